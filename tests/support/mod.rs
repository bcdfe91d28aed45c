//! Test support: real `redis-server` processes on free ports, an event subscriber, and a guard
//! around the built binary. Every guard kills and reaps its process on drop, so a failing test
//! leaves nothing behind.

pub mod cluster;
pub mod faketime;
pub mod proxy;
pub mod receiver;
pub mod sentinel;
pub mod tls;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use presence_sweeper::Evictor;
use presence_sweeper::pass::{self, Pass};
use presence_sweeper_config::{Config, Sources};
use presence_sweeper_redis::Store;
use presence_sweeper_rules::report::NoObserver;
use tokio_util::sync::CancellationToken;

/// Polls `f` until it holds; fails the test, naming `what`, after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many keys the database holds, not counting the daemon's canary
/// (`presence-sweeper:canary:*`, one per primary, written while a daemon runs).
pub fn keys_but_the_canary(con: &mut redis::Connection) -> u64 {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    keys.iter()
        .filter(|k| !k.starts_with("presence-sweeper:canary:"))
        .count() as u64
}

/// A free TCP port on 127.0.0.1, below 55535 so that a cluster bus port (+10000) fits too.
/// Sends process `pid` a signal by name (`STOP`, `CONT`, ...).
pub fn signal_pid(pid: u32, name: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill")
        .success();
    assert!(ok, "kill -{name} {pid} failed");
}

/// A port on 127.0.0.1 that nothing listens on while this lives: its socket is bound but never
/// listens, so a connection to it is refused, and no server of a concurrent test can take the
/// port meanwhile (a port from [`free_port`] alone can be taken by one before it is used).
pub struct DeadPort {
    socket: Option<socket2::Socket>,
    pub port: u16,
}

impl DeadPort {
    pub fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        loop {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
            let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
            socket.bind(&any.into()).expect("bind an ephemeral port");
            let port = socket
                .local_addr()
                .unwrap()
                .as_socket()
                .expect("an IP address")
                .port();
            // Below 55535, so that a server started on it later has its cluster bus port.
            if port < 55535 {
                return Self {
                    socket: Some(socket),
                    port,
                };
            }
        }
    }

    /// Lets the port go, for a server that the test starts on it now.
    pub fn release(mut self) -> u16 {
        self.socket.take();
        self.port
    }
}

pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().unwrap().port();
        if port < 55535 {
            return port;
        }
    }
}

/// The server binary every test server runs: standalone, cluster nodes, replicas, sentinels
/// (`--sentinel`) and TLS servers alike. `REDIS_SERVER=/path/to/valkey-server` runs the suite
/// against another build (Valkey, or a Redis of another version); unset, `redis-server` from the
/// `PATH`. `redis-cli` (cluster creation, sharded subscribers) is always taken from the `PATH`.
pub fn redis_server_binary() -> &'static str {
    static BINARY: OnceLock<String> = OnceLock::new();
    BINARY.get_or_init(|| {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        if Command::new(&bin).arg("--version").output().is_err() {
            panic!(
                "`{bin}` was not found: the tests start their own Redis servers. Install it \
                 (Debian/Ubuntu: `apt-get install redis-server`) or set \
                 REDIS_SERVER=/path/to/redis-server (or valkey-server)"
            );
        }
        bin
    })
}

/// The major version of [`redis_server_binary`], from its `--version` (`... v=7.0.15 ...`; Valkey's
/// own version for Valkey); 0 if it names none.
pub fn server_major_version() -> u32 {
    static MAJOR: OnceLock<u32> = OnceLock::new();
    *MAJOR.get_or_init(|| {
        let out = Command::new(redis_server_binary())
            .arg("--version")
            .output()
            .expect("run the server's --version");
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(|v| v.split('.').next()?.parse().ok())
            .unwrap_or(0)
    })
}

/// A test's extra server arguments as this server takes them: before 7.0, `DEBUG` needed no
/// `--enable-debug-command` (the directive did not exist, and Redis 6.2 refuses to start on it).
fn supported_args(extra: &[String]) -> Vec<String> {
    let mut args = Vec::with_capacity(extra.len());
    let mut rest = extra.iter();
    while let Some(arg) = rest.next() {
        if arg == "--enable-debug-command" && server_major_version() < 7 {
            rest.next();
            continue;
        }
        args.push(arg.clone());
    }
    args
}

