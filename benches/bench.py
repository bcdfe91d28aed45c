#!/usr/bin/env python3
"""End-to-end benchmark of presence-sweeper against its own redis-server on 127.0.0.1.

In one run, on this machine:
  1. seeds KEYS conversations x MEMBERS members, STALE of them stale in every key, and runs one
     full `sweep` (the evicting pass), then another over the same keys (the clean pass);
  2. repeats the clean pass with `scan.max_keys_per_second` to show the gentleness control;
  3. sweeps one key of BIG_KEY members (10% stale) and checks SLOWLOG for any command over 10 ms;
  4. runs benches/baseline.py (the baseline: an app's own cleanup loop) and presence-sweeper on
     the same BASELINE_KEYS-key keyspace, for the ratio;
  5. runs a reference design (benches/reference_lua.py: SCAN, then 50-key Lua calls that evict
     and publish, pipelined) and presence-sweeper on the same REFERENCE_KEYS-key
     keyspace, evicting then clean, each on a fresh server, REPEAT times (the run with the median
     ratio reported), so Redis CPU per key can be compared within one run;
  6. counts instructions per key with callgrind, which does not drift with the machine as CPU
     seconds do: Redis's (redis-server run under valgrind) for the reference design and for
     presence-sweeper on the same INSTRUCTIONS_KEYS-key keyspace, evicting then clean, and the
     sweeper's own;
  7. with --simulate, runs `presence-sweeper run` (online ttl 45 s) under
     `presence-sweeper-tools simulate` with 10,000 conversations x 20 users, for eviction lag.

benches/steady.py measures the daemon in steady state (keys checked at their deadlines) instead.

For every pass it reports keys/s, members evicted/s, the sweeper's CPU seconds and peak RSS
(wait4 rusage of that process), Redis's CPU seconds for the pass (INFO cpu deltas of the main
thread) and Redis CPU per key. Redis CPU is the physical limit of a sweep: Redis runs every
command on one thread.

usage: python3 benches/bench.py [--stages passes,gentle,big-key,baseline,reference,instructions]
                                [--simulate] [--keys N] [--members M] [--stale F] [--big-key N]
                                [--baseline-keys N] [--reference-keys N] [--instructions-keys N]
                                [--instructions-runs N] [--compare BINARY] [--skip-build] [--json FILE]

--compare BINARY also counts that build's own instructions per key (stage 6), on the same
keyspaces, beside this checkout's: for an A/B of two builds that does not drift. The sweeper's
own count still moves by about half a percent from run to run (how replies split across reads),
so each build runs --instructions-runs times (3), alternating, and the median is reported with
the range.
needs: redis-server on PATH; cargo; python3 with venv + pip for the baseline (redis-py is
installed into a private virtualenv under ~/.cache on first use); valgrind for stage 6 (skipped
without it).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, BIN, Redis, build, sweeper, tools  # noqa: E402,F401

BASELINE = os.path.join(ROOT, "benches", "baseline.py")
REFERENCE = os.path.join(ROOT, "benches", "reference_lua.py")

# The bench sweep: ttl 1 h so that seeding a million keys (tens of seconds) does not age the
# "fresh" members into zombies before the pass; what a pass costs does not depend on the ttl.
BENCH_CONFIG = """
[http]
listen = "127.0.0.1:0"
[log]
level = "warn"
[sweeps.typing]
enabled = false
[sweeps.online]
ttl = "1h"
"""


def run(redis, args, env=None):
    """Runs a command and measures it: (stdout, wall, own CPU, peak RSS in MB, Redis CPU)."""
    cpu0 = redis.cpu()
    t0 = time.perf_counter()
    out_file = tempfile.TemporaryFile()
    err_file = tempfile.TemporaryFile()
    proc = subprocess.Popen(args, stdout=out_file, stderr=err_file, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    redis_cpu = redis.cpu() - cpu0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out_file.seek(0)
    err_file.seek(0)
    out = out_file.read().decode()
    err = err_file.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {proc.returncode}:\n{out}\n{err}")
    return out, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, redis_cpu


def parse_summary(line):
    fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
    return {k: float(v) for k, v in fields.items()}


def measure_pass(label, config, redis, keys_expected=None):
    out, wall, own_cpu, rss, redis_cpu = run(redis, sweeper(config, redis, "sweep", "--sweep", "online"))
    s = parse_summary(out.strip().splitlines()[-1])
    keys = s["keys"]
    if keys_expected is not None and int(keys) != keys_expected:
        raise SystemExit(f"{label}: swept {keys} keys, expected {keys_expected}")
    slow_count, slow_max, slow_commands = redis.slowlog()
    row = {
        "pass": label, "keys": int(keys), "evicted": int(s["evicted"]),
        "events": int(s["events_published"]), "wall_s": wall,
        "keys_per_s": keys / wall, "evicted_per_s": s["evicted"] / wall,
        "sweeper_cpu_s": own_cpu, "sweeper_rss_mb": rss, "redis_cpu_s": redis_cpu,
        "redis_us_per_key": redis_cpu / keys * 1e6 if keys else 0.0,
        "wall_over_redis": wall / redis_cpu if redis_cpu else 0.0,
        "sweeper_over_redis": own_cpu / redis_cpu if redis_cpu else 0.0,
        "slowlog_over_10ms": slow_count, "slowlog_max_us": slow_max, "slowlog_commands": slow_commands,
    }
    print(f"  {label}: {row['keys']} keys, {row['evicted']} evicted in {wall:.2f} s "
          f"({row['keys_per_s']:,.0f} keys/s); Redis {redis_cpu:.2f} s CPU "
          f"({row['redis_us_per_key']:.2f} us/key); sweeper {own_cpu:.2f} s CPU, {rss:.1f} MB; "
          f"SLOWLOG >10ms: {slow_count} {slow_commands if slow_count else ''}", flush=True)
    return row


def seed(config, redis, conversations, members, stale):
    env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")  # one call per big key
    out, wall, *_ = run(redis, tools(config, redis, "seed", "--conversations", str(conversations),
                                       "--members", str(members), "--stale-fraction", str(stale)), env)
    print(f"  seeded: {out.strip()} ({wall:.1f} s)", flush=True)
    time.sleep(3)  # let Redis settle (freed script memory, expired temporaries)
    redis.slowlog()  # seeding is not the sweeper's doing


def median_row(rows):
    """The run with the median Redis CPU, annotated with the range of every run."""
    ordered = sorted(rows, key=lambda r: r["redis_cpu_s"])
    row = dict(ordered[len(ordered) // 2])
    row["redis_us_per_key_range"] = [ordered[0]["redis_us_per_key"], ordered[-1]["redis_us_per_key"]]
    row["sweeper_cpu_s_range"] = [min(r["sweeper_cpu_s"] for r in rows), max(r["sweeper_cpu_s"] for r in rows)]
    row["slowlog_over_10ms"] = sum(r["slowlog_over_10ms"] for r in rows)
    return row


def baseline_python():
    """A python with redis-py, in a private virtualenv (created on first use)."""
    venv = os.path.join(os.path.expanduser("~"), ".cache", "presence-sweeper-bench", "venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", "redis"], check=True)
    return py


def simulate(config_dir, redis):
    """The daemon under simulated traffic: returns the simulate report (JSON)."""
    cfg = os.path.join(config_dir, "simulate.toml")
    with open(cfg, "w") as f:
        f.write('[http]\nlisten = "127.0.0.1:0"\n[log]\nlevel = "warn"\n'
                '[sweeps.typing]\nenabled = false\n[sweeps.online]\nttl = "45s"\nschedule = "5s"\n')
    daemon = subprocess.Popen(sweeper(cfg, redis, "run"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        p = subprocess.run(tools(cfg, redis, "simulate", "--conversations", "10000", "--users", "20",
                                   "--duration", "2m", "--json"),
                           capture_output=True, text=True)
        if p.returncode not in (0, 1):
            raise SystemExit(f"simulate exited {p.returncode}: {p.stderr}")
        return json.loads(p.stdout), p.returncode
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(10)


def own(out, key):
    """A median count with its runs' range."""
    low, high = out[f"{key}_range"]
    return f"{out[key]:,.0f} ({low:,.0f}-{high:,.0f})"


