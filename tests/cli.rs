//! The binary's one-shot commands: exit codes, messages and summaries.

use crate::support::{DeadPort, RedisServer, run_binary, run_tools, write_file};
use redis::Commands;

fn check_config(toml: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", toml);
    run_binary(&["--config", file.to_str().unwrap(), "check-config"], env)
}

fn assert_config_error(toml: &str, env: &[(&str, &str)], expected: &str) {
    let (code, stdout, stderr) = check_config(toml, env);
    assert_eq!(code, 2, "{toml:?}: stdout {stdout:?} stderr {stderr:?}");
    assert!(stdout.is_empty(), "{stdout:?}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line for {toml:?}: {stderr:?}");
    assert!(
        lines[0].starts_with("presence-sweeper: configuration error: "),
        "{stderr:?}"
    );
    assert!(lines[0].contains(expected), "{toml:?}: {stderr:?}");
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"));
}

#[test]
fn bad_configurations_exit_2_with_one_line_naming_key_and_value() {
    let cases: &[(&str, &str)] = &[
        (
            "[redis]\nurll = \"redis://x\"\n",
            "unknown configuration key `redis.urll`",
        ),
        (
            "[sweeps.online]\nmatch = \"presence:online\"\n",
            "sweeps.online.match = \"presence:online\"",
        ),
        (
            "[sweeps.online]\nmatch = \"presence:*:*\"\n",
            "sweeps.online.match = \"presence:*:*\"",
        ),
        (
            "[sweeps.typing]\nttl = \"0s\"\n",
            "sweeps.typing.ttl = \"0s\"",
        ),
        (
            "[sweeps.typing]\nttl = \"1ms\"\n",
            "sweeps.typing.ttl = \"1ms\" (in ",
        ),
        (
            "[sweeps.typing]\nttl = \"99999999999999999999s\"\n",
            "must be at most 7days",
        ),
        (
            "[sweeps.online]\nschedule = \"0 0 0 31 2 *\"\n",
            "would never walk",
        ),
        (
            "[sweeps.typing]\nttl = \"five seconds\"\n",
            "sweeps.typing.ttl = \"five seconds\"",
        ),
        (
            "[sweeps.typing]\nschedule = \"0ms\"\n",
            "sweeps.typing.schedule = \"0ms\"",
        ),
        (
            "[sweeps.online]\nschedule = \"0 61 * * * *\"\n",
            "sweeps.online.schedule = \"0 61 * * * *\"",
        ),
        (
            "[sweeps.online]\nschedule = \"*/5 * * * *\"\n",
            "sweeps.online.schedule = \"*/5 * * * *\"",
        ),
        (
            "[redis]\npassword_file = \"/nonexistent/redis-password\"\n",
            "redis.password_file = \"/nonexistent/redis-password\"",
        ),
        (
            "[redis]\nconnect_timeout = \"0s\"\n",
            "redis.connect_timeout = \"0s\"",
        ),
        ("[http]\nlisten = \"9750\"\n", "http.listen = \"9750\""),
        (
            "[sweeps.new]\nmatch = \"x:*\"\n",
            "missing configuration key `sweeps.new.ttl`",
        ),
        ("[sweeps]\nonline = 3\n", "sweeps.online = 3"),
        (
            "this is not toml",
            "c.toml: TOML parse error at line 1, column 6",
        ),
    ];
    for (toml, expected) in cases {
        assert_config_error(toml, &[], expected);
    }
}

