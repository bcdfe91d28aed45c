"""A managed Redis that refuses CONFIG (the command renamed away, as hosted services do) but
publishes keyspace notifications: what the sweeper costs Redis there.

300,000 unrelated keys (`DEBUG POPULATE`) beside 2,000 conversations x 4 users heartbeating every
2 s (online ttl 8 s), typists, a brand-new conversation every second; `notify-keyspace-events KEA`
set at start, `rename-command CONFIG ""`. Three phases back to back on one Redis, as in
steady.py: the traffic alone, the sweeper as shipped (it must find out from the notices
themselves that notifications flow), and full passes on the schedules (what it did before: the
typing sweep walks the whole keyspace every second). The sweeper's share is Redis's main-thread
CPU (`INFO cpu` deltas) in a phase minus the traffic's alone, over the same window.

usage: python3 benches/managed.py [--noise N] [--duration S] [--window S] [--skip-build] [--json FILE]
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parse_and_build  # noqa: E402
from steady import fmt, lag, scenario  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--noise", type=int, default=300_000, help="unrelated keys")
    ap.add_argument("--duration", type=int, default=80, help="seconds of traffic per phase")
    ap.add_argument("--window", type=int, default=60, help="seconds of CPU measured per phase")
    args = parse_and_build(ap)
    work = tempfile.mkdtemp(prefix="presence-sweeper-managed-")
    traffic = ["--conversations", "2000", "--users", "4", "--heartbeat", "2s", "--typing",
               "--new-conversations", "60", "--grace", "12s"]
    try:
        r = scenario("managed", work,
                     ["--notify-keyspace-events", "KEA", "--enable-debug-command", "local",
                      "--rename-command", "CONFIG", ""],
                     args.noise, '[sweeps.online]\nttl = "8s"\n', traffic, args.duration, args.window,
                     warmup=15.0)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| how | Redis CPU | the sweeper's share | notifications in use | lag p99: known / new keys / typists |")
    print("|---|---|---|---|---|")
    for how in ("traffic alone", "deadlines", "full passes"):
        row = r[how]
        rep = row["report"]
        share = row.get("sweeper_redis_core")
        print(f"| {how} | {row['redis_core']:.2%} | {'' if share is None else f'{share:.2%}'} | "
              f"{row.get('notifications_in_use', '')} | "
              f"{fmt(lag(rep, 'eviction_lag_seconds.p99'))} / {fmt(lag(rep, 'new_key_eviction_lag_seconds.p99'))} / "
              f"{fmt(lag(rep.get('typing') or {}, 'stop_lag_seconds.p99'))} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=2)


if __name__ == "__main__":
    main()
