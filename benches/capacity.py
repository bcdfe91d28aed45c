#!/usr/bin/env python3
"""The capacity model of docs/capacity.md: what presence costs Redis and presence-sweeper, per
primary and per replica, from a deployment's own numbers; and its validation against measured
points on a Redis Cluster of this machine.

  model     prints the model for one deployment
  table     prints it from 100k to 100M conversations, the other numbers fixed
  validate  measures it: calibrates the constants on a small point, then predicts larger points
            on the same cluster and measures them (the apps' traffic alone, then with one
            sweeper), and, at the largest point, runs --replicas sweepers that share the
            primaries (coordination.lease = true). Prints predicted against measured, each
            with its error. Takes about 3 minutes per phase (25 to 30 minutes in all).

The model (per second; N conversations, M members each, heartbeat period h, ttl T, a share v of
users vanishing per minute, P primaries, R replicas):

  heartbeats       W = N x M / h                       (one ZADD each, from the apps)
  deadline checks  C = N / I, where I = T - a is the time between two checks of a key and a the
                   age of its oldest heartbeat at its deadline: T mod h for one member (whose
                   heartbeats keep their phase), h x M / (M + 1) for several on their own phases
  evictions        E = N x M x v / 60
  Redis CPU        P x idle + W x heartbeat + C x check + E x evict (+ W x notify with KEA;
                   En publishes only new keys, nothing measurable), spread over the P primaries
  sweeper CPU      C x sweeper_check (+ W x sweeper_notice with KEA) + idle per working replica,
                   shared by min(R, P) replicas, each holding about P / R primaries (the busiest
                   holds ceil(P / R))
  sweeper memory   base + index_bytes per tracked key it holds

usage:
  python3 benches/capacity.py model --conversations 1000000 [--members 1] [--heartbeat 20]
                                    [--ttl 45] [--vanish 0.01] [--primaries 3] [--replicas 3]
                                    [--notify En|KEA|off]
  python3 benches/capacity.py table [the same, but --conversations]
  python3 benches/capacity.py validate [--calibrate 50000] [--points 100000,300000,600000]
                                       [--primaries 3] [--replicas 3] [--skip-build] [--json FILE]
needs (validate): redis-server and redis-cli on PATH; cargo.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Measured on this machine (2 cores) by `validate`'s calibration: 50,000 conversations x 1 user
# on a 3-primary cluster, heartbeat 20 s, ttl 45 s, En. See docs/capacity.md for the run.
CONSTANTS = {
    # Redis CPU per heartbeat (heartbeat.lua: TIME, ZADD GT, EXPIRE; one member), us.
    "heartbeat_us": 9.0,
    # Redis CPU per deadline check, us (the sweeper's share over its checks).
    "check_us": 3.0,
    # Redis CPU per evicted member with its event, us (benches/bench.py: 7.3 us per evicting key).
    "evict_us": 7.3,
    # Redis CPU per write to publish its keyspace event with KEA and the sweeper subscribed, us
    # (steady.py --scenarios cost: +0.94 us).
    "notify_us": 0.94,
    # The sweeper's own CPU per deadline check, us.
    "sweeper_check_us": 2.5,
    # The sweeper's own CPU per keyspace notice heard (KEA), us (steady.py live before En).
    "sweeper_notice_us": 2.0,
    # Redis CPU of an idle primary (its cron), what an idle sweeper adds to it (its canary,
    # leases, pings), and the sweeper's own CPU with nothing to check; in cores.
    "idle_primary_core": 0.003,
    "sweeper_idle_redis_core": 0.001,
    "sweeper_idle_core": 0.002,
    # The sweeper's RSS with nothing tracked, MB, and its index per tracked key, bytes
    # (steady.py --scenarios big: 104 bytes at most).
    "base_mb": 18.0,
    "index_bytes": 104.0,
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
        "idle": primaries * c["idle_primary_core"],
        "apps": writes * c["heartbeat_us"] / 1e6,
        "notifications": writes * c["notify_us"] / 1e6 if kea else 0.0,
        "checks": checks * c["check_us"] / 1e6,
        "evictions": evictions * c["evict_us"] / 1e6,
        "sweeper_idle": primaries * c["sweeper_idle_redis_core"],
    }
    working = max(1, min(replicas, primaries))
    sweeper = (checks * c["sweeper_check_us"] / 1e6 + (writes * c["sweeper_notice_us"] / 1e6 if kea else 0.0)
               + working * c["sweeper_idle_core"])
    busiest = math.ceil(primaries / working) / primaries
    return {
        "writes_per_s": writes, "checks_per_s": checks, "evictions_per_s": evictions,
        "redis_core_total": sum(redis.values()),
        "redis_core_per_primary": {k: v / primaries for k, v in redis.items()},
        "sweeper_share_core_total": (redis["notifications"] + redis["checks"] + redis["evictions"]
                                     + redis["sweeper_idle"]),
        "apps_core_total": redis["idle"] + redis["apps"],
        "sweeper_core_total": sweeper,
        "sweeper_core_busiest_replica": sweeper * busiest,
        "sweeper_rss_mb_busiest_replica": c["base_mb"] + n * busiest * c["index_bytes"] / 1e6,
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
    print(f"  Redis CPU per primary: {pct(sum(p.values()))} of a core: idle {pct(p['idle'])}, apps {pct(p['apps'])}, "
          f"notifications {pct(p['notifications'])}, checks {pct(p['checks'])}, evictions {pct(p['evictions'])}, "
          f"the sweeper's upkeep {pct(p['sweeper_idle'])}")
    print(f"  sweeper: {pct(m['sweeper_core_total'])} of a core in all; the busiest replica "
          f"{pct(m['sweeper_core_busiest_replica'])} and {m['sweeper_rss_mb_busiest_replica']:,.0f} MB")
    if m["idle_replicas"]:
        print(f"  {m['idle_replicas']} replicas stand by: leases are per primary")
    if m["sweeper_core_busiest_replica"] > 0.7:
        print("  the busiest replica needs over 70% of a core (its runtime runs on one): add primaries "
              "and replicas")


def print_table(args):
    print(f"{args.members} members, heartbeat {args.heartbeat:g} s, ttl {args.ttl:g} s, {args.vanish:.1%} "
          f"vanishing a minute, notify-keyspace-events {args.notify}")
    print("| conversations | primaries | replicas | heartbeats/s | checks/s | Redis per primary "
          "(apps + sweeper) | sweeper's share per primary | busiest replica CPU | busiest replica RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, primaries in [(100_000, 1), (1_000_000, 1), (1_000_000, 3), (10_000_000, 10),
                         (30_000_000, 30), (100_000_000, 100)]:
        replicas = min(primaries, 3) if primaries < 10 else primaries // 5
        m = model(n, args.members, args.heartbeat, args.ttl, args.vanish, primaries, replicas, args.notify)
        p = m["redis_core_per_primary"]
        print(f"| {n:,} | {primaries} | {replicas} | {m['writes_per_s']:,.0f} | {m['checks_per_s']:,.0f} | "
              f"{pct(sum(p.values()))} | {pct(m['sweeper_share_core_total'] / primaries)} | "
              f"{pct(m['sweeper_core_busiest_replica'])} | {m['sweeper_rss_mb_busiest_replica']:,.0f} MB |")


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


def sim_args(n):
    return ["--conversations", str(n), "--users", "1", "--heartbeat", f"{HEARTBEAT:g}s",
            "--vanish-rate", str(VANISH), "--grace", GRACE]


def measure_point(work, cluster, n, replicas=1):
    """The apps alone, then with `replicas` sweepers (En): Redis's CPU, the sweepers' own, their
    checks, RSS, and the simulator's verdicts."""
    from common import Daemon, free_port
    from steady import Window, config, run_phase, simulate
    sweeps = cluster.toml + SWEEPS
    alone = run_phase(f"{n}-alone", work, cluster, sweeps, None, sim_args(n), DURATION, WINDOW, warmup=WARMUP,
                      flags="")
    if replicas == 1:
        swept = run_phase(f"{n}-swept", work, cluster, sweeps, "", sim_args(n), DURATION, WINDOW, warmup=WARMUP,
                          flags="En")
        swept["per_replica_core"] = [swept["sweeper_core"]]
    else:
        cluster.cli("CONFIG", "SET", "notify-keyspace-events", "En")
        daemons = []
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
        for d in daemons:
            d.stop()
        print(f"  {replicas} replicas: sweepers {swept['sweeper_core']:.2%} of a core in all over {seconds:.0f} s, "
              f"leases held {swept['leases_held']}; evictions {report['evictions']}, false "
              f"{report['false_evictions']}, duplicates {report['duplicate_events']}, missed "
              f"{report['missed_zombies']}", flush=True)
    swept["sweeper_redis_core"] = swept["redis_core"] - alone["redis_core"]
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


