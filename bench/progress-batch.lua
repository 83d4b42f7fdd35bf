-- wrk script: batches of progress updates (POST /v1/progress) over keep-alive. Each
-- request carries BENCH_BATCH items (default 50), each the ~100-byte update that
-- bench/progress.lua sends alone, spread over the tasks bench-0 … bench-(BENCH_TASKS-1).
-- Reports requests and items per second; a reply other than 2xx counts as an error (that
-- no item was refused, bench/progress-batch.sh checks against what is stored).
local tasks = tonumber(os.getenv("BENCH_TASKS") or "32")
local size = tonumber(os.getenv("BENCH_BATCH") or "50")
local counter = 0

function setup(thread)
  thread:set("offset", math.random(0, tasks - 1))
end

request = function()
  local items = {}
  for i = 1, size do
    counter = counter + 1
    items[i] = string.format(
      '{"task_id":"bench-%d","increment":1,"label":"Copying photos to archive volume 3 (batch %06d)","unit":"files"}',
      (counter + offset) % tasks, counter % 1000000)
  end
  return wrk.format("POST", "/v1/progress", {["Content-Type"] = "application/json"},
                    '{"updates":[' .. table.concat(items, ",") .. ']}')
end

done = function(summary, latency, requests)
  local seconds = summary.duration / 1e6
  io.write(string.format(
    "RESULT requests=%d duration_s=%.2f rps=%.0f items_per_s=%.0f p50_ms=%.2f p99_ms=%.2f errors=%d\n",
    summary.requests, seconds, summary.requests / seconds, summary.requests * size / seconds,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