/// Why a server did not come up.
pub enum StartError {
    /// Its port was taken meanwhile (another test's server, or one that is still closing).
    PortTaken,
    /// It exited for another reason; its log says why.
    Exited(String),
}

/// The part of the log at `path` after its first `from` bytes (a restart appends to the log of
/// the start before).
fn read_log_from(path: &Path, from: u64) -> String {
    let log = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(log.get(from as usize..).unwrap_or_default()).into_owned()
}

/// How a server answered its first `PING`.
enum Greeting {
    /// With a reply or a Redis error other than `-LOADING` (e.g. `-NOAUTH`).
    Answered,
    /// `-LOADING`: still reading its data.
    Loading,
    /// Not at all: a closed connection, or a TLS-only port that this plain client cannot greet.
    Failed,
}

/// A `redis-server` owned by one test. Killed and reaped on drop.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    extra: Vec<String>,
    /// Another server binary than [`redis_server_binary`], and its environment (a server
    /// under libfaketime, see `faketime`).
    program: Option<String>,
    env: Vec<(String, String)>,
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server on a free port with extra `redis-server` arguments (e.g. `--requirepass`).
    pub fn start_with(extra: &[&str]) -> Self {
        for _ in 0..5 {
            let mut server = Self::unstarted(free_port(), extra);
            match server.try_start() {
                Ok(()) => return server,
                Err(StartError::PortTaken) => {}
                Err(StartError::Exited(log)) => server.exited(&log),
            }
        }
        panic!(
            "could not start {} on a free port after 5 tries: each port was taken meanwhile",
            redis_server_binary()
        );
    }

    /// A server that will use `port` but is not running yet ([`RedisServer::restart`] starts it).
    pub fn unstarted(port: u16, extra: &[&str]) -> Self {
        Self {
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            program: None,
            env: Vec::new(),
        }
    }

    /// The server's own directory (its data, its log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Fails the test: the server exited at start, and `log` says why.
    fn exited(&self, log: &str) -> ! {
        panic!(
            "{} on port {} exited at start (arguments {:?}); its log:\n{log}",
            redis_server_binary(),
            self.port,
            self.extra
        )
    }

    /// Starts the process and waits until it accepts connections. Panics, with the log, if it
    /// neither does nor exits within 10 s.
    pub fn try_start(&mut self) -> Result<(), StartError> {
        let log_path = self.log_path();
        let log_start = std::fs::metadata(&log_path).map_or(0, |m| m.len());
        let mut cmd = Command::new(self.program.as_deref().unwrap_or(redis_server_binary()));
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)))
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &self.dir.path().to_string_lossy()])
            .args(["--logfile", &log_path.to_string_lossy()])
            .args(supported_args(&self.extra))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                // Errors in the arguments go to stderr, before the log file is open.
                let mut stderr = String::new();
                let _ =
                    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr);
                let log = read_log_from(&log_path, log_start);
                if log.contains("Address already in use") {
                    return Err(StartError::PortTaken);
                }
                return Err(StartError::Exited(format!("({status}){stderr}\n{log}")));
            }
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                let up = match self.greeting() {
                    Greeting::Answered => true,
                    Greeting::Loading => false,
                    // A server that accepted into its backlog and then exited (a cluster node
                    // whose bus port was taken, between its listen and its exit) fails the
                    // greeting too: it is up only if it is still running a moment later.
                    Greeting::Failed => {
                        std::thread::sleep(Duration::from_millis(100));
                        matches!(child.try_wait(), Ok(None))
                    }
                };
                if up {
                    self.child = Some(child);
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{} on port {} did not come up; its log:\n{}",
            redis_server_binary(),
            self.port,
            read_log_from(&log_path, log_start)
        );
    }

    /// How the server answers a `PING`: one restarting from RDB or AOF accepts connections
    /// while it loads, and answers `-LOADING` meanwhile. A server that wants a password has
    /// answered once it asks for it.
    fn greeting(&self) -> Greeting {
        let loading = |e: &redis::RedisError| {
            e.code() == Some("LOADING") || e.to_string().contains("LOADING")
        };
        let reply = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(1))
            .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con));
        match reply {
            Ok(_) => Greeting::Answered,
            Err(e) if loading(&e) => Greeting::Loading,
            Err(e) if e.code().is_some() => Greeting::Answered,
            Err(_) => Greeting::Failed,
        }
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// A client for the test's own commands (with the password, if any, set by the caller).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    /// A synchronous connection for seeding and assertions.
    pub fn con(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect to test redis")
    }

    /// Whether the process is up (not stopped by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Sends the server a signal (by name: `STOP` pauses it, `CONT` resumes it).
    pub fn signal(&self, name: &str) {
        signal_pid(self.child.as_ref().expect("running").id(), name);
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (data is gone: nothing is persisted).
    pub fn restart(&mut self) {
        if let Err(log) = self.try_restart() {
            self.exited(&log);
        }
    }

    /// [`RedisServer::restart`] that answers the server's log, rather than failing the test,
    /// when the server exits at start for another reason than a taken port.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.stop();
        for _ in 0..50 {
            match self.try_start() {
                Ok(()) => return Ok(()),
                Err(StartError::PortTaken) => std::thread::sleep(Duration::from_millis(100)),
                Err(StartError::Exited(log)) => return Err(log),
            }
        }
        panic!(
            "could not restart {} on port {}: the port stayed taken for 5 s; its last log:\n{}",
            redis_server_binary(),
            self.port,
            std::fs::read_to_string(self.log_path()).unwrap_or_default()
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server would not die of SIGKILL any sooner, but resume it anyway.
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(child.id().to_string())
                .status();
        }
        self.stop();
    }
}

