//! RESP2 replies as bytes: finding where one ends, and reading them in place.
//!
//! The data path's hottest reply, a transaction's members and rosters, is read straight from the
//! bytes Redis sent ([`Reader`]), without building a value for every member first.

use std::io;

use redis::Value;

/// Deepest nesting accepted in a reply; ours are at most three levels (EXEC of ZRANGEs).
pub(super) const MAX_DEPTH: usize = 8;

pub(super) fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Redis protocol error: {what}"),
    )
}

/// The line starting at `at`, without its CRLF, and where the next element starts; `None` if
/// the line is not complete yet.
pub(super) fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    // Header lines hold no CR, and simple strings and errors may not.
    let end = rest.iter().position(|&b| b == b'\r')?;
    (rest.get(end + 1)? == &b'\n').then(|| (&rest[..end], at + end + 2))
}

/// The integer on the header line that starts at `at` (just past its type byte), and where the
/// next element starts, in one pass over the line. `None` if the line has not all
/// arrived.
#[inline]
pub(super) fn header(buf: &[u8], at: usize) -> io::Result<Option<(i64, usize)>> {
    // Most headers of the data path are one digit (member lengths, counts, small arrays), and
    // every reply is walked twice (framing, then reading): take those in one inlined step.
    if let Some(&[d @ b'0'..=b'9', b'\r', b'\n']) = buf.get(at..at + 3) {
        return Ok(Some((i64::from(d - b'0'), at + 3)));
    }
    long_header(buf, at)
}

#[inline(never)]
fn long_header(buf: &[u8], at: usize) -> io::Result<Option<(i64, usize)>> {
    let bad = || protocol("a length or integer that is not a number");
    let negative = buf.get(at) == Some(&b'-');
    let start = at + usize::from(negative);
    // Up to 19 digits fit a u64 whatever they are; the range is checked once at the end.
    let digits = buf.get(start..).unwrap_or_default();
    let digits = &digits[..digits
        .iter()
        .take(19)
        .take_while(|d| d.is_ascii_digit())
        .count()];
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    let i = start + digits.len();
    match (buf.get(i), buf.get(i + 1)) {
        (None, _) | (Some(b'\r'), None) => return Ok(None),
        (Some(b'\r'), Some(b'\n')) if i > start => {}
        _ => return Err(bad()),
    }
    let n = if negative {
        0i64.checked_sub_unsigned(n).ok_or_else(bad)?
    } else {
        i64::try_from(n).map_err(|_| bad())?
    };
    Ok(Some((n, i + 2)))
}

/// Where the reply starting at `at` ends, if all of it has arrived: one [`Framer`] walk.
pub(super) fn reply_len(buf: &[u8], at: usize) -> io::Result<Option<usize>> {
    Framer {
        at,
        open: Vec::new(),
    }
    .reply_end(buf)
}

/// Finds where the reply at the start of a buffer ends as the buffer grows, resuming where the
/// last look stopped: a big reply arriving in many reads is walked once, not once per read.
#[derive(Debug, Default)]
pub(super) struct Framer {
    /// Where the next element starts: everything before it has been walked.
    at: usize,
    /// Elements still to come in each array being walked, innermost last.
    open: Vec<usize>,
}

impl Framer {
    /// Whether the reply at the start of the buffer has been partly walked.
    pub(super) fn walking(&self) -> bool {
        self.at > 0 || !self.open.is_empty()
    }