def callgrind_total(path):
    """Instructions in one callgrind dump."""
    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"{path}: no instruction count")


def instructions(config, work, keys, members, stale, py, compare=None, runs=3):
    """Instructions per key, counted by callgrind, which does not drift with the machine: Redis's
    for the reference design and for presence-sweeper on the same keyspace (evicting, then
    clean), and presence-sweeper's own."""
    env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="600s")  # Redis runs ~50x slower
    out = {}
    cg_dir = tempfile.mkdtemp(dir=work)
    r = Redis(tempfile.mkdtemp(dir=work),
              wrapper=("valgrind", "--tool=callgrind", f"--callgrind-out-file={cg_dir}/redis.out"))
    try:
        def counted(label, args):
            subprocess.run(["callgrind_control", "-z", str(r.proc.pid)], check=True, capture_output=True)
            subprocess.run(args, check=True, capture_output=True, env=env)
            subprocess.run(["callgrind_control", "-d", label, str(r.proc.pid)], check=True,
                           capture_output=True)

        for design, passes in (
                ("reference", lambda label: [py, REFERENCE, str(r.port), "presence:*:online", "3600"]),
                ("ours", lambda label: sweeper(config, r, "sweep", "--sweep", "online"))):
            r.cli("FLUSHALL")
            subprocess.run(tools(config, r, "seed", "--conversations", str(keys), "--members", str(members),
                                   "--stale-fraction", str(stale)), check=True, capture_output=True, env=env)
            for label in ("evicting", "clean"):
                counted(f"{design}-{label}", passes(label))
    finally:
        r.stop()
    for path in os.listdir(cg_dir):
        with open(os.path.join(cg_dir, path), errors="replace") as f:
            trigger = next((l for l in f if l.startswith("desc: Trigger:")), "")
        label = trigger.split()[-1] if "dump" in trigger else None
        if label and "-" in label:
            out[f"redis_{label}"] = callgrind_total(os.path.join(cg_dir, path)) / keys
    # The sweeper's own (and the other build's), against a Redis at full speed. Its count moves by
    # about half a percent from run to run (how a reply splits across reads decides how often the
    # framer looks at it), so each build runs `runs` times, alternating, and the median counts.
    builds = [("sweeper", None)] + ([("compare", compare)] if compare else [])
    counts = {}
    for run in range(runs):
        for name, binary in builds:
            r = Redis(tempfile.mkdtemp(dir=work))
            try:
                seed(config, r, keys, members, stale)
                for label in ("evicting", "clean"):
                    path = os.path.join(cg_dir, f"{name}-{label}-{run}.out")
                    cmd = sweeper(config, r, "sweep", "--sweep", "online")
                    if binary:
                        cmd[0] = binary
                    p = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={path}", *cmd],
                                       check=True, capture_output=True, env=env, text=True)
                    counts.setdefault(f"{name}_{label}", []).append(callgrind_total(path) / keys)
                    out[f"{name}_{label}_summary"] = p.stdout.strip()
            finally:
                r.stop()
    for k, v in counts.items():
        out[k] = statistics.median(v)
        out[f"{k}_range"] = [min(v), max(v)]
    for label in ("evicting", "clean"):
        print(f"  {label}: Redis {out[f'redis_ours-{label}']:,.0f} instructions/key for presence-sweeper, "
              f"{out[f'redis_reference-{label}']:,.0f} for the reference design "
              f"(ratio {out[f'redis_ours-{label}'] / out[f'redis_reference-{label}']:.2f}); "
              f"the sweeper's own {own(out, f'sweeper_{label}')}"
              + (f", the other build's {own(out, f'compare_{label}')}" if compare else ""), flush=True)
    return out


