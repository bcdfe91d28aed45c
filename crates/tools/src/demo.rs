//! `presence-sweeper-tools demo`: the daemon's main job, shown on one machine with nothing set
//! up beforehand. It starts a private `redis-server` on a free port, runs the daemon beside it
//! (in this process), and runs simulated users against both, some of whom vanish without a
//! goodbye; it prints each leave as it arrives, then a summary. Everything it started goes when
//! it ends, however it ends: the server is killed and its directory removed.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use presence_sweeper::serve::daemon::Daemon;
use presence_sweeper::serve::logging::LogStats;
use presence_sweeper::serve::systemd::Notifier;
use presence_sweeper::serve::{BuildInfo, http};
use presence_sweeper_config::{Config, ConfigError, Sources};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::simulate::{self, Heard, Judgement, SimulateOptions};

/// How long the server has to answer `PING` after it starts.
const SERVER_START: Duration = Duration::from_secs(10);

/// What the demo shows.
#[derive(Debug, Clone)]
pub(crate) struct DemoOptions {
    /// The `redis-server` to run; the one on `PATH` by default.
    pub(crate) redis_server: Option<PathBuf>,
    /// How long users vanish; the run goes on a little longer, for the last leaves.
    pub(crate) duration: Duration,
    /// Conversations.
    pub(crate) conversations: u32,
    /// Users per conversation.
    pub(crate) users: u32,
    /// Share of users who vanish per minute.
    pub(crate) vanish_rate: f64,
}

/// Why the demo could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    /// No server to run.
    #[error(
        "no redis-server on PATH: install one (e.g. `sudo apt-get install redis-server`) or name it with --redis-server PATH"
    )]
    NoServer,
    /// The server did not start.
    #[error("{0}")]
    Server(String),
    /// The demo's own configuration was refused (a bug, not the operator's input).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The daemon could not start.
    #[error("{0}")]
    Daemon(String),
    /// The simulation could not start.
    #[error("{0}")]
    Simulate(String),
}

