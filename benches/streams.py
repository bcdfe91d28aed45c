#!/usr/bin/env python3
"""Leave events an app can rely on (issue 24's targets), measured side by side in one run against
redis-server processes of its own on 127.0.0.1:

  cpu        Redis CPU per evicted member of a one-shot pass (`presence-sweeper sweep`), KEYS keys x
             20 members, 2 stale in each, on a fresh server per phase, phases alternating REPEAT
             times: no stream; a stream per conversation (member events); the same with batch
             events; one fixed stream for every conversation. Also Redis memory per key after the
             pass (used_memory delta): the new streams' cost.
  mass       one room of 10,000 members, 5,000 stale, one pass: messages and bytes published,
             member vs batch events (without a stream, and with one).
  offline    `presence-sweeper run` with a stream; a consumer following the README's recipe
             goes offline for OFFLINE seconds while 500 zombies leave, then catches up.
  aof        the same consumer across a Redis restart with AOF (kill -9, appendfsync always).
  flush      a trim past the consumer's id, and a FLUSHALL: the consumer learns it and reloads.
  sweepers   two `sweep` passes at once on 20,000 keys: entries per leave, vacated per emptied room.
  cluster    a 3-primary cluster, hash-tagged keys, a stream per conversation: entries per leave,
             live members removed.
  hostile    40 ids of 16 KiB that are not UTF-8, batch events: valid JSON, largest event, all listed.

usage: python3 benches/streams.py [--stages cpu,mass,offline,aof,flush,sweepers,cluster,hostile]
                                  [--keys N] [--repeat N] [--offline S] [--node-bytes N]
                                  [--skip-build] [--json FILE]
needs: redis-server, redis-cli on PATH; cargo; python3 (redis-py is installed into the private
virtualenv benches/bench.py uses, under ~/.cache/presence-sweeper-bench).
"""

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Daemon, Redis, build, free_port, sweeper, tools, write  # noqa: E402

STAGES = ["cpu", "mass", "offline", "aof", "flush", "sweepers", "cluster", "hostile"]

BASE = """
[http]
listen = "127.0.0.1:{http}"
[log]
level = "warn"
[sweeps.typing]
enabled = false
[sweeps.online]
ttl = "{ttl}"
{extra}
"""


def redis_py():
    """redis-py from the benches' private virtualenv (made by benches/bench.py's baseline)."""
    venv = os.path.expanduser("~/.cache/presence-sweeper-bench/venv")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "redis"], check=True)
    site = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                           "import site; print(site.getsitepackages()[0])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    sys.path.insert(0, site)
    import redis  # noqa: E402
    return redis


def config(work, name, ttl="1h", extra="", http=0):
    return write(os.path.join(work, name), BASE.format(ttl=ttl, extra=extra, http=http))


def sweep(cfg, redis, env=None):
    p = subprocess.run(sweeper(cfg, redis, "sweep", "--sweep", "online"), capture_output=True,
                       text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"sweep failed: {p.stdout}{p.stderr}")
    line = p.stdout.strip().splitlines()[-1]
    return {k: float(v) for k, v in (f.split("=", 1) for f in line.split() if "=" in f)}


# --- cpu -------------------------------------------------------------------------------------

CPU_PHASES = [
    ("no stream", ""),
    ("stream per conversation, member events", 'stream = "presence:{hash_tag}:log"'),
    ("stream per conversation, batch events", 'stream = "presence:{hash_tag}:log"\nevent_shape = "batch"'),
    ("one fixed stream, member events", 'stream = "presence-sweeper:leaves"'),
]


