//! Records what the binaries were built from, for `--version` and the `build_info` metric: the
//! git revision (`PRESENCE_SWEEPER_GIT_REVISION` when set, as in a container build where `.git`
//! is left out; else `git rev-parse`; else "unknown") and the compiler (`rustc -V`).

use std::path::PathBuf;
use std::process::Command;

const REVISION_ENV: &str = "PRESENCE_SWEEPER_GIT_REVISION";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed={REVISION_ENV}");
    let revision = match std::env::var(REVISION_ENV) {
        Ok(r) if !r.trim().is_empty() => r.trim().to_owned(),
        _ => git_revision().unwrap_or_else(|| "unknown".into()),
    };
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let compiler = output(Command::new(rustc).arg("-V")).unwrap_or_else(|| "rustc unknown".into());
    // Not PRESENCE_SWEEPER_*: cargo sets these in the tests' environment too, where the
    // binary would take them for mistyped settings.
    println!("cargo:rustc-env=BUILD_GIT_REVISION={revision}");
    println!("cargo:rustc-env=BUILD_RUSTC_VERSION={compiler}");
}

/// The checked-out commit, watching the files that move when it changes (HEAD, the branch it
/// points to, packed refs) so that builds between commits do not rerun this script.
fn git_revision() -> Option<String> {
    let git = |args: &[&str]| output(Command::new("git").args(args));
    let revision = git(&["rev-parse", "--short=12", "HEAD"])?;
    let mut watched = vec![PathBuf::from(git(&["rev-parse", "--git-path", "HEAD"])?)];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.extend(git(&["rev-parse", "--git-path", &branch]).map(PathBuf::from));
    }
    watched.extend(git(&["rev-parse", "--git-path", "packed-refs"]).map(PathBuf::from));
    // A path that does not exist would make cargo rerun this script on every build.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    Some(revision)
}

/// A command's first line of output, if it ran and succeeded.
fn output(command: &mut Command) -> Option<String> {
    let out = command.output().ok().filter(|o| o.status.success())?;
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}