/// A private `redis-server` and its directory, killed and removed when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Server {
    /// Starts `binary` on a free port of 127.0.0.1, persisting nothing, in a directory of its
    /// own, and waits until it answers.
    async fn start(binary: &Path) -> Result<Self, DemoError> {
        let dir = tempfile::tempdir().map_err(|e| DemoError::Server(e.to_string()))?;
        let port = free_port().map_err(|e| DemoError::Server(e.to_string()))?;
        let child = Command::new(binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .arg("--logfile")
            .arg(dir.path().join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| DemoError::Server(format!("cannot run {}: {e}", binary.display())))?;
        let server = Self { child, port, dir };
        server.wait_ready().await?;
        Ok(server)
    }

    async fn wait_ready(&self) -> Result<(), DemoError> {
        let client =
            redis::Client::open(self.url()).map_err(|e| DemoError::Server(e.to_string()))?;
        let deadline = Instant::now() + SERVER_START;
        loop {
            if let Ok(mut con) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING")
                    .query_async::<String>(&mut con)
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                let log =
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(DemoError::Server(format!(
                    "redis-server did not answer on port {} within {}s: {}",
                    self.port,
                    SERVER_START.as_secs(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port of 127.0.0.1 nothing listens on now (another process may take it before the server
/// does; the server then fails to start, and says so).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The `redis-server` to run: the one named, or the first on `PATH`.
fn server_binary(named: Option<&Path>) -> Result<PathBuf, DemoError> {
    if let Some(path) = named {
        return Ok(path.to_owned());
    }
    let path = std::env::var_os("PATH").ok_or(DemoError::NoServer)?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
        .ok_or(DemoError::NoServer)
}

/// The demo's configuration: the built-in defaults with a short window (6 s online, its walks
/// every 2 s), so that vanished users leave within seconds; notifications turned on by the
/// daemon itself; metrics on a free port; quiet logs.
fn config(url: &str) -> Result<Config, ConfigError> {
    let settings = [
        ("REDIS__URL", url),
        ("HTTP__LISTEN", "127.0.0.1:0"),
        ("LOG__LEVEL", "warn"),
        ("TRACKING__CONFIGURE_NOTIFICATIONS", "true"),
        ("SWEEPS__ONLINE__TTL", "6s"),
        ("SWEEPS__ONLINE__SCHEDULE", "2s"),
        ("SWEEPS__TYPING__ENABLED", "false"),
    ];
    let env: HashMap<String, String> = settings
        .iter()
        .map(|(k, v)| (format!("PRESENCE_SWEEPER__{k}"), (*v).to_owned()))
        .collect();
    Config::load(&Sources {
        env,
        ..Sources::default()
    })
}

/// Runs the demo until it is done or `cancel` fires (Ctrl-C), printing as it goes; returns
/// whether the sweeper behaved.
pub(crate) async fn run(
    opts: &DemoOptions,
    build: BuildInfo,
    cancel: &CancellationToken,
) -> Result<bool, DemoError> {
    let binary = server_binary(opts.redis_server.as_deref())?;
    let server = Server::start(&binary).await?;
    let config = config(&server.url())?;
    say(format_args!(
        "Redis: {} on 127.0.0.1:{} (pid {}), private to this demo and removed at its end",
        binary.display(),
        server.port,
        server.child.id()
    ));
    let daemon_stop = CancellationToken::new();
    let daemon = start_daemon(&config, build, &daemon_stop).await?;
    say(format_args!(
        "presence-sweeper: sweeping its `online` keys (ttl 6s); metrics at http://{}/metrics",
        daemon.0
    ));
    let sim = SimulateOptions {
        conversations: opts.conversations,
        users: opts.users,
        heartbeat: Duration::from_secs(2),
        vanish_rate: opts.vanish_rate,
        rejoin: true,
        new_conversations: 6.0,
        typing: false,
        duration: opts.duration,
        grace: None,
        sweep: "online".into(),
    };
    let plan = simulate::plan(&config, &sim).map_err(|e| DemoError::Simulate(e.to_string()))?;
    say(format_args!(
        "users: {} conversations of {}, heartbeating every 2s; for {}, {:.0}% of them a minute \
         vanish without a goodbye, and a new conversation opens every 10s\n",
        opts.conversations,
        opts.users,
        humantime::format_duration(opts.duration),
        opts.vanish_rate * 100.0
    ));
    let started = Instant::now();
    let narrator: simulate::Narrator = Box::new(move |heard: Heard<'_>| {
        narrate(started.elapsed(), &heard);
    });
    let outcome = simulate::run_narrated(&plan, &config.redis, cancel, Some(narrator)).await;
    daemon_stop.cancel();
    let _ = daemon.1.await;
    drop(server);
    let report = outcome.map_err(|e| DemoError::Simulate(e.to_string()))?;
    summary(&report);
    Ok(!report.failed())
}

/// The daemon, in this process, on a listener of its own: its address and its task.
async fn start_daemon(
    config: &Config,
    build: BuildInfo,
    stop: &CancellationToken,
) -> Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>), DemoError> {
    let listener = http::bind(config.http.listen)
        .await
        .map_err(|e| DemoError::Daemon(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| DemoError::Daemon(e.to_string()))?;
    // No reloads: the sender lives as long as the daemon.
    let (reload_tx, reloads) = tokio::sync::mpsc::channel(1);
    let again = config.clone();
    let daemon = Daemon {
        config: config.clone(),
        listener,
        reloads,
        loader: Box::new(move || Ok(again.clone())),
        notifier: Arc::new(Notifier::disabled()),
        logs: LogStats::default(),
        build,
    };
    let stop = stop.clone();
    let task = tokio::spawn(async move {
        let _reload = reload_tx;
        if let Err(e) = daemon.run(stop).await {
            tracing::error!(error = %e, "the daemon stopped");
        }
    });
    Ok((addr, task))
}

/// One line per event, as it arrives.
fn narrate(at: Duration, heard: &Heard<'_>) {
    let what = match heard.verdict {
        Judgement::Evicted { lag } => format!(
            "left  {} ms after its window closed (last heartbeat + 6s)",
            (lag * 1000.0).round().max(0.0)
        ),
        Judgement::False => "announced gone while still heartbeating: a FALSE leave".into(),
        Judgement::Duplicate => "announced twice: a DUPLICATE".into(),
        Judgement::Unknown => "announced, though the demo never wrote it".into(),
    };
    say(format_args!(
        "[{:>6.1}s] {} u{}  {what}",
        at.as_secs_f64(),
        heard.conversation,
        heard.user
    ));
}

/// The run's verdicts, in a few lines.
fn summary(report: &simulate::SimulateReport) {
    let ms = |s: f64| format!("{:.0} ms", (s * 1000.0).max(0.0));
    let lag = report.eviction_lag_seconds.as_ref().map_or_else(
        || "no lag measured (no zombie left)".to_owned(),
        |l| {
            format!(
                "lag p50 {}, p99 {}, max {}",
                ms(l.p50),
                ms(l.p99),
                ms(l.max)
            )
        },
    );
    say(format_args!(
        "\nsummary: {} users vanished, {} leaves announced; {} false leaves, {} duplicates, {} \
         missed zombies; {lag}",
        report.users_vanished,
        report.evictions,
        report.false_evictions,
        report.duplicate_events,
        report.missed_zombies
    ));
    say(if report.failed() {
        "the sweeper misbehaved: see the counts above"
    } else {
        "every vanished user left once, and nobody who stayed was announced gone"
    });
}

/// A line on stdout, the demo's own output; a stdout that is gone stops nothing.
fn say(line: impl std::fmt::Display) {
    let _ = writeln!(std::io::stdout(), "{line}");
}