#[test]
fn environment_mistakes_are_named_too() {
    assert_config_error(
        "",
        &[("PRESENCE_SWEEPER__SWEEPS__ONLINE__TLL", "10s")],
        "unknown configuration key `sweeps.online.tll` (from PRESENCE_SWEEPER__SWEEPS__ONLINE__TLL)",
    );
    assert_config_error(
        "",
        &[("PRESENCE_SWEEPER__SCAN__COUNT", "lots")],
        "scan.count = \"lots\" (from PRESENCE_SWEEPER__SCAN__COUNT): must be a whole number",
    );
    assert_config_error(
        "",
        &[("PRESENCE_SWEEPER__METRICS__LISTEN", ":9100")],
        "unknown configuration key `metrics` (from PRESENCE_SWEEPER__METRICS__LISTEN)",
    );
    assert_config_error(
        "[metrics]\nlisten = \":9100\"\n",
        &[],
        "unknown configuration key `metrics` (in ",
    );
    assert_config_error(
        "",
        &[("PRESENCE_SWEEPER___REDIS__URL", "redis://10.0.0.5:6379")],
        "environment variable PRESENCE_SWEEPER___REDIS__URL is malformed: the prefix, the \
         section and the key are joined by exactly two underscores \
         (PRESENCE_SWEEPER__SECTION__KEY); did you mean PRESENCE_SWEEPER__REDIS__URL?",
    );
    assert_config_error(
        "[sweeps.online]\nttl = \"-5s\"\n",
        &[],
        "c.toml): negative: a duration must be greater than zero",
    );
}

#[test]
fn missing_config_file_exits_2() {
    let (code, _, stderr) = run_binary(&["--config", "/nonexistent/p.toml", "check-config"], &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("cannot read config file /nonexistent/p.toml"),
        "{stderr}"
    );
    let (code, _, stderr) = run_binary(
        &["check-config"],
        &[("PRESENCE_SWEEPER_CONFIG", "/nonexistent/q.toml")],
    );
    assert_eq!(code, 2);
    assert!(stderr.contains("/nonexistent/q.toml"), "{stderr}");
}

#[test]
fn check_config_prints_the_effective_configuration_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let pw = write_file(dir.path(), "pw", "hunter2-file-secret\n");
    let toml = format!(
        "[redis]\npassword_file = {:?}\n[sweeps.typing]\nenabled = false\n",
        pw.to_str().unwrap()
    );
    let (code, stdout, stderr) = check_config(
        &toml,
        &[(
            "PRESENCE_SWEEPER__REDIS__URL",
            "redis://app:url-secret@10.0.0.5:6380/2",
        )],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("url = \"redis://app:***@10.0.0.5:6380/2\""),
        "{stdout}"
    );
    assert!(stdout.contains("[sweeps.typing]\n"), "{stdout}");
    assert!(stdout.contains("enabled = false"), "{stdout}");
    assert!(stdout.contains("ttl = \"45s\""), "{stdout}");
    for out in [&stdout, &stderr] {
        assert!(!out.contains("hunter2"), "{out}");
        assert!(!out.contains("url-secret"), "{out}");
    }
}

#[test]
fn flags_override_environment() {
    let (code, stdout, _) = run_binary(
        &[
            "--redis-url",
            "redis://flag:1/0",
            "--log-format",
            "json",
            "check-config",
        ],
        &[("PRESENCE_SWEEPER__REDIS__URL", "redis://env:2/0")],
    );
    assert_eq!(code, 0);
    assert!(stdout.contains("url = \"redis://flag:1/0\""), "{stdout}");
    assert!(stdout.contains("format = \"json\""), "{stdout}");
    let (code, _, stderr) = run_binary(&["--log-format", "xml", "check-config"], &[]);
    assert_eq!(code, 2, "clap rejects it: {stderr}");
}

