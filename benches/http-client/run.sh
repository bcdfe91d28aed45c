#!/usr/bin/env bash
# What the webhooks' HTTP client costs: one binary per client (none, hyper with hyper-rustls as
# the daemon uses, reqwest with rustls), each starting an HTTP/1.1 server, building its client
# (native root certificates loaded) and POSTing once. Prints each one's stripped size and the
# instructions of one run (valgrind's callgrind: counts do not drift with the machine's speed).
# Needs crates.io (reqwest is no dependency of the daemon) and valgrind.
# Usage: bash benches/http-client/run.sh
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/../../target/http-client}
for client in none hyperclient reqwestclient; do
  features=()
  [ "$client" = none ] || features=(--features "$client")
  cargo build --quiet --release "${features[@]}"
  cp "$CARGO_TARGET_DIR/release/http-client-cost" "$CARGO_TARGET_DIR/$client"
done
for client in none hyperclient reqwestclient; do
  bin=$CARGO_TARGET_DIR/$client
  instructions=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" 2>&1 >/dev/null \
    | awk '/Collected/ { print $NF }')
  printf '%-14s %9d bytes  %10d instructions\n' "$client" "$(stat -c %s "$bin")" "$instructions"
done
