-- wrk script for benchmarks/ingest.py: POST one fixed, signed webhook body; every
-- request carries a unique X-GitHub-Delivery id, so the receiver enqueues each one
-- (a repeated id would be a cheap "duplicate" answer and flatter the figure).
--
--   wrk -t1 -c8 -d10s -s benchmarks/wrk_webhook.lua http://127.0.0.1:PORT/webhook \
--       -- BODY_FILE SIGNATURE EVENT ID_PREFIX
--
-- Prints one JSON line at the end (after wrk's own report) starting with "JSON ".

local threads = {}
local counter = 0

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  local f = assert(io.open(args[1], "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["User-Agent"] = "GitHub-Hookshot/bench"
  wrk.headers["X-Hub-Signature-256"] = args[2]
  wrk.headers["X-GitHub-Event"] = args[3]
  prefix = args[4] .. "-t" .. tid .. "-"
end

function request()
  counter = counter + 1
  wrk.headers["X-GitHub-Delivery"] = prefix .. counter
  return wrk.format()
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'JSON {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, ' ..
    '"read_errors": %d, "write_errors": %d, "timeouts": %d, "non_2xx": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
    e.timeout, e.status, latency:percentile(50), latency:percentile(99), latency.max))
end
