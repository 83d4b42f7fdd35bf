#!/usr/bin/env bash
# The daemon's CPU time per progress update under figure 1's load: one run of BINARY with
# --durability DURABILITY (full or normal), pinned to CPU 0, 32 tasks, wrk with 50
# connections for 10 s on CPU 1 (bench/progress.lua), a fresh database. Prints updates/s
# and the daemon's user+system CPU (from /proc/PID/stat) per update, in µs: a figure that
# compares two builds run alternately better than throughput alone on a shared machine.
#
#   bench/cpu-per-update.sh .build/release/headwayd normal
set -euo pipefail
BINARY=$1 DURABILITY=${2:-normal}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
taskset -c 0 "$BINARY" --listen "127.0.0.1:$port" --db "$work/bench.db" --durability "$DURABILITY" 2>"$work/log" &
daemon=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
for id in $(seq 0 31); do
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
    -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
done
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
before=$(ticks)
line=$(BENCH_TASKS=32 taskset -c 1 wrk -t1 -c50 -d10s -s bench/progress.lua "http://127.0.0.1:$port" | grep '^RESULT')
after=$(ticks)
requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
rps=$(sed 's/.*rps=\([0-9]*\).*/\1/' <<<"$line")
kill -TERM $daemon; wait $daemon || true
hz=$(getconf CLK_TCK)
echo "$(basename "$BINARY") $DURABILITY rps=$rps cpu_us_per_update=$(python3 -c "print(round(($after - $before) * 1e6 / $hz / $requests, 2))")"
