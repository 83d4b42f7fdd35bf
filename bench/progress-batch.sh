#!/usr/bin/env bash
# Progress updates per second sent one a request (bench/progress.lua) against the same
# updates sent in batches (bench/progress-batch.lua, POST /v1/progress), at --durability
# full and normal, run alternately on one binary.
#
# Starts the release headwayd on a free loopback port with a fresh database for each run,
# registers the tasks, and drives it with wrk over keep-alive (50 connections by default).
# The daemon is pinned to CPU 0 and wrk to CPU 1. Every reply is a committed change; the
# increments stored are checked against the updates acknowledged (each item of a batch is
# one update), and the writer's commits per request are reported from the stop's log line.
#
#   bench/progress-batch.sh                      # 50 connections, batches of 50, 10 s, 3 rounds
#   BATCH=100 CONNECTIONS=50 DURATION=20 REPEAT=5 bench/progress-batch.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-50}
DURATION=${DURATION:-10}
REPEAT=${REPEAT:-3}
BATCH=${BATCH:-50}
TASKS=${BENCH_TASKS:-200}
BINARY=${HEADWAYD:-.build/release/headwayd}
source bench/wrk-common.sh

# One run: MODE single|batch, DURABILITY full|normal; prints the result line, and the
# median's number (updates per second) last.
run() {
  local mode=$1 durability=$2 port daemon line stored acknowledged batching
  port=$(free_port)
  rm -f "$work"/bench.db*
  $pin_server "$BINARY" --listen "127.0.0.1:$port" --db "$work/bench.db" --durability "$durability" \
    --log-level info 2>"$work/daemon.log" &
  daemon=$!
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  for id in $(seq 0 $((TASKS - 1))); do
    curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
      -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
  done
  if [ "$mode" = single ]; then
    line=$(BENCH_TASKS=$TASKS $pin_client wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s bench/progress.lua \
      "http://127.0.0.1:$port" | grep '^RESULT')
    acknowledged=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
  else
    line=$(BENCH_TASKS=$TASKS BENCH_BATCH=$BATCH $pin_client wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" \
      -s bench/progress-batch.lua "http://127.0.0.1:$port" | grep '^RESULT')
    acknowledged=$(( $(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line") * BATCH ))
  fi
  stored=$(curl -sf "http://127.0.0.1:$port/v1/tasks?page_size=500" \
    | python3 -c 'import json,sys; print(sum(t["completed"] for t in json.load(sys.stdin)["tasks"]))')
  kill -TERM $daemon; wait $daemon || true
  batching=$(grep -o 'batches=[0-9]* writes=[0-9]*' "$work/daemon.log" | awk -F'[= ]' '{printf "jobs_per_commit=%.1f", $4 / $2}')
  # wrk stops mid-request: what it did not count as acknowledged may be stored too.
  echo "  $durability $mode: $line stored_updates=$stored acknowledged_updates=$acknowledged $batching" >&2
  if [ "$stored" -lt "$acknowledged" ]; then
    echo "  FAILED: $((acknowledged - stored)) acknowledged updates are not stored (refused items?)" >&2
    exit 1
  fi
  if [ "$mode" = single ]; then sed 's/.*rps=\([0-9]*\).*/\1/' <<<"$line"; else sed 's/.*items_per_s=\([0-9]*\).*/\1/' <<<"$line"; fi
}

echo "headwayd progress, one update a request vs batches of $BATCH: $CONNECTIONS connections, ${DURATION}s x $REPEAT," \
  "$TASKS tasks, $(nproc) cores"
for durability in full normal; do
  single=() batch=()
  for _ in $(seq 1 "$REPEAT"); do
    value=$(run single "$durability"); single+=("$value")
    value=$(run batch "$durability"); batch+=("$value")
  done
  echo "  $durability median: single $(printf '%s\n' "${single[@]}" | median) updates/s," \
    "batches of $BATCH $(printf '%s\n' "${batch[@]}" | median) updates/s"
done
