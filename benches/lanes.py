#!/usr/bin/env python3
"""How many deadline-check reads a second one client gets through a busy Redis over one
connection against several, side by side in one run: whether the daemon's one data connection
per primary caps its checks when the apps' connections keep Redis busy.

A Redis of our own holds --keys sorted sets of one member. --hogs connections keep it busy: each
writes pipelines of a spin script (`EVALSHA`, about --spin iterations a call) as fast as Redis
takes them, standing for the apps' connections in a burst. Then rounds of checks, the way the
daemon sends them: --in-flight `ZRANGE key 0 1 WITHSCORES` at once, over one connection (all in
one pipeline) or over N (--in-flight / N each), each round waiting for every reply. Keys checked
a second, alternating one and N for --trials trials.

Redis reads each readable connection at most 16 KB per turn of its event loop; when the other
connections keep it busy, a turn is long, and a client's share of it grows with its connections.
(docs/design.md, "A slow hour", has what this showed and why the daemon still uses one.)

usage: python3 benches/lanes.py [--hogs 8] [--connections 4] [--in-flight 1600] [--trials 3]
                                [--json FILE]
needs: redis-server and redis-cli on PATH.
"""

import argparse
import os
import shutil
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Redis, keep_json, resp  # noqa: E402

SPIN = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return x"


class Hog:
    """A connection that keeps Redis busy: pipelines of the spin script, its replies drained."""

    def __init__(self, redis, sha, spin):
        self.sock = socket.create_connection(("127.0.0.1", redis.port))
        self.calls = resp("EVALSHA", sha, "0", spin) * 200
        self.stopping = False
        threading.Thread(target=self._drain, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _drain(self):
        while not self.stopping:
            try:
                if not self.sock.recv(1 << 20):
                    return
            except OSError:
                return

    def _write(self):
        while not self.stopping:
            try:
                self.sock.sendall(self.calls)
            except OSError:
                return

    def stop(self):
        self.stopping = True
        self.sock.close()


def read_replies(sock, n):
    """Reads until `n` `ZRANGE ... WITHSCORES` replies of one member (`*2`) have come."""
    got, seen = b"", 0
    while seen < n:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("Redis closed a connection")
        got += chunk
        seen = got.count(b"*2\r\n")
    return got


def checks_per_second(redis, keys, connections, in_flight, rounds):
    socks = [socket.create_connection(("127.0.0.1", redis.port)) for _ in range(connections)]
    per = in_flight // connections
    start, done, at = time.time(), 0, 0
    try:
        for _ in range(rounds):
            for s in socks:
                s.sendall(b"".join(resp("ZRANGE", f"presence:c{(at + i) % keys}:online", 0, 1, "WITHSCORES")
                                   for i in range(per)))
                at += per
            for s in socks:
                read_replies(s, per)
            done += per * connections
        return done / (time.time() - start)
    finally:
        for s in socks:
            s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--hogs", type=int, default=8)
    ap.add_argument("--spin", type=int, default=300)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=1600)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="presence-sweeper-lanes-")
    redis = Redis(work)
    hogs = []
    rows = {"redis": redis.version(), "hogs": args.hogs, "in_flight": args.in_flight, "trials": []}
    try:
        sha = redis.cli("SCRIPT", "LOAD", SPIN)
        seed = socket.create_connection(("127.0.0.1", redis.port))
        seed.sendall(b"".join(resp("ZADD", f"presence:c{i}:online", 1, "u") for i in range(args.keys)))
        got = b""
        while got.count(b"\r\n") < args.keys:
            got += seed.recv(1 << 20)
        seed.close()
        hogs = [Hog(redis, sha, args.spin) for _ in range(args.hogs)]
        time.sleep(1)
        print(f"{args.hogs} connections keep Redis busy; {args.in_flight} reads in flight a round", flush=True)
        for t in range(args.trials):
            one = checks_per_second(redis, args.keys, 1, args.in_flight, args.rounds)
            many = checks_per_second(redis, args.keys, args.connections, args.in_flight, args.rounds)
            rows["trials"].append({"one": one, "many": many})
            print(f"  trial {t + 1}: 1 connection {one:,.0f} keys/s; {args.connections} connections "
                  f"{many:,.0f} keys/s ({many / one:.2f}x)", flush=True)
    finally:
        for h in hogs:
            h.stop()
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    keep_json(args.json, rows)


if __name__ == "__main__":
    main()
