//! The end of an outage: once the receiver accepts an event again, the events waiting out
//! their backoff after its failures go at once, not up to a minute later.

use std::time::{Duration, Instant};

use crate::support::receiver::{Mode, Receiver};
use crate::support::{RedisServer, seed_keys, wait_until};

use super::{PER_CONVERSATION, conversations, daemon, toml};

#[test]
fn a_receiver_back_from_an_outage_gets_the_backlog_at_once() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Unavailable);
    let d = daemon(&server, &toml(PER_CONVERSATION, &receiver.url(), ""));
    d.wait_ready(Duration::from_secs(20));
    seed_keys(&mut server.con(), conversations(10), 1, 1);
    // Six failures each: their waits are now 4 to 16 s.
    wait_until("the backoff grows", Duration::from_secs(30), || {
        receiver.hits().len() >= 60
    });
    receiver.set(Mode::Accept);
    // A new leave is posted at once, accepted, and wakes the others.
    let recovered = Instant::now();
    seed_keys(&mut server.con(), ["presence:fresh:typing"], 1, 1);
    receiver.wait_delivered(11, Duration::from_secs(30));
    let took = recovered.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the backlog waited {took:?} after the receiver came back"
    );
}
