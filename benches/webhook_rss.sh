#!/usr/bin/env bash
# RSS of the release daemon 20 s after 500 leaves: with a webhook whose receiver accepts and never
# answers, and without a webhook. Needs redis-server and redis-cli; BINARY picks the daemon
# (default target/release/presence-sweeper). Usage: bash benches/webhook_rss.sh
set -u
free_port() { python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
PORT=$(free_port); HPORT=$(free_port)
redis-server --port $PORT --save "" --appendonly no --daemonize yes --logfile "${TMPDIR:-/tmp}"/webhook-rss-redis.log
python3 -c "
import socket,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1',$HPORT)); s.listen(1000)
conns=[]
while True:
    c,_=s.accept(); conns.append(c)
" & HANG=$!
sleep 0.5
run() {
  cat > "${TMPDIR:-/tmp}"/webhook-rss.toml <<TOML
[http]
listen = "127.0.0.1:0"
[sweeps.online]
enabled = false
[sweeps.typing]
schedule = "100ms"
stream = "presence:{hash_tag}:log"
$1
TOML
  redis-cli -p $PORT flushall >/dev/null
  "${BINARY:-target/release/presence-sweeper}" --config "${TMPDIR:-/tmp}"/webhook-rss.toml --redis-url redis://127.0.0.1:$PORT 2>/dev/null & D=$!
  sleep 2
  NOW=$(redis-cli -p $PORT time | head -1)
  for i in $(seq 0 499); do echo "ZADD presence:r$i:typing $((NOW-100)) zombie $((NOW+600)) live"; done | redis-cli -p $PORT > /dev/null
  sleep 20
  echo "$2: $(grep VmRSS /proc/$D/status) due=$(redis-cli -p $PORT zcard presence-sweeper:webhooks:crm:due)"
  kill $D; wait $D 2>/dev/null
}
run "[webhooks.crm]
url = \"http://127.0.0.1:$HPORT/\"
secret = \"whsec_cHJlc2VuY2Utc3dlZXBlci13ZWJob29rLXRlc3QtazE=\"
sweeps = [\"typing\"]
timeout = \"10s\"" "webhook, receiver hangs"
run "" "no webhook"
kill $HANG
redis-cli -p $PORT shutdown nosave >/dev/null 2>&1
