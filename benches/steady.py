#!/usr/bin/env python3
"""Steady state: what presence-sweeper costs Redis while apps heartbeat, and how late zombies
leave. Each scenario runs the same traffic three ways in one run, side by side:

  traffic alone     no sweeper: what the app's own writes cost Redis (the base line);
  deadlines         presence-sweeper as shipped (keys checked at their deadlines, keyspace
                    notifications where the server has them on);
  full passes       the same binary with tracking.max_keys = 0 and notifications off: every walk
                    checks every key on the sweeps' schedules, as every pass did before deadlines.

The sweeper's cost is Redis's CPU (INFO cpu, main thread) over a window of the run minus the
traffic alone's over the same window, in % of one core. The traffic is `presence-sweeper-tools
simulate`, which also judges every event: lag (event arrival - (last heartbeat + ttl), on Redis's clock) of
zombies in known keys, in brand-new keys, and of typists; false evictions, duplicates, missed
zombies.

Scenarios:
  A  shared Redis: 1,000,000 unrelated keys (DEBUG POPULATE); 2,000 conversations x 4 users
     heartbeating every 2 s, online ttl 8 s, typing sweep default, a new conversation a second;
     notifications on (KEA)
  B  no notifications, no noise: 5,000 such conversations
  C  simulate --conversations 10000 --users 20, default configuration, notifications on
  live  a big app in steady state: 1,000,000 conversations x 1 user heartbeating every 20 s,
     default online sweep (ttl 45 s): every key comes due about every 25 s, so this is what
     deadline checks cost at that scale (Redis CPU per check is reported). Notifications as
     each phase's build is best served: off for the apps alone, new keys (En) for this build,
     KEA for --before (an earlier build knows no new-key notifications)
  big  1,000,000 conversations x 20 members (seeded, ttl 1 h: nothing goes stale), notifications
     on: the daemon's RSS with 1,000,000 tracked keys against the same daemon without an index
     (tracking.max_keys = 0), Redis CPU of the start-up walk, of a reconciliation walk, and in
     between
  cost  what notifications cost Redis per write (pipelined ZADDs from redis-benchmark): off; KEA,
     Kzg and En with nobody subscribed, and with the sweeper subscribed

A fourth phase runs an earlier build with --before BINARY (say, one from before deadlines:
`git worktree add /tmp/before <rev> && cargo build --release --manifest-path /tmp/before/Cargo.toml`).

usage: python3 benches/steady.py [--scenarios A,B,C,live,big,cost] [--window S] [--before BINARY]
                                 [--skip-build] [--json FILE]
needs: redis-server, redis-cli and redis-benchmark on PATH; cargo.
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
from common import LIVE_SWEEPS, Daemon, Redis, free_port, lag_summary, live_traffic, parse_and_build, tools, write  # noqa: E402

SHIPPED = ""
FULL_PASSES = '[tracking]\nmax_keys = 0\nnotifications = "off"\n'


def config(work, name, sweeps, mode, http_port, level="warn"):
    return write(os.path.join(work, f"{name}.toml"),
                 f'[http]\nlisten = "127.0.0.1:{http_port}"\n[log]\nlevel = "{level}"\n{sweeps}{mode}')


def simulate(cfg, redis, args):
    """Runs `simulate` and returns its JSON report (it exits 1 when it judged a failure)."""
    p = subprocess.run(tools(cfg, redis, "simulate", "--json", *args), capture_output=True, text=True)
    if p.returncode not in (0, 1):
        raise SystemExit(f"simulate exited {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


CHECKS = "presence_sweeper_deadline_checks_total"
LAG = "presence_sweeper_eviction_lag_seconds"


class Window:
    """Redis CPU (and the daemon's, and its deadline checks) over a window that starts `warmup`
    seconds from now."""

    def __init__(self, redis, daemon, warmup, seconds):
        self.result = None

        def measure():
            time.sleep(warmup)
            checks = (lambda: daemon.metric(CHECKS)) if daemon else (lambda: 0.0)
            lags = (lambda: daemon.histogram(LAG)) if daemon else list
            h0 = lags()
            switches = daemon.switches if daemon else (lambda: 0)
            r0, d0, c0, s0, t0 = redis.cpu(), daemon.cpu() if daemon else 0.0, checks(), switches(), time.time()
            # Checks per 5 s through the window: keys checked together come due together, and
            # an even rate is what keeps a busy Redis from saturating in waves.
            fives, last = [], c0
            while time.time() + 5 <= t0 + seconds:
                time.sleep(5)
                now = checks()
                fives.append(now - last)
                last = now
            time.sleep(max(0.0, t0 + seconds - time.time()))
            r1, d1, c1, s1, t1 = redis.cpu(), daemon.cpu() if daemon else 0.0, checks(), switches(), time.time()
            # The daemon's own lag over the window alone, past the start's transient (the
            # first checks of every key, and the looks that spread them).
            before = dict(h0)
            window_lag = [(le, c - before.get(le, 0.0)) for le, c in lags()]
            self.result = {"redis_core": (r1 - r0) / (t1 - t0), "sweeper_core": (d1 - d0) / (t1 - t0),
                           "seconds": t1 - t0, "checks_per_s": (c1 - c0) / (t1 - t0),
                           "sweeper_switches_per_s": (s1 - s0) / (t1 - t0),
                           "checks_per_5s": fives, "window_lag": lag_summary(window_lag)}

        self.thread = threading.Thread(target=measure)
        self.thread.start()

    def get(self):
        self.thread.join()
        return self.result


class Timeline:
    """Each second of a window: Redis's CPU, the longest `PING` round trip on a connection of
    its own (how long any client waited for Redis then), the daemon's checks, and its evictions
    and those more than 100 ms late. Written to `path` as CSV; `summary()` sets the seconds with
    late evictions against the rest."""

    def __init__(self, redis, daemon, warmup, seconds, path):
        self.path, self.rows, self.worst = path, [], 0.0
        self.lock = threading.Lock()
        self.stopping = False
        threading.Thread(target=self._ping, args=(redis,), daemon=True).start()
        self.thread = threading.Thread(target=self._poll, args=(redis, daemon, warmup, seconds))
        self.thread.start()

    def _ping(self, redis):
        import socket
        sock = socket.create_connection(("127.0.0.1", redis.port))
        while not self.stopping:
            t = time.perf_counter()
            sock.sendall(b"PING\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                got += sock.recv(64)
            rtt = time.perf_counter() - t
            with self.lock:
                self.worst = max(self.worst, rtt)
            time.sleep(0.005)
        sock.close()

    def _poll(self, redis, daemon, warmup, seconds):
        def late():
            buckets = daemon.histogram(LAG)
            total = buckets[-1][1] if buckets else 0.0
            return total, total - max((c for le, c in buckets if le <= 0.1), default=0.0)

        time.sleep(warmup)
        t0 = time.time()
        last = (redis.cpu(), daemon.metric(CHECKS), *late(), t0)
        with self.lock:
            self.worst = 0.0
        while time.time() < t0 + seconds:
            time.sleep(max(0.0, last[-1] + 1.0 - time.time()))
            now = (redis.cpu(), daemon.metric(CHECKS), *late(), time.time())
            with self.lock:
                worst, self.worst = self.worst, 0.0
            dt = now[-1] - last[-1]
            self.rows.append({"t": round(now[-1] - t0, 2), "redis_core": (now[0] - last[0]) / dt,
                              "ping_max_ms": worst * 1000, "checks": now[1] - last[1],
                              "evictions": now[2] - last[2], "late": now[3] - last[3]})
            last = now
        self.stopping = True
        with open(self.path, "w") as f:
            f.write(",".join(self.rows[0]) + "\n" if self.rows else "")
            for r in self.rows:
                f.write(",".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()) + "\n")

    def summary(self):
        """The seconds with evictions more than 100 ms late against the rest: how many, Redis's
        CPU, the longest PING and the checks in each (medians), and the late evictions' share."""
        self.thread.join()

        def median(rows, key):
            v = sorted(r[key] for r in rows)
            return v[len(v) // 2] if v else 0.0

        late = [r for r in self.rows if r["late"] > 0]
        rest = [r for r in self.rows if r["late"] == 0]
        out = {"path": self.path, "late_evictions": sum(r["late"] for r in self.rows),
               "evictions": sum(r["evictions"] for r in self.rows)}
        for name, rows in (("late_seconds", late), ("other_seconds", rest)):
            out[name] = {"count": len(rows), "redis_core": median(rows, "redis_core"),
                         "ping_max_ms": median(rows, "ping_max_ms"), "checks": median(rows, "checks")}
        return out


def lag(report, key):
    v = report
    for k in key.split("."):
        v = (v or {}).get(k)
    return v


def run_phase(label, work, redis, sweeps, mode, sim_args, duration, window, binary=None, warmup=None,
              flags=None, timeline=None):
    """One phase: an optional daemon (`binary`, or this checkout's), the traffic, and the
    window's CPU; `flags`, if given, are the server's notify-keyspace-events for it; `timeline`,
    a CSV file for the window's seconds (see `Timeline`)."""
    daemon = None
    walk_cpu = 0.0
    if flags is not None:
        redis.cli("CONFIG", "SET", "notify-keyspace-events", flags)
    if mode is not None:
        port = free_port()
        cfg = config(work, label, sweeps, mode, port)
        before = redis.cpu()
        daemon = Daemon(cfg, redis, port, binary=binary)
        daemon.wait_ready(120)
        walk_cpu = redis.cpu() - before
    else:
        cfg = config(work, label, sweeps, "", free_port())
    warmup = min(15.0, duration / 4) if warmup is None else warmup
    seconds = min(window, duration - warmup - 2)
    w = Window(redis, daemon, warmup, seconds)
    line = Timeline(redis, daemon, warmup, seconds, timeline) if timeline and daemon else None
    report = simulate(cfg, redis, [*sim_args, "--duration", f"{duration}s"])
    cpu = w.get()
    if line:
        cpu["timeline"] = t = line.summary()
        late, other = t["late_seconds"], t["other_seconds"]
        print(f"    each second ({t['path']}): {late['count']} with evictions over 100 ms late "
              f"({t['late_evictions']:.0f} of {t['evictions']:.0f}): Redis {late['redis_core']:.0%}, "
              f"longest PING {late['ping_max_ms']:.0f} ms, {late['checks']:.0f} checks (medians); "
              f"{other['count']} others: Redis {other['redis_core']:.0%}, longest PING "
              f"{other['ping_max_ms']:.0f} ms, {other['checks']:.0f} checks", flush=True)
    row = {"phase": label, **cpu, "startup_walk_redis_cpu_s": walk_cpu, "report": report}
    if daemon is not None:
        row["sweeper_rss_mb"] = daemon.rss_mb()
        row["missed_notifications"] = daemon.metric("presence_sweeper_missed_notifications_total")
        row["notifications_in_use"] = daemon.metric("presence_sweeper_notifications_in_use")
        row["daemon_lag"] = lag_summary(daemon.histogram("presence_sweeper_eviction_lag_seconds"))
        daemon.stop()
    t = report.get("typing") or {}
    own = f", sweeper {cpu['sweeper_core']:.2%}" if daemon else ""
    print(f"  {label}: Redis {cpu['redis_core']:.2%} of a core over {cpu['seconds']:.0f} s{own}; "
          f"evictions {report['evictions']} (lag p99 {fmt(lag(report, 'eviction_lag_seconds.p99'))}), "
          f"new keys {report.get('new_key_evictions', 0)} "
          f"(p99 {fmt(lag(report, 'new_key_eviction_lag_seconds.p99'))}), "
          f"typing stops {t.get('stops', 0)} (p99 {fmt(lag(t, 'stop_lag_seconds.p99'))}); "
          f"false {report['false_evictions']}, duplicates {report['duplicate_events']}, "
          f"missed {report['missed_zombies']}", flush=True)
    in_window = cpu.get("window_lag") or {}
    if in_window.get("count"):
        print(f"    in the window alone: {in_window['count']} evictions, "
              f"{in_window['within_100ms']:.1%} within 100 ms, {in_window['within_1s']:.1%} within 1 s, "
              f"p99 <= {fmt(in_window['p99_le'])}", flush=True)
    if daemon and cpu.get("checks_per_s"):
        print(f"    the sweeper's own CPU: {cpu['sweeper_core'] / cpu['checks_per_s'] * 1e6:.2f} us per deadline "
              f"check ({cpu['checks_per_s']:,.0f} checks/s)", flush=True)
    fives = cpu.get("checks_per_5s") or []
    if daemon and fives and max(fives):
        print(f"    checks per 5 s: {min(fives):.0f} to {max(fives):.0f} (mean {sum(fives) / len(fives):.0f})",
              flush=True)
    own_lag = row.get("daemon_lag") or {}
    if own_lag.get("count"):
        print(f"    the daemon's own eviction_lag_seconds: {own_lag['count']} evictions, "
              f"{own_lag['within_100ms']:.1%} within 100 ms, {own_lag['within_1s']:.1%} within 1 s, "
              f"p50 <= {fmt(own_lag['p50_le'])}, p99 <= {fmt(own_lag['p99_le'])}", flush=True)
    return row


def fmt(x):
    return "-" if x is None else f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def scenario(name, work, redis_extra, populate, sweeps, sim_args, duration, window, before=None,
             warmup=None, flags=None):
    """`flags`: notify-keyspace-events per phase label, where phases differ (else the server's)."""
    print(f"scenario {name}", flush=True)
    redis = Redis(tempfile.mkdtemp(dir=work), extra=redis_extra)
    try:
        if populate:
            redis.cli("DEBUG", "POPULATE", str(populate), "noise", "32")
            print(f"  {redis.cli('DBSIZE')} unrelated keys", flush=True)
        rows = {}
        phases = [("traffic alone", None, None), ("deadlines", SHIPPED, None), ("full passes", FULL_PASSES, None)]
        if before:
            # An earlier build, with the same sweeps and otherwise its own defaults.
            phases.append(("before", SHIPPED, before))
        for label, mode, binary in phases:
            rows[label] = run_phase(f"{name}-{label.replace(' ', '-')}", work, redis, sweeps, mode, sim_args,
                                    duration, window, binary=binary, warmup=warmup,
                                    flags=(flags or {}).get(label))
        base = rows["traffic alone"]["redis_core"]
        for label, _, _ in phases[1:]:
            row = rows[label]
            row["sweeper_redis_core"] = row["redis_core"] - base
            if row.get("checks_per_s"):
                row["redis_us_per_check"] = row["sweeper_redis_core"] / row["checks_per_s"] * 1e6
        return {"redis": redis.version(), **rows}
    finally:
        redis.stop()


def big(work, conversations):
    print(f"big: {conversations:,} conversations x 20 members, notifications on", flush=True)
    redis = Redis(tempfile.mkdtemp(dir=work), extra=["--notify-keyspace-events", "KEA"])
    try:
        sweeps = '[sweeps.typing]\nenabled = false\n[sweeps.online]\nttl = "1h"\n'
        seed_cfg = config(work, "big-seed", sweeps, "", free_port())
        env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")
        subprocess.run(tools(seed_cfg, redis, "seed", "--conversations", str(conversations), "--members", "20",
                               "--stale-fraction", "0"), check=True, capture_output=True, env=env)
        # What the daemon takes without an index: the same walk, nothing tracked.
        port = free_port()
        cfg = config(work, "big-untracked", sweeps, '[tracking]\nmax_keys = 0\n', port)
        daemon = Daemon(cfg, redis, port)
        daemon.wait_ready(600)
        untracked_rss = daemon.peak_rss_mb()
        daemon.stop()
        # A reconciliation a minute, so that the window holds one; its cost scales to any interval.
        port = free_port()
        cfg = config(work, "big", sweeps, '[tracking]\nreconcile_interval = "60s"\n', port)
        daemon = Daemon(cfg, redis, port)
        before = redis.cpu()
        t0 = time.time()
        daemon.wait_ready(600)
        startup = redis.cpu() - before
        startup_wall = time.time() - t0
        # The start-up walk queued every key for a first check (its lowest score): wait them out.
        while daemon.metric(CHECKS) < conversations:
            time.sleep(0.5)
        first_checks = redis.cpu() - before
        tracked = daemon.metric("presence_sweeper_tracked_keys")
        rss = daemon.rss_mb()
        time.sleep(2)
        walks0 = daemon.metric("presence_sweeper_sweeps_total")
        r0, d0, t1 = redis.cpu(), daemon.cpu(), time.time()
        # Until one reconciliation walk has run and finished.
        while daemon.metric("presence_sweeper_sweeps_total") < walks0 + 1:
            time.sleep(0.5)
        time.sleep(1)
        r1, d1, t2 = redis.cpu(), daemon.cpu(), time.time()
        result = {
            "conversations": conversations, "tracked_keys": tracked, "untracked_peak_rss_mb": untracked_rss,
            "rss_mb": rss, "peak_rss_mb": daemon.peak_rss_mb(),
            "index_bytes_per_key": (rss - untracked_rss) * 1024 * 1024 / max(tracked, 1),
            "startup_walk_redis_cpu_s": startup, "startup_walk_wall_s": startup_wall,
            "startup_with_first_checks_redis_cpu_s": first_checks,
            "reconcile_cycle_redis_cpu_s": r1 - r0, "reconcile_cycle_wall_s": t2 - t1,
            "sweeper_cpu_s_per_cycle": d1 - d0,
        }
        # Steady state at the default interval: one reconciliation per 5 minutes.
        result["steady_redis_core_at_5m"] = (r1 - r0) / 300
        daemon.stop()
        print(f"  RSS {rss:.1f} MB with {tracked:,.0f} tracked keys, {untracked_rss:.1f} MB at most without an index "
              f"(the index: {result['index_bytes_per_key']:.0f} bytes per key); start-up walk {startup:.1f} s of Redis "
              f"CPU ({startup_wall:.1f} s wall), with the first checks {first_checks:.1f} s; one reconciliation "
              f"{r1 - r0:.2f} s of Redis CPU ({result['steady_redis_core_at_5m']:.2%} of a core every 5 min)", flush=True)
        return {"redis": redis.version(), **result}
    finally:
        redis.stop()


def notify_cost(work, writes):
    """Redis CPU per pipelined ZADD: notifications off, on, on with the sweeper subscribed."""
    print("cost of keyspace notifications per write", flush=True)
    out = {}
    keys = 100_000
    for label, flags, subscribed in (("off", "", False), ("KEA", "KEA", False),
                                     ("KEA + sweeper subscribed", "KEA", True),
                                     ("Kzg", "Kzg", False), ("Kzg + sweeper subscribed", "Kzg", True),
                                     ("En", "En", False), ("En + sweeper subscribed", "En", True)):
        redis = Redis(tempfile.mkdtemp(dir=work), extra=["--notify-keyspace-events", flags])
        daemon = None
        try:
            # Scores an hour ahead: the keys are tracked but never due within the run (further
            # ahead, the daemon would take them for another score_unit and evict nothing).
            bench = ["redis-benchmark", "-p", str(redis.port), "-q", "-P", "32", "-c", "4", "-r", str(keys)]
            zadd = ["ZADD", "presence:__rand_int__:online", str(int(time.time()) + 3600), "u__rand_int__"]
            subprocess.run([*bench, "-n", str(keys * 4), *zadd], check=True, capture_output=True)
            if subscribed:
                port = free_port()
                cfg = config(work, f"cost-{len(out)}", "", "", port)
                daemon = Daemon(cfg, redis, port)
                daemon.wait_ready(120)
                # Every key known (checked once) before the measured writes. DBSIZE would count
                # the daemon's canary too.
                presence = int(redis.cli("EVAL", "return #redis.call('KEYS', 'presence:*')", "0"))
                while daemon.metric("presence_sweeper_deadline_checks_total") < presence:
                    time.sleep(0.2)
            c0 = redis.cpu()
            subprocess.run([*bench, "-n", str(writes), *zadd], check=True, capture_output=True)
            us = (redis.cpu() - c0) / writes * 1e6
            out[label] = us
            print(f"  {label}: {us:.3f} us of Redis CPU per ZADD", flush=True)
        finally:
            if daemon:
                daemon.stop()
            redis.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenarios", default="A,B,C,live,big,cost")
    ap.add_argument("--duration", type=int, default=75, help="seconds users vanish in A and B")
    ap.add_argument("--window", type=int, default=45, help="seconds of CPU measured in each phase")
    ap.add_argument("--noise", type=int, default=1_000_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--writes", type=int, default=2_000_000)
    ap.add_argument("--live", type=int, default=1_000_000, help="conversations of scenario live")
    ap.add_argument("--before", help="an earlier build of presence-sweeper, run as one more phase of A, B, C, live")
    ap.add_argument("--before-flags", default="KEA",
                    help="notify-keyspace-events for --before in live (default KEA; En for a build that knows new keys)")
    args = parse_and_build(ap)
    wanted = set(args.scenarios.split(","))
    work = tempfile.mkdtemp(prefix="presence-sweeper-steady-")
    results = {"machine": f"{os.cpu_count()} cores"}
    online = '[sweeps.online]\nttl = "8s"\n'
    traffic = ["--users", "4", "--heartbeat", "2s", "--typing", "--new-conversations", "60", "--grace", "12s"]
    try:
        if "A" in wanted:
            results["A"] = scenario(
                "A", work, ["--notify-keyspace-events", "KEA", "--enable-debug-command", "local"],
                args.noise, online, ["--conversations", "2000", *traffic], args.duration, args.window,
                before=args.before)
        if "B" in wanted:
            results["B"] = scenario("B", work, [], 0, online, ["--conversations", "5000", *traffic],
                                    args.duration, args.window, before=args.before)
        if "C" in wanted:
            results["C"] = scenario("C", work, ["--notify-keyspace-events", "KEA"], 0, "",
                                    ["--conversations", "10000", "--users", "20", "--grace", "50s"],
                                    max(args.duration, 90), args.window, before=args.before)
        if "live" in wanted:
            # A big app in steady state: every conversation has one user online, heartbeating every
            # 20 s, so every key comes due about every 25 s (ttl 45 s); the window starts once the
            # first ttl has passed.
            #
            # Each phase with the notifications its build is best served by, so that the sweeper's
            # share holds what notifications cost Redis: none for the apps alone; new keys (`En`)
            # for this build; the keyspace events of every write (`KEA`) for an earlier one, which
            # predates new-key notifications.
            results["live"] = scenario("live", work, ["--notify-keyspace-events", "KEA"], 0,
                                       LIVE_SWEEPS, live_traffic(args.live),
                                       150, 60, before=args.before, warmup=60.0,
                                       flags={"traffic alone": "", "deadlines": "En", "full passes": "",
                                              "before": args.before_flags})
        if "big" in wanted:
            results["big"] = big(work, args.big)
        if "cost" in wanted:
            results["cost"] = notify_cost(work, args.writes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def report(r):
    print()
    print(f"Results ({r['machine']}; Redis and the sweeper sharing them)")
    print()
    print("| scenario | how | Redis CPU (% of a core) | the sweeper's share | with a reconciliation walk "
          "every 5 min | sweeper's own CPU | deadline checks/s (Redis us each) | "
          "lag p99: known keys / new keys / typists | false / duplicate / missed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("A", "B", "C", "live"):
        if name not in r:
            continue
        for how in ("traffic alone", "deadlines", "full passes", "before"):
            if how not in r[name]:
                continue
            row = r[name][how]
            rep = row["report"]
            t = rep.get("typing") or {}
            share = f"{row['sweeper_redis_core']:.2%}" if "sweeper_redis_core" in row else ""
            # The start-up walk is what a reconciliation costs (no presence key exists yet).
            amortized = f"{row['sweeper_redis_core'] + row['startup_walk_redis_cpu_s'] / 300:.2%}" \
                if how == "deadlines" else ""
            own = f"{row['sweeper_core']:.2%}" if how != "traffic alone" else ""
            lags = " / ".join(fmt(x) for x in (lag(rep, "eviction_lag_seconds.p99"),
                                               lag(rep, "new_key_eviction_lag_seconds.p99"),
                                               lag(t, "stop_lag_seconds.p99")))
            verdict = "" if how == "traffic alone" else \
                f"{rep['false_evictions'] + t.get('false_stops', 0)} / " \
                f"{rep['duplicate_events'] + t.get('duplicate_stops', 0)} / " \
                f"{rep['missed_zombies'] + t.get('missed_stops', 0)}"
            checks = f"{row['checks_per_s']:,.0f} ({row['redis_us_per_check']:.1f})" \
                if row.get("redis_us_per_check") else ""
            print(f"| {name} | {how} | {row['redis_core']:.2%} | {share} | {amortized} | {own} | {checks} | "
                  f"{lags if how != 'traffic alone' else ''} | {verdict} |")
    if "big" in r:
        b = r["big"]
        print()
        print(f"{b['conversations']:,} x 20, notifications on: RSS {b['rss_mb']:.1f} MB with {b['tracked_keys']:,.0f} "
              f"tracked keys ({b['untracked_peak_rss_mb']:.1f} MB at most without an index: "
              f"{b['index_bytes_per_key']:.0f} bytes per key); "
              f"steady state {b['steady_redis_core_at_5m']:.2%} of a core (one reconciliation of "
              f"{b['reconcile_cycle_redis_cpu_s']:.2f} s of Redis CPU per 5 min); start-up "
              f"{b['startup_with_first_checks_redis_cpu_s']:.1f} s of Redis CPU")
    if "cost" in r:
        c = r["cost"]
        print()
        rows = "; ".join(f"{label} {us:.3f} us ({us - c['off']:+.3f})" for label, us in c.items() if label != "off")
        print(f"Redis CPU per ZADD: notifications off {c['off']:.3f} us; {rows}")


if __name__ == "__main__":
    main()
