-- wrk script: progress updates over keep-alive, spread over the tasks bench-0 … bench-(N-1).
-- Each body is about 100 bytes of JSON, like a runner's report.
local tasks = tonumber(os.getenv("BENCH_TASKS") or "32")
local counter = 0

function setup(thread)
  thread:set("offset", math.random(0, tasks - 1))
end

request = function()
  counter = counter + 1
  local id = (counter + offset) % tasks
  local body = string.format('{"increment":1,"label":"Copying photos to archive volume 3 (batch %06d)"}', counter % 1000000)
  return wrk.format("POST", "/v1/tasks/bench-" .. id .. "/progress",
                    {["Content-Type"] = "application/json"}, body)
end

local non2xx = 0
response = function(status, headers, body)
  if status ~= 200 then non2xx = non2xx + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_s=%.2f rps=%.0f p50_ms=%.2f p99_ms=%.2f errors=%d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
