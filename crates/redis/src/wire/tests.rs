//! The wire against fake servers that stall, go silent, drop the connection or stop reading:
//! what a request that times out does to the wire, and which failures leave Redis possibly
//! having run a request.

use std::time::Duration;

use tokio::sync::oneshot;

use super::failure::is_unsent;
use super::{Target, Wait, Wire, is_reply_lost};
use crate::resp::Value;

/// A server on a free port that answers the connection's PING and CLIENT SETNAME, then
/// hands every later read to `answer`, which may write replies when it likes.
async fn server<F, Fut>(answer: F) -> (Target, tokio::task::JoinHandle<()>)
where
    F: FnOnce(
            tokio::net::tcp::OwnedWriteHalf,
            tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
        ) -> Fut
        + Send
        + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        let (mut read, mut write) = socket.into_split();
        let mut buf = [0u8; 1024];
        let _ = read.read(&mut buf).await.unwrap();
        write.write_all(b"+PONG\r\n+OK\r\n").await.unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let answering = tokio::spawn(answer(write, rx));
        while let Ok(n) = read.read(&mut buf).await {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
        drop(tx);
        let _ = answering.await;
    });
    let target = Target::local(port);
    (target, task)
}

const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

async fn connect(target: &Target, timeout: u64, outcome: u64) -> Wire {
    Wire::connect(
        target,
        "test",
        Duration::from_secs(5),
        Duration::from_millis(timeout),
        Duration::from_millis(outcome),
    )
    .await
    .unwrap()
}

/// A server that goes silent after the greeting, as a paused server or a connection a
/// firewall dropped would.
#[tokio::test]
async fn a_request_that_times_out_retires_the_wire() {
    let (target, server) = server(|write, mut rx| async move {
        // Holding the socket open, answering nothing.
        let _open = write;
        while rx.recv().await.is_some() {}
    })
    .await;
    let wire = connect(&target, 200, 200).await;
    assert!(!wire.is_closed());
    let error = wire.send(PING.to_vec(), 1, Wait::Reply).await.unwrap_err();
    assert!(
        error.to_string().contains("did not answer in time"),
        "{error}"
    );
    assert!(
        is_reply_lost(&error),
        "it was written: Redis may have run it"
    );
    assert!(
        wire.is_closed(),
        "the store opens a new connection next pass"
    );
    let after = wire.send(PING.to_vec(), 1, Wait::Reply).await.unwrap_err();
    assert!(is_unsent(&after), "nothing more is written: {after}");
    server.abort();
}

/// A server that stalls longer than the command timeout, then answers everything it read
/// (a SIGSTOP, a frozen VM): the call that changes data gets its reply on the retired
/// wire; the reads before and behind it failed at the command timeout, as lost replies.
#[tokio::test]
async fn a_call_that_changes_data_is_heard_after_the_command_timeout() {
    use tokio::io::AsyncWriteExt;
    let (target, server) = server(|mut write, mut rx| async move {
        let mut got = 0;
        while got < 3 * PING.len() {
            got += rx.recv().await.unwrap().len();
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        write.write_all(b"+PONG\r\n:7\r\n+PONG\r\n").await.unwrap();
        while rx.recv().await.is_some() {}
    })
    .await;
    let wire = connect(&target, 100, 30_000).await;
    let started = tokio::time::Instant::now();
    let (before, change, behind) = tokio::join!(
        wire.send(PING.to_vec(), 1, Wait::Reply),
        wire.send(PING.to_vec(), 1, Wait::Outcome),
        wire.send(PING.to_vec(), 1, Wait::Reply),
    );
    for read in [before, behind] {
        let read = read.unwrap_err();
        assert!(is_reply_lost(&read), "{read}");
    }
    assert_eq!(change.unwrap(), vec![Value::Int(7)], "heard late");
    assert!(started.elapsed() >= Duration::from_millis(1500));
    assert!(wire.is_closed(), "retired all the same");
    server.abort();
}

/// A server that never answers: the call that changes data gives up at its own limit, as a
/// lost reply; a request sent after it on the retired wire is never written.
#[tokio::test]
async fn a_call_that_changes_data_gives_up_at_its_own_limit() {
    let (target, server) = server(|write, mut rx| async move {
        // Holding the socket open, answering nothing.
        let _open = write;
        while rx.recv().await.is_some() {}
    })
    .await;
    let wire = connect(&target, 100, 400).await;
    let started = tokio::time::Instant::now();
    let error = wire
        .send(PING.to_vec(), 1, Wait::Outcome)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    assert!(is_reply_lost(&error), "{error}");
    assert!(error.to_string().contains("changes data"), "{error}");
    let after = wire
        .send(PING.to_vec(), 1, Wait::Outcome)
        .await
        .unwrap_err();
    assert!(is_unsent(&after), "{after}");
    server.abort();
}

/// The connection drops while a call that changes data waits: its reply is lost (Redis
/// may have run it), not unsent.
#[tokio::test]
async fn a_dropped_connection_loses_the_reply_of_a_call_that_changes_data() {
    let (target, server) = server(|write, mut rx| async move {
        let _ = rx.recv().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(write);
    })
    .await;
    let wire = connect(&target, 100, 30_000).await;
    let error = wire
        .send(PING.to_vec(), 1, Wait::Outcome)
        .await
        .unwrap_err();
    assert!(is_reply_lost(&error), "{error}");
    server.abort();
}

/// A server that stops reading (its socket buffers full): a call too big to be written
/// whole times out, and since Redis never read it whole it changed nothing. It fails as
/// never sent at once, rather than waiting out its limit and counting as unanswered.
#[tokio::test]
async fn a_call_cut_while_being_written_fails_as_unsent_at_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = socket.read(&mut buf).await.unwrap();
        socket.write_all(b"+PONG\r\n+OK\r\n").await.unwrap();
        // Reads nothing more, holding the socket open.
        tokio::time::sleep(Duration::from_secs(60)).await;
    });
    let target = Target::local(port);
    let wire = connect(&target, 200, 30_000).await;
    let big = vec![b'x'; 256 * 1024 * 1024];
    let started = tokio::time::Instant::now();
    let error = wire.send(big, 1, Wait::Outcome).await.unwrap_err();
    assert!(is_unsent(&error), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    server.abort();
}

/// A requester that stops waiting (a reload, shutdown): the retired wire lets its socket go
/// within a second or two, not at the call's limit.
#[tokio::test]
async fn a_retired_wire_closes_once_nobody_waits() {
    let (closed_tx, closed_rx) = oneshot::channel();
    let (target, server) = server(move |write, mut rx| async move {
        let _open = write;
        while rx.recv().await.is_some() {}
        let _ = closed_tx.send(tokio::time::Instant::now());
    })
    .await;
    let wire = connect(&target, 100, 60_000).await;
    let call = wire.send(PING.to_vec(), 1, Wait::Outcome);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err(),
        "still waiting when dropped"
    );
    let dropped = tokio::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(20), closed_rx)
        .await
        .expect("the socket closed")
        .unwrap();
    assert!(
        closed - dropped < Duration::from_secs(10),
        "{:?}",
        closed - dropped
    );
    assert!(wire.is_closed());
    server.abort();
}
