"""Experiment for issue 24's CPU target: where the stream script's own time goes.

Replays the daemon's calls of src/evict/stream.lua (EVALSHA, 25 keys and their streams per call,
a stream per conversation, member events, the daemon's arguments) on a fresh server seeded by
`presence-sweeper-tools seed` (KEYS keys x 20 members, 2 stale), once per variant of the script,
alternating, and reports Redis CPU (main thread) per evicted member, split by INFO commandstats
into the EVALSHA calls, the commands they ran, and the rest (Lua's own work). The variants cut
one part of the script each, so the differences bound what that part costs:

  as built      src/evict/stream.lua
  no JSON       every event is a constant 7 bytes: no encoding of ids, scores or the roster
  no appends    no XADD and no PUBLISH (the JSON is still built)
  setup only    returns right after reading TIME: the call itself and the script's top level

usage: python3 benches/experiments/stream_script_parts.py [KEYS] [RUNS]
needs: a release build (cargo build --release) and what benches/streams.py needs.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streams import config, redis_py  # noqa: E402
from common import ROOT, Redis, tools  # noqa: E402

rp = redis_py()
KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
BATCH = 25
SCRIPT = open(os.path.join(ROOT, "src", "evict", "stream.lua")).read()


def variant(old, new):
    assert old in SCRIPT, f"the script changed; update this experiment: {old!r}"
    return SCRIPT.replace(old, new, 1)


VARIANTS = [
    ("as built", SCRIPT),
    ("no JSON", variant("local function bodies(conv, stale, got, roster, card)\n",
                        "local function bodies(conv, stale, got, roster, card)\n"
                        "  do local o, c = {}, {} for j = 1, got do o[j] = '{\"x\":1'; c[j] = j end"
                        " return o, c end\n")),
    ("no appends", variant("local function append(stream, json)\n",
                           "local function append(stream, json)\n  do return '1-1' end\n")
     .replace("if publish ~= '' then", "if false then", 1)),  # checked below
    ("setup only", variant("local results = {}\nlocal stopped = false\n",
                           "do return { format('%.17g', now), {} } end\n"
                           "local results = {}\nlocal stopped = false\n")),
]

# The daemon's arguments for the built-in `online` sweep with a 1 h ttl (see stream.lua's header).
HEAD = ["3600.0", "s", "500", "100", "", "10000", "0", "86400000", "member", "65536", "PUBLISH",
        '{"type":"presence.leave"', ',"online":', ',"online_count":', ',"online_truncated":true',
        "100", "100", "0"]


assert "if false then" in VARIANTS[2][1], "the script changed; update this experiment"


def measure(script, name):
    work = tempfile.TemporaryDirectory()
    d = work.name
    r = Redis(d)
    try:
        cfg = config(d, "c.toml")
        env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")
        subprocess.run(tools(cfg, r, "seed", "--conversations", str(KEYS), "--members", "20",
                             "--stale-fraction", "0.1"), check=True, capture_output=True, env=env)
        time.sleep(1)
        c = rp.Redis(port=r.port, protocol=2)
        keys = sorted(c.scan_iter("presence:*:online", count=1000))
        sha = c.script_load(script)
        c.config_resetstat()
        c0 = r.cpu()
        for i in range(0, len(keys), BATCH):
            args, argv = [], list(HEAD)
            for k in keys[i:i + BATCH]:
                conv = k.decode().split(":", 1)[1].rsplit(":", 1)[0]
                args += [k, b"presence:{" + k + b"}:log"]
                argv += [f',"conversation_id":"{conv}"', f"presence:{conv}:events"]
            c.evalsha(sha, len(args), *args, *argv)
        cpu = r.cpu() - c0
        stats = c.info("commandstats")
        if name == "as built":  # after the counts: its ZCARDs would count as commands inside
            left = sum(c.zcard(k) for k in keys)
            assert left == 18 * KEYS, f"the script evicted {20 * KEYS - left}, not {2 * KEYS}"
        calls = stats["cmdstat_evalsha"]["usec"]
        inside = sum(v["usec"] for k, v in stats.items()
                     if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat", "cmdstat_info"))
        n = 2 * KEYS  # the members the as-built script evicts
        return cpu / n * 1e6, calls / n, inside / n, (calls - inside) / n
    finally:
        r.stop()
        work.cleanup()


rows = {name: [] for name, _ in VARIANTS}
for run in range(RUNS):
    for name, script in VARIANTS:
        rows[name].append(measure(script, name))
        cpu, calls, inside, own = rows[name][-1]
        print(f"run {run + 1} {name}: {cpu:.2f} us Redis CPU per evicted member; EVALSHA {calls:.2f}, "
              f"commands inside {inside:.2f}, Lua's own {own:.2f}", flush=True)
print("\n| variant | Redis CPU per evicted member | EVALSHA | commands inside | Lua's own |\n|---|---|---|---|---|")
for name, _ in VARIANTS:
    med = [sorted(r[i] for r in rows[name])[len(rows[name]) // 2] for i in range(4)]
    print(f"| {name} | " + " | ".join(f"{x:.2f}" for x in med) + " |")
