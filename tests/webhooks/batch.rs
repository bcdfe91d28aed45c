//! A mass leave with `event_shape = "batch"`: 5,000 members of one conversation leave at once,
//! and the receiver gets a few requests listing them, not 5,000.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::support::receiver::{Mode, Receiver};
use crate::support::{RedisServer, redis_now, wait_until};

use super::{PER_CONVERSATION, daemon, toml};

#[test]
fn a_mass_leave_of_5000_in_batch_events_is_at_most_20_requests() {
    let server = RedisServer::start();
    let receiver = Receiver::start(Mode::Accept);
    let config = toml(PER_CONVERSATION, &receiver.url(), "").replace(
        "[sweeps.typing]\n",
        "[sweeps.typing]\nevent_shape = \"batch\"\n",
    );
    let d = daemon(&server, &config);
    d.wait_ready(Duration::from_secs(20));
    let mut con = server.con();
    let now = redis_now(&mut con);
    let mut zadd = redis::cmd("ZADD");
    zadd.arg("presence:room:typing");
    for i in 0..5000 {
        zadd.arg(now - 100.0).arg(format!("u{i}"));
    }
    zadd.arg(now + 600.0).arg("live");
    let _: i64 = zadd.query(&mut con).unwrap();
    let mut left = BTreeSet::new();
    wait_until("5,000 members delivered", Duration::from_secs(30), || {
        left = receiver
            .delivered()
            .iter()
            .flat_map(|h| {
                h.json()["leaves"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|l| l["user_id"].as_str().unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        left.len() == 5000
    });
    assert!(!left.contains("live"));
    let requests = receiver.hits().len();
    println!("{requests} requests for 5,000 leaves");
    assert!(requests <= 20, "{requests} requests for 5,000 leaves");
}
