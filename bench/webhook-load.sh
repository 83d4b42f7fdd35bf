#!/usr/bin/env bash
# Progress updates per second with a webhook on every event, against none.
#
# Starts headwayd (--webhook-allow-private) on a free loopback port with a fresh database,
# registers the tasks, and, in the "webhook" rounds, a webhook for every event kind
# (task.updated included: one delivery per update) whose receiver takes 1 s per request
# (Python's http.server, sleeping). Then drives POST /v1/tasks/{id}/progress with wrk, as
# bench/progress-throughput.sh does, alternating the two modes. Prints updates/s, and for
# the webhook rounds the deliveries made and still pending at the end (they wait, stored,
# in order: a receiver that slow falls behind by design).
#
#   bench/webhook-load.sh                                  # the release build
#   HEADWAYD=.build/debug/headwayd DURABILITY=normal bench/webhook-load.sh
set -euo pipefail
cd "$(dirname "$0")/.."

CONNECTIONS=${CONNECTIONS:-32}
DURATION=${DURATION:-10}
REPEAT=${REPEAT:-3}
TASKS=${BENCH_TASKS:-32}
DURABILITY=${DURABILITY:-full}
BINARY=${HEADWAYD:-.build/release/headwayd}
source bench/wrk-common.sh

receiver_port=$(free_port)
$pin_client python3 -c '
import http.server, sys, time
class Slow(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(1)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *arguments):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
' "$receiver_port" &

metric() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v name="$2" '$1 == name {print $2}'; }

echo "headwayd updates/s with a webhook on every event (receiver: 1 s per request) against none:"
echo "  $CONNECTIONS connections, ${DURATION}s x $REPEAT, $TASKS tasks, durability $DURABILITY, $BINARY, $(nproc) cores"
declare -A results
for run in $(seq 1 "$REPEAT"); do
  for mode in none webhook; do
    port=$(free_port)
    rm -f "$work"/bench.db*
    $pin_server "$BINARY" --listen "127.0.0.1:$port" --db "$work/bench.db" --durability "$DURABILITY" \
      --webhook-allow-private --log-level warn 2>"$work/daemon.log" &
    daemon=$!
    for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
    if [ "$mode" = webhook ]; then
      curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/webhooks" -H 'Content-Type: application/json' \
        -d "{\"url\":\"http://127.0.0.1:$receiver_port/hook\",\"events\":[\"task.created\",\"task.updated\",\"task.stalled\",\"task.recovered\",\"task.cancel_requested\",\"task.finished\",\"task.deleted\"]}"
    fi
    for id in $(seq 0 $((TASKS - 1))); do
      curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/tasks" -H 'Content-Type: application/json' \
        -d "{\"id\":\"bench-$id\",\"name\":\"Benchmark task $id\"}"
    done
    line=$(BENCH_TASKS=$TASKS $pin_client wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" -s bench/progress.lua \
      "http://127.0.0.1:$port" | grep '^RESULT')
    extra=""
    if [ "$mode" = webhook ]; then
      extra=" delivered=$(metric "$port" 'headway_webhook_attempts_total{result="delivered"}')"
      extra+=" pending=$(metric "$port" headway_webhook_deliveries_pending)"
    fi
    kill -TERM $daemon; wait $daemon || true
    echo "  run $run, $mode: $line$extra"
    results[$mode]+="$(sed 's/.*rps=\([0-9]*\).*/\1/' <<<"$line")"$'\n'
  done
done
for mode in none webhook; do
  echo "  $mode median: $(printf '%s' "${results[$mode]}" | grep . | median) updates/s"
done
