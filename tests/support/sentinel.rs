//! A primary, its replica and three sentinels, all real processes on free ports.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port};

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
        let dir = tempfile::tempdir().unwrap();
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port();
            let conf = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir.path().display(),
                    primary.port
                ),
            )
            .unwrap();
            let child = Command::new("redis-server")
                .arg(&conf)
                .arg("--sentinel")
                .arg("--logfile")
                .arg(dir.path().join(format!("sentinel-{i}.log")))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server --sentinel");
            sentinels.push((port, child));
        }
        let setup = Self {
            primary,
            replica,
            sentinels,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(setup.sentinels_agree(setup.primary.port) && setup.replica_in_sync()) {
            assert!(Instant::now() < deadline, "the sentinels never settled");
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
        let (port, _) = &self.sentinels[0];
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut con)
            .unwrap();
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
