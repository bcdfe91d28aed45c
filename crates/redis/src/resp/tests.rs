//! The decoder against every kind of reply, hostile input, generated input (proptest) and the
//! bytes real servers sent (`tests/fixtures/resp`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use proptest::prelude::*;

use super::*;

/// Counts the bytes each thread asks the allocator for, so that a test can tell what decoding
/// some bytes allocated (tests run on threads of their own).
struct Counting;

thread_local! {
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
}

#[expect(
    unsafe_code,
    reason = "a global allocator is unsafe to implement; this one only counts, then defers to the system's"
)]
// SAFETY: every call goes to `System` unchanged; the count is a const-initialised thread-local
// without a destructor, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATED.try_with(|a| a.set(a.get() + layout.size()));
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes this thread has allocated so far.
pub fn allocated() -> usize {
    ALLOCATED.with(Cell::get)
}

/// The one reply `input` holds: framed, read and decoded alike.
fn whole(input: &[u8]) -> Value {
    assert_eq!(reply_len(input, 0).unwrap(), Some(input.len()), "framed");
    let mut reader = Reader::new(input);
    let value = reader.value().unwrap().expect("whole");
    assert_eq!(reader.position(), input.len(), "read as framed");
    value
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn error(line: &str) -> ServerError {
    ErrorLine::new(line.as_bytes()).owned()
}

#[test]
fn decodes_every_resp2_type() {
    assert_eq!(whole(b"+OK\r\n"), Value::Okay);
    assert_eq!(whole(b"+QUEUED\r\n"), Value::SimpleString("QUEUED".into()));
    assert_eq!(whole(b"+\r\n"), Value::SimpleString(String::new()));
    assert_eq!(whole(b":-42\r\n"), Value::Int(-42));
    assert_eq!(whole(b":9223372036854775807\r\n"), Value::Int(i64::MAX));
    assert_eq!(whole(b":-9223372036854775808\r\n"), Value::Int(i64::MIN));
    assert_eq!(whole(b"$5\r\na\r\nbc\r\n"), bulk("a\r\nbc"));
    assert_eq!(whole(b"$0\r\n\r\n"), bulk(""));
    assert_eq!(whole(b"$-1\r\n"), Value::Nil);
    assert_eq!(whole(b"*-1\r\n"), Value::Nil);
    assert_eq!(whole(b"*0\r\n"), Value::Array(vec![]));
    assert_eq!(
        whole(b"*2\r\n*2\r\n$1\r\nu\r\n$4\r\n1.50\r\n:3\r\n"),
        Value::Array(vec![
            Value::Array(vec![bulk("u"), bulk("1.50")]),
            Value::Int(3)
        ])
    );
}

/// Error replies are parsed here, as redis-rs would: the code is the first word.
#[test]
fn error_replies_keep_their_code_and_details() {
    let Value::ServerError(e) = whole(b"-MOVED 3999 127.0.0.1:6381\r\n") else {
        panic!("not an error");
    };
    assert_eq!(
        (e.code(), e.details()),
        ("MOVED", Some("3999 127.0.0.1:6381"))
    );
    assert_eq!(e.to_string(), "MOVED 3999 127.0.0.1:6381");
    let e = error("NOPERM User u has no permissions to access the 'k' key");
    assert_eq!(e.code(), "NOPERM");
    assert_eq!(
        e.details(),
        Some("User u has no permissions to access the 'k' key")
    );
    assert_eq!((error("ERR").code(), error("ERR").details()), ("ERR", None));
    assert_eq!(error("").code(), "");
    // Not text: the code reads as none, the details as lossy text.
    let e = ErrorLine::new(b"\xff\xfe oops \xff").owned();
    assert_eq!((e.code(), e.details()), ("", Some("oops \u{fffd}")));
    // Into redis-rs's error, the code and details are what the crate asks of it.
    let e = redis::RedisError::from(error(
        "READONLY You can't write against a read only replica.",
    ));
    assert_eq!(e.code(), Some("READONLY"));
    assert_eq!(
        e.detail(),
        Some("You can't write against a read only replica.")
    );
    let e = crate::Error::from(redis::RedisError::from(error("NOPERM no 'k'")));
    assert!(matches!(e, crate::Error::Permission { .. }), "{e}");
}

#[test]
fn reads_in_place_every_kind_of_reply() {
    let bytes = b"*7\r\n+OK\r\n+QUEUED\r\n:-7\r\n$4\r\na\r\nb\r\n$-1\r\n\
                  *2\r\n*1\r\n:1\r\n:2\r\n-MOVED 12 127.0.0.1:7001\r\n";
    let mut r = Reader::new(bytes);
    assert_eq!(r.item().unwrap(), Item::Array(7));
    assert_eq!(r.item().unwrap(), Item::Status(b"OK"));
    assert_eq!(r.item().unwrap(), Item::Status(b"QUEUED"));
    assert_eq!(r.item().unwrap(), Item::Int(-7));
    assert_eq!(r.item().unwrap(), Item::Bulk(b"a\r\nb"));
    assert_eq!(r.item().unwrap(), Item::Nil);
    r.skip().unwrap();
    match r.item().unwrap() {
        Item::Error(e) => {
            assert_eq!(e.code(), "MOVED");
            assert_eq!(e.owned().details(), Some("12 127.0.0.1:7001"));
        }
        other => panic!("{other:?}"),
    }
    assert!(r.item().is_err(), "nothing left");
    assert_eq!(r.position(), bytes.len());
}

#[test]
fn an_incomplete_reply_waits_at_every_cut() {
    let full = b"*3\r\n$3\r\nabc\r\n:7\r\n*1\r\n$2\r\nxy\r\n";
    for cut in 0..full.len() {
        assert_eq!(reply_len(&full[..cut], 0).unwrap(), None, "cut at {cut}");
        assert_eq!(
            Reader::new(&full[..cut]).value().unwrap(),
            None,
            "cut at {cut}"
        );
        assert!(Reader::new(&full[..cut]).skip().is_err(), "cut at {cut}");
    }
    assert_eq!(reply_len(full, 0).unwrap(), Some(full.len()));
}

/// The framer resumes where it stopped, byte after byte, and ends where the whole walk does.
#[test]
fn a_reply_arriving_byte_by_byte_is_framed_once_whole() {
    let replies: [&[u8]; 6] = [
        b"*3\r\n$3\r\nabc\r\n:7\r\n*1\r\n$2\r\nxy\r\n",
        b"*2\r\n*2\r\n*0\r\n*-1\r\n$-1\r\n",
        b"*2\r\n+QUEUED\r\n-ERR no\r\n",
        b"$12\r\nab\r\ncd\r\n\r\nef\r\n",
        b":-9223372036854775808\r\n",
        b"*1\r\n*1\r\n*1\r\n:1\r\n",
    ];
    for full in replies {
        let mut framer = Framer::default();
        let mut buf = Vec::new();
        for (i, &b) in full.iter().enumerate() {
            buf.push(b);
            let end = framer.reply_end(&buf).unwrap();
            if i + 1 < full.len() {
                assert_eq!(end, None, "{full:?} cut after {}", i + 1);
            } else {
                assert_eq!(end, Some(full.len()), "{full:?}");
            }
        }
        assert!(!framer.walking(), "starts over for the next reply");
        // The next reply behind it in the same buffer is framed from the start again.
        buf.extend_from_slice(b":1\r\n");
        assert_eq!(framer.reply_end(&buf).unwrap(), Some(full.len()));
    }
}

#[test]
fn garbage_is_a_protocol_error() {
    let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
    for garbage in [
        &b"?what\r\n"[..],
        b"$x\r\n",
        b":9223372036854775808\r\n",
        b":-9223372036854775809\r\n",
        b":99999999999999999999\r\n",
        b":\r\n",
        b":-\r\n",
        b":1x\r\n",
        b"$2\r\nabcd\r\n",
        b"*1\r\n?\r\n",
        b"$-2\r\n",
        b"*-2\r\n",
        b"+a\rb\r\n",
        b"-ERR a\rb\r\n",
        b":1\rx",
    ] {
        let mut reader = Reader::new(garbage);
        assert!(reply_len(garbage, 0).is_err(), "{garbage:?}");
        assert!(reader.value().is_err(), "{garbage:?}");
        assert!(Reader::new(garbage).skip().is_err(), "{garbage:?}");
    }
    // Too deep to build a value of; framing and skipping need no stack.
    assert!(Reader::new(deep.as_bytes()).value().is_err());
    assert_eq!(reply_len(deep.as_bytes(), 0).unwrap(), Some(deep.len()));
    let exactly = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
    assert!(Reader::new(exactly.as_bytes()).value().unwrap().is_some());
}

/// A header's length sizes nothing: the reader reports "incomplete" without reserving for it.
#[test]
fn hostile_lengths_allocate_nothing_in_proportion() {
    let giant_bulk = b"$1073741824\r\nsome of it".as_slice();
    let giant_array = b"*2147483647\r\n:1\r\n:2\r\n$3\r\nabc\r\n".as_slice();
    let biggest = b"*9223372036854775807\r\n*9223372036854775807\r\n:1\r\n".as_slice();
    let huge_bulk = b"$9223372036854775807\r\nx\r\n".as_slice();
    for input in [giant_bulk, giant_array, biggest, huge_bulk] {
        let before = allocated();
        let mut framer = Framer::default();
        assert_eq!(framer.reply_end(input).unwrap(), None, "{input:?}");
        assert_eq!(reply_len(input, 0).unwrap(), None, "{input:?}");
        assert_eq!(Reader::new(input).value().unwrap(), None, "{input:?}");
        assert!(Reader::new(input).skip().is_err(), "{input:?}");
        let used = allocated() - before;
        assert!(used < 1024, "{input:?} allocated {used} bytes");
    }
    // The count sees what is allocated (this thread's, whatever other tests do meanwhile).
    let before = allocated();
    let control = vec![0u8; 4096];
    assert!(allocated() - before >= control.len());
    // A bulk string of a negative length other than -1 is refused, not read as null.
    assert!(reply_len(b"$-2\r\n", 0).is_err());
}

/// The fixtures cut anywhere: the framer resumes across the cut and ends where the whole walk
/// does.
#[test]
fn captured_replies_cut_anywhere_frame_alike() {
    for reply in fixtures() {
        let whole = frames(reply, &[]);
        for cut in 1..reply.len() {
            assert_eq!(frames(reply, &[cut]), whole, "cut at {cut}");
        }
    }
}

fn fixtures() -> [&'static [u8]; 6] {
    macro_rules! fixture {
        ($path:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/resp/",
                $path
            ))
            .as_slice()
        };
    }
    [
        fixture!("redis-7.0/evict.reply"),
        fixture!("redis-7.0/wrongtype.reply"),
        fixture!("redis-7.0/noperm.reply"),
        fixture!("valkey-9.1/evict.reply"),
        fixture!("valkey-9.1/wrongtype.reply"),
        fixture!("valkey-9.1/noperm.reply"),
    ]
}

