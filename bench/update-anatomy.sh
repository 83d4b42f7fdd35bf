#!/usr/bin/env bash
# Where the daemon's time per progress update goes, against the cheapest request it
# serves: one release headwayd (pinned to CPU 0, a fresh database), wrk on CPU 1 with 50
# keep-alive connections, alternately
#   - GET /healthz (the whole HTTP path: libmicrohttpd, the middleware, the access log and
#     the metrics; no database, no hand-off to the writer), and
#   - POST /v1/tasks/{id}/progress (bench/progress.lua, 32 tasks, --durability DURABILITY):
#     the same HTTP path, plus parsing, the wait for the writer's batch (not suspended), and
#     the task's JSON;
# and prints for each the daemon's CPU time per request (user + system, from
# /proc/PID/stat) and, with perf, its system calls per request (counted in one more run
# of each: tracing them costs CPU time itself). Then how long fdatasync takes in the
# database's folder (the same disk): what a commit with --durability full waits for.
#
#   bench/update-anatomy.sh                 # normal, 10 s a run, 3 rounds
#   DURABILITY=full REPEAT=5 bench/update-anatomy.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10}
REPEAT=${REPEAT:-3}
DURABILITY=${DURABILITY:-normal}
BINARY=${HEADWAYD:-.build/release/headwayd}
source bench/wrk-common.sh

# One run: KIND healthz|update, TRACE yes|no; prints "requests/s µs-per-request", then the
# system calls per request when traced.
run() {
  local kind=$1 trace=$2 port daemon before after requests line syscalls=""
  port=$(free_port)
  rm -f "$work"/bench.db* "$work/syscalls"
  $pin_server "$BINARY" --listen "127.0.0.1:$port" --db "$work/bench.db" --durability "$DURABILITY" \
    2>"$work/daemon.log" &
  daemon=$!
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  for id in $(seq 0 31); do
    curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
      -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
  done
  before=$(awk '{print $14 + $15}' "/proc/$daemon/stat")
  if [ "$trace" = yes ]; then
    perf stat -e 'syscalls:sys_enter_*' -p "$daemon" -o "$work/syscalls" -- sleep "$DURATION" >/dev/null 2>&1 &
  fi
  if [ "$kind" = healthz ]; then
    line=$($pin_client wrk -t1 -c50 -d"${DURATION}s" "http://127.0.0.1:$port/healthz" | grep 'Requests/sec\|requests in')
    requests=$(awk '/requests in/ {print $1}' <<<"$line")
  else
    line=$(BENCH_TASKS=32 $pin_client wrk -t1 -c50 -d"${DURATION}s" -s bench/progress.lua "http://127.0.0.1:$port" \
      | grep '^RESULT')
    requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
  fi
  after=$(awk '{print $14 + $15}' "/proc/$daemon/stat")
  if [ "$trace" = yes ]; then wait %2 2>/dev/null || true; fi
  if [ "$trace" = yes ] && [ -s "$work/syscalls" ]; then
    # The counts of the calls made at least once per 100 requests, per request.
    syscalls=$(awk -v n="$requests" '/syscalls:sys_enter_/ {gsub(/,/, "", $1); if ($1 > n / 100)
      printf "%s=%.2f ", substr($2, 20), $1 / n}' "$work/syscalls")
  fi
  kill -TERM "$daemon"; wait "$daemon" || true
  python3 -c "print(f'{$requests / $DURATION:.0f} {($after - $before) * 1e6 / $(getconf CLK_TCK) / $requests:.1f}', '$syscalls')"
}

echo "headwayd, GET /healthz vs progress updates ($DURABILITY): 50 connections, ${DURATION}s x $REPEAT, $(nproc) cores"
for kind in healthz update; do : > "$work/$kind"; done
for _ in $(seq 1 "$REPEAT"); do
  for kind in healthz update; do
    result=$(run "$kind" no)
    echo "  $kind: $result"
    echo "$result" >> "$work/$kind"
  done
done
if command -v perf >/dev/null; then
  for kind in healthz update; do
    echo "  $kind, system calls per request: $(run "$kind" yes | cut -d' ' -f3-)"
  done
fi
for kind in healthz update; do
  echo "  $kind median: $(awk '{print $1}' "$work/$kind" | median) requests/s," \
    "$(awk '{print $2}' "$work/$kind" | median) µs of CPU per request"
done
python3 - "$work" <<'EOF'
import os, statistics, sys, time
path = os.path.join(sys.argv[1], "sync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT)
times = []
for i in range(100):
    os.pwrite(fd, b"x" * 4096, (i % 8) * 4096)
    start = time.perf_counter()
    os.fdatasync(fd)
    times.append(1000 * (time.perf_counter() - start))
os.close(fd)
times.sort()
print(f"  fdatasync of a 4 KiB write here: median {statistics.median(times):.2f} ms, p90 {times[89]:.2f} ms")
EOF
