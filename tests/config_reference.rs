//! The shipped `config/presence-sweeper.toml` is the one place where settings are explained, and
//! the reference in `docs/configuration.md` is generated from it. These tests fail when a key in
//! effect (every key `check-config` prints) is not explained in the shipped file or not in the
//! docs, and when the docs' reference is out of date.
//!
//! To regenerate the reference after editing the shipped file:
//! `UPDATE_CONFIG_DOCS=1 cargo test --test tests config_reference`.

use crate::support::run_binary;

const SHIPPED: &str = include_str!("../config/presence-sweeper.toml");
const DOCS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
/// Everything after this line of the docs is generated.
const MARKER: &str = "<!-- Everything below is generated from config/presence-sweeper.toml: \
                      edit that file, then run `UPDATE_CONFIG_DOCS=1 cargo test --test tests \
                      config_reference`. -->";

/// One key of the shipped file, with the comment above it.
struct Entry {
    /// Dotted, with the documented sweep's name as `<name>`.
    key: String,
    /// The value as shipped; `None` for a key shown only as a commented-out example.
    value: Option<String>,
    example: String,
    prose: Vec<String>,
}

/// A `[table]` of the shipped file, with the comment above it.
struct Section {
    name: String,
    intro: Vec<String>,
    entries: Vec<Entry>,
}

/// `key = value` (also inside a comment), if the line is one.
fn assignment(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(" = ")?;
    key.bytes()
        .all(|b| b.is_ascii_lowercase() || b == b'_')
        .then_some((key, value))
}

/// The sweep the shipped file explains; the other sweep tables only set values.
const DOCUMENTED_SWEEP: &str = "sweeps.online";

fn generalize(table: &str) -> Option<String> {
    if let Some(rest) = table.strip_prefix(DOCUMENTED_SWEEP) {
        return Some(format!("sweeps.<name>{rest}"));
    }
    (!table.starts_with("sweeps.")).then(|| table.to_owned())
}

/// The shipped file's explained sections, in order (the undocumented sweep tables left out).
fn shipped_sections() -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut comment: Vec<String> = Vec::new();
    let mut documented = false;
    for line in SHIPPED.lines() {
        if line.trim().is_empty() {
            comment.clear();
        } else if let Some(table) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            documented = match generalize(table) {
                Some(name) => {
                    sections.push(Section {
                        name,
                        intro: std::mem::take(&mut comment),
                        entries: Vec::new(),
                    });
                    true
                }
                None => false,
            };
        } else if let Some(text) = line.strip_prefix('#') {
            let text = text.strip_prefix(' ').unwrap_or(text);
            // A table that exists only as an example (none by default) is commented out.
            if let Some(table) = text.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                sections.push(Section {
                    name: table.to_owned(),
                    intro: std::mem::take(&mut comment),
                    entries: Vec::new(),
                });
                documented = true;
                continue;
            }
            match assignment(text) {
                Some((key, example)) if documented => {
                    push(&mut sections, key, None, example, &mut comment)
                }
                _ => comment.push(text.to_owned()),
            }
        } else if let Some((key, value)) = assignment(line) {
            if documented {
                push(&mut sections, key, Some(value), value, &mut comment);
            }
        } else {
            panic!("unexpected line in the shipped file: {line:?}");
        }
    }
    sections
}

fn push(
    sections: &mut [Section],
    key: &str,
    value: Option<&str>,
    example: &str,
    prose: &mut Vec<String>,
) {
    let section = sections.last_mut().expect("keys come after a [table]");
    section.entries.push(Entry {
        key: format!("{}.{key}", section.name),
        value: value.map(str::to_owned),
        example: example.to_owned(),
        prose: std::mem::take(prose),
    });
}

/// A webhook, so that its keys are in effect too (none is configured by default).
const WITH_A_WEBHOOK: &[(&str, &str)] = &[
    (
        "PRESENCE_SWEEPER__SWEEPS__ONLINE__STREAM",
        "presence:{hash_tag}:log",
    ),
    (
        "PRESENCE_SWEEPER__WEBHOOKS__CRM__URL",
        "https://crm.example.com/hooks",
    ),
    (
        "PRESENCE_SWEEPER__WEBHOOKS__CRM__SECRET",
        "whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=",
    ),
    ("PRESENCE_SWEEPER__WEBHOOKS__CRM__SWEEPS", "online"),
];