#[test]
fn one_shot_sweep_prints_a_summary_per_sweep() {
    let server = RedisServer::start();
    let mut con = server.con();
    let keys = (0..3).flat_map(|c| {
        [
            format!("presence:c{c}:online"),
            format!("presence:c{c}:typing"),
        ]
    });
    crate::support::seed_keys(&mut con, keys, 1, 1);
    let url = server.url();
    let (code, stdout, stderr) = run_binary(&["--redis-url", &url, "sweep", "--dry-run"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("online: keys_scanned=3 keys=3 members=3 would_evict=3 events_published=0"),
        "{stdout}"
    );
    let n: u64 = con.zcard("presence:c0:online").unwrap();
    assert_eq!(n, 2, "dry run changed nothing");

    let (code, stdout, stderr) =
        run_binary(&["--redis-url", &url, "sweep", "--sweep", "typing"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with(
            "typing: keys_scanned=3 keys=3 members=3 evicted=3 events_published=3 seconds="
        ),
        "{stdout}"
    );
    let n: u64 = con.zcard("presence:c0:online").unwrap();
    assert_eq!(n, 2, "only the named sweep ran");

    let (code, stdout, _) = run_binary(&["--redis-url", &url, "sweep"], &[]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("online: keys_scanned=3 keys=3 members=3 evicted=3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("typing: keys_scanned=3 keys=3 members=3 evicted=0"),
        "{stdout}"
    );
}

/// The daemon's binary carries no tool that writes synthetic data: those are in
/// `presence-sweeper-tools`, which its help names.
#[test]
fn the_daemon_has_no_seed_or_simulate() {
    for command in ["seed", "simulate"] {
        let (code, stdout, stderr) =
            run_binary(&["--redis-url", "redis://127.0.0.1:1/0", command], &[]);
        assert_eq!(code, 2, "{command}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("unrecognized subcommand '{command}'")),
            "{stderr}"
        );
    }
    let (code, help, _) = run_binary(&["--help"], &[]);
    assert_eq!(code, 0);
    assert!(
        help.contains("are in the `presence-sweeper-tools` binary"),
        "{help}"
    );
    for command in ["run", "sweep", "check-config", "healthcheck", "stats"] {
        assert!(
            help.contains(&format!("\n  {command} ")),
            "{command} in {help}"
        );
    }
}

#[test]
fn named_sweep_must_exist() {
    let (code, _, stderr) = run_binary(
        &[
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "sweep",
            "--sweep",
            "presence",
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown sweep `presence` (configured: online, typing)"),
        "{stderr}"
    );
}

#[test]
fn one_shot_sweep_exits_1_when_redis_is_unreachable() {
    let dead = DeadPort::new();
    let port = dead.port;
    let url = format!("redis://127.0.0.1:{port}/0");
    let started = std::time::Instant::now();
    let (code, stdout, stderr) = run_binary(&["--redis-url", &url, "sweep"], &[]);
    assert_eq!(code, 1, "{stdout} {stderr}");
    assert!(
        stderr.contains(&format!("sweep failed: cannot connect to Redis at {url}: ")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn password_from_file_works_and_a_wrong_one_fails_clearly() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret-pw"]);
    let dir = tempfile::tempdir().unwrap();
    let good = write_file(dir.path(), "good", "s3cret-pw\n");
    let bad = write_file(dir.path(), "bad", "wrong-pw\n");
    let url = server.url();
    let toml =
        |p: &std::path::Path| format!("[redis]\npassword_file = {:?}\n", p.to_str().unwrap());

    let file = write_file(dir.path(), "good.toml", &toml(&good));
    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            &url,
            "sweep",
        ],
        &[],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(!stdout.contains("s3cret") && !stderr.contains("s3cret"));

    let file = write_file(dir.path(), "bad.toml", &toml(&bad));
    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            &url,
            "sweep",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stdout} {stderr}");
    assert!(
        stderr.to_lowercase().contains("auth") || stderr.contains("WRONGPASS"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wrong-pw") && !stderr.contains("s3cret"),
        "{stderr}"
    );
}

/// `run` with its metrics address taken exits 1 with one line that names the address and says
/// why once.
#[test]
fn a_taken_metrics_address_exits_1_with_its_cause_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "c.toml",
        &format!("[http]\nlisten = \"{addr}\"\n"),
    );
    let (code, stdout, stderr) = run_binary(
        &[
            "--config",
            file.to_str().unwrap(),
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "run",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stdout}{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "presence-sweeper: cannot listen on {addr} (http.listen): "
        )),
        "{stderr}"
    );
    assert_eq!(
        last.matches("Address already in use").count(),
        1,
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A `PRESENCE_SWEEPER_*` variable that sets nothing (one underscore: the `config` crate skips
/// it) is named with the one probably meant: an error for `check-config`, a warning elsewhere.
#[test]
fn unknown_environment_variables_are_named_with_the_one_meant() {
    let typo = [("PRESENCE_SWEEPER_REDIS_URL", "redis://127.0.0.1:1/0")];
    let meant = "environment variable PRESENCE_SWEEPER_REDIS_URL sets nothing; did you mean \
                 PRESENCE_SWEEPER__REDIS__URL?";
    let (code, stdout, stderr) = run_binary(&["check-config"], &typo);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        format!("presence-sweeper: configuration error: {meant}")
    );

    let dead = DeadPort::new();
    let url = format!("redis://127.0.0.1:{}/0", dead.port);
    let (code, _, stderr) = run_binary(&["--redis-url", &url, "sweep"], &typo);
    assert_eq!(
        code, 1,
        "Redis is unreachable, the variable only warned: {stderr}"
    );
    assert!(
        stderr.contains("WARN") && stderr.contains(meant),
        "{stderr}"
    );

    // The variables the binary reads itself stay known.
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "c.toml", "");
    let (code, _, stderr) = run_binary(
        &["check-config"],
        &[("PRESENCE_SWEEPER_CONFIG", file.to_str().unwrap())],
    );
    assert_eq!(code, 0, "{stderr}");
}

/// A misspelt level is a valid `tracing` filter (a target called `wraning`) that silences every
/// line: it is refused, wherever it comes from, by every command.
#[test]
fn an_invalid_log_level_exits_2_everywhere() {
    let why = "\"wraning\" is not a level (off, error, warn, info, debug, trace)";
    for args in [
        &["--log-level", "wraning", "check-config"][..],
        &[
            "--log-level",
            "wraning",
            "--redis-url",
            "redis://127.0.0.1:1/0",
            "sweep",
        ],
        &["--log-level", "wraning", "healthcheck"],
        &["--log-level", "wraning", "run"],
    ] {
        let (code, stdout, stderr) = run_binary(args, &[]);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!(
                "presence-sweeper: configuration error: log.level = \"wraning\" (from \
                 --log-level): {why}"
            )),
            "{args:?}: {stderr}"
        );
    }
    assert_config_error(
        "",
        &[("PRESENCE_SWEEPER__LOG__LEVEL", "info,debgu")],
        "log.level = \"info,debgu\" (from PRESENCE_SWEEPER__LOG__LEVEL): \"debgu\" is not a level",
    );
    let (code, _, stderr) = check_config("[log]\nlevel = \"wraning\"\n", &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("c.toml): \"wraning\" is not a level"),
        "{stderr}"
    );
    let (code, _, stderr) = run_binary(&["--log-level", "info,h2=warn", "check-config"], &[]);
    assert_eq!(code, 0, "a filter with levels is fine: {stderr}");
}

/// Runs the binary in `cwd`.
fn run_binary_in(cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(crate::support::binary_path())
        .args(args)
        .current_dir(cwd)
        .env_remove("PRESENCE_SWEEPER_CONFIG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Messages show the configuration file as the operator gave it, not a rewritten path, and a
/// missing key or a bad value names it.
#[test]
fn the_config_file_is_named_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("x");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(dir.path().join("cfg")).unwrap();
    write_file(
        &dir.path().join("cfg"),
        "missing.toml",
        "[sweeps.x]\nttl = \"1s\"\n",
    );
    write_file(&dir.path().join("cfg"), "bad.toml", "[scan]\ncount = 0\n");
    write_file(&cwd, "good.toml", "[scan]\ncount = 10\n");
    let absolute = cwd.join("good.toml");
    let absolute = absolute.to_str().unwrap();

    let cases = [
        (
            "../cfg/missing.toml",
            "missing configuration key `sweeps.x.match` (in ../cfg/missing.toml)",
        ),
        (
            "./../cfg/bad.toml",
            "scan.count = 0 (in ./../cfg/bad.toml): must be between 1 and 1000000",
        ),
    ];
    for (path, expected) in cases {
        let (code, _, stderr) = run_binary_in(&cwd, &["--config", path, "check-config"]);
        assert_eq!(code, 2, "{stderr}");
        assert_eq!(
            stderr.trim_end(),
            format!("presence-sweeper: configuration error: {expected}")
        );
    }
    let (code, stdout, stderr) = run_binary_in(&cwd, &["--config", absolute, "check-config"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with(&format!("# read: the file {absolute}\n")),
        "{stdout}"
    );
}

/// `check-config` shows every key in effect: unset ones as comments, and what a storm guard's
/// `hold` follows when it is not set.
#[test]
fn check_config_prints_every_key_in_effect() {
    let (code, stdout, stderr) = check_config("[sweeps.online]\nttl = \"60s\"\n", &[]);
    assert_eq!(code, 0, "{stderr}");
    for line in [
        "# master_name: unset",
        "# password_file: unset",
        "# key_file: unset",
        "hold = \"1m\"  # the sweep's ttl",
        "hold = \"5s\"  # the sweep's ttl",
    ] {
        assert!(stdout.lines().any(|l| l == line), "{line:?} in {stdout}");
    }
}

#[test]
fn version_names_the_git_revision_and_the_compiler() {
    use presence_sweeper_cli::version::{REVISION, RUSTC, VERSION};
    let (code, stdout, _) = run_binary(&["--version"], &[]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout.trim(),
        format!("presence-sweeper {VERSION} (revision {REVISION}, built with {RUSTC})")
    );
    // Built from this checkout (unless the build was told otherwise): its commit.
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let (Some(head), None) = (head, option_env!("PRESENCE_SWEEPER_GIT_REVISION")) {
        assert_eq!(REVISION, head);
    }
    assert!(RUSTC.starts_with("rustc 1."), "{RUSTC}");
}

/// A TCP server that answers anything with an HTTP error, as a web server on the wrong port
/// would.
fn not_redis() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut socket in listener.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf);
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n!!");
        }
    });
    addr
}

