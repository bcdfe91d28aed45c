//! The configuration's layers, checks and effective printing.

use std::time::Duration;

use super::*;

fn load_with(file_text: Option<&str>, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let dir = std::env::temp_dir().join(format!(
        "presence-sweeper-config-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = file_text.map(|t| {
        let p = dir.join("c.toml");
        std::fs::write(&p, t).unwrap();
        p
    });
    let r = Config::load(&Sources {
        file,
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        overrides: Overrides::default(),
        system_file: false,
    });
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

#[test]
fn defaults_are_the_two_builtin_sweeps() {
    let c = load_with(None, &[]).unwrap();
    assert_eq!(c.redis.url, "redis://127.0.0.1:6379/0");
    assert_eq!(c.scan.count, 1000);
    let names: Vec<_> = c.sweeps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["online", "typing"]);
    let online = c.sweep("online").unwrap();
    assert_eq!(online.ttl, Duration::from_secs(45));
    assert_eq!(online.schedule, Schedule::Every(Duration::from_secs(30)));
    assert_eq!(online.event, "presence.leave");
    let typing = c.sweep("typing").unwrap();
    assert_eq!(typing.ttl, Duration::from_secs(5));
    assert_eq!(typing.event, "typing.stop");
}

#[test]
fn file_overrides_disables_and_adds() {
    let c = load_with(
        Some(
            r#"
            [sweeps.typing]
            enabled = false
            [sweeps.online]
            ttl = "60s"
            [sweeps.cursor]
            match = "cursor:*"
            ttl = "2s"
            schedule = "500ms"
            event = "cursor.gone"
            score_unit = "milliseconds"
            "#,
        ),
        &[],
    )
    .unwrap();
    assert!(!c.sweep("typing").unwrap().enabled);
    assert_eq!(c.sweep("online").unwrap().ttl, Duration::from_secs(60));
    let cursor = c.sweep("cursor").unwrap();
    assert_eq!(cursor.score_unit, ScoreUnit::Milliseconds);
    assert_eq!(
        cursor.channel.to_string(),
        "presence:{conversation_id}:events"
    );
    assert_eq!(c.enabled_sweeps().count(), 2);
}

#[test]
fn environment_beats_file() {
    let c = load_with(
        Some("[redis]\nurl = \"redis://file:1/0\"\n[scan]\ncount = 10\n"),
        &[
            ("PRESENCE_SWEEPER__REDIS__URL", "redis://env:2/0"),
            ("PRESENCE_SWEEPER__SWEEPS__ONLINE__TTL", "90s"),
            ("PRESENCE_SWEEPER__SWEEPS__TYPING__ENABLED", "false"),
            ("PRESENCE_SWEEPER_CONFIG", "ignored"),
        ],
    )
    .unwrap();
    assert_eq!(c.redis.url, "redis://env:2/0");
    assert_eq!(c.scan.count, 10);
    assert_eq!(c.sweep("online").unwrap().ttl, Duration::from_secs(90));
    assert!(!c.sweep("typing").unwrap().enabled);
}