/// Loads the configuration the way the binary does, from a TOML text and a Redis URL.
pub fn config(url: &str, toml: &str) -> Config {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("presence-sweeper.toml");
    std::fs::write(&file, toml).unwrap();
    let mut env = std::collections::HashMap::new();
    env.insert("PRESENCE_SWEEPER__REDIS__URL".to_string(), url.to_string());
    Config::load(&Sources {
        file: Some(file),
        env,
        overrides: Default::default(),
        system_file: false,
    })
    .expect("valid test configuration")
}

/// One sweep's full passes, run in the test process.
pub struct OnePass {
    store: Store,
    pass: Pass,
    sweeps: Vec<Arc<Evictor>>,
}

impl OnePass {
    /// Connects with `cfg` and readies passes of the sweep called `sweep`.
    pub async fn connect(cfg: &Config, sweep: &str) -> Self {
        Self {
            store: Store::connect(&cfg.redis).await.unwrap(),
            pass: Pass::new(cfg),
            sweeps: vec![Arc::new(Evictor::new(cfg.sweep(sweep).unwrap(), cfg))],
        }
    }

    /// One full pass.
    pub async fn run(&self, opts: pass::Options) -> Result<pass::Report, pass::Incomplete> {
        let cancel = CancellationToken::new();
        self.pass
            .run(&self.store, &self.sweeps, opts, &NoObserver, &cancel)
            .await
            .map(|mut reports| reports.remove(0))
    }
}

/// Redis's clock in Unix seconds (any node's, through a cluster connection).
pub fn redis_now(con: &mut impl redis::ConnectionLike) -> f64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
    s as f64 + us as f64 / 1e6
}

/// In each of `keys`, `zombies` members last seen 100 s ago and `live` members whose score is a
/// minute ahead (live throughout a test), on Redis's clock, in one pipeline (one key at a time
/// through a cluster connection). The members are
/// `zombie` and `live` when there is one of a kind, else `zombie0`, `zombie1`, ... and `live0`, ...
pub fn seed_keys<K: AsRef<str>>(
    con: &mut impl redis::ConnectionLike,
    keys: impl IntoIterator<Item = K>,
    zombies: usize,
    live: usize,
) {
    let now = redis_now(con);
    let name = |kind: &str, n: usize, i: usize| match n {
        1 => kind.to_owned(),
        _ => format!("{kind}{i}"),
    };
    let mut zadds = Vec::new();
    for key in keys {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(key.as_ref());
        for i in 0..zombies {
            zadd.arg(now - 100.0 - i as f64)
                .arg(name("zombie", zombies, i));
        }
        for i in 0..live {
            // Ten minutes ahead: live however long a test runs on a loaded machine.
            zadd.arg(now + 600.0).arg(name("live", live, i));
        }
        zadds.push(zadd);
    }
    // A cluster connection takes one command at a time (a pipeline may not span slots).
    if let [zadd] = zadds.as_slice() {
        return zadd.query::<()>(con).unwrap();
    }
    let mut pipe = redis::pipe();
    for zadd in zadds {
        pipe.add_command(zadd).ignore();
    }
    let _: () = pipe.query(con).unwrap();
}

