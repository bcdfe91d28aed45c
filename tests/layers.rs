//! The crate map in `src/lib.rs` says each layer depends only on the layers below it. This
//! reads every library source file and fails on any path that names a layer above the file's
//! own, so the rule cannot drift; and it checks that the map lists the layers in this order.

use std::path::{Path, PathBuf};

/// The library's layers, lowest first; a module may name its own layer and those before it.
/// Modules sharing a layer may name each other (none of them names anything else of the
/// crate).
const LAYERS: &[&[&str]] = &[
    &["config", "error", "version", "manual"],
    &["events"],
    &["store"],
    &["evict"],
    &["sweep"],
    &["tracking"],
    &["pass"],
    &["serve"],
    &["stats"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate's top-level modules a line names through `crate::`, comments left out.
fn named(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let code = code.split(" // ").next().unwrap_or_default();
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `presence_sweeper_crate::` and the like
        }
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            for item in group.split(',') {
                names.extend(ident(item.trim()));
            }
        } else {
            names.extend(ident(rest));
        }
    }
    names
}

fn ident(path: &str) -> Option<String> {
    let end = path
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(path.len());
    (end > 0).then(|| path[..end].to_owned())
}

#[test]
fn no_module_names_a_layer_above_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut violations = Vec::new();
    let mut checked = 0;
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = top.trim_end_matches(".rs");
        // The binaries' edge (the CLI, main) may name anything; lib.rs declares the map.
        if matches!(module, "lib" | "main" | "cli" | "bin") {
            continue;
        }
        let own = layer_of(module)
            .unwrap_or_else(|| panic!("{} is in no layer of this test's table", rel.display()));
        checked += 1;
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for name in named(line) {
                // `crate::Error`, `crate::Store` and other re-exports at the root: their home.
                let Some(layer) = layer_of(&name).or_else(|| root_export(&name)) else {
                    continue;
                };
                if layer > own {
                    violations.push(format!("{}:{}: names {name}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} files read");
    assert!(
        violations.is_empty(),
        "modules naming a layer above their own:\n{}",
        violations.join("\n")
    );
}

/// The layer of an item `lib.rs` re-exports at the crate root.
fn root_export(name: &str) -> Option<usize> {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub use "))
        .find(|l| {
            l.trim_end_matches(';')
                .rsplit([':', '{', ',', ' '])
                .any(|item| item.trim_end_matches('}') == name)
        })
        .and_then(ident)
        .and_then(|module| layer_of(&module))
}

#[test]
fn the_crate_map_lists_the_layers_in_order() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let map: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//! - "))
        .collect();
    let mut last = 0;
    for entry in &map {
        let module = entry
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("a map entry without a module: {entry}"));
        let layer = layer_of(module)
            .unwrap_or_else(|| panic!("the map names `{module}`, which is in no layer"));
        assert!(
            layer >= last,
            "the map lists `{module}` after a higher layer"
        );
        last = layer;
    }
    let listed: Vec<&str> = map.iter().filter_map(|e| e.split('`').nth(1)).collect();
    for layer in LAYERS {
        for module in *layer {
            assert!(listed.contains(module), "the map does not list `{module}`");
        }
    }
}
