#!/usr/bin/env python3
"""The capacity model of docs/capacity.md: what presence costs Redis and presence-sweeper, per
primary and per replica, from a deployment's own numbers; and its validation against measured
points on a Redis Cluster of this machine.

  model     prints the model for one deployment
  table     prints it from 100k to 100M conversations, the other numbers fixed
  validate  measures it: calibrates the constants on two points, then predicts three others
            on the same cluster and measures them (the apps' traffic alone, then with one
            sweeper), and, at the largest point, runs --replicas sweepers that share the
            primaries (coordination.lease = true). Prints predicted against measured, each
            with its error. Takes about 3 minutes per phase (about 35 minutes in all).

The model (per second; N conversations, M members each, heartbeat period h, ttl T, a share v of
users vanishing per minute, P primaries, R replicas):

  heartbeats       W = N x M / h                       (one ZADD each, from the apps)
  deadline checks  C = N / I, where I = T - a is the time between two checks of a key and a the
                   age of its oldest heartbeat at its deadline: T mod h for one member (whose
                   heartbeats keep their phase), h x M / (M + 1) for several on their own phases
  evictions        E = N x M x v / 60
  Redis CPU        P x apps_fixed + W x heartbeat (the apps); P x sweeper_fixed + C x check
                   + E x evict (the sweeper; its commands' time, a lower bound); + W x notify with
                   KEA (En publishes only new keys, nothing measurable); spread over the P primaries
  sweeper CPU      P x sweeper_fixed_cpu + C x sweeper_check (+ W x sweeper_notice with KEA),
                   shared by min(R, P) replicas, each holding about P / R primaries (the busiest
                   holds ceil(P / R))
  sweeper memory   base + index_bytes per tracked key it holds + ring_mb per index ring (two
                   per primary it holds, one more with a ttl over 63 s)

usage:
  python3 benches/capacity.py model --conversations 1000000 [--members 1] [--heartbeat 20]
                                    [--ttl 45] [--vanish 0.01] [--primaries 1] [--replicas 1]
                                    [--notify En|KEA]
  python3 benches/capacity.py table [the same, but --conversations, --primaries, --replicas:
                                    the table sizes those]
  python3 benches/capacity.py validate [--calibrate 50000,200000] [--points 100000,300000,500000]
                                       [--primaries 3] [--replicas 3] [--skip-build] [--json FILE]
                                       [--replay FILE]
needs (validate): redis-server and redis-cli on PATH; cargo.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Measured on this machine (2 cores) by `validate`'s calibration on a 3-primary cluster: two
# points, 50,000 and 200,000 conversations x 1 user, heartbeat 20 s, ttl 45 s, En. Each cost is a
# fixed part per primary (what it costs at any rate: the cron, the wake-ups of both sides' ticks
# and batches) plus a part per operation, fitted through the two points. See docs/capacity.md.
CONSTANTS = {
    # Redis CPU per primary with the apps' traffic but no sweeper, beyond what scales with the
    # heartbeats, in cores; and per heartbeat (heartbeat.lua: TIME, ZADD GT, EXPIRE; one
    # member, sent one call at a time as a cluster needs), us.
    "apps_fixed_core": 0.0057,
    "heartbeat_us": 10.19,
    # The sweeper's commands' execution time in Redis (INFO commandstats), fixed per primary in
    # cores and per deadline check in us: what the model counts as the sweeper's Redis CPU, a
    # lower bound (reading, parsing and replying are not in it). Redis's whole CPU with the
    # sweeper minus without it drifted by more than the sweeper's share here (docs/capacity.md).
    # (Fitted at -0.013 % on the last run: nothing measurable.)
    "sweeper_fixed_command_core": 0.0,
    "check_command_us": 2.89,
    # Redis CPU per evicted member with its event, us (benches/bench.py: 7.3 us per evicting key).
    "evict_us": 7.3,
    # Redis CPU per write to publish its keyspace event with KEA and the sweeper subscribed, us
    # (steady.py --scenarios cost: +0.94 us).
    "notify_us": 0.94,
    # The sweeper's own CPU per primary it holds, at any rate, in cores; and per deadline check, us.
    "sweeper_fixed_core": 0.0021,
    "sweeper_check_us": 2.24,
    # The sweeper's own CPU per keyspace notice heard (KEA), us (steady.py live, before En).
    "sweeper_notice_us": 2.0,
    # The sweeper's RSS with nothing tracked, MB, and its index per tracked key, bytes
    # (steady.py --scenarios big: 71 bytes at most).
    "base_mb": 21.0,
    "index_bytes": 71.0,
    # Each index's ring of deadlines, MB: one per sweep on each primary held once it tracks a
    # key (the online and typing sweeps), and a second for a sweep whose ttl is over 63 s
    # (65,536 buckets of 12 bytes and their bitmap).
    "ring_mb": 0.79,
}


def check_interval(members, heartbeat, ttl):
    """Seconds between two deadline checks of one key (see the module's doc)."""
    if heartbeat >= ttl:
        return ttl  # Live users are evicted anyway: the apps are misconfigured.
    age = ttl % heartbeat if members == 1 else heartbeat * members / (members + 1)
    return ttl - age


def model(n, members, heartbeat, ttl, vanish, primaries, replicas, notify, c=CONSTANTS):
    """The model's figures for one deployment: rates per second, CPU in cores, memory in MB."""
    writes = n * members / heartbeat
    checks = n / check_interval(members, heartbeat, ttl)
    evictions = n * members * vanish / 60
    kea = notify.upper() == "KEA"
    redis = {
        "apps_fixed": primaries * c["apps_fixed_core"],
        "apps": writes * c["heartbeat_us"] / 1e6,
        "notifications": writes * c["notify_us"] / 1e6 if kea else 0.0,
        "sweeper_fixed": primaries * c["sweeper_fixed_command_core"],
        "checks": checks * c["check_command_us"] / 1e6,
        "evictions": evictions * c["evict_us"] / 1e6,
    }
    working = max(1, min(replicas, primaries))
    sweeper = (primaries * c["sweeper_fixed_core"] + checks * c["sweeper_check_us"] / 1e6
               + (writes * c["sweeper_notice_us"] / 1e6 if kea else 0.0))
    busiest = math.ceil(primaries / working) / primaries
    # The online and the typing sweep (5 s); a ttl past the fine ring adds the coarse one.
    rings = 2 + (1 if ttl > 63 else 0)
    return {
        "writes_per_s": writes, "checks_per_s": checks, "evictions_per_s": evictions,
        "redis_core_total": sum(redis.values()),
        "redis_core_per_primary": {k: v / primaries for k, v in redis.items()},
        "apps_core_total": redis["apps_fixed"] + redis["apps"],
        "sweeper_share_core_total": (redis["notifications"] + redis["sweeper_fixed"] + redis["checks"]
                                     + redis["evictions"]),
        "sweeper_command_core_total": redis["sweeper_fixed"] + redis["checks"],
        "sweeper_core_total": sweeper,
        "sweeper_core_busiest_replica": sweeper * busiest,
        "sweeper_rss_mb_busiest_replica": (c["base_mb"] + n * busiest * c["index_bytes"] / 1e6
                                           + math.ceil(primaries / working) * rings * c["ring_mb"]),
        "idle_replicas": max(0, replicas - primaries),
    }


def pct(x):
    return f"{x:.2%}"


def print_model(args):
    m = model(args.conversations, args.members, args.heartbeat, args.ttl, args.vanish, args.primaries,
              args.replicas, args.notify)
    p = m["redis_core_per_primary"]
    print(f"{args.conversations:,.0f} conversations x {args.members} members, heartbeat {args.heartbeat:g} s, "
          f"ttl {args.ttl:g} s, {args.vanish:.1%} vanishing a minute, {args.primaries} primaries, "
          f"{args.replicas} replicas, notify-keyspace-events {args.notify}")
    print(f"  per second: {m['writes_per_s']:,.0f} heartbeats, {m['checks_per_s']:,.0f} deadline checks, "
          f"{m['evictions_per_s']:,.1f} evictions")
    print(f"  Redis CPU per primary: {pct(sum(p.values()))} of a core: the apps {pct(p['apps_fixed'] + p['apps'])}, "
          f"notifications {pct(p['notifications'])}, the sweeper's fixed part {pct(p['sweeper_fixed'])}, "
          f"checks {pct(p['checks'])}, evictions {pct(p['evictions'])}")
    print(f"  sweeper: {pct(m['sweeper_core_total'])} of a core in all; the busiest replica "
          f"{pct(m['sweeper_core_busiest_replica'])} and {m['sweeper_rss_mb_busiest_replica']:,.0f} MB")
    if m["idle_replicas"]:
        print(f"  {m['idle_replicas']} replicas stand by: leases are per primary")
    if m["sweeper_core_busiest_replica"] > 0.7:
        print("  the busiest replica needs over 70% of a core (its runtime runs on one): add primaries "
              "and replicas")


def print_table(args):
    print(f"{args.members} members, heartbeat {args.heartbeat:g} s, ttl {args.ttl:g} s, {args.vanish:.1%} "
          f"vanishing a minute, notify-keyspace-events {args.notify}; primaries so that the apps stay "
          f"under {APPS_PER_PRIMARY:.0%} of a core each, replicas so that each needs under "
          f"{SWEEPER_PER_REPLICA:.0%} of a core (2 at least, for a standby)")
    print("| conversations | primaries | replicas | heartbeats/s | checks/s | Redis per primary: the apps | "
          "the sweeper | the busiest replica: CPU | RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000, 30_000_000, 100_000_000):
        primaries, replicas = sizing(n, args)
        m = model(n, args.members, args.heartbeat, args.ttl, args.vanish, primaries, replicas, args.notify)
        print(f"| {n:,} | {primaries} | {replicas} | {m['writes_per_s']:,.0f} | {m['checks_per_s']:,.0f} | "
              f"{pct(m['apps_core_total'] / primaries)} | {pct(m['sweeper_share_core_total'] / primaries)} | "
              f"{pct(m['sweeper_core_busiest_replica'])} | {m['sweeper_rss_mb_busiest_replica']:,.0f} MB |")


# The table's sizing: the apps' share of each primary, and each replica's CPU, at most.
APPS_PER_PRIMARY = 0.5
SWEEPER_PER_REPLICA = 0.5


def sizing(n, args):
    """Primaries and replicas for `n` conversations under the table's bounds."""
    primaries = 1
    while model(n, args.members, args.heartbeat, args.ttl, args.vanish, primaries, 1,
                args.notify)["apps_core_total"] / primaries > APPS_PER_PRIMARY:
        primaries += 1
    replicas = 2
    while replicas < primaries and model(n, args.members, args.heartbeat, args.ttl, args.vanish, primaries,
                                         replicas, args.notify)["sweeper_core_busiest_replica"] > SWEEPER_PER_REPLICA:
        replicas += 1
    return primaries, replicas


# ---- validation -------------------------------------------------------------------------------

HEARTBEAT, TTL, VANISH = 20.0, 45.0, 0.01
SWEEPS = "[sweeps.typing]\nenabled = false\n"
# Per phase: the simulator runs DURATION s then GRACE; the window starts once the first ttl
# has passed (every key checked once at least) and ends before the simulator's end.
DURATION, WARMUP, WINDOW, GRACE = 110, 55.0, 45, "50s"


class Replicas:
    """Several daemons as one, for steady.Window: CPU summed, metrics summed."""

    def __init__(self, daemons):
        self.daemons = daemons

    def cpu(self):
        return sum(d.cpu() for d in self.daemons)

    def metric(self, name):
        return sum(d.metric(name) for d in self.daemons)

    def switches(self):
        return sum(d.switches() for d in self.daemons)

    def histogram(self, name):
        """The daemons' cumulative buckets, summed bucket by bucket."""
        buckets = {}
        for d in self.daemons:
            for le, count in d.histogram(name):
                buckets[le] = buckets.get(le, 0.0) + count
        return sorted(buckets.items())


# The apps' and the simulator's commands, the heartbeat script's inner ones too (Redis counts
# them on their own as well as in EVALSHA's time), and TIME, which both send (the sweeper's
# costs nothing to speak of); every other is the sweeper's.
APPS_COMMANDS = {"evalsha", "eval", "zadd", "ttl", "expire", "script|load", "script", "zscore", "info", "time",
                 "del", "psubscribe",
                 "client|setname", "client", "ping", "cluster|slots", "cluster", "hello", "config|set", "config",
                 "command", "command|docs", "readonly"}


def sim_args(n):
    return ["--conversations", str(n), "--users", "1", "--heartbeat", f"{HEARTBEAT:g}s",
            "--vanish-rate", str(VANISH), "--grace", GRACE]


def measure_point(work, cluster, n, replicas=1, alone=None):
    """The apps alone (unless given, from an earlier phase), then with `replicas` sweepers (En):
    Redis's CPU, the sweepers' own, their checks, RSS, and the simulator's verdicts."""
    from common import Daemon, commandstats, free_port
    from steady import Window, config, run_phase, simulate
    sweeps = cluster.toml + SWEEPS
    if alone is None:
        alone = run_phase(f"{n}-alone", work, cluster, sweeps, None, sim_args(n), DURATION, WINDOW, warmup=WARMUP,
                          flags="")
    stats = {}
    threading.Thread(target=commandstats, args=(cluster.nodes, WARMUP, WINDOW, stats), daemon=True).start()
    if replicas == 1:
        swept = run_phase(f"{n}-swept", work, cluster, sweeps, "", sim_args(n), DURATION, WINDOW, warmup=WARMUP,
                          flags="En")
        swept["per_replica_core"] = [swept["sweeper_core"]]
    else:
        cluster.cli("CONFIG", "SET", "notify-keyspace-events", "En")
        daemons = []
        # Stopped however the phase ends: a daemon left behind outlives the cluster and spins.
        try:
            for i in range(replicas):
                port = free_port()
                cfg = config(work, f"{n}-replica{i}", sweeps, "[coordination]\nlease = true\n", port)
                daemons.append(Daemon(cfg, cluster, port))
            for d in daemons:
                d.wait_ready(120)
            group = Replicas(daemons)
            cpu0 = [d.cpu() for d in daemons]
            w = Window(cluster, group, WARMUP, WINDOW)
            report = simulate(config(work, f"{n}-replicas-sim", sweeps, "", free_port()), cluster,
                              [*sim_args(n), "--duration", f"{DURATION}s"])
            swept = {"phase": f"{n}-replicas", **w.get(), "report": report}
            seconds = swept["seconds"]
            # Over the whole run (the window's share is what Window gives in all).
            swept["per_replica_core_run"] = [(d.cpu() - c0) for d, c0 in zip(daemons, cpu0)]
            swept["leases_held"] = [d.metric("presence_sweeper_lease_held") for d in daemons]
            swept["sweeper_rss_mb"] = max(d.rss_mb() for d in daemons)
        finally:
            for d in daemons:
                d.stop()
        print(f"  {replicas} replicas: sweepers {swept['sweeper_core']:.2%} of a core in all over {seconds:.0f} s, "
              f"leases held {swept['leases_held']}; evictions {report['evictions']}, false "
              f"{report['false_evictions']}, duplicates {report['duplicate_events']}, missed "
              f"{report['missed_zombies']}", flush=True)
    swept["sweeper_redis_core"] = swept["redis_core"] - alone["redis_core"]
    swept["commandstats"] = stats
    swept["sweeper_command_core"], swept["sweeper_calls_per_check"] = sweeper_commands(swept)
    print(f"    the sweeper's commands: {swept['sweeper_command_core']:.2%} of a core in Redis's command time, "
          f"{swept['sweeper_calls_per_check']:.2f} calls per check", flush=True)
    return {"conversations": n, "alone": alone, "swept": swept}


IDLE_SECONDS = 15


def measure_idle(work, cluster):
    """Redis's CPU with nothing to do, then with an idle sweeper (no presence keys): the model's
    constant terms."""
    from common import Daemon, free_port
    from steady import config
    r0, t0 = cluster.cpu(), time.time()
    time.sleep(IDLE_SECONDS)
    redis_idle = (cluster.cpu() - r0) / (time.time() - t0)
    port = free_port()
    daemon = Daemon(config(work, "idle", cluster.toml + SWEEPS, "", port), cluster, port)
    daemon.wait_ready(60)
    time.sleep(2)
    r0, d0, t0 = cluster.cpu(), daemon.cpu(), time.time()
    time.sleep(IDLE_SECONDS)
    seconds = time.time() - t0
    idle = {"redis_core": redis_idle, "redis_core_with_sweeper": (cluster.cpu() - r0) / seconds,
            "sweeper_core": (daemon.cpu() - d0) / seconds, "sweeper_rss_mb": daemon.rss_mb()}
    daemon.stop()
    print(f"  idle: Redis {idle['redis_core']:.2%} of a core ({idle['redis_core_with_sweeper']:.2%} with an idle "
          f"sweeper), the sweeper {idle['sweeper_core']:.2%} and {idle['sweeper_rss_mb']:.1f} MB", flush=True)
    return idle


def fit(x1, y1, x2, y2):
    """(intercept, slope) of the line through two points."""
    if x1 == x2:
        raise SystemExit("the two calibration points measured the same rate: give two different numbers of "
                         "conversations, and a --duration over 90 s so that the window holds deadline checks")
    slope = (y2 - y1) / (x2 - x1)
    return y1 - slope * x1, slope


def constants_from(idle, low, high, primaries):
    """The constants two calibration points give, each cost a fixed part plus a part per
    operation (the others stay as measured elsewhere, and say where)."""
    c = dict(CONSTANTS)
    c["base_mb"] = idle["sweeper_rss_mb"]

    def line(point_x, point_y):
        return fit(point_x(low), point_y(low), point_x(high), point_y(high))

    writes = lambda p: p["conversations"] / HEARTBEAT  # noqa: E731
    checks = lambda p: p["swept"]["checks_per_s"]  # noqa: E731
    fixed, per = line(writes, lambda p: p["alone"]["redis_core"])
    c["apps_fixed_core"], c["heartbeat_us"] = fixed / primaries, per * 1e6
    fixed, per = line(checks, lambda p: p["swept"]["sweeper_command_core"])
    c["sweeper_fixed_command_core"], c["check_command_us"] = fixed / primaries, per * 1e6
    fixed, per = line(checks, lambda p: p["swept"]["sweeper_core"])
    c["sweeper_fixed_core"], c["sweeper_check_us"] = fixed / primaries, per * 1e6
    return c


def compare(point, c, primaries, replicas=1):
    n = point["conversations"]
    m = model(n, 1, HEARTBEAT, TTL, VANISH, primaries, replicas, "En", c)
    swept = point["swept"]
    pairs = [
        ("Redis CPU, apps alone (all primaries)", m["apps_core_total"], point["alone"]["redis_core"]),
        ("Redis CPU with the sweeper (all primaries)", m["redis_core_total"], swept["redis_core"]),
        ("the sweeper's Redis share, by difference", m["sweeper_share_core_total"], swept["sweeper_redis_core"]),
        ("the sweeper's commands' time in Redis", m["sweeper_command_core_total"], swept["sweeper_command_core"]),
        ("deadline checks/s", m["checks_per_s"], swept["checks_per_s"]),
        ("the sweeper's own CPU (all replicas)", m["sweeper_core_total"], swept["sweeper_core"]),
        ("the busiest replica's RSS, MB", m["sweeper_rss_mb_busiest_replica"], swept.get("sweeper_rss_mb", 0.0)),
    ]
    rows = []
    for what, predicted, measured in pairs:
        err = (predicted - measured) / measured if measured else float("nan")
        rows.append({"what": what, "model": predicted, "measured": measured, "error": err})
    return rows


def show(value, what):
    if "checks" in what:
        return f"{value:,.0f}"
    if "MB" in what:
        return f"{value:,.1f}"
    return f"{value:.2%}"


def validate(args):
    from common import Cluster, build
    global DURATION, WARMUP, WINDOW
    if args.replay:
        with open(args.replay) as f:
            report(json.load(f))
        return
    if args.duration != DURATION:
        DURATION, WARMUP, WINDOW = args.duration, args.duration / 2, int(args.duration * 0.4)
    cal_points = [int(p) for p in args.calibrate.split(",")]
    if len(cal_points) != 2:
        raise SystemExit("--calibrate takes two numbers of conversations")
    if not args.skip_build:
        build()
    work = tempfile.mkdtemp(prefix="capacity-")
    results = {"primaries": args.primaries, "replica_count": args.replicas, "points": []}
    try:
        cluster = Cluster(work, primaries=args.primaries)
        try:
            print(f"calibration: {cal_points[0]:,} and {cal_points[1]:,} conversations on {args.primaries} "
                  f"primaries", flush=True)
            results["idle"] = measure_idle(work, cluster)
            results["calibration"] = [measure_point(work, cluster, n) for n in cal_points]
            for n in (int(p) for p in args.points.split(",")):
                print(f"point: {n:,} conversations", flush=True)
                results["points"].append(measure_point(work, cluster, n))
            if args.replicas > 1:
                n = results["points"][-1]["conversations"]
                print(f"replicas: {n:,} conversations, {args.replicas} sweepers sharing the primaries", flush=True)
                results["replicas"] = measure_point(work, cluster, n, replicas=args.replicas,
                                                    alone=results["points"][-1]["alone"])
        finally:
            cluster.stop()
            # Whatever was measured is kept, even when a later phase failed.
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results)


def sweeper_commands(swept):
    """The sweeper's commands' execution time in Redis (cores) and calls per check, from a
    phase's commandstats."""
    stats = swept.get("commandstats") or {}
    ours = {k: v for k, v in stats.items() if k not in APPS_COMMANDS}
    core = sum(v["usec_per_s"] for v in ours.values()) / 1e6
    return core, sum(v["calls_per_s"] for v in ours.values()) / (swept["checks_per_s"] or 1.0)


def report(results):
    """Fits the constants to the calibration points and compares the model with every other
    point; prints both as tables."""
    primaries = results["primaries"]
    for point in [*results["calibration"], *results["points"], *([results["replicas"]] if "replicas" in results
                                                                   else [])]:
        swept = point["swept"]
        swept["sweeper_command_core"], swept["sweeper_calls_per_check"] = sweeper_commands(swept)
    c = constants_from(results["idle"], *results["calibration"], primaries)
    results["constants"] = c
    print()
    print("| constant | value |")
    print("|---|---|")
    for k, v in c.items():
        print(f"| `{k}` | {v:.4g} |")
    print()
    print("| conversations | what | model | measured | error |")
    print("|---|---|---|---|---|")
    for point in results["points"]:
        point["rows"] = compare(point, c, primaries)
        for r in point["rows"]:
            print(f"| {point['conversations']:,} | {r['what']} | {show(r['model'], r['what'])} | "
                  f"{show(r['measured'], r['what'])} | {r['error']:+.0%} |")
    if "replicas" in results:
        one = results["points"][-1]["swept"]
        many = results["replicas"]["swept"]
        print()
        print("| sweepers | their CPU in all | Redis share | the sweeper's commands in Redis | checks/s | "
              "lag p99 | false / duplicate / missed |")
        print("|---|---|---|---|---|---|---|")
        for label, s in (("1", one), (str(results.get("replica_count", "several")), many)):
            r = s["report"]
            p99 = (r.get("eviction_lag_seconds") or {}).get("p99")
            print(f"| {label} | {s['sweeper_core']:.2%} | {s['sweeper_redis_core']:.2%} | "
                  f"{s['sweeper_command_core']:.2%} | {s['checks_per_s']:,.0f} | "
                  f"{'-' if p99 is None else f'{p99 * 1000:.0f} ms'} | {r['false_evictions']} / "
                  f"{r['duplicate_events']} / {r['missed_zombies']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("model", "table"):
        p = sub.add_parser(name)
        if name == "model":
            p.add_argument("--conversations", type=float, required=True)
        p.add_argument("--members", type=int, default=1)
        p.add_argument("--heartbeat", type=float, default=20.0, help="seconds")
        p.add_argument("--ttl", type=float, default=45.0, help="seconds")
        p.add_argument("--vanish", type=float, default=0.01, help="share of users vanishing a minute")
        p.add_argument("--primaries", type=int, default=1)
        p.add_argument("--replicas", type=int, default=1)
        # Without notifications the sweeper walks every key on each schedule: not modelled.
        p.add_argument("--notify", default="En", choices=["En", "KEA"])
    v = sub.add_parser("validate")
    v.add_argument("--calibrate", default="50000,200000", help="two numbers of conversations")
    v.add_argument("--points", default="100000,300000,500000")
    v.add_argument("--primaries", type=int, default=3)
    v.add_argument("--replicas", type=int, default=3)
    v.add_argument("--duration", type=int, default=DURATION,
                   help="seconds per phase before the grace (a shorter one is a smoke test: "
                        "under 60 s the window holds no deadline checks)")
    v.add_argument("--skip-build", action="store_true")
    v.add_argument("--json", help="write every measurement here")
    v.add_argument("--replay", help="fit and compare again from a --json file, measuring nothing")
    args = ap.parse_args()
    for name in ("conversations", "members", "primaries", "replicas"):
        if getattr(args, name, 1) < 1:
            ap.error(f"--{name} must be at least 1")
    if getattr(args, "heartbeat", 1) <= 0 or getattr(args, "ttl", 1) <= 0:
        ap.error("--heartbeat and --ttl must be positive")
    if not 0 <= getattr(args, "vanish", 0) <= 1:
        ap.error("--vanish is a share of users a minute, from 0 to 1")
    if args.command == "validate" and args.primaries < 3:
        ap.error("--primaries: a Redis Cluster needs 3 at least")
    if args.command != "validate" and args.heartbeat >= args.ttl:
        print("warning: the heartbeat period is not shorter than the ttl: live users would be evicted",
              file=sys.stderr)
    {"model": print_model, "table": print_table, "validate": validate}[args.command](args)


if __name__ == "__main__":
    main()
