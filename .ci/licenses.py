#!/usr/bin/env python3
"""Writes the third-party notices that the package and the archive carry.

The binaries link every crate they depend on statically, so their licences (most ask that the
copyright notice and licence text go with every copy) must ship with them. This lists each crate
built into the release binaries for x86_64-unknown-linux-gnu, with the licence it declares, then
the licence and notice files it ships; crates that ship the same text share one copy. Procedural
macros and build-time dependencies are left out: they run while building and are not in the
binaries.

usage: python3 .ci/licenses.py OUT    (cargo metadata fetches the crates' sources if need be)
"""

import hashlib
import json
import os
import subprocess
import sys

TRIPLE = "x86_64-unknown-linux-gnu"
# The files a crate's licence and notices are in, by how their names start (case-insensitive);
# the last two only at the top of a crate (elsewhere they are as likely to be source files).
LICENCE_FILES = ("license", "licence", "copying", "notice", "unlicense", "copyright", "authors")


def linked_crates(meta):
    """The packages reachable from the workspace's members (the daemon's binary and the tools')
    through normal (not dev, not build) dependencies, procedural macros and the members
    themselves left out: those are this project, under its own licence."""
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    members = set(meta["workspace_members"])
    seen, todo = set(), list(members)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        for dep in nodes[node]["deps"]:
            if not any(k["kind"] is None for k in dep["dep_kinds"]):
                continue
            if any("proc-macro" in t["kind"] for t in packages[dep["pkg"]]["targets"]):
                continue
            todo.append(dep["pkg"])
    seen -= members
    return sorted((packages[i] for i in seen), key=lambda p: (p["name"], p["version"]))


def licence_texts(package):
    """(path in the crate, text) of each licence or notice file: at the top of the crate's
    source, and anywhere below it for code a crate carries from elsewhere under its own licence
    (mimalloc's C sources in libmimalloc-sys, a polyfill in ring)."""
    top = os.path.dirname(package["manifest_path"])
    out = []
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        kinds = LICENCE_FILES if folder == top else LICENCE_FILES[:5]
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.lower().startswith(kinds) and os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    out.append((os.path.relpath(path, top), f.read().strip("\n")))
    declared = package.get("license_file")
    if declared and not any(n == os.path.normpath(declared) for n, _ in out):
        with open(os.path.join(top, declared), encoding="utf-8", errors="replace") as f:
            out.append((os.path.normpath(declared), f.read().strip("\n")))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    # stderr is left to the terminal: cargo's own error says what went wrong.
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", TRIPLE],
        check=True, stdout=subprocess.PIPE, text=True).stdout)
    root = next(p for p in meta["packages"] if p["id"] == meta["resolve"]["root"])
    crates = linked_crates(meta)
    texts = {}  # digest of the text, whitespace folded -> (text, [crate names])
    for package in crates:
        label = f"{package['name']} {package['version']}"
        files = licence_texts(package)
        if not files:
            sys.exit(f"licenses: {label} ships no licence file (it declares {package['license']!r}); "
                     "add its text by hand before shipping")
        for name, text in files:
            digest = hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
            texts.setdefault(digest, (text, []))[1].append(f"{label} ({name})")
    rule = "=" * 78
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write(f"Third-party software in {root['name']} {root['version']}\n\n"
                  "The binaries are statically linked with the Rust standard library (MIT OR\n"
                  "Apache-2.0, https://github.com/rust-lang/rust) and with the crates below, each\n"
                  "under the licence it declares. Their licence and notice files follow; crates\n"
                  "that ship the same text share one copy.\n\n")
        width = max(len(f"{p['name']} {p['version']}") for p in crates)
        for p in crates:
            out.write(f"  {p['name'] + ' ' + p['version']:<{width}}  {p['license'] or 'see its files'}\n")
        for text, owners in sorted(texts.values(), key=lambda t: t[1][0]):
            out.write(f"\n{rule}\n")
            for owner in owners:
                out.write(f"{owner}\n")
            out.write(f"{rule}\n\n{text}\n")
    print(f"licenses: {len(crates)} crates, {len(texts)} distinct texts -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
