"""Experiment for issue 24's CPU target: the stream append outside Lua, as lean as it can be made,
as a prototype in Python.

Redis's cost of a command does not depend on the client's language, so this bounds what the
daemon could reach by moving the stream's work out of the script: per batch of 25 keys (the
script's batch), on one connection, SCAN included in the measured span:

  1. WATCH the keys and their streams, TIME, and per key: the stale members with their scores
     (ZRANGE BYSCORE LIMIT), the roster (ZRANGE REV, no scores), ZCARD, the oldest remaining
     member (ZRANGE BYSCORE LIMIT 0 1); per stream its last id (XREVRANGE COUNT 1), for `prev`;
  2. the events' JSON built here;
  3. MULTI; per key an XADD per event (MAXLEN ~), ZREMRANGEBYRANK, PEXPIRE (per conversation
     only); EXEC (a watched key that changed aborts it: counted, not retried);
  4. PUBLISH each event with its id.

Every event of a batch names as `prev` the last id its stream held before the batch: chaining
them would need ids chosen by the client (XADD <id>), and costs the same bytes.

Reports Redis CPU (main thread) per evicted member beside `presence-sweeper sweep` without a
stream, each on a fresh server seeded alike (KEYS keys x 20 members, 2 stale), alternating, with
the INFO commandstats split and the memory each pass left.

usage: python3 benches/experiments/stream_outside_lua.py [KEYS] [RUNS]
  FIXED=1      one fixed stream (presence-sweeper:leaves) instead of one per conversation
needs: a release build (cargo build --release) and what benches/streams.py needs.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streams import config, sweep, redis_py  # noqa: E402
from common import Redis, tools  # noqa: E402

rp = redis_py()
KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
FIXED = bool(os.environ.get("FIXED"))
BATCH = 25
TTL = 3600  # the seed's stale members are older than the config's 1 h ttl
work = tempfile.mkdtemp()


def seeded():
    d = tempfile.mkdtemp(dir=work)
    r = Redis(d)
    cfg = config(d, "c.toml")
    env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")
    subprocess.run(tools(cfg, r, "seed", "--conversations", str(KEYS), "--members", "20",
                         "--stale-fraction", "0.1"), check=True, capture_output=True, env=env)
    time.sleep(1)
    r.cli("CONFIG", "RESETSTAT")
    return r, cfg


def split(r, evicted):
    """INFO commandstats: microseconds per evicted member of the busiest commands."""
    rows = []
    for line in r.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            usec = int(dict(f.split("=", 1) for f in rest.split(","))["usec"])
            rows.append((usec / evicted, name))
    return " ".join(f"{n}={u:.2f}" for u, n in sorted(rows, reverse=True)[:9])


def proto(r):
    c = rp.Redis(port=r.port, protocol=2)
    conn = c.connection_pool.get_connection()

    def send(cmds):
        conn.send_packed_command(conn.pack_commands(cmds))
        return [conn.read_response() for _ in cmds]

    evicted = aborted = 0
    cursor = 0
    while True:
        cursor, page = c.scan(cursor, match="presence:*:online", count=1000, _type="zset")
        for i in range(0, len(page), BATCH):
            batch = page[i:i + BATCH]
            streams = ([b"presence-sweeper:leaves"] if FIXED
                       else [b"presence:{" + k + b"}:log" for k in batch])
            bound = c.time()
            cutoff = repr(bound[0] + bound[1] / 1e6 - TTL)
            reads = []
            for k in batch:
                reads += [("ZRANGE", k, "-inf", "(" + cutoff, "BYSCORE", "LIMIT", 0, 500, "WITHSCORES"),
                          ("ZRANGE", k, 0, 99, "REV"), ("ZCARD", k),
                          ("ZRANGE", k, "(" + cutoff, "+inf", "BYSCORE", "LIMIT", 0, 1, "WITHSCORES")]
            got = send([("WATCH", *batch, *streams), ("TIME",), *reads,
                        *[("XREVRANGE", s, "+", "-", "COUNT", 1) for s in streams]])
            t = got[1]
            now = int(t[0]) + int(t[1]) / 1e6
            per_key, tops = got[2:2 + 4 * len(batch)], got[2 + 4 * len(batch):]
            prev = {s: (top[0][0].decode() if top else "0-0") for s, top in zip(streams, tops)}
            tx, pubs = [("MULTI",)], []
            for j, k in enumerate(batch):
                s = streams[0] if FIXED else streams[j]
                stale_flat, roster, card = per_key[4 * j:4 * j + 3]
                stale = list(zip(stale_flat[0::2], stale_flat[1::2]))
                if not stale:
                    continue
                conv = k.decode().split(":")[1]
                left = [m.decode() for m in roster if m not in {m for m, _ in stale}]
                for m, score in stale:
                    body = json.dumps({"type": "presence.leave", "conversation_id": conv,
                                       "user_id": m.decode(), "reason": "expired",
                                       "last_seen": float(score), "timestamp": now, "online": left,
                                       "online_count": card - len(stale)}, separators=(",", ":"))[:-1]
                    tx.append(("XADD", s, "MAXLEN", "~", 10000, "*", "event",
                               body + ',"prev":"%s"}' % prev[s]))
                    pubs.append((f"presence:{conv}:events", body, prev[s]))
                tx.append(("ZREMRANGEBYRANK", k, 0, len(stale) - 1))
                if not FIXED:
                    tx.append(("PEXPIRE", s, 86_400_000))
            if len(tx) == 1:
                send([("UNWATCH",)])
                continue
            replies = send(tx + [("EXEC",)])[-1]
            if replies is None:
                aborted += 1
                continue
            ids = [x.decode() for x in replies if isinstance(x, bytes)]
            send([("PUBLISH", ch, body + ',"prev":"%s","id":"%s"}' % (p, id_))
                  for (ch, body, p), id_ in zip(pubs, ids)])
            evicted += len(ids)
        if cursor == 0:
            return evicted, aborted


kind = "one fixed stream" if FIXED else "a stream per conversation"
for run in range(RUNS):
    r, cfg = seeded()
    try:
        m0, c0 = int(r.info("memory")["used_memory"]), r.cpu()
        s = sweep(cfg, r)
        us = (r.cpu() - c0) / s["evicted"] * 1e6
        mem = (int(r.info("memory")["used_memory"]) - m0) / KEYS
        print(f"run {run + 1} sweep, no stream: {us:.2f} us Redis CPU per evicted member "
              f"({int(s['evicted'])}), {mem:+.0f} bytes per key\n    {split(r, s['evicted'])}", flush=True)
    finally:
        r.stop()
    r, cfg = seeded()
    try:
        m0, c0 = int(r.info("memory")["used_memory"]), r.cpu()
        n, aborted = proto(r)
        us = (r.cpu() - c0) / n * 1e6
        mem = (int(r.info("memory")["used_memory"]) - m0) / KEYS
        print(f"run {run + 1} prototype (WATCH, reads, MULTI/EXEC with an XADD per event), {kind}: "
              f"{us:.2f} us ({n}, {aborted} aborted), {mem:+.0f} bytes per key\n    {split(r, n)}", flush=True)
    finally:
        r.stop()
