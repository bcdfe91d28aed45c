//! What this binary was built from (recorded by `build.rs`): for `--version`, the
//! `build_info` metric and bug reports.

/// The crate's version, e.g. `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit it was built from (12 hex digits), the value of
/// `PRESENCE_SWEEPER_GIT_REVISION` at build time, or `unknown`.
pub const REVISION: &str = env!("BUILD_GIT_REVISION");

/// The compiler, as `rustc -V` says it, e.g. `rustc 1.95.0 (59807616e 2026-04-14)`.
pub const RUSTC: &str = env!("BUILD_RUSTC_VERSION");

/// What `--version` prints after the program's name.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("BUILD_GIT_REVISION"),
    ", built with ",
    env!("BUILD_RUSTC_VERSION"),
    ")"
);

/// The compiler's version number alone (`1.95.0`), for a metric label.
pub fn rustc_release() -> &'static str {
    RUSTC.split_whitespace().nth(1).unwrap_or(RUSTC)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_long_version_names_revision_and_compiler() {
        assert!(super::LONG.starts_with(super::VERSION));
        assert!(super::LONG.contains(super::REVISION));
        assert!(super::RUSTC.starts_with("rustc "), "{}", super::RUSTC);
        assert!(super::rustc_release().starts_with(|c: char| c.is_ascii_digit()));
    }
}
