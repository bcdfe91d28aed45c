#!/usr/bin/env python3
"""The sweeper's own cost per deadline check, in scenario `live` (1,000,000 conversations, one
user each heartbeating every 20 s, ttl 45 s, 1 % vanishing), this build against earlier ones in
one run. Each phase starts a daemon on the same Redis (notifications `En`), lets the simulator
run for --warmup seconds (past the first checks of every key and the looks that spread them),
then measures over --window seconds:

  - the daemon's CPU time, in % of a core and per deadline check;
  - Redis's CPU, and the checks per second;
  - the daemon's voluntary context switches per check (its wake-ups: a count, which does
    not drift);
  - the sweeper's reads per check (`ZRANGE`, `ZCARD`, `PTTL` from `INFO commandstats`: counts,
    which do not drift) and their execution time in Redis per check (which does, and leaves
    out each command's parsing and reply).

CPU time drifts with the machine's speed (2x within an hour here), so the builds alternate
(--rounds 3: this, before, this, before, this, before): a drift shows up as a difference
between rounds, and the builds are compared round by round.

--variant LABEL=TOML runs this build once more in each round with TOML added to its
configuration, to compare settings side by side: --variant 'batch 100=[evict]\\nbatch_keys = 100'.

usage: python3 benches/own_cost.py [--conversations N] [--before BINARY ...] [--variant LABEL=TOML ...]
                                   [--rounds 3] [--warmup 100] [--window 40] [--skip-build] [--json FILE]
needs: redis-server and redis-cli on PATH; cargo.
"""

import argparse
import os
import shutil
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BIN, LIVE_SWEEPS, Redis, commandstats, keep_json, live_traffic, parse_and_build  # noqa: E402

# The sweeper's reads in scenario `live` (the apps write through a script, and the simulator
# reads none of these).
READS = ("zrange", "zcard", "pttl")
from steady import run_phase  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=1_000_000)
    ap.add_argument("--before", action="append", default=[], help="an earlier build of presence-sweeper")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=TOML: this build with TOML (\\n for a new line) added to its configuration")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=100.0)
    ap.add_argument("--window", type=float, default=40.0)
    args = parse_and_build(ap)
    work = tempfile.mkdtemp(prefix="presence-sweeper-own-cost-")
    redis = Redis(tempfile.mkdtemp(dir=work), extra=["--notify-keyspace-events", "En"])
    sweeps = LIVE_SWEEPS
    sim = live_traffic(args.conversations)
    duration = int(args.warmup + args.window + 5)
    builds = [("this", BIN, "")] + [(f"before {i + 1}" if len(args.before) > 1 else "before", b, "")
                                    for i, b in enumerate(args.before)]
    for v in args.variant:
        label, sep, toml = v.partition("=")
        if not sep:
            raise SystemExit(f"--variant {v!r}: expected LABEL=TOML")
        builds.append((label, BIN, toml.replace("\\n", "\n") + "\n"))
    rows = {"redis": redis.version(), "phases": []}
    try:
        for r in range(args.rounds):
            for label, binary, toml in builds:
                stats = {}
                counting = threading.Thread(target=commandstats, args=([redis], args.warmup, args.window, stats),
                                            daemon=True)
                counting.start()
                row = run_phase(f"own-cost-{label.replace(' ', '-')}-{r + 1}", work, redis, sweeps + toml, "", sim,
                                duration, args.window, binary=binary, warmup=args.warmup)
                counting.join()
                row["commandstats"] = stats
                row["build"] = label
                row["round"] = r + 1
                rows["phases"].append(row)
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    width = max(9, *(len(label) for label, _, _ in builds))
    print(f"\n{'build':<{width}} round  checks/s  CPU us/check  sweeper CPU  wake-ups/check  Redis CPU  "
          "reads/check  their Redis us/check  false/dup/missed")
    for row in rows["phases"]:
        rep = row["report"]
        checks = max(row["checks_per_s"], 1)
        reads = [row["commandstats"].get(c, {}) for c in READS]
        calls = sum(r.get("calls_per_s", 0) for r in reads) / checks
        usec = sum(r.get("usec_per_s", 0) for r in reads) / checks
        print(f"{row['build']:<{width}} {row['round']:>5}  {row['checks_per_s']:>8,.0f}  "
              f"{row['sweeper_core'] / checks * 1e6:>12.2f}  "
              f"{row['sweeper_core']:>10.2%}  {row.get('sweeper_switches_per_s', 0) / checks:>14.4f}  "
              f"{row['redis_core']:>9.2%}  {calls:>11.2f}  {usec:>20.2f}  "
              f"{rep['false_evictions']}/{rep['duplicate_events']}/{rep['missed_zombies']}")
    keep_json(args.json, rows)


if __name__ == "__main__":
    main()
