#!/usr/bin/env bash
# SQLite's own cost of one progress update's UPDATE (bench/sqlite-update-floor.c) on a
# database headwayd made: the release headwayd registers 200 tasks and reports progress
# once on each, stops, and the C program then updates those rows pinned to CPU 0, three
# runs. Set beside a batch item's cost in headwayd (figure 3r, bench/progress-batch.sh).
#
#   bench/sqlite-update-floor.sh            # 200,000 updates a run
#   COUNT=50000 bench/sqlite-update-floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-200000}
BINARY=.build/release/headwayd
source bench/wrk-common.sh
cc -O2 -o "$work/sqlite-update-floor" bench/sqlite-update-floor.c -lsqlite3

port=$(free_port)
"$BINARY" --listen "127.0.0.1:$port" --db "$work/floor.db" --log-level warn &
daemon=$!
for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
for id in $(seq 0 199); do
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
    -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
  curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks/bench-$id/progress" -H 'Content-Type: application/json' \
    -d '{"increment":1,"label":"Copying photos to archive volume 3 (batch 000001)","unit":"files"}'
done
kill -TERM "$daemon"; wait "$daemon" || true
for round in 1 2 3; do
  echo "round $round: $($pin_server "$work/sqlite-update-floor" "$work/floor.db" "$COUNT")"
done
