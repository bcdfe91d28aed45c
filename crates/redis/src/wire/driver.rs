//! A wire's socket task ([`drive`]): writes the requests in the order they come, gathered, and
//! hands each reply to the request it answers ([`deliver`]); once the wire is retired, reads on
//! only for the requests that changed data and whose requesters still wait.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::connect::Transport;
use super::failure::{closed, retired};
use super::request::{Pending, Request, Wait};
use crate::resp::{Framer, Reader, protocol};

/// Read buffer size; a reply bigger than this simply grows it.
const READ_CHUNK: usize = 64 * 1024;

/// Most requests gathered into one write (the system allows 1024 buffers per call).
const MAX_GATHER: usize = 512;

/// How often a retired wire that waits for outcomes looks whether anyone still waits.
const GAVE_UP_CHECK: Duration = Duration::from_secs(1);

/// The socket's one task: writes requests in the order they come and hands each reply to the
/// request it answers. Ends when the socket fails or every handle is gone; requests still
/// waiting then fail. Once retired it writes nothing more, and reads on only while a
/// [`Wait::Outcome`] request waits for its reply, for at most `outcome_timeout`.
pub(super) async fn drive(
    mut stream: Box<dyn Transport>,
    mut requests: mpsc::UnboundedReceiver<Request>,
    retire: CancellationToken,
    outcome_timeout: Duration,
) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut framer = Framer::default();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let failure = loop {
        tokio::select! {
            request = requests.recv() => {
                let Some(request) = request else { return };
                if retire.is_cancelled() {
                    // Never written: dropped, it fails as never sent.
                    break retired();
                }
                // Whatever else is queued goes out in the same write, gathered (no copy).
                let mut next = Some(request);
                while let Some(mut request) = next.take() {
                    chunks.push(std::mem::take(&mut request.bytes));
                    pending.push_back(Pending::new(request));
                    if chunks.len() < MAX_GATHER {
                        next = requests.try_recv().ok();
                    }
                }
                // A server that stops reading must not hold the driver in a write forever.
                let mut sent = 0;
                let written = tokio::select! {
                    written = write_gathered(&mut stream, &chunks, &mut sent) => written,
                    () = retire.cancelled() => {
                        unwritten(&mut pending, &chunks, sent);
                        Err(retired())
                    }
                };
                if let Err(e) = written {
                    break e;
                }
                chunks.clear();
            }
            () = retire.cancelled() => break retired(),
            // Read even when nothing is pending: a server that closes an idle connection (a
            // restart) is noticed at once, and the next pass opens a new one.
            read = stream.read_buf(&mut input) => match read {
                Ok(0) => break closed(),
                Ok(_) => {
                    if let Err(e) = deliver(&mut input, &mut pending, &mut framer) {
                        break e;
                    }
                    if input.capacity() - input.len() < READ_CHUNK / 4 {
                        input.reserve(READ_CHUNK);
                    }
                }
                Err(e) => break e,
            },
        }
    };
    // Requests still queued were never written: dropped, each fails as never sent.
    requests.close();
    while requests.try_recv().is_ok() {}
    let failure = if retire.is_cancelled() {
        hear_outcomes(
            &mut stream,
            &mut pending,
            &mut input,
            &mut framer,
            outcome_timeout,
        )
        .await
        .unwrap_or(failure)
    } else {
        failure
    };
    for mut p in pending {
        p.fail(&failure);
    }
}

/// A write of `chunks`, the last requests in `pending`, was cut short after `sent` bytes: the
/// requests it did not finish are taken out and fail as never sent. One cut in the middle
/// changed nothing either: Redis runs no command it has not read whole, and a request that
/// changes data does so only in its last command ([`Wait::Outcome`]). (Over TLS, bytes the
/// stream took may still sit unencrypted in it: such a request counts as written.)
fn unwritten(pending: &mut VecDeque<Pending>, chunks: &[Vec<u8>], sent: usize) {
    let mut end = 0;
    let whole = chunks
        .iter()
        .take_while(|c| {
            end += c.len();
            end <= sent
        })
        .count();
    for _ in whole..chunks.len() {
        // Dropping its reply: the requester sees a request never sent.
        drop(pending.pop_back());
    }
}