def stage_cpu(work, keys, repeat, node_bytes=None):
    rows = {label: [] for label, _ in CPU_PHASES}
    parts = {label: [] for label, _ in CPU_PHASES}
    memory = {label: [] for label, _ in CPU_PHASES}
    for run in range(repeat):
        for label, extra in CPU_PHASES:
            d = tempfile.mkdtemp(dir=work)
            redis = Redis(d, extra=("--stream-node-max-bytes", str(node_bytes)) if node_bytes else ())
            try:
                cfg = config(d, "c.toml", extra=extra)
                env = dict(os.environ, PRESENCE_SWEEPER__REDIS__COMMAND_TIMEOUT="120s")
                subprocess.run(tools(cfg, redis, "seed", "--conversations", str(keys), "--members", "20",
                                     "--stale-fraction", "0.1"), check=True, capture_output=True, env=env)
                time.sleep(2)
                redis.cli("CONFIG", "RESETSTAT")
                mem0 = int(redis.info("memory")["used_memory"])
                cpu0 = redis.cpu()
                s = sweep(cfg, redis)
                cpu = redis.cpu() - cpu0
                memory[label].append((int(redis.info("memory")["used_memory"]) - mem0) / keys)
                assert int(s["evicted"]) == 2 * keys, s
                rows[label].append(cpu / s["evicted"] * 1e6)
                parts[label].append({k: v / s["evicted"] for k, v in call_parts(redis).items()})
                print(f"  run {run + 1} {label}: {cpu:.2f} s Redis CPU, {rows[label][-1]:.2f} us per evicted "
                      f"member, {int(s['events_published'])} events, {memory[label][-1]:+.0f} bytes of memory "
                      "per key", flush=True)
            finally:
                redis.stop()
    base = sorted(rows["no stream"])[len(rows["no stream"]) // 2]
    out = []
    for label, _ in CPU_PHASES:
        r = sorted(rows[label])
        med = r[len(r) // 2]
        split = {k: sorted(p[k] for p in parts[label])[len(r) // 2] for k in parts[label][0]}
        mem = sorted(memory[label])[len(r) // 2]
        out.append({"phase": label, "us_per_member": med, "range": [r[0], r[-1]],
                    "vs_no_stream": med / base - 1, "parts": split, "bytes_per_key": mem})
    return out


# Commands a pass sends around its evictions, not inside them.
OUTSIDE = {"evalsha", "eval", "exec", "multi", "scan", "info", "config", "time", "client", "hello",
           "ping", "select", "script", "cluster", "acl", "memory", "type"}


def call_parts(redis):
    """Where the evicting calls' Redis time went (INFO commandstats, microseconds; a command a
    script runs counts both in its own line and in the script's): the EVALSHA or EXEC calls in
    all, the commands run inside them, the rest (Lua's own work: building the events, moving
    arguments and replies between Lua and Redis; or queueing a transaction), and XADD alone."""
    stats = {}
    for line in redis.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            stats[name] = int(dict(f.split("=", 1) for f in rest.split(","))["usec"])
    calls = sum(stats.get(k, 0) for k in ("evalsha", "eval", "exec"))
    inside = sum(v for k, v in stats.items() if k not in OUTSIDE)
    # A transaction's own line does not hold its PUBLISHes (the daemon sends them after EXEC).
    inside_calls = inside - (stats.get("publish", 0) if "exec" in stats else 0)
    # EXEC's own line and its commands' overlap in ways Redis versions count differently: a
    # transaction's own work is not told apart (-1).
    own = -1 if "exec" in stats else calls - inside_calls
    return {"calls": calls, "inside": inside_calls, "own": own, "xadd": stats.get("xadd", 0)}


# --- mass ------------------------------------------------------------------------------------

def stage_mass(work, rp):
    out = []
    for stream in [False, True]:
        for shape in ["member", "batch"]:
            d = tempfile.mkdtemp(dir=work)
            redis = Redis(d)
            try:
                extra = f'event_shape = "{shape}"'
                if stream:
                    extra += '\nstream = "presence:{hash_tag}:log"'
                cfg = config(d, "c.toml", ttl="45s", extra=extra)
                r = rp.Redis(port=redis.port)
                now = float(r.time()[0])
                for start in range(0, 10_000, 1000):
                    r.zadd("presence:big:online", {
                        f"user-{i:05}": (now - 100 if i % 2 else now + 3600) for i in range(start, start + 1000)})
                got = {"messages": 0, "bytes": 0, "largest": 0}
                done = threading.Event()
                ps = r.pubsub()
                ps.subscribe("presence:big:events")

                def listen():
                    while not done.is_set():
                        m = ps.get_message(timeout=0.2)
                        if m and m["type"] == "message":
                            got["messages"] += 1
                            got["bytes"] += len(m["data"])
                            got["largest"] = max(got["largest"], len(m["data"]))
                t = threading.Thread(target=listen)
                t.start()
                time.sleep(0.3)
                s = sweep(cfg, redis)
                time.sleep(1.0)
                done.set()
                t.join()
                assert int(s["evicted"]) == 5000, s
                row = {"stream": stream, "shape": shape, **got}
                out.append(row)
                print(f"  mass leave, {'stream' if stream else 'no stream'}, {shape}: {got['messages']} messages, "
                      f"{got['bytes']:,} bytes (largest {got['largest']:,})", flush=True)
            finally:
                redis.stop()
    return out


# --- the consumer of the README's recipe -----------------------------------------------------

def older(a, b):
    pa, pb = a.split("-"), b.split("-")
    return (int(pa[0]), int(pa[1])) < (int(pb[0]), int(pb[1]))


class Consumer:
    """Live pub/sub plus catch-up from the stream, as the README's recipe says."""

    def __init__(self, rp, port, key, stream, channel):
        self.rp, self.port, self.key, self.stream, self.channel = rp, port, key, stream, channel
        self.applied, self.reloads, self.cursor, self.roster = [], 0, "0-0", set()
        self.connect()
        self.snapshot()

    def connect(self):
        self.r = self.rp.Redis(port=self.port)
        self.ps = self.r.pubsub()
        self.ps.subscribe(self.channel)

    def snapshot(self):
        pipe = self.r.pipeline(transaction=True)
        pipe.zrange(self.key, 0, -1)
        pipe.xrevrange(self.stream, "+", "-", count=1)
        roster, last = pipe.execute()
        self.roster = {m.decode() for m in roster}
        self.cursor = last[0][0].decode() if last else "0-0"

    def reload(self):
        self.reloads += 1
        self.snapshot()

    def apply(self, ev, id_):
        users = [le["user_id"] for le in ev["leaves"]] if "leaves" in ev else [ev["user_id"]]
        for u in users:
            self.roster.discard(u)
            self.applied.append(u)
        self.cursor = id_

    def drain(self, wait=0.5):
        deadline = time.time() + wait
        while time.time() < deadline:
            m = self.ps.get_message(timeout=0.1)
            if m and m["type"] == "message":
                self.on_event(json.loads(m["data"]))
                deadline = time.time() + wait

    def on_event(self, ev):
        if not older(self.cursor, ev["id"]):
            return
        if ev["prev"] == self.cursor:
            self.apply(ev, ev["id"])
        else:
            self.catch_up()

    def catch_up(self):
        if self.cursor == "0-0":
            return self.reload()
        entries = self.r.xrange(self.stream, self.cursor, "+")
        if not entries:
            return self.reload()
        if entries[0][0].decode() == self.cursor:
            entries = entries[1:]
        for id_, fields in entries:
            ev = json.loads(fields[b"event"])
            if ev["prev"] != self.cursor:
                return self.reload()
            self.apply(ev, id_.decode())

    def disconnect(self):
        self.ps.close()
        self.r.close()

    def reconnect(self):
        self.connect()
        self.catch_up()


def daemon_config(work, http, extra=""):
    return config(work, "d.toml", ttl="5s", http=http,
                  extra='schedule = "1s"\nstream = "presence:{hash_tag}:log"\n' + extra)


def stage_offline(work, rp, offline):
    d = tempfile.mkdtemp(dir=work)
    redis = Redis(d, extra=("--notify-keyspace-events", "KEA"))
    http = free_port()
    cfg = daemon_config(d, http)
    daemon = Daemon(cfg, redis, http)
    try:
        daemon.wait_ready()
        r = rp.Redis(port=redis.port)
        key, stream = "presence:c1:online", "presence:{presence:c1:online}:log"
        now = float(r.time()[0])
        r.zadd(key, {f"live{i}": now + 3600 for i in range(10)})
        c = Consumer(rp, redis.port, key, stream, "presence:c1:events")
        # One leave while it listens: its cursor is then an entry of the stream. (A cursor of
        # 0-0, taken when the room had no stream, cannot be resumed: the recipe reloads.)
        r.zadd(key, {"first": float(r.time()[0]) - 10})
        c.drain(wait=3)
        c.disconnect()
        # 500 zombies, whose windows close while the consumer is away.
        t0 = time.time()
        for i in range(500):
            r.zadd(key, {f"z{i}": float(r.time()[0]) - 5 + (offline - 10) * i / 500})
        time.sleep(max(0.0, offline - (time.time() - t0)))
        left = r.zcard(key)
        c.reconnect()
        c.drain()
        caught = [u for u in c.applied if u.startswith("z")]
        row = {"offline_s": offline, "zombies": 500, "applied": len(caught),
               "distinct": len(set(caught)), "reloads": c.reloads, "left_in_set": left}
        print(f"  offline {offline} s while 500 zombies left: caught up {row['applied']} "
              f"({row['distinct']} distinct), reloads {c.reloads}", flush=True)
        return row
    finally:
        daemon.stop()
        redis.stop()


def stage_aof(work, rp):
    d = tempfile.mkdtemp(dir=work)
    redis = Redis(d, extra=("--appendonly", "yes", "--appendfsync", "always"))
    http = free_port()
    cfg = daemon_config(d, http)
    daemon = Daemon(cfg, redis, http)
    try:
        daemon.wait_ready()
        r = rp.Redis(port=redis.port)
        key, stream = "presence:c2:online", "presence:{presence:c2:online}:log"
        r.zadd(key, {"live": float(r.time()[0]) + 3600})
        c = Consumer(rp, redis.port, key, stream, "presence:c2:events")
        r.zadd(key, {f"a{i}": float(r.time()[0]) - 10 for i in range(50)})
        time.sleep(3)
        c.drain()
        before = len(c.applied)
        c.disconnect()
        redis.kill_restart()
        r = rp.Redis(port=redis.port)
        entries = r.xlen(stream)
        r.zadd(key, {f"b{i}": float(r.time()[0]) - 10 for i in range(50)})
        time.sleep(8)  # the daemon finds Redis again; a restart gives everyone a ttl of credit
        c.reconnect()
        c.drain()
        row = {"applied_before": before, "entries_after_restart": entries, "applied": len(c.applied),
               "distinct": len(set(c.applied)), "reloads": c.reloads}
        print(f"  AOF restart: the stream kept {entries} entries; the consumer applied {len(c.applied)} leaves "
              f"({row['distinct']} distinct), reloads {c.reloads}", flush=True)
        return row
    finally:
        daemon.stop()
        redis.stop()


def stage_flush(work, rp):
    d = tempfile.mkdtemp(dir=work)
    redis = Redis(d)
    try:
        cfg = config(d, "c.toml", ttl="45s", extra='stream = "presence:{hash_tag}:log"')
        r = rp.Redis(port=redis.port)
        key, stream = "presence:c3:online", "presence:{presence:c3:online}:log"
        r.zadd(key, {"live": float(r.time()[0]) + 3600, "z0": 1})
        c = Consumer(rp, redis.port, key, stream, "presence:c3:events")
        sweep(cfg, redis)
        c.drain()
        c.disconnect()
        r.zadd(key, {f"t{i}": 1 for i in range(5)})
        sweep(cfg, redis)
        r.xtrim(stream, maxlen=1, approximate=False)
        c.reconnect()
        trimmed = c.reloads
        c.drain()
        r.flushall()
        r.zadd(key, {"live": float(r.time()[0]) + 3600, "f0": 1})
        sweep(cfg, redis)
        c.drain()
        row = {"reload_after_trim": trimmed, "reloads_after_flushall": c.reloads - trimmed,
               "roster": sorted(c.roster)}
        print(f"  trimmed past: {trimmed} reload; FLUSHALL: {row['reloads_after_flushall']} reload; "
              f"roster {row['roster']}", flush=True)
        return row
    finally:
        redis.stop()


def stage_sweepers(work, rp):
    d = tempfile.mkdtemp(dir=work)
    redis = Redis(d)
    try:
        cfg = config(d, "c.toml", extra='stream = "presence:{hash_tag}:log"\n[evict]\nbatch_keys = 50')
        r = rp.Redis(port=redis.port)
        now = float(r.time()[0])
        pipe = r.pipeline(transaction=False)
        for c in range(20_000):
            members = {f"z{i}": now - 7200 for i in range(3)}
            if c % 2 == 0:
                members["live"] = now + 3600
            pipe.zadd(f"presence:s{c}:online", members)
        pipe.execute()
        procs = [subprocess.Popen(sweeper(cfg, redis, "sweep", "--sweep", "online"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        evicted = 0
        for p in procs:
            out, _ = p.communicate()
            evicted += int(float(out.strip().splitlines()[-1].split("evicted=")[1].split()[0]))
        entries = vacated = 0
        dup = 0
        for c in range(20_000):
            got = r.xrange(f"presence:{{presence:s{c}:online}}:log")
            users = [json.loads(f[b"event"])["user_id"] for _, f in got]
            entries += len(got)
            dup += len(users) - len(set(users))
            vacated += sum(1 for _, f in got if json.loads(f[b"event"]).get("vacated"))
        row = {"zombies": 60_000, "evicted": evicted, "entries": entries, "duplicates": dup,
               "vacated": vacated, "emptied_rooms": 10_000}
        print(f"  two sweepers: {entries} entries for 60,000 zombies ({dup} twice); vacated {vacated} "
              f"for 10,000 emptied rooms", flush=True)
        return row
    finally:
        redis.stop()


def stage_cluster(work, rp):
    nodes = []
    try:
        for _ in range(3):
            d = tempfile.mkdtemp(dir=work)
            nodes.append(Redis(d, extra=("--cluster-enabled", "yes", "--cluster-config-file",
                                         os.path.join(d, "nodes.conf")), port=free_port(55536)))
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
                        "--cluster-yes"], check=True, capture_output=True)
        from redis.cluster import RedisCluster, ClusterNode
        rc = None
        for _ in range(100):
            try:
                rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", n.port) for n in nodes])
                if all(n.info("cluster").get("cluster_state") == "ok" for n in
                       [rp.Redis(port=x.port) for x in nodes]):
                    break
            except Exception:  # noqa: BLE001 - the cluster is still forming
                pass
            time.sleep(0.2)
        now = float(rc.time()[0])
        for c in range(3000):
            rc.zadd(f"presence:{{c{c}}}:online", {"z0": now - 7200, "z1": now - 7200, "live": now + 3600})
        cfg = config(tempfile.mkdtemp(dir=work), "c.toml", extra=(
            'stream = "presence:{hash_tag}:log"\n[redis]\nmode = "cluster"\nnodes = ['
            + ", ".join(f'"redis://127.0.0.1:{n.port}"' for n in nodes) + "]"))
        p = subprocess.run(sweeper(cfg, nodes[0], "sweep", "--sweep", "online"), capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"cluster sweep failed: {p.stdout}{p.stderr}")
        entries = dup = live_gone = 0
        for c in range(3000):
            got = rc.xrange(f"presence:{{c{c}}}:log")
            users = [json.loads(f[b"event"])["user_id"] for _, f in got]
            entries += len(users)
            dup += len(users) - len(set(users))
            live_gone += 0 if rc.zscore(f"presence:{{c{c}}}:online", "live") else 1
        row = {"zombies": 6000, "entries": entries, "duplicates": dup, "false_leaves": live_gone}
        print(f"  cluster: {entries} entries for 6,000 zombies ({dup} twice), {live_gone} live members removed",
              flush=True)
        return row
    finally:
        for n in nodes:
            n.stop()


def stage_hostile(work, rp):
    d = tempfile.mkdtemp(dir=work)
    redis = Redis(d)
    try:
        cfg = config(d, "c.toml", ttl="45s", extra='stream = "presence:{hash_tag}:log"\nevent_shape = "batch"')
        r = rp.Redis(port=redis.port)
        ids = []
        for i in range(40):
            b = bytearray(b"abcdefghijklmnopqrstuvwxyz" * 631)[:16384]
            b[0] = i
            for j in range(7, len(b), 97):
                b[j] = 0xFF
            ids.append(bytes(b))
        r.zadd("presence:h:online", {m: 1 for m in ids})
        ps = r.pubsub()
        ps.subscribe("presence:h:events")
        time.sleep(0.2)
        sweep(cfg, redis)
        listed, largest, events, valid = [], 0, 0, True
        deadline = time.time() + 3
        while time.time() < deadline:
            m = ps.get_message(timeout=0.2)
            if m and m["type"] == "message":
                events += 1
                largest = max(largest, len(m["data"]))
                try:
                    ev = json.loads(m["data"])
                except ValueError:
                    valid = False
                    continue
                listed += [base64.b64decode(le["user_id_base64"]) for le in ev["leaves"]]
        row = {"events": events, "largest_bytes": largest, "valid_json": valid,
               "all_listed": sorted(listed) == sorted(ids)}
        print(f"  hostile ids: {events} events, largest {largest:,} bytes (max_bytes 65,536), valid JSON "
              f"{valid}, every member listed {row['all_listed']}", flush=True)
        return row
    finally:
        redis.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--offline", type=float, default=60.0)
    ap.add_argument("--node-bytes", type=int, help="cpu: run Redis with this stream-node-max-bytes")
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    stages = args.stages.split(",")
    if not args.skip_build:
        build()
    rp = redis_py()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for stage in STAGES:
            if stage not in stages:
                continue
            print(f"{stage}:", flush=True)
            if stage == "cpu":
                results[stage] = stage_cpu(work, args.keys, args.repeat, args.node_bytes)
            elif stage == "offline":
                results[stage] = stage_offline(work, rp, args.offline)
            else:
                results[stage] = globals()[f"stage_{stage}"](work, rp)
    if "cpu" in results:
        print("\n| phase | Redis CPU per evicted member (us) | runs | vs no stream | memory per key (bytes) |"
              "\n|---|---|---|---|---|")
        for row in results["cpu"]:
            lo, hi = row["range"]
            print(f"| {row['phase']} | {row['us_per_member']:.2f} | {lo:.2f}-{hi:.2f} | "
                  f"{row['vs_no_stream'] * 100:+.0f}% | {row['bytes_per_key']:+,.0f} |")
        print("\nwhere the evicting calls' Redis time went (INFO commandstats, us per evicted member, medians):"
              "\n\n| phase | EVALSHA or EXEC | commands inside | the calls' own work (Lua) | of which XADD |"
              "\n|---|---|---|---|---|")
        for row in results["cpu"]:
            p = row["parts"]
            own = f"{p['own']:.2f}" if p["own"] >= 0 else "-"
            print(f"| {row['phase']} | {p['calls']:.2f} | {p['inside']:.2f} | {own} | {p['xadd']:.2f} |")
    if "mass" in results:
        print("\n| stream | shape | messages | bytes | largest |\n|---|---|---|---|---|")
        for row in results["mass"]:
            print(f"| {'yes' if row['stream'] else 'no'} | {row['shape']} | {row['messages']:,} | "
                  f"{row['bytes']:,} | {row['largest']:,} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
