//! A Redis Cluster of real `redis-server` processes on free ports, made with
//! `redis-cli --cluster create`; every node is killed on drop.

use std::process::Command;
use std::time::{Duration, Instant};

use super::RedisServer;

/// A cluster owned by one test.
pub struct RedisCluster {
    /// Every node, primaries first as created (replicas follow).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `primaries` primaries with `replicas` replicas each; node timeout 2 s so failovers are
    /// quick.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        Self::start_with(primaries, replicas, &[])
    }

    /// [`RedisCluster::start`] with extra `redis-server` arguments for every node.
    pub fn start_with(primaries: usize, replicas: usize, extra: &[&str]) -> Self {
        let mut args = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--cluster-replica-validity-factor",
            "0",
        ];
        args.extend_from_slice(extra);
        let nodes: Vec<RedisServer> = (0..primaries * (1 + replicas))
            .map(|_| RedisServer::start_with(&args))
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        create
            .arg("--cluster-replicas")
            .arg(replicas.to_string())
            .arg("--cluster-yes");
        let out = create.output().expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok` and agrees on all slots, every
    /// live replica's link to its primary is up (so a failover loses nothing), and every live
    /// node's `CLUSTER NODES` lists each live replica as one (gossip spreads roles later than
    /// slots: Redis 6.2 was seen listing a linked replica as a primary without slots).
    pub fn wait_ok(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let live: Vec<&RedisServer> = self.nodes.iter().filter(|n| n.is_running()).collect();
            let mut replicas = 0;
            let mut listed = Vec::new();
            let ok = live.iter().all(|n| {
                let mut con = n.con();
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .unwrap_or_default();
                let replication: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut con)
                    .unwrap_or_default();
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut con)
                    .unwrap_or_default();
                replicas += usize::from(replication.contains("role:slave"));
                listed.push(
                    nodes
                        .lines()
                        .filter(|l| l.contains("slave") && !l.contains("fail"))
                        .count(),
                );
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok && listed.iter().all(|n| *n == replicas) {
                return;
            }
            assert!(Instant::now() < deadline, "cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis://127.0.0.1:PORT` of every running node, for `redis.nodes`.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }

    /// The `[redis]` table of a sweeper configuration for this cluster.
    pub fn redis_toml(&self) -> String {
        let seeds: Vec<String> = self.seeds().iter().map(|s| format!("{s:?}")).collect();
        format!(
            "[redis]\nmode = \"cluster\"\nnodes = [{}]\n",
            seeds.join(", ")
        )
    }

    /// A synchronous cluster connection for seeding and checking (routes by key).
    pub fn con(&self) -> redis::cluster::ClusterConnection {
        let live: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.is_running())
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect();
        redis::cluster::ClusterClient::new(live)
            .unwrap()
            .get_connection()
            .expect("cluster connection")
    }

    /// Node ids and ports of the current primaries, from `CLUSTER NODES`.
    pub fn primaries(&self) -> Vec<(String, u16)> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .expect("a live node");
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut node.con())
            .unwrap();
        text.lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .map(|l| {
                let mut f = l.split_whitespace();
                let id = f.next().unwrap().to_owned();
                let addr = f.next().unwrap();
                let port = addr.split(['@', ':']).nth(1).unwrap().parse().unwrap();
                (id, port)
            })
            .collect()
    }

    /// The node listening on `port`.
    pub fn node(&mut self, port: u16) -> &mut RedisServer {
        self.nodes.iter_mut().find(|n| n.port == port).unwrap()
    }
}