#[test]
fn a_server_that_is_not_redis_is_named_as_such_in_one_line() {
    let addr = not_redis();
    let url = format!("redis://{addr}/0");
    let expected = format!("{addr} answered, but not as Redis does (is it a Redis server?)");
    let (code, _, stderr) = run_binary(&["--redis-url", &url, "sweep"], &[]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(
        stderr.lines().last().unwrap(),
        format!("presence-sweeper: sweep failed: cannot connect to Redis: {expected}")
    );
    // The daemon says it once per attempt, one line each, and not as an outage.
    let d = crate::support::Binary::spawn(
        "[http]\nlisten = \"127.0.0.1:0\"\n",
        &["--redis-url", &url],
        &[],
    );
    d.wait_for_log(&expected, 2, std::time::Duration::from_secs(10));
    let log = d.log();
    assert!(!log.contains("Unexpected"), "{log}");
    assert!(!log.contains("not reachable"), "{log}");
    assert!(
        log.lines()
            .filter(|l| l.contains("Redis is not usable yet; retrying"))
            .all(|l| l.contains(&expected)),
        "{log}"
    );
}

#[test]
fn one_shot_sweep_says_first_what_it_will_change_without_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let port = server
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let url = format!("redis://default:s3cret@127.0.0.1:{port}/0");
    let (code, stdout, stderr) = run_binary(&["--redis-url", &url, "sweep", "--dry-run"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("s3cret") && !stdout.contains("s3cret"));
    assert_eq!(
        stderr.lines().next().unwrap(),
        format!(
            "presence-sweeper: sweeping redis://default:***@127.0.0.1:{port}/0 \
             (dry run: nothing is changed): online, typing"
        ),
        "{stderr}"
    );
    let (code, _, stderr) = run_binary(&["--redis-url", &url, "sweep", "--sweep", "typing"], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "presence-sweeper: sweeping redis://default:***@127.0.0.1:{port}/0 \
             (evicting and publishing): typing\n"
        )),
        "{stderr}"
    );
}

