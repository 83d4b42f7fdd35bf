#!/usr/bin/env bash
# Two builds' CPU time per progress update, measured side by side: both daemons run at
# the same time on CPU 0 (fresh databases, 32 tasks each), each loaded by its own wrk
# (50 connections, bench/progress.lua) on CPU 1, so that whatever else the machine does
# falls on both alike; prints each one's updates and user+system CPU per update (from
# /proc/PID/stat) and the ratio B / A. Run it again with the two swapped: the second
# daemon started measures about 1.5 % cheaper than the first when both are the same
# build, and the mean of the two orders cancels that.
#
#   bench/cpu-ab.sh OLD_BINARY NEW_BINARY [full|normal]
#   bench/cpu-ab.sh NEW_BINARY OLD_BINARY [full|normal]
set -euo pipefail
A=$1 B=$2 DURABILITY=${3:-full} DURATION=${DURATION:-10}
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
port_a=$(free_port) port_b=$(free_port)
taskset -c 0 "$A" --listen "127.0.0.1:$port_a" --db "$work/a.db" --durability "$DURABILITY" --log-level warn 2>/dev/null &
daemon_a=$!
taskset -c 0 "$B" --listen "127.0.0.1:$port_b" --db "$work/b.db" --durability "$DURABILITY" --log-level warn 2>/dev/null &
daemon_b=$!
for port in "$port_a" "$port_b"; do
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  for id in $(seq 0 31); do
    curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
      -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
  done
done
a0=$(ticks "$daemon_a") b0=$(ticks "$daemon_b")
BENCH_TASKS=32 taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" -s bench/progress.lua "http://127.0.0.1:$port_a" >"$work/wrk_a" &
wrk_a=$!
BENCH_TASKS=32 taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" -s bench/progress.lua "http://127.0.0.1:$port_b" >"$work/wrk_b" &
wrk_b=$!
wait "$wrk_a" "$wrk_b"
a1=$(ticks "$daemon_a") b1=$(ticks "$daemon_b")
updates_a=$(sed -n 's/^RESULT requests=\([0-9]*\).*/\1/p' "$work/wrk_a")
updates_b=$(sed -n 's/^RESULT requests=\([0-9]*\).*/\1/p' "$work/wrk_b")
python3 -c "
tick = 1e6 / $(getconf CLK_TCK)
a = ($a1 - $a0) * tick / $updates_a
b = ($b1 - $b0) * tick / $updates_b
print(f'A {$updates_a} updates, {a:.2f} µs each | B {$updates_b} updates, {b:.2f} µs each | B / A {b / a:.3f}')"
