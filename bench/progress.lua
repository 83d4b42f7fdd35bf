-- wrk script: updates over keep-alive, spread over the channels bench-0 … bench-(N-1).
-- BENCH_PATH is the publish path with CHANNEL where the channel goes (headwayd:
-- /v1/tasks/CHANNEL/progress, nchan: /pub?id=CHANNEL). Every body is the same ~100-byte
-- JSON update a runner sends.
local tasks = tonumber(os.getenv("BENCH_TASKS") or "32")
local path = os.getenv("BENCH_PATH") or "/v1/tasks/CHANNEL/progress"
local counter = 0

function setup(thread)
  thread:set("offset", math.random(0, tasks - 1))
end

request = function()
  counter = counter + 1
  local id = (counter + offset) % tasks
  local body = string.format('{"increment":1,"label":"Copying photos to archive volume 3 (batch %06d)","unit":"files"}',
                             counter % 1000000)
  return wrk.format("POST", (path:gsub("CHANNEL", "bench-" .. id)), {["Content-Type"] = "application/json"}, body)
end

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f errors=%d "
                         .. "status_4xx_5xx=%d connect_errors=%d read_errors=%d write_errors=%d timeouts=%d max_ms=%.2f\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    errors.status + errors.connect + errors.read + errors.write + errors.timeout,
    errors.status, errors.connect, errors.read, errors.write, errors.timeout, latency.max / 1000))
end
