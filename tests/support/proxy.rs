//! A TCP proxy in front of a real server, for faults of the network between: it forwards both
//! ways, and when armed, holds the server's replies on the connection whose request carried a
//! given command, as a link that delays one direction does. The server runs every request at
//! once; only its answers wait.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the armed proxy waits for, and how long it then holds replies.
struct Trigger {
    /// RESP bytes of the command's name, as a client sends it (`$4\r\nEXEC\r\n`).
    needle: Vec<u8>,
    /// RESP bytes of the name a connection must have given itself (`CLIENT SETNAME`).
    named: Vec<u8>,
    hold: Duration,
    /// Connections it may still hold.
    left: usize,
}

/// Forwards `127.0.0.1:<port>` to the server; stops accepting, and closes every connection,
/// when dropped.
pub struct Proxy {
    port: u16,
    trigger: Arc<Mutex<Option<Trigger>>>,
    /// How many times replies were held.
    held: Arc<Mutex<usize>>,
    running: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    /// A proxy on a free port in front of `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let trigger: Arc<Mutex<Option<Trigger>>> = Arc::default();
        let held = Arc::new(Mutex::new(0));
        let running = Arc::new(AtomicBool::new(true));
        let connections: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (t, h, r, c) = (
            trigger.clone(),
            held.clone(),
            running.clone(),
            connections.clone(),
        );
        let accept = std::thread::spawn(move || {
            while r.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            continue;
                        };
                        let mut all = c.lock().unwrap();
                        all.push(client.try_clone().unwrap());
                        all.push(server.try_clone().unwrap());
                        drop(all);
                        splice(client, server, t.clone(), h.clone());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self {
            port,
            trigger,
            held,
            running,
            connections,
            accept: Some(accept),
        }
    }

    /// The proxy's URL, for a client that should go through it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// From now on, the next `connections` connections named `name` (`CLIENT SETNAME`) that
    /// send `command` (e.g. `EXEC` or `EVALSHA`) get no reply for `hold` from that moment:
    /// whatever the server answers meanwhile, on those connections, arrives after it.
    pub fn hold_replies_after(
        &self,
        name: &str,
        command: &str,
        hold: Duration,
        connections: usize,
    ) {
        *self.trigger.lock().unwrap() = Some(Trigger {
            needle: bulk(command),
            named: bulk(name),
            hold,
            left: connections,
        });
    }

    /// How many connections had their replies held so far.
    pub fn held(&self) -> usize {
        *self.held.lock().unwrap()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Relaxed);
        for s in self.connections.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// `text` as a RESP bulk string, as it appears inside a command.
fn bulk(text: &str) -> Vec<u8> {
    format!("${}\r\n{text}\r\n", text.len()).into_bytes()
}

/// Two threads per connection: requests go straight on (setting the hold before the request
/// that triggers it is forwarded, so that its reply is held too); replies wait out the hold.
fn splice(
    client: TcpStream,
    server: TcpStream,
    trigger: Arc<Mutex<Option<Trigger>>>,
    held: Arc<Mutex<usize>>,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let until: Arc<Mutex<Option<Instant>>> = Arc::default();
    let (mut from_client, mut to_server) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    let (mut from_server, mut to_client) = (server, client);
    let hold_until = until.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        // The tail of the last read, so that a name cut between two reads is still found.
        let mut tail: Vec<u8> = Vec::new();
        // The names this connection gave itself.
        let mut names: Vec<u8> = Vec::new();
        loop {
            let n = match from_client.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let mut seen = std::mem::take(&mut tail);
            seen.extend_from_slice(&buf[..n]);
            if let Some(at) = find(&seen, b"$7\r\nSETNAME\r\n") {
                names.extend_from_slice(&seen[at..seen.len().min(at + 256)]);
            }
            if let Some(t) = trigger.lock().unwrap().as_mut()
                && t.left > 0
                && find(&names, &t.named).is_some()
                && find(&seen, &t.needle).is_some()
            {
                t.left -= 1;
                *hold_until.lock().unwrap() = Some(Instant::now() + t.hold);
                *held.lock().unwrap() += 1;
            }
            let keep = seen.len().min(64);
            tail = seen[seen.len() - keep..].to_vec();
            if to_server.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_server.shutdown(Shutdown::Write);
    });
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let wait = until
                .lock()
                .unwrap()
                .map(|u| u.saturating_duration_since(Instant::now()));
            if let Some(wait) = wait {
                std::thread::sleep(wait);
            }
            if to_client.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to_client.shutdown(Shutdown::Both);
    });
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