/// The replies of `bytes` arriving in pieces cut at `cuts`, as a reader of the socket frames
/// them: each reply's bytes.
fn frames(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut framer = Framer::default();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut from = 0;
    for &to in cuts.iter().chain([&bytes.len()]) {
        buf.extend_from_slice(&bytes[from..to]);
        from = to;
        while let Some(len) = framer.reply_end(&buf).unwrap() {
            out.push(buf.drain(..len).collect());
        }
    }
    assert!(buf.is_empty(), "whole replies only");
    out
}

/// Replies as RESP2 can carry them.
pub fn arb_value() -> impl Strategy<Value = Value> {
    let text = || proptest::collection::vec(proptest::sample::select(b"ab AZ09:'".to_vec()), 0..8);
    let leaf = prop_oneof![
        Just(Value::Nil),
        Just(Value::Okay),
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
        text()
            .prop_filter("OK is Okay", |t| t != b"OK")
            .prop_map(|t| Value::SimpleString(String::from_utf8(t).unwrap())),
        text().prop_map(|t| Value::ServerError(ErrorLine::new(&t).owned())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
    })
}

/// `value` as a server writes it.
pub fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.extend_from_slice(b"$-1\r\n"),
        Value::Okay => out.extend_from_slice(b"+OK\r\n"),
        Value::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
        Value::BulkString(b) => {
            out.extend_from_slice(format!("${}\r\n", b.len()).as_bytes());
            out.extend_from_slice(b);
            out.extend_from_slice(b"\r\n");
        }
        Value::SimpleString(s) => out.extend_from_slice(format!("+{s}\r\n").as_bytes()),
        Value::ServerError(e) => out.extend_from_slice(format!("-{e}\r\n").as_bytes()),
        Value::Array(items) => {
            out.extend_from_slice(format!("*{}\r\n", items.len()).as_bytes());
            for item in items {
                encode(item, out);
            }
        }
    }
}

