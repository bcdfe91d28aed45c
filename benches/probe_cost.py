#!/usr/bin/env python3
"""What a deadline check's read costs Redis per key, with and without `PTTL` (the read that lets
the index look at a key again when its own TTL ends), in one run.

Seeds KEYS sorted sets of MEMBERS members each, every key with a TTL (as the README's heartbeat
leaves it), then sends the check's read of every key, `ZRANGE key 0 0 WITHSCORES` and `ZCARD`
("before") or those and `PTTL key` ("after"), streamed through `redis-cli --pipe` (the
per-key work is the check's; the pipelines are deeper than its batches), the two alternating
for `--rounds` rounds so that the machine's drift falls on both alike. Reports Redis main-thread
CPU per key from `INFO cpu` deltas. Needs redis-server and redis-cli on PATH.

    python3 benches/probe_cost.py [--keys 100000] [--rounds 5]
"""

import argparse
import os
import subprocess
import tempfile

from common import Redis, resp

SEED = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  local key = 'presence:c' .. i .. ':online'
  for u = 1, tonumber(ARGV[3]) do
    redis.call('ZADD', key, 1764460000 + u, 'user' .. u)
  end
  redis.call('EXPIRE', key, 3600)
end
"""


def pipeline_file(work, keys, pttl):
    """Every key's read, as the check sends it."""
    path = os.path.join(work, f"reads-{int(pttl)}.resp")
    with open(path, "wb") as f:
        for i in range(keys):
            key = f"presence:c{i}:online"
            f.write(resp("ZRANGE", key, "0", "0", "WITHSCORES"))
            f.write(resp("ZCARD", key))
            if pttl:
                f.write(resp("PTTL", key))
    return path


def send(redis, path):
    with open(path, "rb") as f:
        subprocess.run(["redis-cli", "-p", str(redis.port), "--pipe"], stdin=f, check=True,
                       stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        redis = Redis(work)
        try:
            for start in range(0, args.keys, 1000):
                end = min(start + 1000, args.keys) - 1
                redis.cli("EVAL", SEED, "0", str(start), str(end), str(args.members))
            files = {p: pipeline_file(work, args.keys, p) for p in (False, True)}
            cost = {False: [], True: []}
            for _ in range(args.rounds):
                for pttl in (False, True):
                    before = redis.cpu()
                    send(redis, files[pttl])
                    cost[pttl].append((redis.cpu() - before) / args.keys * 1e6)
            print(f"redis {redis.version()}, {args.keys} keys x {args.members} members, "
                  f"{args.rounds} rounds alternating")
            for pttl, label in ((False, "ZRANGE 0 0 + ZCARD (before)"),
                                (True, "ZRANGE 0 0 + ZCARD + PTTL (after)")):
                runs = sorted(cost[pttl])
                print(f"  {label:36} median {runs[len(runs) // 2]:.3f} us/key "
                      f"(min {runs[0]:.3f}, max {runs[-1]:.3f})")
        finally:
            redis.stop()


if __name__ == "__main__":
    main()