#[test]
fn unknown_keys_are_named_with_their_layer() {
    let e = load_with(Some("[redis]\nulr = \"x\"\n"), &[]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown configuration key `redis.ulr` (in "),
        "{msg}"
    );
    let e = load_with(None, &[("PRESENCE_SWEEPER__SWEEPS__ONLINE__TLL", "4s")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown configuration key `sweeps.online.tll` (from PRESENCE_SWEEPER__SWEEPS__ONLINE__TLL)"
    );
}

#[test]
fn unknown_tables_are_named_with_their_layer() {
    let e = load_with(Some("[metrics]\nlisten = \"x\"\n"), &[]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown configuration key `metrics` (in "),
        "{msg}"
    );
    assert!(msg.ends_with("c.toml)"), "{msg}");
    let e = load_with(Some("[sweeps.online.guard]\nshare = 1\n"), &[]).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("unknown configuration key `sweeps.online.guard` (in "),
        "{msg}"
    );
    let e = load_with(None, &[("PRESENCE_SWEEPER__METRICS__LISTEN", ":9")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown configuration key `metrics` (from PRESENCE_SWEEPER__METRICS__LISTEN)"
    );
}

#[test]
fn malformed_variables_are_named_with_what_is_wrong() {
    for (name, meant) in [
        (
            "PRESENCE_SWEEPER___REDIS__URL",
            "PRESENCE_SWEEPER__REDIS__URL",
        ),
        (
            "PRESENCE_SWEEPER__REDIS___URL",
            "PRESENCE_SWEEPER__REDIS__URL",
        ),
        (
            "PRESENCE_SWEEPER__REDIS____URL",
            "PRESENCE_SWEEPER__REDIS__URL",
        ),
        (
            "presence_sweeper__redis__url_",
            "PRESENCE_SWEEPER__REDIS__URL",
        ),
    ] {
        let e = load_with(None, &[(name, "redis://x:1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "environment variable {name} is malformed: the prefix, the section and the key \
                 are joined by exactly two underscores (PRESENCE_SWEEPER__SECTION__KEY); did you \
                 mean {meant}?"
            )
        );
    }
    let e = load_with(None, &[("PRESENCE_SWEEPER__", "x")]).unwrap_err();
    assert!(
        e.to_string().ends_with("(PRESENCE_SWEEPER__SECTION__KEY)"),
        "{e}"
    );
    // A sweep's own name may start with `_`, so its variable has three underscores in a row.
    let c = load_with(
        None,
        &[
            ("PRESENCE_SWEEPER__SWEEPS___DRAFT__MATCH", "d:*"),
            ("PRESENCE_SWEEPER__SWEEPS___DRAFT__TTL", "9s"),
            ("PRESENCE_SWEEPER__SWEEPS___DRAFT__SCHEDULE", "1s"),
            ("presence_sweeper__sweeps___draft__event", "draft.stop"),
        ],
    )
    .unwrap();
    assert_eq!(c.sweep("_draft").unwrap().ttl, Duration::from_secs(9));
}

#[test]
fn values_from_the_environment_name_their_variable() {
    let e = load_with(None, &[("PRESENCE_SWEEPER__SCAN__COUNT", "lots")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "scan.count = \"lots\" (from PRESENCE_SWEEPER__SCAN__COUNT): must be a whole number"
    );
    let var = "PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT";
    let e = load_with(Some("[redis]\ncommand_timeout = \"1s\"\n"), &[(var, "2h")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("redis.command_timeout = \"2h\" (from {var}): must be at most 1h")
    );
    // Types as the `config` crate's `try_parsing` read them.
    let c = load_with(
        None,
        &[
            ("PRESENCE_SWEEPER__SCAN__COUNT", "7"),
            ("PRESENCE_SWEEPER__SWEEPS__TYPING__ENABLED", "False"),
            (
                "PRESENCE_SWEEPER__SWEEPS__ONLINE__STORM_GUARD__SHARE",
                "0.25",
            ),
        ],
    )
    .unwrap();
    assert_eq!(c.scan.count, 7);
    assert!(!c.sweep("typing").unwrap().enabled);
    assert!((c.sweep("online").unwrap().storm_guard.share - 0.25).abs() < f64::EPSILON);
}

#[test]
fn score_unit_takes_its_documented_short_forms() {
    for (text, unit) in [
        ("seconds", ScoreUnit::Seconds),
        ("s", ScoreUnit::Seconds),
        ("milliseconds", ScoreUnit::Milliseconds),
        ("ms", ScoreUnit::Milliseconds),
    ] {
        let file = format!("[sweeps.online]\nscore_unit = \"{text}\"\n");
        let c = load_with(Some(&file), &[]).unwrap();
        assert_eq!(c.sweep("online").unwrap().score_unit, unit, "{text}");
    }
    let e = load_with(Some("[sweeps.online]\nscore_unit = \"MS\"\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(": must be \"seconds\" (or \"s\") or \"milliseconds\" (or \"ms\")"),
        "{e}"
    );
    let shipped = include_str!("../../../config/presence-sweeper.toml");
    assert!(shipped.contains("# \"seconds\" (or \"s\") or \"milliseconds\" (or \"ms\")"));
}

#[test]
fn bad_values_name_key_and_value() {
    let cases = [
        (
            "[sweeps.online]\nmatch = \"presence:online\"",
            "sweeps.online.match = \"presence:online\"",
        ),
        ("[sweeps.online]\nmatch = \"a:*:*\"", "exactly one `*`"),
        (
            "[sweeps.online]\nttl = \"0s\"",
            "sweeps.online.ttl = \"0s\"",
        ),
        (
            "[sweeps.online]\nttl = \"soon\"",
            "sweeps.online.ttl = \"soon\"",
        ),
        (
            "[sweeps.online]\nschedule = \"0 99 * * * *\"",
            "sweeps.online.schedule = \"0 99 * * * *\"",
        ),
        (
            "[sweeps.online]\nscore_unit = \"hours\"",
            "sweeps.online.score_unit = \"hours\"",
        ),
        (
            "[http]\nlisten = \"localhost\"",
            "http.listen = \"localhost\"",
        ),
        ("[log]\nformat = \"xml\"", "log.format = \"xml\""),
        ("[scan]\ncount = 0", "scan.count = 0"),
        ("[redis]\nurl = \"http://x\"", "redis.url = \"http://x\""),
        (
            "[redis]\npassword_file = \"/nonexistent/pw\"",
            "redis.password_file = \"/nonexistent/pw\"",
        ),
        (
            "[sweeps.x]\nttl = \"1s\"",
            "missing configuration key `sweeps.x.match`",
        ),
        (
            "[coordination]\nlease_ttl = \"500ms\"",
            "coordination.lease_ttl = \"500ms\" (in ",
        ),
        (
            "[sweeps.user_id]\nmatch = \"u:*\"\nttl = \"1s\"\nschedule = \"1s\"\nevent = \"e\"",
            "sweeps.user_id = \"user_id\"",
        ),
        (
            "[sweeps.online_base64]\nmatch = \"u:*\"\nttl = \"1s\"\nschedule = \"1s\"\nevent = \"e\"",
            "already an event field",
        ),
        ("[sweeps.\"a b\"]\nmatch = \"u:*\"", "letters, digits"),
    ];
    for (text, expected) in cases {
        let msg = load_with(Some(text), &[]).unwrap_err().to_string();
        assert!(msg.contains(expected), "{text:?} gave {msg:?}");
        assert!(!msg.contains('\n'), "one line: {msg:?}");
    }
}

#[test]
fn scale_out_settings() {
    let c = load_with(
        Some(
            "[redis]\nmode = \"cluster\"\nnodes = [\"redis://a:7000\", \"redis://b:7001\"]\n\
             [coordination]\nlease = true\nlease_ttl = \"3s\"\n",
        ),
        &[],
    )
    .unwrap();
    assert_eq!(c.redis.mode, RedisMode::Cluster);
    assert_eq!(c.redis.nodes, ["redis://a:7000", "redis://b:7001"]);
    assert!(c.coordination.lease);
    assert_eq!(c.coordination.lease_ttl, Duration::from_secs(3));
    // Lists from the environment are comma-separated.
    let c = load_with(
        None,
        &[
            ("PRESENCE_SWEEPER__REDIS__MODE", "sentinel"),
            (
                "PRESENCE_SWEEPER__REDIS__SENTINELS",
                "redis://s1:26379, redis://s2:26379",
            ),
            ("PRESENCE_SWEEPER__REDIS__MASTER_NAME", "mymaster"),
        ],
    )
    .unwrap();
    assert_eq!(c.redis.sentinels, ["redis://s1:26379", "redis://s2:26379"]);
    assert_eq!(c.redis.master_name.as_deref(), Some("mymaster"));
}

#[test]
fn scale_out_mistakes_are_named() {
    let cases = [
        (
            "[redis]\nmode = \"cluster\"\n",
            "cluster mode needs `redis.nodes`",
        ),
        (
            "[redis]\nmode = \"sentinel\"\nsentinels = [\"redis://s:26379\"]\n",
            "needs `redis.master_name`",
        ),
        (
            "[redis]\nmode = \"replicated\"\n",
            "redis.mode = \"replicated\"",
        ),
        (
            "[redis]\nnodes = [\"http://x\"]\n",
            "redis.nodes[0] = \"http://x\"",
        ),
        (
            "[coordination]\nlease_ttl = \"0s\"\n",
            "coordination.lease_ttl = \"0s\"",
        ),
    ];
    for (text, expected) in cases {
        let msg = load_with(Some(text), &[]).unwrap_err().to_string();
        assert!(msg.contains(expected), "{text:?} gave {msg:?}");
    }
}

#[test]
fn redacts_url_passwords() {
    assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
    assert_eq!(redact_url("redis://:pw@h:1/0"), "redis://:***@h:1/0");
    assert_eq!(redact_url("redis://pw@h:1"), "redis://***@h:1");
    assert_eq!(redact_url("redis://h:1/0"), "redis://h:1/0");
    assert_eq!(redact_url("redis://u:p/a?s#s@h:1/0"), "redis://u:***@h:1/0");
    assert_eq!(
        redact_url("unix:///run/redis.sock?db=1&pass=hunter2"),
        "unix:///run/redis.sock?db=1&pass=***"
    );
    let c = load_with(
        None,
        &[("PRESENCE_SWEEPER__REDIS__URL", "redis://u:hunter2@h:1/0")],
    )
    .unwrap();
    assert!(!c.to_toml().contains("hunter2"));
}

#[test]
fn effective_config_round_trips() {
    let c = load_with(None, &[]).unwrap();
    let mut again = load_with(Some(&c.to_toml()), &[]).unwrap();
    again.provenance = c.provenance.clone();
    // Printed, a `hold` that followed the sweep's ttl is a value of its own: the same in effect.
    let followed = c.to_toml().replace("  # the sweep's ttl", "");
    assert_eq!(again.to_toml(), followed);
}

#[test]
fn every_key_in_effect_is_printed() {
    let c = load_with(None, &[]).unwrap();
    let printed = c.to_toml();
    for key in [
        "redis.master_name",
        "redis.tls.key_file",
        "sweeps.online.storm_guard.hold",
        "sweeps.typing.storm_guard.hold",
    ] {
        let shown = printed
            .lines()
            .scan(String::new(), |table, line| {
                Some(effective_key(table, line))
            })
            .flatten()
            .any(|k| k == key);
        assert!(shown, "{key} in {printed}");
    }
    assert!(
        printed.contains("hold = \"5s\"  # the sweep's ttl"),
        "{printed}"
    );
}

#[test]
fn errors_name_the_file_as_given() {
    let dir = std::env::temp_dir().join(format!("presence-sweeper-paths-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("cfg")).unwrap();
    std::fs::write(dir.join("cfg/a.toml"), "[sweeps.x]\nttl = \"1s\"\n").unwrap();
    let given = dir.join("cfg/../cfg/a.toml");
    let e = Config::load(&Sources {
        file: Some(given.clone()),
        ..Sources::default()
    })
    .unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        e.to_string(),
        format!(
            "missing configuration key `sweeps.x.match` (in {})",
            given.display()
        )
    );
}

#[test]
fn flags_are_named_as_the_origin() {
    let e = Config::load(&Sources {
        overrides: Overrides {
            log_level: Some("wraning".into()),
            ..Overrides::default()
        },
        ..Sources::default()
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("log.level = \"wraning\" (from --log-level): \"wraning\" is not a level"),
        "{e}"
    );
}

/// Every duration key and the longest value it takes. Sweep keys are those of the built-in
/// `online` sweep, which the shipped file explains.
const DURATION_BOUNDS: &[(&str, Duration)] = &[
    ("redis.connect_timeout", MAX_TIMEOUT),
    ("redis.command_timeout", MAX_TIMEOUT),
    ("redis.eviction_timeout", MAX_TIMEOUT),
    ("tracking.reconcile_interval", MAX_INTERVAL),
    ("coordination.lease_ttl", MAX_LEASE_TTL),
    ("sweeps.online.ttl", MAX_TTL),
    ("sweeps.online.schedule", MAX_INTERVAL),
    ("sweeps.online.storm_guard.hold", MAX_TTL),
];

/// The dotted keys `check-config` prints whose value is a duration.
fn duration_keys(c: &Config) -> Vec<String> {
    let mut table = String::new();
    c.to_toml()
        .lines()
        .filter_map(|line| {
            let key = effective_key(&mut table, line)?;
            let value = line.split_once(" = ")?.1;
            // Durations are strings; humantime would also take a bare 0.
            let text = value
                .split("  #")
                .next()?
                .strip_prefix('"')?
                .strip_suffix('"')?;
            humantime::parse_duration(text).is_ok().then_some(key)
        })
        .collect()
}

#[test]
fn every_duration_key_has_a_bound() {
    let c = load_with(None, &[]).unwrap();
    let keys = duration_keys(&c);
    assert!(keys.len() >= DURATION_BOUNDS.len(), "{keys:?}");
    for key in keys {
        let key = key.replace("sweeps.typing.", "sweeps.online.");
        assert!(
            DURATION_BOUNDS.iter().any(|(k, _)| *k == key),
            "{key} is a duration without a bound in DURATION_BOUNDS"
        );
    }
}

#[test]
fn every_duration_key_takes_its_bound_and_refuses_more() {
    for (key, max) in DURATION_BOUNDS {
        let (table, name) = key.rsplit_once('.').unwrap();
        let at = humantime::format_duration(*max).to_string();
        let c = load_with(Some(&format!("[{table}]\n{name} = \"{at}\"\n")), &[])
            .unwrap_or_else(|e| panic!("{key} = {at}: {e}"));
        assert!(c.to_toml().contains(&format!("{name} = \"{at}\"")), "{key}");
        for above in [
            format!("{at} 1ms"),
            "9999999999999999999s".to_owned(),
            "99999999999999999999s".to_owned(),
        ] {
            let file = format!("[{table}]\n{name} = \"{above}\"\n");
            let e = load_with(Some(&file), &[]).unwrap_err().to_string();
            let named = format!("{key} = \"{above}\" (in ");
            assert!(e.starts_with(&named), "{e}");
            assert!(e.ends_with(&format!(": must be at most {at}")), "{e}");
            let var = env::variable_for(key);
            let e = load_with(None, &[(&var, &above)]).unwrap_err().to_string();
            let said = format!("{key} = \"{above}\" (from {var}): must be at most {at}");
            assert_eq!(e, said);
        }
    }
}

#[test]
fn the_shipped_file_states_every_bound() {
    let shipped = include_str!("../../../config/presence-sweeper.toml");
    for (key, max) in DURATION_BOUNDS {
        let (table, name) = key.rsplit_once('.').unwrap();
        let at = humantime::format_duration(*max);
        let section = shipped
            .split_once(&format!("\n[{table}]\n"))
            .unwrap_or_else(|| panic!("[{table}] in the shipped file"))
            .1;
        let before = section
            .lines()
            .take_while(|l| !l.starts_with(&format!("{name} = ")))
            .take_while(|l| !l.starts_with(&format!("# {name} = ")))
            .collect::<Vec<_>>();
        let comment: Vec<&str> = before
            .iter()
            .rev()
            .take_while(|l| l.starts_with('#'))
            .copied()
            .collect();
        let said = comment
            .iter()
            .any(|l| l.to_lowercase().contains(&format!("at most \"{at}\"")));
        assert!(said, "the comment above {key} says `at most \"{at}\"`");
    }
}

#[test]
fn a_negative_duration_is_called_negative() {
    let e = load_with(Some("[sweeps.online]\nttl = \"-5s\"\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("sweeps.online.ttl = \"-5s\" (in "), "{e}");
    assert!(
        e.ends_with(": negative: a duration must be greater than zero"),
        "{e}"
    );
    let e = load_with(Some("[sweeps.online]\nschedule = \"-5s\"\n"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with(": negative: a duration must be greater than zero"),
        "{e}"
    );
}

#[test]
fn a_stream_and_its_settings() {
    let c = load_with(
        Some(
            r#"
            [sweeps.online]
            stream = "presence:{hash_tag}:log"
            stream_retention = "1h"
            event_shape = "batch"
            [sweeps.typing]
            stream = "presence-sweeper:typing"
            stream_maxlen = 0
            "#,
        ),
        &[],
    )
    .unwrap();
    let online = c.sweep("online").unwrap();
    assert_eq!(online.event_shape, EventShape::Batch);
    let stream = online.stream.as_ref().unwrap();
    assert_eq!(
        (stream.maxlen, stream.retention),
        (10_000, Some(Duration::from_secs(3600)))
    );
    assert_eq!(
        stream.effective_ttl(),
        Some(Duration::from_secs(3600)),
        "the retention"
    );
    let typing = c.sweep("typing").unwrap().stream.as_ref().unwrap();
    assert_eq!(
        (typing.maxlen, typing.effective_ttl()),
        (0, None),
        "a fixed stream: no TTL"
    );
    assert!(
        c.to_toml()
            .contains("stream_ttl = \"1h\"  # a per-conversation stream's default")
    );
    assert_eq!(c.sweep("typing").unwrap().event_shape, EventShape::Member);
}

#[test]
fn stream_settings_without_a_stream_and_bad_shapes_are_refused() {
    let e = load_with(Some("[sweeps.online]\nstream_maxlen = 5\n"), &[]).unwrap_err();
    assert!(
        e.to_string().contains("sweeps.online.stream_maxlen")
            && e.to_string().contains("needs `stream`"),
        "{e}"
    );
    let e = load_with(Some("[sweeps.online]\nevent_shape = \"bulk\"\n"), &[]).unwrap_err();
    assert!(e.to_string().contains("\"member\" or \"batch\""), "{e}");
    for name in ["leaves", "vacated", "id", "prev"] {
        let toml = format!(
            "[sweeps.{name}]\nmatch = \"a:*\"\nttl = \"5s\"\nschedule = \"1s\"\nevent = \"x\"\n"
        );
        assert!(load_with(Some(&toml), &[]).is_err(), "{name}");
    }
}

#[test]
fn in_a_cluster_a_stream_must_share_its_keys_slot() {
    let cluster = "[redis]\nmode = \"cluster\"\nnodes = [\"redis://127.0.0.1:7000\"]\n";
    let fixed = format!("{cluster}[sweeps.online]\nstream = \"presence-sweeper:leaves\"\n");
    let e = load_with(Some(&fixed), &[]).unwrap_err().to_string();
    assert!(
        e.contains("sweeps.online.stream") && e.contains("{hash_tag}"),
        "{e}"
    );
    let tagged = format!("{cluster}[sweeps.online]\nstream = \"presence:{{hash_tag}}:log\"\n");
    load_with(Some(&tagged), &[]).unwrap();
    // Sharded publishing from the script: the channel too.
    let sharded = tagged.replace("[sweeps", "sharded_pubsub = true\n[sweeps");
    let e = load_with(Some(&sharded), &[]).unwrap_err().to_string();
    assert!(e.contains("sweeps.online.channel"), "{e}");
    // Without a cluster, any name.
    load_with(
        Some("[sweeps.online]\nstream = \"presence-sweeper:leaves\"\n"),
        &[],
    )
    .unwrap();
}

#[test]
fn a_window_under_a_second_is_refused_with_the_reason() {
    for ttl in ["1ms", "999ms"] {
        let file = format!("[sweeps.online]\nttl = \"{ttl}\"\n");
        let e = load_with(Some(&file), &[]).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("sweeps.online.ttl = \"{ttl}\" (in ")),
            "{e}"
        );
        assert!(e.contains("must be at least 1s: "), "{e}");
    }
    let c = load_with(Some("[sweeps.online]\nttl = \"1s\"\n"), &[]).unwrap();
    assert_eq!(c.sweep("online").unwrap().ttl, Duration::from_secs(1));
}

#[test]
fn a_schedule_that_never_fires_is_refused() {
    let file = "[sweeps.online]\nschedule = \"0 0 0 31 2 *\"\n";
    let e = load_with(Some(file), &[]).unwrap_err().to_string();
    assert!(
        e.starts_with("sweeps.online.schedule = \"0 0 0 31 2 *\" (in "),
        "{e}"
    );
    assert!(
        e.ends_with("no date matches it: the sweep would never walk"),
        "{e}"
    );
}

#[test]
fn the_shipped_configuration_needs_no_advice() {
    assert_eq!(load_with(None, &[]).unwrap().advice(), vec![]);
}

#[test]
fn an_open_ended_match_is_a_warning_with_a_safer_pattern() {
    let c = load_with(
        Some("[sweeps.online]\nmatch = \"*\"\n[sweeps.typing]\nmatch = \"presence:*\"\n"),
        &[],
    )
    .unwrap();
    let advice = c.advice();
    let warnings: Vec<String> = advice
        .iter()
        .filter(|a| a.is_warning())
        .map(ToString::to_string)
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(warnings[0].starts_with("sweeps.online.match = \"*\" has nothing literal"));
    assert!(warnings[0].contains("every sorted set in the database"));
    assert!(warnings[0].contains("such as \"presence:*:online\""));
    assert!(warnings[1].contains("whose name starts with \"presence:\""));
    assert!(warnings[1].contains("such as \"presence:*:typing\""));
}

#[test]
fn own_keys_that_fit_a_match_are_named() {
    let c = load_with(
        Some(
            "[coordination]\nlease = true\nkey_prefix = \"presence:lease:\"\n\
             [sweeps.online]\nmatch = \"presence*\"\nstream = \"presence:{hash_tag}:log\"\n",
        ),
        &[],
    )
    .unwrap();
    let notes: Vec<String> = c
        .advice()
        .iter()
        .filter(|a| !a.is_warning())
        .map(ToString::to_string)
        .collect();
    let online = notes
        .iter()
        .find(|n| n.starts_with("sweeps.online.match"))
        .unwrap();
    assert!(
        online.contains("presence-sweeper:*: its canary"),
        "{online}"
    );
    assert!(
        online.contains("the leases presence:lease:online"),
        "{online}"
    );
    assert!(
        online.contains("sweeps.online.stream = \"presence:{hash_tag}:log\""),
        "{online}"
    );
    // The typing sweep's match fits its own lease only.
    let typing = notes
        .iter()
        .find(|n| n.starts_with("sweeps.typing.match"))
        .unwrap();
    assert!(
        typing.contains("the leases presence:lease:typing,"),
        "{typing}"
    );
    assert!(
        !typing.contains("canary") && !typing.contains("stream"),
        "{typing}"
    );
}

#[test]
fn a_match_inside_the_daemons_namespace_is_refused() {
    let e = load_with(
        Some("[sweeps.online]\nmatch = \"presence-sweeper:*\"\n"),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("sweeps.online.match"), "{e}");
    assert!(e.contains("the daemon's own"), "{e}");
}

const WEBHOOK_SECRET: &str = "whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=";

fn with_webhook(hook: &str) -> Result<Config, ConfigError> {
    load_with(
        Some(&format!(
            "[sweeps.online]\nstream = \"presence:{{hash_tag}}:log\"\n\n[webhooks.crm]\n{hook}\n"
        )),
        &[],
    )
}

#[test]
fn a_webhook_is_read_with_its_defaults_and_marks_its_sweeps_stream() {
    let c = with_webhook(&format!(
        "url = \"https://crm.example.com/hooks\"\nsecret = \"{WEBHOOK_SECRET}\"\nsweeps = [\"online\"]"
    ))
    .unwrap();
    let hook = &c.webhooks[0];
    assert_eq!(hook.name, "crm");
    assert_eq!(hook.timeout, Duration::from_secs(10));
    assert_eq!(hook.retry_for, Duration::from_secs(3600));
    assert_eq!(hook.concurrency, 16);
    let stream = c.sweep("online").unwrap().stream.as_ref().unwrap();
    assert_eq!(stream.webhooks, ["crm"]);
    let toml = c.to_toml();
    assert!(toml.contains("[webhooks.crm]"), "{toml}");
    assert!(!toml.contains("whsec_"), "{toml}");
    assert!(!format!("{c:?}").contains("whsec_"));
}

#[test]
fn webhooks_refuse_what_cannot_work_naming_the_key_and_never_the_secret() {
    let url = "url = \"https://crm.example.com/hooks\"";
    let secret = format!("secret = \"{WEBHOOK_SECRET}\"");
    let cases = [
        (
            format!("{url}\n{secret}\nsweeps = [\"typing\"]"),
            "webhooks.crm.sweeps",
            "sweeps.typing.stream",
        ),
        (
            format!("{url}\n{secret}\nsweeps = [\"nope\"]"),
            "webhooks.crm.sweeps",
            "no sweep is called `nope`",
        ),
        (
            format!("url = \"ftp://x/\"\n{secret}\nsweeps = [\"online\"]"),
            "webhooks.crm.url",
            "http:// or https://",
        ),
        (
            format!("url = \"https://u:p@x/\"\n{secret}\nsweeps = [\"online\"]"),
            "webhooks.crm.url",
            "credentials",
        ),
        (
            format!(
                "{url}\nsecret = \"sk_live_abcdefghijklmnopqrstuvwxyz\"\nsweeps = [\"online\"]"
            ),
            "webhooks.crm.secret",
            "whsec_",
        ),
        (
            format!("{url}\nsecret = \"whsec_c2hvcnQ=\"\nsweeps = [\"online\"]"),
            "webhooks.crm.secret",
            "24 to 64 bytes",
        ),
        (
            format!("{url}\nsweeps = [\"online\"]"),
            "webhooks.crm.secret",
            "missing",
        ),
    ];
    for (hook, key, why) in cases {
        let e = with_webhook(&hook).unwrap_err().to_string();
        assert!(e.contains(key) && e.contains(why), "{hook}: {e}");
        for secret in [
            "sk_live_abcdefghijklmnopqrstuvwxyz",
            "c2hvcnQ=",
            WEBHOOK_SECRET,
        ] {
            assert!(!e.contains(secret), "{e}");
        }
    }
}

#[test]
fn retry_for_must_fit_in_the_streams_retention() {
    let e = load_with(
        Some(&format!(
            "[sweeps.online]\nstream = \"s\"\nstream_retention = \"10m\"\n\n[webhooks.crm]\n\
             url = \"http://127.0.0.1:1/\"\nsecret = \"{WEBHOOK_SECRET}\"\nsweeps = [\"online\"]\n"
        )),
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("webhooks.crm.retry_for") && e.contains("stream_retention"),
        "{e}"
    );
}
