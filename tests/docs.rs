//! The documentation against the repository: every relative link in the user docs leads to a
//! file that exists (and, with a `#fragment`, to a heading of that file, by GitHub's rules for
//! heading anchors), and every metric the daemon registers is described in `docs/metrics.md`.
//! Plain text processing with std only: no Markdown parser, no Redis.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files a user reads, relative to the repository's root.
fn user_docs() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "CHANGELOG.md", "benches/README.md"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let docs = fs::read_dir(root().join("docs")).expect("docs/ exists");
    let mut in_docs: Vec<PathBuf> = docs
        .map(|e| e.expect("readable docs/").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            p.strip_prefix(root())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
}

fn read(path: &Path) -> String {
    fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The lines of a Markdown text outside fenced code blocks, with their numbers (from 1).
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => lines.push((i + 1, line)),
            _ => {}
        }
    }
    lines
}

/// A line without its inline code spans (`` `...` ``), which hold no links.
fn without_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The targets of inline links and images, `[text](target)`, and of reference definitions,
/// `[name]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut targets = Vec::new();
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(end) = trimmed.find("]:")
    {
        let rest = trimmed[end + 2..].trim();
        if let Some(target) = rest.split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_owned());
        }
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let inside = after[..end].trim();
        // `[text](target "title")`: the target is the first word.
        if let Some(target) = inside.split_whitespace().next() {
            targets.push(target.trim_matches(['<', '>']).to_owned());
        }
        rest = &after[end..];
    }
    targets
}

/// Whether a link leaves the repository (a URL with a scheme, or mail).
fn is_external(target: &str) -> bool {
    let scheme_end = target.find(':');
    let first_special = target.find(['/', '#', '?']);
    match (scheme_end, first_special) {
        (Some(colon), Some(other)) => colon < other,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Heading text as GitHub renders it for its anchor: code spans keep their text, links their
/// label, emphasis markers go.
fn heading_text(raw: &str) -> String {
    let mut text = String::new();
    let mut rest = raw;
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find("](").and_then(|mid| {
            let close = after[mid + 2..].find(')')?;
            Some((mid, mid + 2 + close))
        }) {
            Some((mid, close)) => {
                text.push_str(&after[..mid]);
                rest = &after[close + 1..];
            }
            None => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.replace(['`', '*'], "")
}

/// GitHub's anchor for a heading: lower case; letters, digits, `_`, `-` kept; spaces become
/// `-`; everything else dropped.
fn slug(heading: &str) -> String {
    heading_text(heading)
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown text's headings; a repeated one gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// `path` with `.` and `..` resolved, without touching the file system; `None` if it climbs
/// out of the repository.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with one link of `doc`, if anything.
fn broken(doc: &Path, target: &str) -> Option<String> {
    let (file, fragment) = match target.split_once('#') {
        Some((file, fragment)) => (file, Some(fragment)),
        None => (target, None),
    };
    let file = file.split('?').next().unwrap_or_default();
    let resolved = if file.is_empty() {
        doc.to_path_buf()
    } else {
        let dir = doc.parent().unwrap_or(Path::new(""));
        match normalize(&dir.join(file)) {
            Some(p) => p,
            None => return Some("leaves the repository".into()),
        }
    };
    let on_disk = root().join(&resolved);
    if !on_disk.exists() {
        return Some(format!("{} does not exist", resolved.display()));
    }
    let fragment = fragment.filter(|f| !f.is_empty())?;
    if on_disk.extension().is_none_or(|x| x != "md") {
        // Line anchors of source files (#L10) are GitHub's, not the file's.
        return None;
    }
    let headings = anchors(&read(&resolved));
    (!headings.contains(fragment)).then(|| {
        format!(
            "no heading of {} has the anchor #{fragment} (it has: {})",
            resolved.display(),
            headings.into_iter().collect::<Vec<_>>().join(", ")
        )
    })
}

#[test]
fn relative_links_lead_to_files_and_headings_that_exist() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in user_docs() {
        let text = read(&doc);
        for (number, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if is_external(&target) {
                    continue;
                }
                checked += 1;
                if let Some(why) = broken(&doc, &target) {
                    problems.push(format!("{}:{number}: ({target}): {why}", doc.display()));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the scan broken?"
    );
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

/// The string literals of Rust source, each with the code right before and after it (comments
/// skipped, so that a literal in a comment is not taken for one in code).
fn literals(source: &str) -> Vec<(char, String, String)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out: Vec<(char, String, String)> = Vec::new();
    let mut code_before = ' ';
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' => {
                // A char literal ('"', '\'') or a lifetime.
                if chars.get(i + 1) == Some(&'\\') {
                    i += 2;
                    while i < chars.len() && chars[i] != '\'' {
                        i += 1;
                    }
                    i += 1;
                } else if chars.get(i + 2) == Some(&'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
                code_before = '\'';
            }
            'r' if chars[i + 1..]
                .iter()
                .find(|c| **c != '#')
                .is_some_and(|c| *c == '"')
                && !chars
                    .get(i.wrapping_sub(1))
                    .is_some_and(|c| c.is_alphanumeric() || *c == '_') =>
            {
                let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
                let start = i + 2 + hashes;
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let rest: String = chars[start.min(chars.len())..].iter().collect();
                let end = rest.find(&close).unwrap_or(rest.len());
                out.push((code_before, rest[..end].to_owned(), String::new()));
                i = start + rest[..end].chars().count() + close.chars().count();
                code_before = '"';
            }
            '"' => {
                let mut value = String::new();
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if let Some(c) = chars.get(i) {
                        value.push(*c);
                    }
                    i += 1;
                }
                i += 1;
                out.push((code_before, value, String::new()));
                code_before = '"';
            }
            c => {
                if !c.is_whitespace() {
                    code_before = c;
                }
                if let Some(last) = out.last_mut()
                    && last.2.len() < 8
                {
                    last.2.push(c);
                }
                i += 1;
            }
        }
    }
    out
}

/// The names of the metrics registered in `src/serve/metrics/`: every literal passed as the
/// first argument of a call and followed by another literal (the help text), as in
/// `opts("evicted_total", "Members removed.")`, `counter(..)`, `gauge(..)` and `histogram(..)`,
/// with the namespace the registry adds; and the `process_*` counter the daemon defines itself.
fn registered_metrics() -> BTreeSet<String> {
    let dir = root().join("src/serve/metrics");
    let mut names = BTreeSet::new();
    let is_name = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("src/serve/metrics exists")
        .map(|e| e.expect("readable").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    // The webhooks register theirs in the same registry, from their own crate.
    files.push(root().join("crates/webhooks/src/metrics.rs"));
    for file in files {
        let source = fs::read_to_string(&file).expect("readable source");
        // Leave out the unit tests, which look names up rather than register them.
        let source = source.split("#[cfg(test)]").next().unwrap_or_default();
        let lits = literals(source);
        for (i, (before, value, after)) in lits.iter().enumerate() {
            let between: String = after.chars().filter(|c| !c.is_whitespace()).collect();
            let help_follows = between == "," && lits.get(i + 1).is_some_and(|(b, _, _)| *b == ',');
            if *before == '(' && help_follows && is_name(value) {
                names.insert(format!("presence_sweeper_{value}"));
            }
            if value.starts_with("process_") && is_name(value) {
                names.insert(value.clone());
            }
        }
    }
    names
}

/// Whether `text` names `name` as a whole word (`presence_sweeper_keys` is not named by
/// `presence_sweeper_keys_scanned_total`).
fn mentions(text: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        !text[..at].chars().next_back().is_some_and(word)
            && !text[at + name.len()..].chars().next().is_some_and(word)
    })
}

/// Every `presence_sweeper_...` metric name mentioned in `text`.
fn mentioned_metrics(text: &str) -> BTreeSet<String> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("presence_sweeper_") {
        let preceded = rest[..at].chars().next_back().is_some_and(word);
        let tail = &rest[at..];
        let len = tail.find(|c: char| !word(c)).unwrap_or(tail.len());
        if !preceded {
            found.insert(tail[..len].to_owned());
        }
        rest = &tail[len..];
    }
    found
}

