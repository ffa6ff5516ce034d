-- wrk script of bench/service_poll.py: every request GETs a random line of the file named by
-- POLL_PATHS (one path per line); done() prints one JSON line that the bench parses.
local paths = {}
for line in io.lines(os.getenv("POLL_PATHS")) do
  paths[#paths + 1] = line
end

local thread_count = 0

function setup(thread)
  thread_count = thread_count + 1
  thread:set("seed", thread_count)
end

function init(args)
  math.randomseed(seed or 0)
end

function request()
  return wrk.format("GET", paths[math.random(#paths)])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors": %d, "non_2xx": %d, "p50_us": %.0f, "p99_us": %.0f}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
