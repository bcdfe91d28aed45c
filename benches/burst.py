#!/usr/bin/env python3
"""A burst of new keys while the daemon gets little CPU: its peak memory, and how long until it
tracks every key (issue 18, point 7).

The burst: every app re-creates its keys at once. A writer process of its own sends `ZADD
presence:<n>:online` round-robin over --keys keys (each key is new at its first write) at
--rate writes/s for --seconds, pipelined over one connection; notifications on (`KEA`).

The daemon runs under a CPU limit, as a container's `resources.limits.cpu` would give it: a
cgroup v1 `cpu` group (cpu.cfs_quota_us 20000 of cpu.cfs_period_us 100000 for --cpu 0.2), or a
cgroup v2 group (cpu.max "20000 100000"), created here (as root) and removed at the end. Its
VmHWM (peak RSS) and VmRSS are read from /proc; tracked keys from its /metrics, against the presence keys in Redis.

    python3 benches/burst.py [--binary OLD_BUILD ...] [--cpu 0.2] [--keys 300000]

Each binary (the tree's release build, then every --binary) runs the same burst on a fresh
Redis, one after the other, and a table compares them.
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BIN, Daemon, Redis, free_port, parse_and_build, write  # noqa: E402

V1 = "/sys/fs/cgroup/cpu"
V2 = "/sys/fs/cgroup"


class CpuLimit:
    """A cgroup that holds a process to `cpu` of one core."""

    def __init__(self, cpu):
        name = f"presence-sweeper-burst-{os.getpid()}"
        period = 100000
        quota = int(cpu * period)
        if os.path.exists(os.path.join(V1, "cpu.cfs_quota_us")):
            self.path = os.path.join(V1, name)
            os.makedirs(self.path, exist_ok=True)
            write(os.path.join(self.path, "cpu.cfs_period_us"), str(period))
            write(os.path.join(self.path, "cpu.cfs_quota_us"), str(quota))
        elif os.path.exists(os.path.join(V2, "cgroup.controllers")):
            self.path = os.path.join(V2, name)
            os.makedirs(self.path, exist_ok=True)
            write(os.path.join(self.path, "cpu.max"), f"{quota} {period}")
        else:
            raise SystemExit("no cgroup cpu controller here (cgroup v1 cpu or v2 cpu.max)")

    def wrapper(self, binary, work):
        """A script that joins the group, then runs `binary`: every thread it starts is held."""
        path = os.path.join(work, f"limited-{abs(hash(binary))}.sh")
        write(path, f'#!/bin/sh\necho $$ > {self.path}/cgroup.procs\nexec {binary} "$@"\n')
        os.chmod(path, 0o755)
        return path

    def throttled(self):
        """(periods throttled, periods) from the group's cpu.stat: proof the limit bound."""
        try:
            with open(os.path.join(self.path, "cpu.stat")) as f:
                stat = dict(line.split() for line in f if line.strip())
            return int(stat.get("nr_throttled", 0)), int(stat.get("nr_periods", 0))
        except OSError:
            return None

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def writer(port, keys, rate, seconds, score):
    """ZADDs round-robin over `keys` keys at `rate`/s for `seconds`, pipelined; replies drained by a
    thread. Returns (writes, seconds taken)."""
    batch = 1000
    cmds = []
    for i in range(0, keys, batch):
        chunk = []
        for k in range(i, min(i + batch, keys)):
            key = f"presence:{k}:online".encode()
            member = f"u{k}".encode()
            s = str(score).encode()
            chunk.append(b"*4\r\n$4\r\nZADD\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                         % (len(key), key, len(s), s, len(member), member))
        cmds.append((b"".join(chunk), len(chunk)))
    total = int(rate * seconds)
    sock = socket.create_connection(("127.0.0.1", port))
    expected = [0]
    done = threading.Event()

    def drain():
        got = 0
        while not done.is_set() or got < expected[0]:
            data = sock.recv(1 << 20)
            if not data:
                return
            got += data.count(b"\r\n")

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    sent, i, t0 = 0, 0, time.time()
    while sent < total:
        data, n = cmds[i % len(cmds)]
        i += 1
        sock.sendall(data)
        sent += n
        expected[0] = sent
        ahead = t0 + sent / rate - time.time()
        if ahead > 0:
            time.sleep(ahead)
    elapsed = time.time() - t0
    done.set()
    # Redis may still be answering the last writes; the daemon is watched meanwhile.
    t.join(5)
    sock.close()
    return sent, elapsed


def run(binary, label, args, work, limit):
    redis = Redis(tempfile.mkdtemp(dir=work), extra=["--notify-keyspace-events", "KEA"])
    port = free_port()
    cfg = write(os.path.join(work, f"{label}.toml"),
                f'[http]\nlisten = "127.0.0.1:{port}"\n[log]\nlevel = "warn"\n'
                '[sweeps.typing]\nenabled = false\n[sweeps.online]\nttl = "1h"\n')
    daemon = Daemon(cfg, redis, port, binary=limit.wrapper(binary, work))
    try:
        daemon.wait_ready(120)
        time.sleep(2)
        base = daemon.rss_mb()
        samples = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.time(), daemon.rss_mb()))
                time.sleep(0.2)

        threading.Thread(target=sample, daemon=True).start()
        t0 = time.time()
        writes, wrote_s = writer(redis.port, args.keys, args.rate, args.seconds, int(time.time()))
        end = t0 + wrote_s
        # The presence keys alone: the daemon's own canary key is no presence key.
        keys = int(redis.cli("DBSIZE")) - len(redis.cli("KEYS", "presence-sweeper:*").split())
        tracked_at = None
        while time.time() < end + args.grace:
            if daemon.proc.poll() is not None:
                break
            if daemon.metric("presence_sweeper_tracked_keys") >= keys:
                tracked_at = time.time() - end
                break
            time.sleep(0.5)
        tracked = daemon.metric("presence_sweeper_tracked_keys") if daemon.proc.poll() is None else 0
        stop.set()
        peak = daemon.peak_rss_mb()
        row = {
            "label": label, "binary": binary, "writes": writes, "write_rate": writes / wrote_s,
            "keys": keys, "tracked": tracked, "tracked_after_s": tracked_at,
            "rss_idle_mb": base, "peak_rss_mb": peak, "rss_end_mb": daemon.rss_mb(),
            "cpu_s": daemon.cpu(), "wall_s": time.time() - t0,
            "missed_notifications": daemon.metric("presence_sweeper_missed_notifications_total"),
            "rss_samples": [(round(t - t0, 1), round(r, 1)) for t, r in samples],
        }
        print(f"{label}: peak RSS {peak:.1f} MB, {tracked:,.0f} of {keys:,} keys tracked"
              f" {'%.1f s after the burst' % tracked_at if tracked_at is not None else 'NOT within the grace'}",
              flush=True)
        return row
    finally:
        if daemon.proc.poll() is None:
            daemon.stop()
        redis.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", action="append", default=[], help="another build to compare (repeatable)")
    ap.add_argument("--cpu", type=float, default=0.2, help="CPU limit, in cores (default 0.2: 200m)")
    ap.add_argument("--keys", type=int, default=300000)
    ap.add_argument("--rate", type=int, default=140000, help="writes per second")
    ap.add_argument("--seconds", type=float, default=25)
    ap.add_argument("--grace", type=float, default=60, help="how long after the burst every key must be tracked")
    args = parse_and_build(ap)
    limit = CpuLimit(args.cpu)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as work:
            for i, binary in enumerate([BIN, *args.binary]):
                rows.append(run(binary, "this tree" if i == 0 else f"--binary {i}", args, work, limit))
    finally:
        limit.remove()
    print(f"\n{args.keys:,} new keys, ~{args.rate:,} writes/s for {args.seconds:.0f} s; daemon at {args.cpu} of a core")
    print("| build | writes/s | idle RSS | peak RSS | RSS after | keys tracked | after the burst | daemon CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        after = f"{r['tracked_after_s']:.1f} s" if r["tracked_after_s"] is not None else f"> {args.grace:.0f} s"
        print(f"| {r['label']} | {r['write_rate']:,.0f} | {r['rss_idle_mb']:.1f} MB | {r['peak_rss_mb']:.1f} MB"
              f" | {r['rss_end_mb']:.1f} MB | {r['tracked']:,.0f} / {r['keys']:,} | {after} | {r['cpu_s']:.1f} s |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
