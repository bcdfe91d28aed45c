#!/usr/bin/env python3
"""A slow hour: scenario `live` (1,000,000 conversations, one user each heartbeating every 20 s,
ttl 45 s, 1 % vanishing) with Redis held busy at `--busy` of a core (default 0.85) by the apps'
own traffic, and how late zombies leave. Phases, in one run, on one Redis, with the same traffic:

  traffic alone   no sweeper. A filler adds work to the heartbeats until Redis's main thread is
                  at --busy of a core; its rate is then fixed for every later phase.
  fixed           this build with evict.max_pipeline_depth = evict.pipeline_depth (4) and
                  evict.batch_keys = 100: the in-flight window of earlier builds. fixed:200
                  sets evict.batch_keys to 200.
  adaptive        this build as shipped (its window grows while due keys wait only where
                  evict.max_pipeline_depth is raised above pipeline_depth; it is not by default).
  limited         as shipped, the daemon held to --cpu of a core (default 0.2: 200m) by a cgroup,
                  as benches/burst.py does (needs root and a cgroup cpu controller; skipped
                  without them). Several limits (--cpu 0.2,0.03) run one phase each; a limit
                  below what the daemon needs shows how it falls behind.
  before          with --before BINARY, an earlier build as shipped (last, unless --phases
                  names it elsewhere: --phases before,fixed).
  LABEL           with --variant 'LABEL=TOML', this build with TOML added to its configuration
                  (after the phases --phases names, unless it names LABEL elsewhere):
                  --variant 'grown=[evict]\\nmax_pipeline_depth = 16'.

The filler stands for the rest of an app's Redis traffic: `EVALSHA` of a script that spins for
--spin iterations (about 50 us), at the rate that reaches --busy. Each phase prints Redis's CPU,
the sweeper's, the simulator's lag figures (p99 of zombies in known and in brand-new keys; 0
false, duplicate or missed is the bar) and the daemon's own presence_sweeper_eviction_lag_seconds.

usage: python3 benches/busy.py [--conversations N] [--busy 0.85] [--cpu 0.2[,0.03]] [--phases
                               fixed,adaptive,limited] [--before BINARY] [--variant LABEL=TOML ...]
                               [--duration 150] [--warmup 60] [--window 60] [--timeline DIR]
                               [--skip-build] [--json FILE]
needs: redis-server and redis-cli on PATH; cargo; root for the limited phase.
"""

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import BIN, LIVE_SWEEPS, Redis, commandstats, live_traffic, parse_and_build, resp  # noqa: E402
from steady import run_phase  # noqa: E402

SPIN = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return x"


