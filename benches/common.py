"""What the benchmark scripts share: a redis-server of their own, the sweeper's binaries (the
daemon, and presence-sweeper-tools for `seed` and `simulate`), measuring commands. Everything talks
to 127.0.0.1 only."""

import json
import os
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "presence-sweeper")
# `seed` and `simulate`: always this checkout's, also when a script runs another build's daemon.
TOOLS = os.path.join(ROOT, "target", "release", "presence-sweeper-tools")


def free_port(below=65536):
    """A port free now on 127.0.0.1, under `below` (a cluster node needs port + 10000 for its
    bus, so cluster nodes ask for one under 55536)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < below:
            return port
    raise SystemExit(f"no free port under {below}")


def build():
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)


def keep_json(path, results):
    """Writes `results` to `path` (`--json FILE`), if one was given."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2, default=str)


def parse_and_build(ap):
    """Adds the options every script takes (`--skip-build`, `--json FILE`), parses, and builds
    the release binaries unless told not to."""
    ap.add_argument("--skip-build", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.skip_build:
        build()
    return args


class Redis:
    """A redis-server of our own, on a free port, killed at exit."""

    def __init__(self, workdir, wrapper=(), extra=(), port=None):
        self.port = port or free_port()
        self.argv = [*wrapper, "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                     "--save", "", "--appendonly", "no", "--dir", workdir,
                     "--logfile", os.path.join(workdir, "redis.log"),
                     "--slowlog-log-slower-than", "10000", "--slowlog-max-len", "4096", *extra]
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if self.cli("PING", check=False) == "PONG":
                return
            time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def kill_restart(self):
        """SIGKILL, then the same server again on the same port and directory."""
        self.proc.kill()
        self.proc.wait(10)
        self._start()

    def signal(self, sig):
        self.proc.send_signal(sig)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def cli(self, *args, check=True):
        p = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise SystemExit(f"redis-cli {args}: {p.stderr}")
        return p.stdout.strip()

    def info(self, section):
        return dict(l.split(":", 1) for l in self.cli("INFO", section).splitlines() if ":" in l)

    def cpu(self):
        """CPU seconds of Redis's main thread so far: the thread every command runs on."""
        info = self.info("cpu")
        return float(info["used_cpu_sys_main_thread"]) + float(info["used_cpu_user_main_thread"])

    def slowlog(self):
        """(count, max microseconds, commands) of the SLOWLOG entries, then resets it. The bench's
        own SLOWLOG calls are left out: resetting thousands of entries (seeding logs its big
        calls) can itself take over 10 ms, and the sweeper never sends SLOWLOG."""
        import json
        entries = json.loads(self.cli("--json", "SLOWLOG", "GET", "4096") or "[]")
        self.cli("SLOWLOG", "RESET")
        entries = [e for e in entries if str(e[3][0]).upper() != "SLOWLOG"]
        durations = [e[2] for e in entries]
        commands = sorted({" ".join(e[3][:1]) for e in entries})
        return len(durations), max(durations, default=0), commands

    def version(self):
        return self.info("server")["redis_version"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


class Cluster:
    """A Redis Cluster of our own: `primaries` nodes on free ports (under 55536, for their bus
    ports), no replicas, every slot assigned; stopped by `stop()`."""

    def __init__(self, workdir, primaries=3, extra=()):
        self.nodes = []
        for i in range(primaries):
            d = os.path.join(workdir, f"node{i}")
            os.makedirs(d, exist_ok=True)
            if os.path.exists(os.path.join(d, "nodes.conf")):
                os.remove(os.path.join(d, "nodes.conf"))
            self.nodes.append(Redis(d, port=free_port(below=55536),
                                    extra=("--cluster-enabled", "yes", "--cluster-config-file",
                                           os.path.join(d, "nodes.conf"), *extra)))
        made = subprocess.run(["redis-cli", "--cluster", "create",
                               *[f"127.0.0.1:{n.port}" for n in self.nodes],
                               "--cluster-replicas", "0", "--cluster-yes"],
                              capture_output=True, text=True)
        if made.returncode != 0:
            self.stop()
            raise SystemExit(f"redis-cli --cluster create failed: {made.stdout[-1000:]}{made.stderr[-1000:]}")
        for _ in range(200):
            if all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in self.nodes):
                return
            time.sleep(0.1)
        self.stop()
        raise SystemExit("the cluster did not come up")

    url = None

    @property
    def toml(self):
        """The `[redis]` table of a config file for this cluster."""
        return f'[redis]\nmode = "cluster"\nnodes = {self.nodes_toml}\n'

    @property
    def nodes_toml(self):
        """`redis.nodes` for a config file."""
        return "[" + ", ".join(f'"redis://127.0.0.1:{n.port}"' for n in self.nodes) + "]"

    def cpu(self):
        """CPU seconds of every node's main thread so far."""
        return sum(n.cpu() for n in self.nodes)

    def cli(self, *args, check=True):
        return [n.cli(*args, check=check) for n in self.nodes]

    def stop(self):
        for n in self.nodes:
            n.stop()


def commandstats(servers, after, seconds, out):
    """`INFO commandstats` summed over `servers` (one Redis, or a cluster's nodes), over
    `seconds` starting `after` seconds from now: calls and usec per second by command, into
    `out`. Run it in a thread beside a phase."""
    time.sleep(after)

    def read():
        stats = {}
        for server in servers:
            for line in server.cli("INFO", "commandstats").splitlines():
                if line.startswith("cmdstat_"):
                    name, fields = line[len("cmdstat_"):].split(":", 1)
                    f = dict(kv.split("=") for kv in fields.split(","))
                    calls, usec = stats.get(name, (0, 0))
                    stats[name] = (calls + int(f["calls"]), usec + int(f["usec"]))
        return stats

    a, t0 = read(), time.time()
    time.sleep(seconds)
    b, t1 = read(), time.time()
    for name, (calls, usec) in b.items():
        c0, u0 = a.get(name, (0, 0))
        out[name] = {"calls_per_s": (calls - c0) / (t1 - t0), "usec_per_s": (usec - u0) / (t1 - t0)}


def resp(*args):
    """One command in RESP, for scripts that talk to Redis over a bare socket."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def _url(redis):
    """`--redis-url` for one server; a cluster's nodes are in the config file (`redis.nodes`)."""
    return ["--redis-url", redis.url] if redis.url else []


def sweeper(config, redis, *args):
    return [BIN, "--config", config, *_url(redis), *args]


def tools(config, redis, *args):
    """A `presence-sweeper-tools` command line (`seed`, `simulate`) with the same configuration."""
    return [TOOLS, "--config", config, *_url(redis), *args]


class Daemon:
    """`presence-sweeper run` in the background, its metrics server on `http_port` (the config
    must say `listen = "127.0.0.1:<http_port>"`); its CPU and RSS come from /proc. Its log is
    kept in a temporary file, or appended to $BENCH_DAEMON_LOG when set (to read it after a
    run: `log.level` is the config's)."""

    def __init__(self, config, redis, http_port, env=None, binary=None):
        keep = os.environ.get("BENCH_DAEMON_LOG")
        self.log = open(keep, "ab") if keep else tempfile.TemporaryFile()
        self.port = http_port
        cmd = sweeper(config, redis, "run")
        if binary:
            cmd[0] = binary
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env)

    def cpu(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def switches(self):
        """Voluntary context switches of its threads so far: each is a wait that ended, a
        wake-up, a count that does not drift with the machine's speed as CPU time does (the
        involuntary ones, preemptions, grow with what else runs). Threads that ended are not
        counted; the daemon's run for its whole life."""
        total = 0
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{task}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            total += int(line.split()[1])
            except FileNotFoundError:
                pass
        return total

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def peak_rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def metric(self, name):
        """Sum of a metric's samples over every label set, from the daemon's /metrics."""
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def histogram(self, name):
        """A histogram's cumulative buckets `[(le, count)]`, summed over every other label."""
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5).read().decode()
        buckets = {}
        for line in text.splitlines():
            if line.startswith(name + "_bucket{"):
                labels, value = line.rsplit(" ", 1)
                le = labels.split('le="', 1)[1].split('"', 1)[0]
                le = float("inf") if le == "+Inf" else float(le)
                buckets[le] = buckets.get(le, 0.0) + float(value)
        return sorted(buckets.items())

    def text(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_ready(self, timeout=60):
        import urllib.error
        import urllib.request
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("the daemon exited:\n" + self.text()[-3000:])
            try:
                url = f"http://127.0.0.1:{self.port}/readyz"
                if urllib.request.urlopen(url, timeout=5).status == 200:
                    return
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.1)
        raise SystemExit("the daemon did not become ready:\n" + self.text()[-3000:])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


# Scenario `live`: a big app, one user per conversation heartbeating every 20 s (the online
# sweep's ttl is 45 s), 1 % of users vanishing; no typing sweep.
LIVE_SWEEPS = "[sweeps.typing]\nenabled = false\n"


def live_traffic(conversations):
    """`simulate`'s arguments for scenario `live` at `conversations`."""
    return ["--conversations", str(conversations), "--users", "1", "--heartbeat", "20s",
            "--vanish-rate", "0.01", "--grace", "60s"]


def lag_summary(buckets):
    """From a lag histogram's cumulative buckets: how many, the share within 100 ms and 1 s, and
    the p50 and p99 as the upper bound of the bucket that holds them."""
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return {"count": 0}

    def within(limit):
        return max((c for le, c in buckets if le <= limit), default=0.0) / total

    def quantile(q):
        return next(le for le, c in buckets if c >= q * total)

    return {"count": int(total), "within_100ms": within(0.1), "within_1s": within(1.0),
            "p50_le": quantile(0.5), "p99_le": quantile(0.99)}
