#!/usr/bin/env bash
# What libmicrohttpd itself costs per request, answered each way bench/mhd-floor.c knows
# (direct, suspend, loop, loop-writer), under figure 1's load: the server pinned to CPU 0,
# wrk on CPU 1 with 50 keep-alive connections posting bench/progress.lua's bodies. Prints
# for each way, and for its commit with and without an fdatasync (as --durability full),
# the requests per second and the server's user and system CPU time per request (from
# /proc/PID/stat). These are the floors a design of headwayd's ingest path can reach;
# headwayd's own figure to set beside them is bench/cpu-per-update.sh's.
#
#   bench/mhd-floor.sh                 # 8 s a run
#   DURATION=10 bench/mhd-floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-8}
BINARY=.build/release/headwayd  # checked by wrk-common.sh; not run here
source bench/wrk-common.sh
cc -O2 -o "$work/mhd-floor" bench/mhd-floor.c -lmicrohttpd -lpthread

run() {
  local mode=$1 sync=$2 port server before after line requests rps
  port=$(free_port)
  # The synced file lies in the repository's folder: the disk a database would use.
  $pin_server "$work/mhd-floor" "$mode" "$port" ${sync:+".build/mhd-floor-sync"} &
  server=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.05; done
  before=$(awk '{print $14, $15}' "/proc/$server/stat")
  line=$(BENCH_TASKS=32 $pin_client wrk -t1 -c50 -d"${DURATION}s" -s bench/progress.lua "http://127.0.0.1:$port" | grep '^RESULT')
  after=$(awk '{print $14, $15}' "/proc/$server/stat")
  kill -TERM "$server"; wait "$server" || true
  requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
  rps=$(sed 's/.*rps=\([0-9]*\).*/\1/' <<<"$line")
  python3 - "$mode" "${sync:-no}" "$rps" "$requests" "$before" "$after" "$(getconf CLK_TCK)" <<'EOF'
import sys
mode, sync, rps, requests, before, after, hz = sys.argv[1:]
b, a, n, hz = before.split(), after.split(), int(requests), int(hz)
user, system = ((int(a[i]) - int(b[i])) * 1e6 / hz / n for i in (0, 1))
print(f"{mode:12} fdatasync={sync:3} {int(rps):>7} requests/s  user {user:5.2f} µs  system {system:5.2f} µs  "
      f"total {user + system:5.2f} µs per request")
EOF
}

for mode in direct suspend loop loop-writer; do
  run "$mode" ""
  [ "$mode" = direct ] || run "$mode" yes
done
rm -f .build/mhd-floor-sync