/// Every key `check-config` prints for the built-in defaults and a webhook, sweep and webhook
/// names as `<name>`.
fn keys_in_effect() -> Vec<String> {
    let (code, stdout, stderr) = run_binary(&["check-config"], WITH_A_WEBHOOK);
    assert_eq!(code, 0, "{stderr}");
    let mut table = String::new();
    let mut keys = Vec::new();
    for line in stdout.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            table = name.to_owned();
            continue;
        }
        let key = match line.strip_prefix("# ") {
            Some(unset) => unset.strip_suffix(": unset"),
            None => line.split_once(" = ").map(|(k, _)| k),
        };
        let Some(key) = key else { continue };
        let mut parts: Vec<&str> = table.split('.').collect();
        if parts[0] == "sweeps" || parts[0] == "webhooks" {
            parts[1] = "<name>";
        }
        let key = format!("{}.{key}", parts.join("."));
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    assert!(keys.len() > 40, "{stdout}");
    keys
}

/// The reference part of docs/configuration.md, as the shipped file makes it.
fn reference() -> String {
    let mut out = String::from("## Reference\n");
    for section in shipped_sections() {
        out.push_str(&format!("\n### `[{}]`\n", section.name));
        if !section.intro.is_empty() {
            out.push_str(&format!("\n{}\n", section.intro.join("\n")));
        }
        for e in section.entries {
            out.push_str(&format!("\n#### `{}`\n\n", e.key));
            let shipped = if section.name.starts_with("sweeps.") {
                "In the built-in `online` sweep"
            } else {
                "Default"
            };
            // The file's "Unset by default:" or "Required:" leads to the example, which the
            // line below shows.
            let mut prose = e.prose.join("\n");
            let mut required = false;
            if let Some(rest) = prose.strip_suffix("Unset by default:") {
                prose = rest.trim_end().to_owned();
            } else if let Some(rest) = prose.strip_suffix("Required:") {
                prose = rest.trim_end().to_owned();
                required = true;
            }
            match &e.value {
                Some(v) => out.push_str(&format!("{shipped}: `{v}`.\n")),
                None if required => {
                    out.push_str(&format!("Required; for example `{}`.\n", e.example))
                }
                None if section.name.starts_with("webhooks.") => {
                    out.push_str(&format!("Optional; for example `{}`.\n", e.example))
                }
                None => out.push_str(&format!("Unset by default; for example `{}`.\n", e.example)),
            }
            if !prose.is_empty() {
                out.push_str(&format!("\n{prose}\n"));
            }
        }
    }
    let first_sweep = SHIPPED.find("\n[sweeps.").expect("built-in sweeps") + 1;
    out.push_str(&format!(
        "\n## The built-in sweeps, as shipped\n\n```toml\n{}```\n",
        &SHIPPED[first_sweep..]
    ));
    out
}

#[test]
fn every_key_in_effect_is_explained_in_the_shipped_file() {
    let explained: Vec<(String, bool)> = shipped_sections()
        .into_iter()
        .flat_map(|s| s.entries)
        .map(|e| (e.key, e.prose.iter().any(|l| !l.trim().is_empty())))
        .collect();
    for key in keys_in_effect() {
        match explained.iter().find(|(k, _)| *k == key) {
            None => panic!("`{key}` is in effect but not in config/presence-sweeper.toml"),
            Some((_, false)) => {
                panic!("`{key}` has no comment above it in config/presence-sweeper.toml")
            }
            Some((_, true)) => {}
        }
    }
}

#[test]
fn every_key_in_effect_is_in_the_docs() {
    let docs = std::fs::read_to_string(DOCS_PATH).expect("docs/configuration.md");
    for key in keys_in_effect() {
        assert!(
            docs.contains(&format!("#### `{key}`")),
            "`{key}` is in effect but has no entry in docs/configuration.md"
        );
    }
}

#[test]
fn the_docs_reference_is_generated_from_the_shipped_file() {
    let docs = std::fs::read_to_string(DOCS_PATH).expect("docs/configuration.md");
    let (head, _) = docs
        .split_once(MARKER)
        .expect("docs/configuration.md holds the generated-reference marker");
    let wanted = format!("{head}{MARKER}\n\n{}", reference());
    if std::env::var_os("UPDATE_CONFIG_DOCS").is_some() {
        std::fs::write(DOCS_PATH, &wanted).unwrap();
        return;
    }
    assert!(
        docs == wanted,
        "docs/configuration.md is out of date: run `UPDATE_CONFIG_DOCS=1 cargo test --test tests \
         config_reference`"
    );
}