#[test]
fn every_registered_metric_is_described_in_docs_metrics_md() {
    let registered = registered_metrics();
    for expected in [
        "presence_sweeper_sweeps_total",
        "presence_sweeper_evicted_total",
        "presence_sweeper_eviction_lag_seconds",
        "presence_sweeper_redis_up",
        "presence_sweeper_log_lines_dropped_total",
        "presence_sweeper_build_info",
        "process_cpu_seconds_total",
    ] {
        assert!(
            registered.contains(expected),
            "the scan of src/serve/metrics missed {expected}: is it broken? found {registered:?}"
        );
    }
    let documented = read(Path::new("docs/metrics.md"));
    let missing: Vec<&String> = registered
        .iter()
        .filter(|name| !mentions(&documented, name))
        .collect();
    assert!(
        missing.is_empty(),
        "registered in src/serve/metrics but not described in docs/metrics.md: {missing:?}"
    );
}

#[test]
fn the_docs_name_no_metric_that_does_not_exist() {
    let registered = registered_metrics();
    let exists = |name: &str| {
        registered.contains(name)
            || ["_bucket", "_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|base| registered.contains(base))
            })
    };
    let mut unknown = Vec::new();
    for doc in user_docs() {
        for name in mentioned_metrics(&read(&doc)) {
            if !exists(&name) {
                unknown.push(format!("{}: {name}", doc.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "metrics that do not exist:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn github_anchors_follow_githubs_rules() {
    assert_eq!(
        slug("Writing heartbeats (the app's side)"),
        "writing-heartbeats-the-apps-side"
    );
    assert_eq!(
        slug("`seed`: a synthetic keyspace, fast"),
        "seed-a-synthetic-keyspace-fast"
    );
    assert_eq!(slug("What `max_keys` costs"), "what-max_keys-costs");
    assert_eq!(slug("[Link](x.md) and **bold**"), "link-and-bold");
    let twice = anchors("# A\n\n## A\n\n```\n# not a heading\n```\n");
    assert_eq!(
        twice.into_iter().collect::<Vec<_>>(),
        ["a", "a-1"].map(String::from)
    );
    assert_eq!(
        link_targets("see [a](docs/x.md#y) and `[b](no.md)`, ![c](img.png \"t\")"),
        ["docs/x.md#y", "img.png"].map(String::from)
    );
    assert!(is_external("https://example.com/a#b"));
    assert!(!is_external("docs/design.md#a:b"));
}

/// The image's first stage builds the dependencies from the manifests alone, so it must copy
/// every workspace member's: a member it misses fails the image build, not the tests.
#[test]
fn the_dockerfile_copies_every_workspace_members_manifest() {
    let dockerfile = read(&root().join("Dockerfile"));
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.join("Cargo.toml").exists() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let line = format!("COPY crates/{name}/Cargo.toml crates/{name}/");
        if !dockerfile.lines().any(|l| l.trim() == line) {
            missing.push(line);
        }
    }
    assert!(
        missing.is_empty(),
        "the Dockerfile lacks:\n{}",
        missing.join("\n")
    );
}