/// The members of `key`, sorted by name.
pub fn members(con: &mut impl redis::ConnectionLike, key: &str) -> Vec<String> {
    let mut m: Vec<String> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap_or_default();
    m.sort();
    m
}

/// One received event.
#[derive(Debug, Clone)]
pub struct Received {
    pub channel: Vec<u8>,
    pub payload: Vec<u8>,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.payload).unwrap_or_else(|e| {
            panic!(
                "event is not valid JSON ({e}): {}",
                String::from_utf8_lossy(&self.payload)
            )
        })
    }
}

/// Collects every message published on channels matching a pattern.
pub struct Subscriber {
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    /// Subscribes (PSUBSCRIBE) and returns once the subscription is active.
    pub async fn start(url: &str, pattern: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        let mut pubsub = client.get_async_pubsub().await.expect("pubsub connection");
        pubsub.psubscribe(pattern).await.expect("psubscribe");
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        let task = tokio::spawn(async move {
            let mut stream = pubsub.into_on_message();
            while let Some(msg) = stream.next().await {
                sink.lock().unwrap().push(Received {
                    channel: msg.get_channel_name().as_bytes().to_vec(),
                    payload: msg.get_payload_bytes().to_vec(),
                });
            }
        });
        Self { received, task }
    }

    /// What arrived so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits until `n` messages arrived (or `timeout`), then a little more to catch extras.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        while self.received.lock().unwrap().len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.received()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A built binary (the daemon's, `presence-sweeper`, or `presence-sweeper-tools`), running;
/// killed on drop. Its stderr (the log) is collected for assertions.
pub struct Binary {
    child: Child,
    log: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

/// Path of the built daemon binary.
pub fn binary_path() -> &'static str {
    env!("CARGO_BIN_EXE_presence-sweeper")
}

/// Path of the built tools binary (`seed`, `simulate`). It is another package's binary, which
/// cargo builds for its own tests only: it is built here, once per test run, with the profile
/// of these tests (at once when `cargo build` already did).
pub fn tools_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let built = escargot::CargoBuild::new()
            .package("presence-sweeper-tools")
            .bin("presence-sweeper-tools")
            .current_release()
            .arg("--locked")
            .run()
            .unwrap_or_else(|e| panic!("building presence-sweeper-tools failed: {e}"));
        built.path().to_string_lossy().into_owned()
    })
}

impl Binary {
    /// Starts the binary with `args`, a config file holding `toml`, and extra environment.
    pub fn spawn(toml: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_with_stderr(toml, args, env, None)
    }

    /// [`Binary::spawn`] for the tools binary.
    pub fn spawn_tools(toml: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_program(tools_path(), toml, args, env, None)
    }

    /// [`Binary::spawn`], with stderr going to `stderr` if given (then only stdout is
    /// collected).
    pub fn spawn_with_stderr(
        toml: &str,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Option<Stdio>,
    ) -> Self {
        Self::spawn_program(binary_path(), toml, args, env, stderr)
    }

