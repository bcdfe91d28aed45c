#!/usr/bin/env python3
"""What a deadline check's read costs Redis per key, by what the read asks, in one run.

A check asks each key only what its index does not know (`Probing` in the rules crate):

  - "before": what every check asked before: `ZRANGE key 0 0 WITHSCORES`, `ZCARD`, `PTTL`
    (a key's first check still asks all three);
  - "one member": `ZRANGE key 0 1 WITHSCORES` alone, for a key of one member at its last check
    (its lowest score, and its size: 0, 1, or 2 and more), at most of its checks;
  - "sized": `ZRANGE key 0 0 WITHSCORES` and `ZCARD`, for a key of more members;
  - "+ PTTL": one of the last two with `PTTL`, at the checks that read a key's own TTL: of a
    key with one, the check before its checks could reach its end (about one in five for the
    README's key TTL); of a key without one, one check in 32.

Seeds KEYS sorted sets of MEMBERS members each, every key with a TTL (as the README's heartbeat
leaves it), then sends each read of every key through `redis-cli --pipe` (the per-key work is
the check's; the pipelines are deeper than its batches), the reads alternating for `--rounds`
rounds so that the machine's drift falls on all alike. Reports Redis main-thread CPU per key
from `INFO cpu` deltas. Needs redis-server and redis-cli on PATH.

    python3 benches/probe_cost.py [--keys 100000] [--members 1,20] [--rounds 5]
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

# Each read's commands for one key, as the check sends them.
READS = {
    "before: ZRANGE 0 0, ZCARD, PTTL": lambda k: [("ZRANGE", k, "0", "0", "WITHSCORES"), ("ZCARD", k),
                                                   ("PTTL", k)],
    "one member: ZRANGE 0 1": lambda k: [("ZRANGE", k, "0", "1", "WITHSCORES")],
    "one member + PTTL": lambda k: [("ZRANGE", k, "0", "1", "WITHSCORES"), ("PTTL", k)],
    "sized: ZRANGE 0 0, ZCARD": lambda k: [("ZRANGE", k, "0", "0", "WITHSCORES"), ("ZCARD", k)],
}


def pipeline_file(work, keys, name):
    """Every key's read `name`."""
    path = os.path.join(work, f"reads-{list(READS).index(name)}.resp")
    with open(path, "wb") as f:
        for i in range(keys):
            for command in READS[name](f"presence:c{i}:online"):
                f.write(resp(*command))
    return path


def send(redis, path):
    with open(path, "rb") as f:
        subprocess.run(["redis-cli", "-p", str(redis.port), "--pipe"], stdin=f, check=True,
                       stdout=subprocess.DEVNULL)


def measure(work, keys, members, rounds):
    """Redis CPU per key (us) of each read, `rounds` times, on keys of `members` members."""
    redis = Redis(work)
    try:
        for start in range(0, keys, 1000):
            end = min(start + 1000, keys) - 1
            redis.cli("EVAL", SEED, "0", str(start), str(end), str(members))
        files = {name: pipeline_file(work, keys, name) for name in READS}
        cost = {name: [] for name in READS}
        for _ in range(rounds):
            for name in READS:
                before = redis.cpu()
                send(redis, files[name])
                cost[name].append((redis.cpu() - before) / keys * 1e6)
        return redis.version(), cost
    finally:
        redis.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--members", default="1,20", help="members per key, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    for members in (int(m) for m in args.members.split(",")):
        with tempfile.TemporaryDirectory() as work:
            version, cost = measure(work, args.keys, members, args.rounds)
        print(f"redis {version}, {args.keys} keys x {members} members, {args.rounds} rounds alternating")
        for name, runs in cost.items():
            runs = sorted(runs)
            print(f"  {name:34} median {runs[len(runs) // 2]:.3f} us/key "
                  f"(min {runs[0]:.3f}, max {runs[-1]:.3f})", flush=True)


if __name__ == "__main__":
    main()
