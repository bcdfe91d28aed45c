#!/usr/bin/env python3
"""Import cycles between the files of a Rust crate: `python3 .ci/cycles.py crates/redis/src`.

A file depends on another when it names an item defined there, through `use crate::...`,
`use super::...` (multi-line `{...}` trees included) or a path written inline. Names are
followed through re-exports (`pub use`) to the file that defines them, so a `lib.rs` or
`mod.rs` that only re-exports is no link in a cycle. Prints each cycle and exits 1 if any.
"""

import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "src")


def module_of(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    return tuple(parts)


FILES = {module_of(p): p for p in ROOT.rglob("*.rs")}


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def expand(tree):
    """`a::{b, c::{d, e}}` as its paths: `a::b`, `a::c::d`, `a::c::e`."""
    tree = re.sub(r"\s+", "", tree)
    depth, at = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                at = i
            depth += 1
        elif ch == "}":
            depth -= 1
    if at is None:
        return [tree]
    prefix, inner = tree[:at], tree[at + 1 : tree.rindex("}")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    return [p for item in items if item for p in expand(prefix + item)]


def uses(text):
    """Each `use` path of a file, with its offset and whether it is a `pub use` (a re-export)."""
    for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        for path in expand(m.group(2)):
            path = re.sub(r"\bas\b.*$", "", path).strip(":")
            yield path, m.start(), bool(m.group(1))


def inline(text):
    for m in re.finditer(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", text):
        yield m.group(1), m.start()


TEXT = {m: strip(p.read_text()) for m, p in FILES.items()}
REEXPORTS = {m: {} for m in FILES}
for m, text in TEXT.items():
    for path, _, public in uses(text):
        if public:
            REEXPORTS[m][path.split("::")[-1]] = path


def absolute(module, path):
    segs = path.split("::")
    if segs[0] == "crate":
        return (), segs[1:]
    base = list(module)
    while segs and segs[0] in ("super", "self"):
        if segs.pop(0) == "super":
            base.pop()
    return tuple(base), segs


def inline_mods(text):
    """(start, end, name) of each `mod name { ... }` written inside a file."""
    for m in re.finditer(r"\bmod\s+(\w+)\s*\{", text):
        depth = 0
        for i in range(m.end() - 1, len(text)):
            depth += text[i] == "{"
            depth -= text[i] == "}"
            if depth == 0:
                yield m.start(), i, m.group(1)
                break


def scoped(module, text, at):
    """The module a path at offset `at` of `module`'s file is written in."""
    inner = [name for start, end, name in inline_mods(text) if start <= at <= end]
    return module + tuple(inner)


def resolve(module, path, seen=()):
    """The file defining what `path`, written in `module`, names; None outside the crate."""
    if path.split("::")[0] not in ("crate", "super", "self"):
        # A relative path: a child module of `module`, or an external crate.
        if module + (path.split("::")[0],) not in FILES and path.split("::")[0] != "*":
            return None
        path = "self::" + path
    at, segs = absolute(module, path)
    for i, seg in enumerate(segs):
        if seg == "*":
            return at
        if at + (seg,) in FILES:
            at = at + (seg,)
            continue
        target = REEXPORTS.get(at, {}).get(seg)
        if target and (at, seg) not in seen:
            return resolve(at, target, seen + ((at, seg),))
        return at
    return at


EDGES = {m: set() for m in FILES}
for m, text in TEXT.items():
    paths = [(p, at) for p, at, public in uses(text) if not public] + list(inline(text))
    for path, at in paths:
        to = resolve(scoped(m, text, at), path)
        if to is not None and to != m and to in FILES:
            EDGES[m].add(to)


def cycles():
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in EDGES[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in FILES:
        if v not in index:
            visit(v)
    return out


name = lambda m: "/".join(m) or "lib"
found = cycles()
for comp in found:
    print("cycle:", " <-> ".join(name(m) for m in comp))
    for m in comp:
        print("  ", name(m), "->", ", ".join(name(t) for t in sorted(EDGES[m]) if t in comp))
if "-v" in sys.argv:
    for m in sorted(EDGES):
        print(name(m), "->", ", ".join(name(t) for t in sorted(EDGES[m])))
sys.exit(1 if found else 0)
