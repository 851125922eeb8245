-- wrk_report.lua: make wrk print its summary as one JSON line (bench/harness.py reads it).
-- Latencies are in microseconds, as wrk measures them.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"p50_us": %.1f, "p90_us": %.1f, "p99_us": %.1f, "max_us": %.1f, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
