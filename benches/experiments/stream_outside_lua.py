"""Experiment for issue 24's CPU target: the stream append outside Lua, as a prototype in Python.

Per batch of 50 keys, on one connection: WATCH the keys and their streams, read the stale members,
the rosters and each stream's last id (`prev`); then MULTI: ZREM, an XADD per event (the JSON built
here), PEXPIRE per stream, EXEC; then PUBLISH each event with its id. Reports Redis CPU per evicted
member (INFO cpu, main thread) beside `presence-sweeper sweep` without a stream, each on a fresh
server seeded alike (KEYS keys x 20 members, 2 stale), twice, alternating.

usage: python3 benches/experiments/stream_outside_lua.py [KEYS]
  FIXED=1      one fixed stream (presence-sweeper:leaves), its last id read once per batch
  NOROSTER=1   entries without the roster (not the event contract: a bound, not a design)
needs: a release build (cargo build --release) and what benches/streams.py needs.
"""
import json, os, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from streams import config, sweep, redis_py
from common import Redis, tools
rp = redis_py()
KEYS = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
BATCH = 50
work = tempfile.mkdtemp()

def seeded():
    d = tempfile.mkdtemp(dir=work)
    r = Redis(d)
    cfg = config(d, "c.toml")
    env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")
    subprocess.run(tools(cfg, r, "seed", "--conversations", str(KEYS), "--members", "20",
                         "--stale-fraction", "0.1"), check=True, capture_output=True, env=env)
    time.sleep(1)
    return r, cfg

def proto(r):
    c = rp.Redis(port=r.port)
    keys = [k for k in c.scan_iter("presence:*:online", count=1000)]
    now = float(c.time()[0])
    cutoff = now - 3600  # the seed's stale members are older than the 1 h ttl
    cpu0 = r.cpu()
    evicted = 0
    conn = c.connection_pool.get_connection()
    def send(cmds):
        conn.send_packed_command(conn.pack_commands(cmds))
        return [conn.read_response() for _ in cmds]
    for i in range(0, len(keys), BATCH):
        batch = keys[i:i + BATCH]
        streams = [b"presence-sweeper:leaves" if os.environ.get("FIXED") else k.replace(b":online", b":log") for k in batch]
        cmds = [("WATCH", *batch, *streams)]
        for k, s in zip(batch, streams):
            cmds.append(("ZRANGE", k, "-inf", f"({cutoff}", "BYSCORE", "LIMIT", 0, 1000, "WITHSCORES"))
            cmds.append(("ZRANGE", k, 0, 99, "REV"))
            cmds.append(("XREVRANGE", s, "+", "-", "COUNT", 1) if not (os.environ.get("FIXED") and k != batch[0]) else ("PING",))
        got = send(cmds)[1:]
        events = []
        tx = [("MULTI",)]
        for j, (k, s) in enumerate(zip(batch, streams)):
            stale, roster, top = got[3 * j:3 * j + 3]
            if not stale:
                continue
            pairs = [tuple(x) for x in stale] if isinstance(stale[0], list) else list(zip(stale[0::2], stale[1::2]))
            members = [m for m, _ in pairs]
            gone = set(members)
            left = [m.decode() for m in roster if m not in gone]
            if not (os.environ.get("FIXED") and j > 0):
                prev = top[0][0].decode() if top else "0-0"
            tx.append(("ZREM", k, *members))
            conv = k.decode().split(":")[1]
            for m, score in pairs:
                ev = json.dumps({"type": "presence.leave", "conversation_id": conv, "user_id": m.decode(),
                                 "reason": "expired", "last_seen": float(score), "timestamp": now,
                                 **({} if os.environ.get("NOROSTER") else {"online": left}), "online_count": len(left), "prev": prev}, separators=(",", ":"))
                tx.append(("XADD", s, "MAXLEN", "~", 10000, "*", "event", ev))
                events.append((f"presence:{conv}:events", ev))
            tx.append(("PEXPIRE", s, 86_400_000))
            evicted += len(members)
        tx.append(("EXEC",))
        replies = send(tx)[-1]
        assert replies is not None, "EXEC aborted"
        ids = [x for x in replies if isinstance(x, bytes)]
        pub = [("PUBLISH", ch, ev[:-1] + f',"id":"{id_.decode()}"}}') for (ch, ev), id_ in zip(events, ids)]
        if pub:
            send(pub)
    return (r.cpu() - cpu0) / evicted * 1e6, evicted

for run in range(2):
    r, cfg = seeded()
    try:
        c0 = r.cpu(); s = sweep(cfg, r); us = (r.cpu() - c0) / s["evicted"] * 1e6
        print(f"run {run+1} sweep, no stream: {us:.2f} us Redis CPU per evicted member ({int(s['evicted'])})", flush=True)
    finally:
        r.stop()
    r, cfg = seeded()
    try:
        us, n = proto(r)
        kind = "one fixed stream" if os.environ.get("FIXED") else "a stream per conversation"
        print(f"run {run+1} prototype (WATCH, MULTI/EXEC, an XADD per event), {kind}: {us:.2f} us ({n})", flush=True)
    finally:
        r.stop()
