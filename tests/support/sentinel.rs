//! A primary, its replica and three sentinels, all real processes on free ports.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port, redis_server_binary, signal_pid};

/// The name the sentinels monitor.
pub const MASTER_NAME: &str = "mymaster";

/// A Sentinel topology owned by one test.
pub struct SentinelSetup {
    /// The first primary.
    pub primary: RedisServer,
    /// Its replica (promoted when the primary dies).
    pub replica: RedisServer,
    sentinels: Vec<(u16, Child)>,
    _dir: tempfile::TempDir,
}

impl SentinelSetup {
    /// Starts everything and waits until the sentinels agree on the primary and the replica is
    /// in sync.
    pub fn start() -> Self {
        let primary = RedisServer::start();
        let replica = RedisServer::start_with(&[]);
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query(&mut replica.con())
            .unwrap();
        // Made before the sentinels start so that its drop kills those started if one fails.
        let mut setup = Self {
            primary,
            replica,
            sentinels: Vec::new(),
            _dir: tempfile::tempdir().unwrap(),
        };
        for i in 0..3 {
            let sentinel = start_sentinel(setup._dir.path(), i, setup.primary.port);
            setup.sentinels.push(sentinel);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(setup.sentinels_agree(setup.primary.port) && setup.replica_in_sync()) {
            assert!(
                Instant::now() < deadline,
                "the sentinels never settled; their logs:\n{}",
                setup.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        setup
    }

    /// The `[redis]` table of a sweeper configuration for this topology.
    pub fn redis_toml(&self) -> String {
        let urls: Vec<String> = self
            .sentinels
            .iter()
            .map(|(p, _)| format!("\"redis://127.0.0.1:{p}\""))
            .collect();
        format!(
            "[redis]\nmode = \"sentinel\"\nsentinels = [{}]\nmaster_name = \"{MASTER_NAME}\"\n",
            urls.join(", ")
        )
    }

    /// Asks the first sentinel for a failover: the old primary stays up and becomes a replica.
    pub fn failover(&self) {
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut sentinel_con(self.sentinels[0].0))
            .unwrap();
    }

    /// A split brain, as a partition leaves it: the replica is promoted and every sentinel
    /// names it, while the old primary stays up, still a primary, still taking writes.
    pub fn split(&self) {
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut self.replica.con())
            .unwrap();
        for (port, _) in &self.sentinels {
            let mut con = sentinel_con(*port);
            let _: () = redis::cmd("SENTINEL")
                .arg("REMOVE")
                .arg(MASTER_NAME)
                .query(&mut con)
                .unwrap();
            let _: () = redis::cmd("SENTINEL")
                .arg("MONITOR")
                .arg(MASTER_NAME)
                .arg("127.0.0.1")
                .arg(self.replica.port)
                .arg(2)
                .query(&mut con)
                .unwrap();
        }
    }

    /// Sends every sentinel a signal (by name: `STOP` makes it hang, `CONT` resumes it).
    pub fn signal_sentinels(&self, name: &str) {
        for (_, child) in &self.sentinels {
            signal_pid(child.id(), name);
        }
    }

    /// The primary's port according to the first sentinel that answers.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|(port, _)| {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
            let mut con = client
                .get_connection_with_timeout(Duration::from_secs(1))
                .ok()?;
            let (_, p): (String, u16) = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER_NAME)
                .query(&mut con)
                .ok()?;
            Some(p)
        })
    }

    /// Every sentinel's log, for failure messages.
    fn logs(&self) -> String {
        (0..self.sentinels.len())
            .map(|i| {
                let log = std::fs::read_to_string(sentinel_log(self._dir.path(), i));
                format!("--- sentinel {i}\n{}", log.unwrap_or_default())
            })
            .collect()
    }

    fn sentinels_agree(&self, port: u16) -> bool {
        self.sentinels.iter().all(|(p, _)| {
            let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{p}")) else {
                return false;
            };
            let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(1)) else {
                return false;
            };
            let info: String = redis::cmd("INFO")
                .arg("sentinel")
                .query(&mut con)
                .unwrap_or_default();
            info.contains(&format!("address=127.0.0.1:{port}"))
                && info.contains("slaves=1")
                && info.contains("sentinels=3")
        })
    }

    fn replica_in_sync(&self) -> bool {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut self.replica.con())
            .unwrap_or_default();
        info.contains("master_link_status:up")
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A connection to the sentinel on `port`.
fn sentinel_con(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection()
        .unwrap()
}

fn sentinel_log(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("sentinel-{i}.log"))
}

/// Sentinel number `i`, monitoring the primary on `primary_port`, on a free port; it runs the
/// same binary as every test server (`REDIS_SERVER`). Waits until it accepts connections; if it
/// exits at start for another reason than a taken port, fails the test with its log.
fn start_sentinel(dir: &Path, i: usize, primary_port: u16) -> (u16, Child) {
    let log = sentinel_log(dir, i);
    for _ in 0..5 {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 5000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir.display(),
            ),
        )
        .unwrap();
        let _ = std::fs::remove_file(&log);
        let mut child = Command::new(redis_server_binary())
            .arg(&conf)
            .arg("--sentinel")
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the server binary with --sentinel");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                if text.contains("Address already in use") {
                    break;
                }
                panic!(
                    "sentinel {i} ({}) exited at start ({status}); its log:\n{text}",
                    redis_server_binary()
                );
            }
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (port, child);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "sentinel {i} did not come up; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("could not start sentinel {i} on a free port after 5 tries");
}