STAGES = ("passes", "gentle", "big-key", "baseline", "reference", "instructions")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default=",".join(STAGES), help="which stages to run, comma-separated")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--stale", type=float, default=0.1)
    ap.add_argument("--big-key", type=int, default=1_000_000)
    ap.add_argument("--baseline-keys", type=int, default=20_000)
    ap.add_argument("--reference-keys", type=int, default=100_000)
    ap.add_argument("--gentle", type=int, default=100_000, help="scan.max_keys_per_second of the gentle pass")
    ap.add_argument("--instructions-keys", type=int, default=3_000,
                    help="keys of the callgrind stage (0 skips it)")
    ap.add_argument("--instructions-runs", type=int, default=3,
                    help="runs of each build's own count in stage 6, alternating; the median is reported")
    ap.add_argument("--compare", help="another build of presence-sweeper whose own instructions stage 6 counts too")
    ap.add_argument("--simulate", action="store_true", help="also run the 10k x 20 simulate lag test (~4 min)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the evicting and clean passes; the median is reported")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    stages = set(args.stages.split(","))
    unknown = stages - set(STAGES)
    if unknown:
        raise SystemExit(f"unknown stages {sorted(unknown)}; known: {', '.join(STAGES)}")

    if not args.skip_build:
        build()
    work = tempfile.mkdtemp(prefix="presence-sweeper-bench-")
    results = {"machine": f"{os.cpu_count()} cores", "repeat": args.repeat}
    redis = None

    def fresh_redis():
        # A new server per phase: freeing a large keyspace (FLUSHALL) leaves the allocator
        # returning memory for seconds after, which would be billed to the next pass.
        nonlocal redis
        if redis is not None:
            redis.stop()
        redis = Redis(tempfile.mkdtemp(dir=work))
        results["redis"] = redis.cli("INFO", "server").split("redis_version:")[1].split()[0]
        return redis

    py = None
    try:
        config = os.path.join(work, "bench.toml")
        with open(config, "w") as f:
            f.write(BENCH_CONFIG)
        gentle = os.path.join(work, "gentle.toml")
        with open(gentle, "w") as f:
            f.write(BENCH_CONFIG + f"[scan]\nmax_keys_per_second = {args.gentle}\n")

        if "passes" in stages:
            print(f"1. {args.keys:,} keys x {args.members} members, {args.stale:.0%} stale, "
                  f"each pass {args.repeat} times (median reported)", flush=True)
            evicting, clean = [], []
            for _ in range(args.repeat):
                r = fresh_redis()
                seed(config, r, args.keys, args.members, args.stale)
                evicting.append(measure_pass("evicting pass", config, r, args.keys))
                clean.append(measure_pass("clean pass", config, r, args.keys))
            results["evicting"] = median_row(evicting)
            results["clean"] = median_row(clean)
        if "gentle" in stages:
            print(f"2. gentleness: scan.max_keys_per_second = {args.gentle:,}", flush=True)
            r = fresh_redis()
            seed(config, r, args.keys, args.members, 0.0)
            results["gentle_uncapped"] = measure_pass("clean pass, uncapped", config, r, args.keys)
            results["gentle"] = measure_pass("clean pass, capped", gentle, r, args.keys)

        if "big-key" in stages:
            print(f"3. one key of {args.big_key:,} members, 10% stale", flush=True)
            r = fresh_redis()
            seed(config, r, 1, args.big_key, 0.1)
            results["big_key"] = measure_pass("1M-member key", config, r, 1)

        if "baseline" in stages:
            print(f"4. baseline on {args.baseline_keys:,} keys", flush=True)
            r = fresh_redis()
            seed(config, r, args.baseline_keys, args.members, args.stale)
            py = py or baseline_python()
            out, wall, _, _, redis_cpu = run(r, [py, BASELINE, str(r.port), "presence:*:online", "3600"])
            fields = parse_summary(out.strip())
            results["baseline"] = {"keys": int(fields["keys"]), "evicted": int(fields["evicted"]),
                                   "keys_per_s": fields["keys_per_s"], "redis_cpu_s": redis_cpu,
                                   "redis_us_per_key": redis_cpu / fields["keys"] * 1e6}
            print(f"  baseline: {out.strip()}; Redis {redis_cpu:.2f} s CPU", flush=True)
            r = fresh_redis()
            seed(config, r, args.baseline_keys, args.members, args.stale)
            results["same_keys"] = measure_pass("presence-sweeper, same keyspace", config, r, args.baseline_keys)

        if "reference" in stages:
            print(f"5. a reference design (Lua evict-and-publish) on {args.reference_keys:,} keys",
                  flush=True)
            py = py or baseline_python()
            runs = []
            for _ in range(args.repeat):
                run_ = {}
                r = fresh_redis()
                seed(config, r, args.reference_keys, args.members, args.stale)
                for label in ("evicting", "clean"):
                    out, wall, _, _, redis_cpu = run(r, [py, REFERENCE, str(r.port), "presence:*:online", "3600"])
                    fields = parse_summary(out.strip())
                    run_[f"reference_{label}"] = {
                        "keys": int(fields["keys"]), "evicted": int(fields["evicted"]), "wall_s": wall,
                        "keys_per_s": fields["keys"] / wall, "redis_cpu_s": redis_cpu,
                        "redis_us_per_key": redis_cpu / fields["keys"] * 1e6}
                    print(f"  reference, {label}: {out.strip()}; Redis {redis_cpu:.2f} s CPU "
                          f"({redis_cpu / fields['keys'] * 1e6:.2f} us/key)", flush=True)
                r = fresh_redis()
                seed(config, r, args.reference_keys, args.members, args.stale)
                run_["ours_evicting"] = measure_pass("presence-sweeper, evicting", config, r, args.reference_keys)
                run_["ours_clean"] = measure_pass("presence-sweeper, clean", config, r, args.reference_keys)
                run_["ratio_evicting"] = (run_["ours_evicting"]["redis_us_per_key"]
                                          / run_["reference_evicting"]["redis_us_per_key"])
                run_["ratio_clean"] = (run_["ours_clean"]["redis_us_per_key"]
                                       / run_["reference_clean"]["redis_us_per_key"])
                runs.append(run_)
            # The run with the median evicting ratio, and the range of both ratios over every run.
            runs.sort(key=lambda x: x["ratio_evicting"])
            results["reference"] = runs[len(runs) // 2]
            results["reference"]["ratio_evicting_range"] = [runs[0]["ratio_evicting"], runs[-1]["ratio_evicting"]]
            clean_ratios = sorted(x["ratio_clean"] for x in runs)
            results["reference"]["ratio_clean_range"] = [clean_ratios[0], clean_ratios[-1]]

        if "instructions" in stages and args.instructions_keys:
            if shutil.which("valgrind"):
                print(f"6. instructions per key (callgrind) on {args.instructions_keys:,} keys: Redis's for the "
                      "reference design and presence-sweeper, and the sweeper's own", flush=True)
                py = py or baseline_python()
                results["instructions"] = instructions(config, work, args.instructions_keys, args.members,
                                                       args.stale, py, args.compare, args.instructions_runs)
            else:
                print("6. instructions per key: skipped, valgrind is not on PATH", flush=True)

        if args.simulate:
            print("7. simulate: 10,000 conversations x 20 users, ttl 45 s", flush=True)
            sim, code = simulate(work, fresh_redis())
            results["simulate"] = {"report": sim, "exit": code}
            print(f"  simulate: {json.dumps(sim)[:600]}", flush=True)
    finally:
        if redis is not None:
            redis.stop()
        shutil.rmtree(work, ignore_errors=True)

    report(results, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def report(r, args):
    print()
    print(f"Results ({r['machine']}, Redis {r.get('redis', '?')}, Redis and the sweeper sharing the cores)")
    print()
    print("| pass | keys | evicted | wall s | keys/s | Redis CPU s | Redis us/key | sweeper CPU s | "
          "sweeper/Redis CPU | wall/Redis CPU | peak RSS MB | SLOWLOG >10 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")

    def row(x, label=None):
        print(f"| {label or x['pass']} | {x['keys']:,} | {x['evicted']:,} | {x['wall_s']:.2f} | {x['keys_per_s']:,.0f} | "
              f"{x['redis_cpu_s']:.2f} | {x['redis_us_per_key']:.2f} | {x.get('sweeper_cpu_s', 0):.2f} | "
              f"{x.get('sweeper_over_redis', 0):.2f} | {x.get('wall_over_redis', 0):.2f} | "
              f"{x.get('sweeper_rss_mb', 0):.1f} | {x.get('slowlog_over_10ms', '')} |")

    spread = lambda x: " (runs {:.2f}-{:.2f} us/key)".format(*x["redis_us_per_key_range"])
    if "evicting" in r:
        row(r["evicting"], f"evicting ({args.stale:.0%} stale){spread(r['evicting'])}")
        row(r["clean"], f"clean{spread(r['clean'])}")
    if "gentle" in r:
        row(r["gentle_uncapped"], "clean, uncapped")
        row(r["gentle"], f"clean, max {args.gentle:,} keys/s")
    if "big_key" in r:
        row(r["big_key"], f"one key of {args.big_key:,} members")
    if "reference" in r:
        ref = r["reference"]
        for label in ("evicting", "clean"):
            x = ref[f"reference_{label}"]
            print(f"| reference design (Lua), {label} | {x['keys']:,} | {x['evicted']:,} | {x['wall_s']:.2f} | "
                  f"{x['keys_per_s']:,.0f} | {x['redis_cpu_s']:.2f} | {x['redis_us_per_key']:.2f} | | | | | |")
            row(ref[f"ours_{label}"], f"presence-sweeper, same keyspace, {label}")
    if "baseline" in r:
        base = r["baseline"]
        print(f"| baseline (benches/baseline.py) | {base['keys']:,} | {base['evicted']:,} | | {base['keys_per_s']:,.0f} | "
              f"{base['redis_cpu_s']:.2f} | {base['redis_us_per_key']:.2f} | | | | | |")
        row(r["same_keys"], "presence-sweeper, same keyspace")
    print()
    if "reference" in r:
        ref = r["reference"]
        span = lambda key: "{:.2f}-{:.2f}".format(*ref[key])
        print(f"Redis CPU per key against the reference design, same run: {ref['ratio_evicting']:.2f} evicting "
              f"(runs {span('ratio_evicting_range')}), {ref['ratio_clean']:.2f} clean (runs {span('ratio_clean_range')})")
    if "baseline" in r:
        print(f"keys/s against the baseline, same keyspace: {r['same_keys']['keys_per_s'] / r['baseline']['keys_per_s']:,.0f}x")
    if "gentle" in r:
        g, u = r["gentle"], r["gentle_uncapped"]
        print(f"gentleness: {g['keys_per_s']:,.0f} keys/s under a cap of {args.gentle:,}; Redis busy "
              f"{g['redis_cpu_s'] / g['wall_s']:.0%} of the pass (uncapped {u['redis_cpu_s'] / u['wall_s']:.0%})")
    if "instructions" in r:
        i = r["instructions"]
        print()
        print(f"Instructions per key (callgrind, {args.instructions_keys:,} keys; counts do not drift with the machine):")
        print()
        print(f"| pass | Redis, presence-sweeper | Redis, reference design | ratio | the sweeper's own "
              f"(median of {args.instructions_runs}, range) |"
              + (" the other build's own | change |" if "compare_evicting" in i else ""))
        print("|---|---|---|---|---|" + ("---|---|" if "compare_evicting" in i else ""))
        for label in ("evicting", "clean"):
            other = ""
            if f"compare_{label}" in i:
                change = i[f"sweeper_{label}"] / i[f"compare_{label}"] - 1
                other = f" {own(i, f'compare_{label}')} | {change:+.1%} |"
            print(f"| {label} | {i[f'redis_ours-{label}']:,.0f} | {i[f'redis_reference-{label}']:,.0f} | "
                  f"{i[f'redis_ours-{label}'] / i[f'redis_reference-{label}']:.2f} | {own(i, f'sweeper_{label}')} |{other}")
    if "simulate" in r:
        s = r["simulate"]["report"]
        lag = s.get("eviction_lag_seconds") or {}
        print()
        print(f"simulate 10,000 x 20, ttl 45 s: {s['evictions']:,} evictions; lag p50 {lag.get('p50', 0) * 1000:.0f} ms, "
              f"p99 {lag.get('p99', 0) * 1000:.0f} ms, max {lag.get('max', 0) * 1000:.0f} ms; false {s['false_evictions']}, "
              f"duplicates {s['duplicate_events']}, missed {s['missed_zombies']} (exit {r['simulate']['exit']})")


if __name__ == "__main__":
    main()