/// Each binary, how the tests run it, and the subcommands its completion scripts and main man
/// page must name.
type Runner = fn(&[&str], &[(&str, &str)]) -> (i32, String, String);
const BINARIES: [(&str, Runner, &[&str]); 2] = [
    (
        "presence-sweeper",
        run_binary,
        &[
            "run",
            "sweep",
            "check-config",
            "healthcheck",
            "stats",
            "completions",
        ],
    ),
    (
        "presence-sweeper-tools",
        run_tools,
        &["seed", "simulate", "demo", "completions"],
    ),
];

/// Needs no configuration: a `PRESENCE_SWEEPER_CONFIG` that does not exist changes nothing.
const NO_CONFIG: &[(&str, &str)] = &[("PRESENCE_SWEEPER_CONFIG", "/nonexistent/p.toml")];

#[test]
fn completions_name_every_subcommand_in_each_shell() {
    for (name, run, subcommands) in BINARIES {
        for shell in ["bash", "zsh", "fish"] {
            let (code, script, stderr) = run(&["completions", shell], NO_CONFIG);
            assert_eq!(code, 0, "{name} {shell}: {stderr}");
            assert!(stderr.is_empty(), "{name} {shell}: {stderr}");
            assert!(script.contains(name), "{name} {shell}");
            for sub in subcommands {
                assert!(script.contains(sub), "{name}'s {shell} script lacks {sub}");
            }
            // The flags too (fish spells them `-l redis-url`), with the values clap knows.
            assert!(script.contains("redis-url"), "{name} {shell}");
            assert!(script.contains("json"), "{name} {shell}");
        }
        let (code, stdout, stderr) = run(&["completions", "tcsh"], &[]);
        assert_eq!(code, 2, "{name}: {stdout}{stderr}");
        assert!(stderr.contains("invalid value 'tcsh'"), "{name}: {stderr}");
    }
}