/// On a retired wire: fails the [`Wait::Reply`] requests at once, and reads on until every
/// [`Wait::Outcome`] request has its reply or its requester gave up (seen within
/// [`GAVE_UP_CHECK`]), the socket fails, or `limit` passes. `Some`: the socket's failure, for
/// the requests left.
async fn hear_outcomes(
    stream: &mut Box<dyn Transport>,
    pending: &mut VecDeque<Pending>,
    input: &mut BytesMut,
    framer: &mut Framer,
    limit: Duration,
) -> Option<io::Error> {
    let given_up = retired();
    for p in pending.iter_mut().filter(|p| p.wait == Wait::Reply) {
        p.fail(&given_up);
    }
    let deadline = tokio::time::Instant::now() + limit;
    while pending.iter().any(Pending::awaits_outcome) {
        tokio::select! {
            read = stream.read_buf(input) => match read {
                Ok(0) => return Some(closed()),
                Ok(_) => {
                    if let Err(e) = deliver(input, pending, framer) {
                        return Some(e);
                    }
                    if input.capacity() - input.len() < READ_CHUNK / 4 {
                        input.reserve(READ_CHUNK);
                    }
                }
                Err(e) => return Some(e),
            },
            () = tokio::time::sleep_until(deadline) => return None,
            // A requester dropped (a reload, shutdown) is noticed even while nothing arrives.
            () = tokio::time::sleep(GAVE_UP_CHECK) => {}
        }
    }
    None
}

/// Writes every chunk, in order, with as few system calls as the socket allows, counting the
/// bytes the socket took in `sent` (so that a write cut short tells how far it got).
async fn write_gathered(
    stream: &mut Box<dyn Transport>,
    chunks: &[Vec<u8>],
    sent: &mut usize,
) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = stream.write_vectored(rest).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "Redis stopped reading",
            ));
        }
        *sent += n;
        IoSlice::advance_slices(&mut rest, n);
    }
    // A TLS stream holds what it encrypted until flushed; a socket has nothing to flush.
    stream.flush().await
}

