#!/usr/bin/env python3
"""Replicas or threads: whether sweeper replicas sharing a cluster's primaries keep the work off
one core. A 3-primary Redis Cluster (new-key notifications, `En`) carries scenario `live`
(--conversations conversations, one user each heartbeating every 20 s, ttl 45 s, 1 % vanishing),
swept in two phases, one run:

  one replica     a single daemon holds every primary's lease: its one loop thread runs all
                  three primaries' work;
  three replicas  three daemons with coordination.lease = true: each holds one primary.

Each phase reports every daemon's CPU (from /proc over the same window), Redis's CPU summed over
the primaries, the leases each holds, and the simulator's verdicts (lag p99; 0 false, duplicate or
missed is the bar). If three replicas each take about a third of one replica's CPU, replicas
spread the primaries' work over cores as a multi-threaded runtime would.

usage: python3 benches/replicas.py [--conversations 600000] [--skip-build] [--json FILE]
needs: redis-server and redis-cli on PATH; cargo.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Daemon, Redis, build, free_port, lag_summary, write  # noqa: E402
from steady import fmt, simulate  # noqa: E402


def cluster(work):
    nodes = [Redis(tempfile.mkdtemp(dir=work), port=free_port(below=55536),
                   extra=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                          "--notify-keyspace-events", "En")) for _ in range(3)]
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
                    "--cluster-yes"], check=True, capture_output=True)
    for _ in range(300):
        if all(n.info("cluster").get("cluster_state") == "ok" for n in nodes):
            return nodes
        time.sleep(0.1)
    raise SystemExit("the cluster never became ok")


def config(work, name, nodes, http_port):
    seeds = ", ".join(f'"redis://127.0.0.1:{n.port}"' for n in nodes)
    return write(os.path.join(work, f"{name}.toml"),
                 f'[http]\nlisten = "127.0.0.1:{http_port}"\n[log]\nlevel = "warn"\n'
                 f'[redis]\nmode = "cluster"\nnodes = [{seeds}]\n'
                 '[coordination]\nlease = true\n[sweeps.typing]\nenabled = false\n')


def phase(label, work, nodes, replicas, sim, duration, warmup, window):
    print(f"  {label}", flush=True)
    daemons = []
    for i in range(replicas):
        port = free_port()
        daemons.append(Daemon(config(work, f"{label}-{i}", nodes, port), nodes[0], port))
    for d in daemons:
        d.wait_ready(120)
    # Every primary's lease held by someone, each replica its share.
    deadline = time.time() + 90
    while time.time() < deadline:
        held = [d.metric("presence_sweeper_lease_held") for d in daemons]
        if sum(held) == len(nodes) and max(held) - min(held) <= 1:
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"leases never settled: {held}")
    result = {}

    def measure():
        time.sleep(warmup)
        r0 = sum(n.cpu() for n in nodes)
        d0 = [d.cpu() for d in daemons]
        t0 = time.time()
        time.sleep(window)
        result["redis_cores"] = (sum(n.cpu() for n in nodes) - r0) / (time.time() - t0)
        result["daemon_cores"] = [(d.cpu() - c) / (time.time() - t0) for d, c in zip(daemons, d0)]

    m = threading.Thread(target=measure)
    m.start()
    cfg = config(work, f"{label}-sim", nodes, free_port())
    report = simulate(cfg, nodes[0], [*sim, "--duration", f"{duration}s"])
    m.join()
    result["leases"] = [d.metric("presence_sweeper_lease_held") for d in daemons]
    lags = [lag_summary(d.histogram("presence_sweeper_eviction_lag_seconds")) for d in daemons]
    for d in daemons:
        d.stop()
    result["report"] = report
    result["daemon_lag"] = lags
    cores = ", ".join(f"{c:.2%}" for c in result["daemon_cores"])
    print(f"    sweepers {cores} of a core (leases {result['leases']}); Redis {result['redis_cores']:.2%} "
          f"over 3 primaries; evictions {report['evictions']} (lag p99 "
          f"{fmt((report.get('eviction_lag_seconds') or {}).get('p99'))}); false {report['false_evictions']}, "
          f"duplicates {report['duplicate_events']}, missed {report['missed_zombies']}", flush=True)
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=600_000)
    ap.add_argument("--duration", type=int, default=150)
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.skip_build:
        build()
    work = tempfile.mkdtemp(prefix="presence-sweeper-replicas-")
    sim = ["--conversations", str(args.conversations), "--users", "1", "--heartbeat", "20s",
           "--vanish-rate", "0.01", "--grace", "60s"]
    rows = {}
    nodes = []
    try:
        nodes = cluster(work)
        print(f"scenario live on a 3-primary cluster, {args.conversations} conversations", flush=True)
        rows["one replica"] = phase("one-replica", work, nodes, 1, sim, args.duration, 60, 60)
        rows["three replicas"] = phase("three-replicas", work, nodes, 3, sim, args.duration, 60, 60)
        one = rows["one replica"]["daemon_cores"][0]
        three = rows["three replicas"]["daemon_cores"]
        print(f"one replica: {one:.2%} of a core; three: {', '.join(f'{c:.2%}' for c in three)} "
              f"({sum(three) / one:.2f}x the one's in all, the busiest {max(three) / one:.0%} of it)")
    finally:
        for n in nodes:
            n.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2, default=str)


if __name__ == "__main__":
    main()