/// `man -l` as a reader sees the page, with groff's warnings on.
fn render(page: &std::path::Path) -> String {
    let out = std::process::Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "80")
        .env_remove("MAN_KEEP_FORMATTING")
        .output()
        .expect("`man` renders the pages: install man-db");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", page.display());
    assert!(stderr.is_empty(), "{}: {stderr}", page.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn man_pages_render_one_per_command_and_name_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let mut expected = Vec::new();
    for (name, run, subcommands) in BINARIES {
        let (code, stdout, stderr) = run(&["man", "--dir", out.to_str().unwrap()], NO_CONFIG);
        assert_eq!(code, 0, "{name}: {stdout}{stderr}");
        expected.push(format!("{name}.1"));
        expected.extend(subcommands.iter().map(|s| format!("{name}-{s}.1")));
        let main = render(&out.join(format!("{name}.1")));
        for heading in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS", "EXIT STATUS"] {
            assert!(
                main.lines().any(|l| l == heading),
                "{name}: no {heading} section:\n{main}"
            );
        }
        for sub in subcommands {
            assert!(main.contains(&format!("{name}-{sub}(1)")), "{main}");
        }
    }
    let mut pages: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    expected.sort();
    // Neither the hidden `man` nor clap's `help` gets a page.
    assert_eq!(pages, expected);

    let main = render(&out.join("presence-sweeper.1"));
    assert!(main.lines().any(|l| l == "FILES"), "{main}");
    assert!(
        main.contains("/etc/presence-sweeper/presence-sweeper.toml"),
        "{main}"
    );
    let sweep = render(&out.join("presence-sweeper-sweep.1"));
    assert!(sweep.contains("--dry-run"), "{sweep}");
    assert!(sweep.contains("keys_scanned"), "{sweep}");
    let seed = render(&out.join("presence-sweeper-tools-seed.1"));
    assert!(seed.contains("--stale-fraction"), "{seed}");
}

/// `check-config` says where the configuration came from, naming the variables and flags that
/// set keys but never their values.
#[test]
fn check_config_names_what_it_read_but_no_value() {
    let (code, stdout, stderr) = run_binary(
        &[
            "--redis-url",
            "redis://u:hunter2@10.0.0.9:6379/0",
            "check-config",
        ],
        &[("PRESENCE_SWEEPER__LOG__LEVEL", "debug")],
    );
    assert_eq!(code, 0, "{stderr}");
    let first = stdout.lines().next().unwrap();
    assert_eq!(
        first,
        "# read: no file: the built-in defaults; variables PRESENCE_SWEEPER__LOG__LEVEL; flags --redis-url"
    );
    assert!(
        stderr.contains("configuration is valid (read: no file: the built-in defaults;"),
        "{stderr}"
    );
    assert!(
        stderr.contains("Redis: redis://u:***@10.0.0.9:6379/0"),
        "{stderr}"
    );
    assert!(!stdout.contains("hunter2") && !stderr.contains("hunter2"));
}