def constants_from(idle, point, primaries):
    """The constants the idle cluster and a calibration point give (the others stay as measured
    elsewhere, and say where)."""
    c = dict(CONSTANTS)
    c["idle_primary_core"] = idle["redis_core"] / primaries
    c["sweeper_idle_redis_core"] = max(0.0, idle["redis_core_with_sweeper"] - idle["redis_core"]) / primaries
    c["sweeper_idle_core"] = idle["sweeper_core"]
    c["base_mb"] = idle["sweeper_rss_mb"]
    n = point["conversations"]
    writes = n / HEARTBEAT
    alone, swept = point["alone"], point["swept"]
    c["heartbeat_us"] = max(0.0, alone["redis_core"] - idle["redis_core"]) / writes * 1e6
    checks = swept["checks_per_s"] or 1.0
    evictions = n * VANISH / 60
    share = swept["redis_core"] - alone["redis_core"] - c["sweeper_idle_redis_core"] * primaries
    c["check_us"] = max(0.0, share - evictions * c["evict_us"] / 1e6) / checks * 1e6
    c["sweeper_check_us"] = max(0.0, swept["sweeper_core"] - idle["sweeper_core"]) / checks * 1e6
    return c


def compare(point, c, primaries, replicas=1):
    n = point["conversations"]
    m = model(n, 1, HEARTBEAT, TTL, VANISH, primaries, replicas, "En", c)
    swept = point["swept"]
    pairs = [
        ("Redis CPU, apps alone (all primaries)", m["apps_core_total"], point["alone"]["redis_core"]),
        ("Redis CPU with the sweeper (all primaries)", m["redis_core_total"], swept["redis_core"]),
        ("the sweeper's Redis share", m["sweeper_share_core_total"], swept["sweeper_redis_core"]),
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
    if args.duration != DURATION:
        DURATION, WARMUP, WINDOW = args.duration, args.duration / 2, int(args.duration * 0.4)
    if not args.skip_build:
        build()
    work = tempfile.mkdtemp(prefix="capacity-")
    points = [int(p) for p in args.points.split(",")]
    results = {"primaries": args.primaries, "points": []}
    try:
        cluster = Cluster(work, primaries=args.primaries)
        try:
            print(f"calibration: {args.calibrate:,} conversations on {args.primaries} primaries", flush=True)
            idle = measure_idle(work, cluster)
            cal = measure_point(work, cluster, args.calibrate)
            c = constants_from(idle, cal, args.primaries)
            results["idle"] = idle
            results["calibration"] = cal
            results["constants"] = c
            print("  constants: " + ", ".join(f"{k} {v:.3g}" for k, v in c.items()), flush=True)
            for n in points:
                print(f"point: {n:,} conversations", flush=True)
                point = measure_point(work, cluster, n)
                point["rows"] = compare(point, c, args.primaries)
                results["points"].append(point)
                for r in point["rows"]:
                    print(f"    {r['what']}: model {show(r['model'], r['what'])}, measured "
                          f"{show(r['measured'], r['what'])} ({r['error']:+.0%})", flush=True)
            if args.replicas > 1:
                n = points[-1]
                print(f"replicas: {n:,} conversations, {args.replicas} sweepers sharing the primaries", flush=True)
                shared = measure_point(work, cluster, n, replicas=args.replicas)
                results["replicas"] = shared
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("| conversations | what | model | measured | error |")
    print("|---|---|---|---|---|")
    for point in results["points"]:
        for r in point["rows"]:
            print(f"| {point['conversations']:,} | {r['what']} | {show(r['model'], r['what'])} | "
                  f"{show(r['measured'], r['what'])} | {r['error']:+.0%} |")
    if "replicas" in results:
        one = results["points"][-1]["swept"]
        many = results["replicas"]["swept"]
        print()
        print("| sweepers | their CPU in all | Redis share | checks/s | lag p99 | false / duplicate / missed |")
        print("|---|---|---|---|---|---|")
        for label, s in (("1", one), (str(args.replicas), many)):
            r = s["report"]
            p99 = (r.get("eviction_lag_seconds") or {}).get("p99")
            print(f"| {label} | {s['sweeper_core']:.2%} | {s['sweeper_redis_core']:.2%} | {s['checks_per_s']:,.0f} | "
                  f"{'-' if p99 is None else f'{p99 * 1000:.0f} ms'} | {r['false_evictions']} / "
                  f"{r['duplicate_events']} / {r['missed_zombies']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


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
        p.add_argument("--notify", default="En", choices=["En", "KEA", "off"])
    v = sub.add_parser("validate")
    v.add_argument("--calibrate", type=int, default=50_000)
    v.add_argument("--points", default="100000,300000,600000")
    v.add_argument("--primaries", type=int, default=3)
    v.add_argument("--replicas", type=int, default=3)
    v.add_argument("--duration", type=int, default=DURATION,
                   help="seconds per phase before the grace (a shorter one is a smoke test: "
                        "under 60 s the window holds no deadline checks)")
    v.add_argument("--skip-build", action="store_true")
    v.add_argument("--json")
    args = ap.parse_args()
    for name in ("conversations", "members", "primaries", "replicas"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) < 1:
            ap.error(f"--{name} must be at least 1")
    if getattr(args, "heartbeat", 1) <= 0 or getattr(args, "ttl", 1) <= 0:
        ap.error("--heartbeat and --ttl must be positive")
    {"model": print_model, "table": print_table, "validate": validate}[args.command](args)


if __name__ == "__main__":
    main()