/// Bytes that look like RESP more often than random ones do.
fn resp_soup() -> impl Strategy<Value = Vec<u8>> {
    let tokens: Vec<&[u8]> = vec![
        b"*",
        b"$",
        b":",
        b"+",
        b"-",
        b"\r\n",
        b"\r",
        b"\n",
        b"0",
        b"1",
        b"2",
        b"3",
        b"9",
        b"-1",
        b"-2",
        b"2147483647",
        b"9223372036854775807",
        b"99999999999999999999",
        b"OK",
        b"ab",
    ];
    proptest::collection::vec(proptest::sample::select(tokens), 0..48).prop_map(|t| t.concat())
}

/// Whatever the bytes, the decoder answers (a reply, "not yet" or an error) and never panics;
/// the framer and the value builder agree on where a reply ends.
fn decode_anything(bytes: &[u8]) {
    let framed = reply_len(bytes, 0);
    let mut reader = Reader::new(bytes);
    let value = reader.value();
    match (&framed, &value) {
        (Ok(Some(len)), Ok(Some(_))) => assert_eq!(*len, reader.position()),
        (Ok(None), Ok(None)) | (Err(_), Err(_)) => {}
        // Only the value's depth limit may refuse what framing accepts (or is still waiting for).
        (Ok(_), Err(e)) => assert!(e.to_string().contains("too deep"), "{e}"),
        _ => panic!("framed {framed:?}, decoded {value:?}"),
    }
    let mut reader = Reader::new(bytes);
    while let Ok(Some(_)) = reader.decode() {}
    let _ = Reader::new(bytes).skip();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        decode_anything(&bytes);
    }

    #[test]
    fn resp_like_bytes_never_panic(bytes in resp_soup()) {
        decode_anything(&bytes);
    }

    /// Every reply reads back as it was written, and cut anywhere it frames the same.
    #[test]
    fn replies_cut_anywhere_read_the_same(
        values in proptest::collection::vec(arb_value(), 1..4),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..4),
    ) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for v in &values {
            encode(v, &mut bytes);
            ends.push(bytes.len());
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let framed = frames(&bytes, &cuts);
        prop_assert_eq!(framed.len(), values.len());
        for (frame, value) in framed.iter().zip(&values) {
            prop_assert_eq!(&Reader::new(frame).value().unwrap(), &Some(value.clone()));
        }
        // Read in place, one reply after the other: each skip ends where its frame does.
        let mut reader = Reader::new(&bytes);
        for end in ends {
            reader.skip().unwrap();
            prop_assert_eq!(reader.position(), end);
        }
    }
}
