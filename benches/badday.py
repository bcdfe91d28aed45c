#!/usr/bin/env python3
"""Bad-day benchmarks: what the sweeper costs, and whether it stays right, when things go wrong.

  long-ids  one conversation with 100 live members and 500 zombies whose ids are 16 KiB (and
            1 KiB) each, swept once by `presence-sweeper run`, then by a one-shot
            `presence-sweeper sweep`: the peak RSS (the daemon's VmHWM; the command's from
            wait4), the largest event, and how many of the 500 events a plain subscriber
            received under Redis's default pub/sub output-buffer limits.
  soak      `presence-sweeper-tools simulate` against a daemon for --soak-seconds while, at random
            moments and in random order (--seed), Redis is killed and restarted, Redis is
            paused (SIGSTOP) past the ttl, and the daemon itself is paused a ttl: false leaves,
            duplicates, missed zombies, users lost with Redis's data, per incident.

usage: python3 benches/badday.py [--stages long-ids,soak] [--soak-seconds 120] [--seed N]
                                 [--binary PATH] [--skip-build]
--binary runs another build of the sweeper (an older commit's, say) for a side-by-side figure.
needs: redis-server and redis-cli on PATH; cargo.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Daemon, Redis, build, free_port, resp, write  # noqa: E402


class Conn:
    """A bare RESP connection: big arguments and pub/sub without a client library."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, *args):
        self.sock.sendall(resp(*args))

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return rest.decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind in (b"*", b">"):
            return [self.reply() for _ in range(int(rest))]
        raise ValueError(line)


