#!/usr/bin/env bash
# Progress updates per second over keep-alive, at --durability full and normal.
#
# Starts the release headwayd on a free loopback port with a fresh database, registers the
# tasks, and drives POST /v1/tasks/{id}/progress with wrk (32 connections by default). The
# daemon is pinned to CPU 0 and wrk to CPU 1 so they do not compete. Every reply is a
# committed change; non-2xx replies are counted and reported.
#
#   bench/progress-throughput.sh            # 32 connections, 10 s, 3 repetitions
#   CONNECTIONS=50 DURATION=20 REPEAT=5 bench/progress-throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-32}
DURATION=${DURATION:-10}
REPEAT=${REPEAT:-3}
TASKS=${BENCH_TASKS:-32}
BINARY=${HEADWAYD:-.build/release/headwayd}
source bench/wrk-common.sh

echo "headwayd progress throughput: $CONNECTIONS connections, ${DURATION}s x $REPEAT, $TASKS tasks, $(nproc) cores"
for durability in full normal; do
  results=()
  for run in $(seq 1 "$REPEAT"); do
    port=$(free_port)
    rm -f "$work"/bench.db*
    $pin_server "$BINARY" --listen "127.0.0.1:$port" --db "$work/bench.db" --durability "$durability" \
      --log-level "${LOG_LEVEL:-info}" 2>"$work/daemon.log" &
    daemon=$!
    for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
    for id in $(seq 0 $((TASKS - 1))); do
      curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
        -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
    done
    line=$(BENCH_TASKS=$TASKS $pin_client wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s bench/progress.lua \
      "http://127.0.0.1:$port" | grep '^RESULT')
    stored=$(curl -sf "http://127.0.0.1:$port/v1/tasks?page_size=500" | python3 -c 'import json,sys; print(sum(t["completed"] for t in json.load(sys.stdin)["tasks"]))')
    kill -TERM $daemon; wait $daemon || true
    batching=$(grep -o 'batches=[0-9]* writes=[0-9]*' "$work/daemon.log" | awk -F'[= ]' '{printf "writes_per_commit=%.1f", $4 / $2}')
    echo "  $durability run $run: $line stored_increments=$stored $batching"
    results+=("$(sed 's/.*rps=\([0-9]*\).*/\1/' <<<"$line")")
  done
  echo "  $durability median: $(printf '%s\n' "${results[@]}" | median) updates/s"
done