    pub fn spawn_program(
        program: &str,
        toml: &str,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Option<Stdio>,
    ) -> Self {
        let own_stderr = stderr.is_none();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("presence-sweeper.toml");
        std::fs::write(&file, toml).unwrap();
        let mut cmd = Command::new(program);
        cmd.arg("--config")
            .arg(&file)
            .args(args)
            .env_remove("PRESENCE_SWEEPER_CONFIG")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr.unwrap_or_else(Stdio::piped));
        let mut child = cmd.spawn().expect("spawn the binary");
        let log = Arc::new(Mutex::new(String::new()));
        let mut streams =
            vec![Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>];
        if own_stderr {
            streams.push(Box::new(child.stderr.take().unwrap()));
        }
        for stream in streams {
            let sink = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let mut log = sink.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            });
        }
        Self {
            child,
            log,
            _dir: dir,
        }
    }

    /// The process's id (to read its memory in /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds the process used so far (user and system, from /proc).
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).expect("its stat");
        // The fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .expect("a stat line")
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        let out = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .expect("getconf");
        let per_second: f64 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("CLK_TCK");
        ticks as f64 / per_second
    }

    /// The path of the config file, to rewrite it (reload tests).
    pub fn config_path(&self) -> PathBuf {
        self._dir.path().join("presence-sweeper.toml")
    }

    /// Everything logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// How many log lines contain `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    /// Waits until the log holds at least `n` lines containing `needle`.
    pub fn wait_for_log(&self, needle: &str, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.count(needle) < n {
            if Instant::now() > deadline {
                panic!(
                    "waited {timeout:?} for {n}x {needle:?} in the log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends a signal (by name, e.g. "TERM").
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{name} failed");
    }

    /// Waits for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the daemon binary to completion; returns (exit code, stdout, stderr).
pub fn run_binary(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run_program(binary_path(), args, env)
}

/// [`run_binary`] for the tools binary.
pub fn run_tools(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    run_program(tools_path(), args, env)
}

fn run_program(program: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(program)
        .args(args)
        .env_remove("PRESENCE_SWEEPER_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// GET `path` from `addr` over HTTP/1.1; returns (status, body). Panics on I/O errors.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    http_request(addr, "GET", path)
}

/// One HTTP/1.1 request with `Connection: close`; returns (status, body).
pub fn http_request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_owned())
}

/// One sample of a Prometheus text exposition.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// Parses the Prometheus text format (enough of it for our own output).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            None => (series.to_owned(), Vec::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("closing brace");
                let mut labels = Vec::new();
                let mut rest = body;
                while !rest.is_empty() {
                    let (k, v) = rest.split_once("=\"").expect("label=\"value\"");
                    let mut value = String::new();
                    let mut chars = v.char_indices();
                    let mut end = v.len();
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '\\' => {
                                if let Some((_, n)) = chars.next() {
                                    value.push(if n == 'n' { '\n' } else { n });
                                }
                            }
                            '"' => {
                                end = i;
                                break;
                            }
                            c => value.push(c),
                        }
                    }
                    labels.push((k.trim_start_matches(',').to_owned(), value));
                    rest = v[end + 1..].trim_start_matches(',');
                }
                (name.to_owned(), labels)
            }
        };
        out.push(Sample {
            name,
            labels,
            value,
        });
    }
    out
}

/// The value of the sample called `name` whose labels include all of `labels`.
pub fn metric(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|s| s.value)
}

/// Scrapes `/metrics` at `addr`.
pub fn scrape(addr: std::net::SocketAddr) -> Vec<Sample> {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    parse_metrics(&body)
}

/// The daemon running inside the test process on a listener the test bound; cancelled on drop.
pub struct InProcessDaemon {
    pub addr: std::net::SocketAddr,
    pub cancel: tokio_util::sync::CancellationToken,
    /// Held so that the daemon's reload channel stays open: a closed one would read as "no more
    /// reloads", which is not what a test means.
    _reload: tokio::sync::mpsc::Sender<()>,
    pub task: Option<tokio::task::JoinHandle<Result<(), presence_sweeper::serve::StartError>>>,
}

impl InProcessDaemon {
    /// Starts the daemon with `config`; a reload re-reads the same file from `file`, if given.
    pub async fn start(config: Config, file: Option<PathBuf>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let (reload, reloads) = tokio::sync::mpsc::channel(1);
        let env: std::collections::HashMap<String, String> = [(
            "PRESENCE_SWEEPER__REDIS__URL".to_string(),
            config.redis.url.clone(),
        )]
        .into();
        let daemon = presence_sweeper::serve::daemon::Daemon {
            config,
            listener,
            reloads,
            loader: Box::new(move || {
                Config::load(&Sources {
                    file: file.clone(),
                    env: env.clone(),
                    overrides: Default::default(),
                    system_file: false,
                })
            }),
            notifier: Arc::new(presence_sweeper::serve::systemd::Notifier::disabled()),
            logs: Default::default(),
            build: presence_sweeper::serve::BuildInfo {
                version: presence_sweeper_cli::version::VERSION,
                revision: presence_sweeper_cli::version::REVISION,
                rustc: presence_sweeper_cli::version::rustc_release(),
            },
        };
        let task = tokio::spawn(daemon.run(cancel.clone()));
        Self {
            addr,
            cancel,
            _reload: reload,
            task: Some(task),
        }
    }