# Runs argv[1:] and prints its peak RSS in KiB, from wait4.
SPAWN = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print(usage.ru_maxrss)
"""


def long_ids(binary, id_bytes, how):
    work = tempfile.mkdtemp(prefix="badday-")
    redis = Redis(work)
    try:
        con = Conn(redis.port)
        now = float(redis.cli("TIME").split()[0])
        args = ["ZADD", "presence:long:online"]
        for n in range(100):
            args += [now + 3600, f"live{n:04}-".encode() + b"x" * (id_bytes - 9)]
        for n in range(500):
            args += [now - 120, f"gone{n:04}-".encode() + b"x" * (id_bytes - 9)]
        con.send(*args)
        assert con.reply() == 600

        sub = Conn(redis.port)
        sub.send("PSUBSCRIBE", "presence:*:events")
        sub.reply()
        events = []

        def listen():
            try:
                while True:
                    msg = sub.reply()
                    if msg[0] == b"pmessage":
                        events.append(len(msg[3]))
            except (EOFError, OSError):
                pass

        threading.Thread(target=listen, daemon=True).start()
        port = free_port()
        cfg = write(os.path.join(work, "s.toml"),
                    f'[http]\nlisten = "127.0.0.1:{port}"\n[log]\nlevel = "' + os.environ.get("BENCH_LOG", "warn") + '"\n'
                    '[sweeps.typing]\nenabled = false\n'
                    '[sweeps.online]\nttl = "60s"\nschedule = "1s"\n'
                    '[sweeps.online.storm_guard]\nenabled = false\n')
        common.BIN = binary
        if how == "sweep":
            # Linux counts a child's peak from before its exec too: forked from this process,
            # which holds the ids, the command would be charged its RSS. A fresh interpreter
            # forks it instead.
            out = subprocess.run([sys.executable, "-c", SPAWN, binary, "--config", cfg,
                                  "--redis-url", f"redis://127.0.0.1:{redis.port}/0", "sweep"],
                                 capture_output=True, text=True, check=True)
            peak = int(out.stdout.split()[-1]) / 1024
        else:
            d = Daemon(cfg, redis, port)
            deadline = time.time() + 60
            while redis.cli("ZCARD", "presence:long:online") != "100" and time.time() < deadline:
                time.sleep(0.2)
        # The events follow the eviction; a subscriber that was cut off never gets the rest.
        deadline = time.time() + 10
        while len(events) < 500 and time.time() < deadline:
            time.sleep(0.2)
        if how != "sweep":
            peak = d.peak_rss_mb()
            d.stop()
            if os.environ.get("BENCH_LOG"):
                print("\n".join(l for l in d.text().splitlines() if "evicted" not in l))
        left = int(redis.cli("ZCARD", "presence:long:online"))
        return {"id_bytes": id_bytes, "how": how, "peak_rss_mb": round(peak, 1),
                "events_received": len(events),
                "largest_event_bytes": max(events, default=0), "members_left": left}
    finally:
        redis.stop()


def soak(binary, seconds, seed=2):
    """simulate against the daemon for `seconds` of vanishing users, with incidents at random
    moments (every 8 to 16 s) in random order: Redis killed and restarted (append-only file
    fsynced on every write), Redis paused past the ttl, the daemon paused for a ttl."""
    import random
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="soak-")
    redis = Redis(work, extra=("--appendonly", "yes", "--appendfsync", "always",
                               "--notify-keyspace-events", "KEA"))
    try:
        port = free_port()
        sweeps = ('[sweeps.typing]\nenabled = false\n'
                  '[sweeps.online]\nttl = "6s"\nschedule = "1s"\n')
        cfg = write(os.path.join(work, "s.toml"),
                    f'[http]\nlisten = "127.0.0.1:{port}"\n[log]\nlevel = "warn"\n{sweeps}')
        common.BIN = binary
        d = Daemon(cfg, redis, port)
        d.wait_ready()
        sim = subprocess.Popen(
            common.tools(cfg, redis, "simulate", "--json", "--conversations", "2000", "--users", "10",
                           "--heartbeat", "2s", "--vanish-rate", "0.2", "--duration", f"{seconds}s"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = time.time()
        chaos = []
        while time.time() - started < seconds - 15:
            time.sleep(rng.uniform(8, 16))
            incident = rng.choice(("kill", "pause-redis", "pause-daemon"))
            if incident == "kill":
                redis.kill_restart()
                chaos.append("Redis kill -9 + restart")
            elif incident == "pause-redis":
                redis.signal(signal.SIGSTOP)
                time.sleep(9)
                redis.signal(signal.SIGCONT)
                chaos.append("Redis SIGSTOP 9 s (1.5 x ttl)")
            else:
                d.proc.send_signal(signal.SIGSTOP)
                time.sleep(6)
                d.proc.send_signal(signal.SIGCONT)
                chaos.append("daemon SIGSTOP 6 s (1 x ttl)")
        out, err = sim.communicate(timeout=seconds + 120)
        report = json.loads(out)
        outages = d.metric("presence_sweeper_redis_outages_total")
        holds = d.metric("presence_sweeper_storm_holds_total")
        lost = d.metric("presence_sweeper_events_failed_total")
        peak = d.peak_rss_mb()
        d.stop()
        keys = ("users_vanished", "evictions", "false_evictions", "duplicate_events", "missed_zombies",
                "lost_in_restart", "unobserved_evictions", "unverified_zombies", "redis_outages",
                "redis_restarts", "subscription_gaps", "failed_heartbeat_calls", "eviction_lag_seconds", "ok")
        result = {k: report[k] for k in keys}
        result.update({"seconds": seconds, "chaos": chaos, "daemon_outage_credits": outages,
                       "daemon_storm_holds": holds, "daemon_events_failed": lost,
                       "daemon_peak_rss_mb": round(peak, 1)})
        print(f"soak {seconds} s, {len(chaos)} incidents ({', '.join(chaos)}): "
              f"{result['users_vanished']} vanished, {result['evictions']} announced, "
              f"{result['false_evictions']} false, {result['duplicate_events']} duplicates, "
              f"{result['missed_zombies']} missed, {result['lost_in_restart']} lost in a restart, "
              f"{result['unobserved_evictions']} unobserved; ok={result['ok']}", flush=True)
        return result
    finally:
        redis.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="long-ids,soak")
    ap.add_argument("--soak-seconds", type=int, default=120)
    ap.add_argument("--seed", type=int, default=2, help="the soak's incidents, reproducibly (2: all three kinds)")
    ap.add_argument("--binary", default=None)
    ap.add_argument("--skip-build", action="store_true")
    a = ap.parse_args()
    if not a.skip_build and not a.binary:
        build()
    binary = a.binary or common.BIN
    results = {}
    stages = a.stages.split(",")
    if "long-ids" in stages:
        results["long_ids"] = [long_ids(binary, n, how)
                               for how in ("run", "sweep") for n in (16 * 1024, 1024)]
        for r in results["long_ids"]:
            print(f"long ids {r['id_bytes']:>6} B, {r['how']:>5}: peak RSS {r['peak_rss_mb']} MB, "
                  f"{r['events_received']}/500 events received, largest {r['largest_event_bytes']} B, "
                  f"{r['members_left']} members left", flush=True)
    if "soak" in stages:
        results["soak"] = soak(binary, a.soak_seconds, a.seed)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