/// Parses every complete reply in `input` and hands it to its request.
///
/// Replies for values are decoded optimistically: most are complete when they are first looked
/// at. A raw reply, and one that was not complete, is first walked by the `framer`, which
/// resumes where it stopped as more arrives, so a big reply arriving in many reads is walked
/// once and decoded once.
fn deliver(
    input: &mut BytesMut,
    pending: &mut VecDeque<Pending>,
    framer: &mut Framer,
) -> io::Result<()> {
    while !input.is_empty() {
        let Some(front) = pending.front_mut() else {
            return Err(protocol("a reply that no request asked for"));
        };
        match &mut front.raw {
            Some(raw) => {
                // Every whole reply that has come, up to the request's count, goes over in one
                // copy: a copy per reply grew the buffer by doubling, which took a third of
                // this function's time in scenario `live` (perf).
                let mut len = 0;
                while front.seen < front.count {
                    let Some(end) = framer.reply_end(&input[len..])? else {
                        break;
                    };
                    len += end;
                    front.seen += 1;
                }
                raw.extend_from_slice(&input[..len]);
                input.advance(len);
                if front.seen < front.count {
                    // The rest has not come yet; the framer resumes at the cut reply.
                    return Ok(());
                }
                pending.pop_front().expect("front exists").finish();
                continue;
            }
            None => {
                if framer.walking() && framer.reply_end(input)?.is_none() {
                    return Ok(());
                }
                let mut reader = Reader::new(input);
                let Some(value) = reader.value()? else {
                    // Walk what has come, so that the next read resumes after it.
                    if framer.reply_end(input)?.is_some() {
                        return Err(protocol("a reply both whole and cut"));
                    }
                    return Ok(());
                };
                let len = reader.position();
                front.values.push(value);
                input.advance(len);
            }
        }
        front.seen += 1;
        if front.seen == front.count {
            pending.pop_front().expect("front exists").finish();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tokio::sync::oneshot;

    use super::*;
    use crate::resp::Value;
    use crate::wire::request::Answer;

    /// The one reply `bytes` holds, as a value.
    fn decoded(bytes: &[u8]) -> Value {
        Reader::new(bytes).value().unwrap().expect("whole")
    }

    fn pending(count: usize, raw: bool) -> (Pending, oneshot::Receiver<io::Result<Answer>>) {
        let (reply, rx) = oneshot::channel();
        let request = Request {
            bytes: Vec::new(),
            count,
            raw,
            wait: Wait::Reply,
            reply,
        };
        (Pending::new(request), rx)
    }

    fn values(rx: &mut oneshot::Receiver<io::Result<Answer>>) -> Vec<Value> {
        match rx.try_recv().expect("answered").expect("no error") {
            Answer::Values(v) => v,
            Answer::Raw(_) => panic!("raw answer to a request for values"),
        }
    }

    /// Replies cut anywhere, for values and raw alike, reach their requests whole.
    #[test]
    fn replies_arriving_in_pieces_are_delivered_whole() {
        let reply: &[u8] = b"*3\r\n$3\r\nabc\r\n*2\r\n:1\r\n$2\r\nxy\r\n+OK\r\n";
        let both = [reply, reply].concat();
        for cut in 1..both.len() {
            for cut2 in cut..both.len() {
                let (a, mut a_rx) = pending(1, false);
                let (b, mut b_rx) = pending(1, true);
                let mut pending = VecDeque::from([a, b]);
                let mut framer = Framer::default();
                let mut input = BytesMut::new();
                for piece in [&both[..cut], &both[cut..cut2], &both[cut2..]] {
                    input.extend_from_slice(piece);
                    deliver(&mut input, &mut pending, &mut framer).unwrap();
                }
                assert_eq!(values(&mut a_rx), vec![decoded(reply)], "cuts {cut} {cut2}");
                match b_rx.try_recv().expect("answered").expect("no error") {
                    Answer::Raw(raw) => assert_eq!(raw, reply, "cuts {cut} {cut2}"),
                    Answer::Values(_) => panic!("values answer to a request for bytes"),
                }
                assert!(input.is_empty() && pending.is_empty());
            }
        }
    }

    #[test]
    fn replies_go_to_their_requests_in_order() {
        let (a, mut a_rx) = pending(1, false);
        let (b, mut b_rx) = pending(2, true);
        let (c, mut c_rx) = pending(1, false);
        let mut pending = VecDeque::from([a, b, c]);
        let mut input = BytesMut::from(&b":1\r\n*1\r\n$2\r\nab\r\n:3\r\n:4"[..]);
        let mut framer = Framer::default();
        deliver(&mut input, &mut pending, &mut framer).unwrap();
        assert_eq!(values(&mut a_rx), vec![Value::Int(1)]);
        match b_rx.try_recv().expect("answered").expect("no error") {
            Answer::Raw(raw) => assert_eq!(raw, b"*1\r\n$2\r\nab\r\n:3\r\n"),
            Answer::Values(_) => panic!("values answer to a request for bytes"),
        }
        assert!(c_rx.try_recv().is_err(), "still waiting for its reply");
        input.extend_from_slice(b"\r\n");
        deliver(&mut input, &mut pending, &mut framer).unwrap();
        assert_eq!(values(&mut c_rx), vec![Value::Int(4)]);
        assert!(input.is_empty());
        input.extend_from_slice(b":5\r\n");
        assert!(
            deliver(&mut input, &mut pending, &mut framer).is_err(),
            "nobody asked"
        );
    }

    fn raw(rx: &mut oneshot::Receiver<io::Result<Answer>>) -> Vec<u8> {
        match rx.try_recv().expect("answered").expect("no error") {
            Answer::Raw(raw) => raw,
            Answer::Values(_) => panic!("values answer to a request for bytes"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Replies cut anywhere, one request each (every other one raw), reach their requests
        /// whole and in order.
        #[test]
        fn generated_replies_cut_anywhere_reach_their_requests(
            replies in proptest::collection::vec(crate::resp::tests::arb_value(), 1..5),
            cuts in proptest::collection::vec(proptest::prelude::any::<proptest::sample::Index>(), 0..5),
        ) {
            let mut bytes = Vec::new();
            let mut requests = VecDeque::new();
            let mut answers = Vec::new();
            for (i, v) in replies.iter().enumerate() {
                let start = bytes.len();
                crate::resp::tests::encode(v, &mut bytes);
                let (p, rx) = pending(1, i % 2 == 1);
                requests.push_back(p);
                answers.push((rx, start..bytes.len()));
            }
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut framer = Framer::default();
            let mut input = BytesMut::new();
            let mut from = 0;
            for to in cuts.into_iter().chain([bytes.len()]) {
                input.extend_from_slice(&bytes[from..to]);
                from = to;
                deliver(&mut input, &mut requests, &mut framer).unwrap();
            }
            proptest::prop_assert!(input.is_empty() && requests.is_empty());
            for (i, ((mut rx, range), v)) in answers.into_iter().zip(&replies).enumerate() {
                if i % 2 == 1 {
                    proptest::prop_assert_eq!(raw(&mut rx), bytes[range].to_vec());
                } else {
                    proptest::prop_assert_eq!(values(&mut rx), vec![v.clone()]);
                }
            }
        }
    }

    /// A header announcing a huge reply reserves nothing for it: the input grows only with what
    /// arrives (the driver's reads), and delivering waits.
    #[test]
    fn a_hostile_header_reserves_nothing() {
        use crate::resp::tests::allocated;
        for head in [
            &b"$1073741824\r\nsome of it"[..],
            b"*2147483647\r\n:1\r\n:2\r\n",
            b"*1\r\n$1073741824\r\n",
        ] {
            for raw in [false, true] {
                let (p, mut rx) = pending(1, raw);
                let mut pending = VecDeque::from([p]);
                let mut framer = Framer::default();
                let mut input = BytesMut::with_capacity(READ_CHUNK);
                input.extend_from_slice(head);
                let before = allocated();
                for _ in 0..3 {
                    deliver(&mut input, &mut pending, &mut framer).unwrap();
                }
                let used = allocated() - before;
                assert!(used < 1024, "{head:?}: {used} bytes");
                assert_eq!(input.capacity(), READ_CHUNK);
                assert!(rx.try_recv().is_err(), "still waiting");
            }
        }
    }
}