    /// Polls `/metrics` until `pred` holds (or panics after `timeout`).
    pub async fn wait_metrics(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        loop {
            let addr = self.addr;
            let samples = tokio::task::spawn_blocking(move || scrape(addr))
                .await
                .unwrap();
            if pred(&samples) {
                return samples;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Cancels and waits for a clean return.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(6), task)
            .await
            .expect("daemon stops within the drain deadline")
            .unwrap()
            .unwrap();
    }
}

impl Drop for InProcessDaemon {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Loads a configuration from a file (kept on disk so reloads can re-read it).
pub fn config_file(dir: &Path, url: &str, toml: &str) -> (Config, PathBuf) {
    let file = write_file(dir, "presence-sweeper.toml", toml);
    let mut env = std::collections::HashMap::new();
    env.insert("PRESENCE_SWEEPER__REDIS__URL".to_string(), url.to_string());
    let config = Config::load(&Sources {
        file: Some(file.clone()),
        env,
        overrides: Default::default(),
        system_file: false,
    })
    .expect("valid test configuration");
    (config, file)
}

impl Binary {
    /// Waits until `/readyz` answers 200: Redis answers and every sweep walked every primary.
    pub fn wait_ready(&self, timeout: Duration) {
        let addr = self.http_addr();
        let deadline = Instant::now() + timeout;
        loop {
            let (status, body) = http_get(addr, "/readyz");
            if status == 200 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "not ready after {timeout:?} ({body}); log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Successful walks of `sweep` so far (`presence_sweeper_sweeps_total{result="success"}`).
    pub fn walks(&self, sweep: &str) -> u64 {
        let s = scrape(self.http_addr());
        metric(
            &s,
            "presence_sweeper_sweeps_total",
            &[("sweep", sweep), ("result", "success")],
        )
        .unwrap_or(0.0) as u64
    }

    /// Waits until `sweep` has walked at least `n` times.
    pub fn wait_walks(&self, sweep: &str, n: u64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.walks(sweep) < n {
            assert!(
                Instant::now() < deadline,
                "fewer than {n} walks of {sweep} after {timeout:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The metrics server's address, from the start-up log line.
    pub fn http_addr(&self) -> std::net::SocketAddr {
        self.wait_for_log(
            "metrics and health server listening",
            1,
            Duration::from_secs(10),
        );
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("metrics and health server listening"))
            .unwrap();
        let at = line.find("addr=").expect("addr field") + 5;
        line[at..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .expect("socket address")
    }
}

/// A `redis-cli SSUBSCRIBE` (sharded pub/sub) on one server, collecting `(channel, payload)`.
pub struct ShardedSubscriber {
    child: Child,
    messages: Arc<Mutex<Vec<(String, String)>>>,
}

impl ShardedSubscriber {
    /// Subscribes to `channels` on the server at `port` (the owner of their slots, in a
    /// cluster) and returns once redis-cli confirmed every subscription.
    pub fn start(port: u16, channels: &[String]) -> Self {
        let mut child = Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .arg("SSUBSCRIBE")
            .args(channels)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-cli SSUBSCRIBE");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let confirmed = Arc::new(Mutex::new(0usize));
        let (sink, count) = (messages.clone(), confirmed.clone());
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines().map_while(Result::ok);
            while let Some(line) = lines.next() {
                match line.as_str() {
                    "ssubscribe" => *count.lock().unwrap() += 1,
                    "smessage" => {
                        if let (Some(channel), Some(payload)) = (lines.next(), lines.next()) {
                            sink.lock().unwrap().push((channel, payload));
                        }
                    }
                    _ => {}
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while *confirmed.lock().unwrap() < channels.len() {
            assert!(Instant::now() < deadline, "SSUBSCRIBE was not confirmed");
            std::thread::sleep(Duration::from_millis(10));
        }
        Self { child, messages }
    }

    /// What arrived so far.
    pub fn received(&self) -> Vec<(String, String)> {
        self.messages.lock().unwrap().clone()
    }
}

impl Drop for ShardedSubscriber {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
