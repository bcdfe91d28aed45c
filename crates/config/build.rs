//! Writes the built-in defaults: the shipped example file without its comments.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    defaults();
}

/// `config/presence-sweeper.toml` is the defaults and the settings' documentation at once; every
/// command parses it first. Its comments are most of its bytes, and parsing them cost about
/// 150,000 instructions per start (callgrind), so the binary carries the file without them:
/// whole-line comments and blank lines go (the file has no multi-line strings), every setting
/// stays on its line.
fn defaults() {
    const SHIPPED: &str = "../../config/presence-sweeper.toml";
    println!("cargo:rerun-if-changed={SHIPPED}");
    let text = std::fs::read_to_string(SHIPPED).expect("the shipped configuration file");
    let kept: String = text
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !line.is_empty() && !line.starts_with('#')
        })
        .flat_map(|line| [line, "\n"])
        .collect();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("defaults.toml"), kept).expect("OUT_DIR is writable");
}
