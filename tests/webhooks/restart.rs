//! A Redis restarted from its append-only file, with the daemon killed meanwhile: the streams,
//! the due set and the cursors come back from the AOF, and a new daemon delivers every event
//! that was not yet delivered, under the ids it would have had. And a Redis away under a
//! running daemon: said once, and its return said.

use std::collections::HashSet;
use std::time::Duration;

use redis::Commands;

use crate::support::receiver::{Mode, Receiver};
use crate::support::{RedisServer, seed_keys, wait_until};

use super::{DUE, PER_CONVERSATION, conversations, daemon, ids_in, stream_of, toml};

#[test]
fn a_killed_daemon_and_a_redis_restarted_from_its_aof_lose_nothing() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let receiver = Receiver::start(Mode::Fail);
    let config = toml(PER_CONVERSATION, &receiver.url(), "");
    let mut first = daemon(&server, &config);
    first.wait_ready(Duration::from_secs(20));
    let keys = conversations(200);
    seed_keys(&mut server.con(), &keys, 1, 1);
    wait_until("200 leaves appended", Duration::from_secs(15), || {
        let due: u64 = server.con().zcard(DUE).unwrap();
        due == 200
    });
    wait_until("attempts", Duration::from_secs(10), || {
        !receiver.hits().is_empty()
    });
    first.signal("KILL");
    first.wait_exit(Duration::from_secs(5));
    // SIGKILL as well: only what reached the AOF survives.
    server.restart();
    let due: u64 = server.con().zcard(DUE).unwrap();
    assert_eq!(due, 200, "the due set came back from the AOF");
    receiver.set(Mode::Accept);
    let second = daemon(&server, &config);
    let hits = receiver.wait_delivered(200, Duration::from_secs(30));
    let streams: Vec<String> = keys.iter().map(|k| stream_of(k)).collect();
    let delivered: HashSet<String> = hits.iter().map(|h| h.id.clone()).collect();
    assert_eq!(
        delivered,
        ids_in(&mut server.con(), &streams),
        "every event, under its own id"
    );
    super::wait_state_gone(&server);
    drop(second);
}

#[test]
fn a_redis_away_is_said_once_and_its_return_too() {
    let mut server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let config = toml(PER_CONVERSATION, &receiver.url(), "");
    let d = daemon(&server, &config);
    d.wait_ready(Duration::from_secs(20));
    server.stop();
    let away = "cannot look for events to deliver";
    let back = "looking for events to deliver works again";
    d.wait_for_log(away, 1, Duration::from_secs(10));
    // Looks fail at each turn meanwhile: the warning is not repeated.
    std::thread::sleep(Duration::from_secs(2));
    server.restart();
    d.wait_for_log(back, 1, Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!((d.count(away), d.count(back)), (1, 1), "{}", d.log());
}