class Filler:
    """Sends the spin script at `rate` calls a second, every 5 ms a share; with `target`, steers
    the rate each 2 s so that Redis's main thread stays at `target` of a core."""

    def __init__(self, redis, spin):
        self.redis = redis
        self.sha = redis.cli("SCRIPT", "LOAD", SPIN)
        self.call = resp("EVALSHA", self.sha, "0", spin)
        self.rate = 0.0
        self.target = None
        self.cost = None
        self.sent = 0
        self.stopping = False
        self.sock = socket.create_connection(("127.0.0.1", redis.port))
        threading.Thread(target=self._drain, daemon=True).start()
        threading.Thread(target=self._send, daemon=True).start()
        threading.Thread(target=self._steer, daemon=True).start()

    def _drain(self):
        while not self.stopping:
            if not self.sock.recv(1 << 16):
                return

    def _send(self):
        owed, last = 0.0, time.time()
        while not self.stopping:
            time.sleep(0.005)
            now = time.time()
            owed += self.rate * (now - last)
            last = now
            n = int(owed)
            if n:
                owed -= n
                try:
                    self.sock.sendall(self.call * n)
                except OSError:
                    # stop() closed the socket under this thread.
                    return
                self.sent += n

    def _steer(self):
        c0, n0, t0 = self.redis.cpu(), self.sent, time.time()
        while not self.stopping:
            time.sleep(2)
            c1, n1, t1 = self.redis.cpu(), self.sent, time.time()
            busy = (c1 - c0) / (t1 - t0)
            sent = (n1 - n0) / (t1 - t0)
            c0, n0, t0 = c1, n1, t1
            if self.target is not None and self.cost:
                # What is not the filler's stays; the filler makes up the rest, in half steps so
                # that noise does not make it swing, and never far past what it could send.
                others = busy - self.cost * sent
                want = max(10.0, (self.target - others) / self.cost)
                self.rate = min(self.rate + 0.5 * (want - self.rate), 2 * sent + 100)

    def calibrate(self):
        """The CPU of one call, from a burst of calls on an otherwise idle Redis."""
        n = 2000
        c0 = self.redis.cpu()
        before = self.sent
        self.sock.sendall(self.call * n)
        self.sent += n
        time.sleep(1.0 + n * 200e-6)
        self.cost = (self.redis.cpu() - c0) / (self.sent - before)
        return self.cost

    def stop(self):
        self.stopping = True
        self.sock.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=1_000_000)
    ap.add_argument("--busy", type=float, default=0.85, help="Redis's main thread, in cores, from the apps")
    ap.add_argument("--spin", type=int, default=3000, help="iterations of the filler's script per call")
    ap.add_argument("--cpu", default="0.2",
                    help="the limited phases' CPU, in cores, comma-separated: one phase each")
    ap.add_argument("--phases", default="fixed,adaptive,limited")
    ap.add_argument("--duration", type=int, default=150)
    ap.add_argument("--window", type=int, default=60)
    ap.add_argument("--warmup", type=float, default=60.0,
                    help="seconds from a phase's start to its measured window: past the first checks "
                    "of every key and the looks that spread them (about 250 s at ttl 45 s), raise "
                    "--duration with it")
    ap.add_argument("--before", help="an earlier build of presence-sweeper, run as one more phase")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL=TOML: this build with TOML (\\n for a new line) added, as one more phase")
    ap.add_argument("--timeline", metavar="DIR",
                    help="write each phase's window second by second to DIR/<phase>.csv: Redis's CPU, "
                    "the longest PING, the checks, the evictions and those over 100 ms late")
    args = parse_and_build(ap)
    if args.timeline:
        os.makedirs(args.timeline, exist_ok=True)
    work = tempfile.mkdtemp(prefix="presence-sweeper-busy-")
    redis = Redis(tempfile.mkdtemp(dir=work), extra=["--notify-keyspace-events", "En"])
    sweeps = LIVE_SWEEPS
    sim = live_traffic(args.conversations)
    filler = Filler(redis, args.spin)
    cost = filler.calibrate()
    print(f"filler: {cost * 1e6:.1f} us of Redis CPU per call", flush=True)
    rows = {"redis": redis.version(), "busy_target": args.busy, "filler_us_per_call": cost * 1e6}
    limit = None
    try:
        def phase(label, mode, binary=None):
            stats = {}
            threading.Thread(target=commandstats, args=([redis], 75, 30, stats), daemon=True).start()
            line = None
            if args.timeline and mode is not None:
                # A phase named twice keeps both files: adaptive.csv, adaptive-2.csv.
                line, n = os.path.join(args.timeline, f"{label}.csv"), 2
                while os.path.exists(line):
                    line, n = os.path.join(args.timeline, f"{label}-{n}.csv"), n + 1
            row = run_phase(f"busy-{label}", work, redis, sweeps, mode, sim, args.duration,
                            args.window, binary=binary, warmup=args.warmup, timeline=line)
            row["commandstats"] = stats
            top = sorted(stats.items(), key=lambda kv: -kv[1]["usec_per_s"])[:6]
            print("    Redis per second: " + ", ".join(
                f"{name} {v['calls_per_s']:.0f} calls {v['usec_per_s'] / 1e4:.1f} %" for name, v in top)
                + f"; in commands {sum(v['usec_per_s'] for v in stats.values()) / 1e4:.1f} % of a core "
                f"(the rest is reading, parsing and replying)", flush=True)
            return row
        filler.target = args.busy
        rows["traffic alone"] = phase("traffic-alone", None)
        rates = filler.rate
        filler.target = None
        filler.rate = rates
        rows["filler_calls_per_s"] = rates
        print(f"  the filler stays at {rates:.0f} calls/s", flush=True)
        wanted = args.phases.split(",")
        if args.before and "before" not in wanted:
            wanted.append("before")
        variants = {}
        for v in args.variant:
            label, sep, toml = v.partition("=")
            if not sep:
                sys.exit(f"busy.py: --variant {v!r}: expected LABEL=TOML")
            variants[label] = toml.replace("\\n", "\n") + "\n"
            if label not in wanted:
                wanted.append(label)
        def keep(label, row):
            """A phase named twice (--phases before,fixed,before,fixed) keeps each row."""
            key, n = label, 2
            while key in rows:
                key, n = f"{label} {n}", n + 1
            rows[key] = row

        for name in wanted:
            if name.split(":")[0] == "fixed":
                # The window and batch of earlier builds (4 batches of 100 keys); fixed:200 is
                # the fixed window with evict.batch_keys = 200.
                batch = name.split(":")[1] if ":" in name else "100"
                extra = f"batch_keys = {int(batch)}\n"
                keep(name, phase(name.replace(":", "-batch-"), "[evict]\nmax_pipeline_depth = 4\n" + extra))
            elif name == "adaptive":
                keep("adaptive", phase("adaptive", ""))
            elif name == "limited":
                for cpu in (float(c) for c in args.cpu.split(",")):
                    try:
                        from burst import CpuLimit
                        limit = CpuLimit(cpu)
                        row = phase(f"limited-{cpu:g}", "", binary=limit.wrapper(BIN, work))
                        row["throttled_periods"] = limit.throttled()
                        print(f"    the cgroup throttled the daemon in {row['throttled_periods']} "
                              f"(throttled, periods) of 100 ms", flush=True)
                        keep(f"limited {cpu:g}", row)
                    except (OSError, SystemExit) as e:
                        print(f"  limited to {cpu:g}: skipped ({e})", flush=True)
                    finally:
                        if limit:
                            limit.remove()
                            limit = None
            elif name == "before" and args.before:
                keep("before", phase("before", "", binary=args.before))
            elif name in variants:
                keep(name, phase(name.replace(" ", "-"), variants[name]))
            else:
                sys.exit(f"busy.py: unknown phase {name!r} (fixed, adaptive, limited, before with --before, "
                         "a --variant's label)")
        base = rows["traffic alone"]["redis_core"]
        for row in rows.values():
            if isinstance(row, dict) and "report" in row and row is not rows["traffic alone"]:
                row["sweeper_redis_core"] = row["redis_core"] - base
    finally:
        filler.stop()
        redis.stop()
        if limit:
            limit.remove()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2, default=str)


if __name__ == "__main__":
    main()