    /// Where the reply that starts at `buf[0]` (or where [`reply_len`] set it going) ends, once
    /// all of it is in `buf`; the framer then starts over at `buf[0]` for the next reply. Between
    /// calls `buf` may only grow at its end.
    pub(super) fn reply_end(&mut self, buf: &[u8]) -> io::Result<Option<usize>> {
        loop {
            if self.open.len() > MAX_DEPTH {
                return Err(protocol("replies nested too deep"));
            }
            let Some(&kind) = buf.get(self.at) else {
                return Ok(None);
            };
            let end = match kind {
                b'+' | b'-' => match line(buf, self.at + 1) {
                    Some((_, next)) => next,
                    None => return Ok(None),
                },
                b':' | b'$' | b'*' => {
                    let Some((n, next)) = header(buf, self.at + 1)? else {
                        return Ok(None);
                    };
                    match kind {
                        b'$' if n >= 0 => {
                            let end = next + n as usize + 2;
                            if buf.len() < end {
                                return Ok(None);
                            }
                            if &buf[end - 2..end] != b"\r\n" {
                                return Err(protocol("a bulk string without its CRLF"));
                            }
                            end
                        }
                        b'*' if n > 0 => {
                            self.open.push(n as usize);
                            self.at = next;
                            continue;
                        }
                        _ => next,
                    }
                }
                other => {
                    return Err(protocol(&format!(
                        "unexpected reply type byte {:?}",
                        other as char
                    )));
                }
            };
            // A whole element ends at `end`, and with it every array it was the last one of.
            self.at = end;
            loop {
                match self.open.last_mut() {
                    None => {
                        self.at = 0;
                        return Ok(Some(end));
                    }
                    Some(left) if *left > 1 => {
                        *left -= 1;
                        break;
                    }
                    Some(_) => {
                        self.open.pop();
                    }
                }
            }
        }
    }
}

/// An error reply as redis-rs represents it (its codes drive MOVED handling and messages).
/// Rare enough to go through redis-rs's own parser.
pub(super) fn server_error(line: &[u8]) -> Value {
    match redis::parse_redis_value(line) {
        Ok(v @ Value::ServerError(_)) => v,
        _ => Value::SimpleString(String::from_utf8_lossy(line).into_owned()),
    }
}

/// One element of a reply, as [`Reader::item`] meets it.
#[derive(Debug, PartialEq)]
pub(crate) enum Item<'a> {
    /// A status reply (`+OK`, `+QUEUED`), without its `+`.
    Status(&'a [u8]),
    /// An error reply.
    Error(redis::ServerError),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(&'a [u8]),
    /// A null bulk string or array.
    Nil,
    /// An array of this many elements, which follow.
    Array(usize),
}

/// Reads replies in place, one element at a time.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`, which holds whole replies.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// The next element; `Err` if the bytes end or are not RESP2.
    pub(crate) fn item(&mut self) -> redis::RedisResult<Item<'a>> {
        Ok(self.read()?)
    }

    fn read(&mut self) -> io::Result<Item<'a>> {
        let at = self.at;
        let kind = *self
            .buf
            .get(at)
            .ok_or_else(|| protocol("the replies ended early"))?;
        let cut = || protocol("a cut line");
        if matches!(kind, b'+' | b'-') {
            let (head, next) = line(self.buf, at + 1).ok_or_else(cut)?;
            self.at = next;
            return Ok(if kind == b'+' {
                Item::Status(head)
            } else {
                match server_error(&self.buf[at..next]) {
                    Value::ServerError(e) => Item::Error(e),
                    _ => return Err(protocol("an unreadable error reply")),
                }
            });
        }
        let (n, next) = header(self.buf, at + 1)?.ok_or_else(cut)?;
        self.at = next;
        Ok(match kind {
            b':' => Item::Int(n),
            b'$' if n < 0 => Item::Nil,
            b'$' => {
                let end = next + n as usize;
                let bytes = self
                    .buf
                    .get(next..end)
                    .ok_or_else(|| protocol("a cut bulk string"))?;
                self.at = end + 2;
                Item::Bulk(bytes)
            }
            b'*' if n < 0 => Item::Nil,
            b'*' => Item::Array(n as usize),
            other => {
                return Err(protocol(&format!(
                    "unexpected reply type byte {:?}",
                    other as char
                )));
            }
        })
    }

    /// Skips the rest of an element whose head was `item` (the elements of an array).
    pub(crate) fn skip_rest(&mut self, item: &Item<'_>) -> redis::RedisResult<()> {
        if let Item::Array(n) = *item {
            for _ in 0..n {
                // The whole reply was framed (and its depth checked) before it was read.
                let end = reply_len(self.buf, self.at)?
                    .ok_or_else(|| protocol("the replies ended early"))?;
                self.at = end;
            }
        }
        Ok(())
    }

    /// Skips one whole reply.
    pub(crate) fn skip(&mut self) -> redis::RedisResult<()> {
        let item = self.item()?;
        self.skip_rest(&item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Item::Error(e) => assert_eq!(
                (e.code(), e.details()),
                ("MOVED", Some("12 127.0.0.1:7001"))
            ),
            other => panic!("{other:?}"),
        }
        assert!(r.item().is_err(), "nothing left");
    }
}
