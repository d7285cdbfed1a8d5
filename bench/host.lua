--- Host figures: start-up time, and concurrent versus sequential HTTP on the event loop.
local sys = require "rlm.sys"
local http = require "rlm.http"
local T = require "support"

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

-- Start-up: the whole `rlm -e ''` process, fork to exit, measured from this process.
local runs, times = 200, {}
for i = 1, runs do
  local t0 = sys.now()
  local r = assert(sys.run({T.rlm, "-e", ""}))
  times[i] = sys.now() - t0
  assert(r.code == 0)
end
print(("startup   rlm -e ''           median %.2f ms over %d runs (min %.2f ms)"):format(
  median(times) * 1e3, runs, times[1] * 1e3))

local py = {}
for i = 1, 50 do
  local t0 = sys.now()
  assert(sys.run({"/usr/bin/python3", "-c", ""}))
  py[i] = sys.now() - t0
end
print(("startup   python3 -c ''       median %.2f ms over 50 runs (for comparison)"):format(median(py) * 1e3))

local server = T.server{"tests/standins/echo"}
local n, latency = 64, 200
local reqs = {}
for i = 1, n do reqs[i] = {url = ("%s/delay?ms=%d&i=%d"):format(server.url, latency, i)} end
http.request(reqs[1])   -- warm the connection pool fairly for both runs

local t0 = sys.now()
local results = http.request_all(reqs)
local concurrent = sys.now() - t0
for _, r in ipairs(results) do assert(r.status == 200, r.error) end

t0 = sys.now()
for _, req in ipairs(reqs) do assert(http.request(req).status == 200) end
local sequential = sys.now() - t0

print(("http      %d requests x %d ms   concurrent %.0f ms   sequential %.0f ms   (%.1fx)"):format(
  n, latency, concurrent * 1e3, sequential * 1e3, sequential / concurrent))
