--- Daytona client figures against the stand-in: N sandboxes created, one command executed in
-- each and deleted, all in parallel — with rlm's client (rlm.daytona, C on curl multi) and with
-- the official TypeScript SDK, side by side: wall time and the requests the stand-in received.
-- A third line runs the same through rlm.interpreter (driver upload and start included).
local T = require "support"
local async = require "rlm.async"
local daytona = require "rlm.daytona"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local N = 20
local KEY = "bench-key"

local server = T.server{"tests/standins/daytona", "--api-key", KEY}
local api = server.url .. "/api"

local function control(method, path)
  local res = assert(http.request{url = server.url .. "/_control/" .. path, method = method})
  return json.decode(res.body)
end

-- Runs fn with fresh counters; returns its wall time, the stats and fn's result.
local function measured(fn)
  control("POST", "reset")
  local before = control("GET", "stats").connections
  local t0 = sys.now()
  local result = fn()
  local wall = sys.now() - t0
  local stats = control("GET", "stats")
  stats.new_connections = stats.connections - before
  assert(#stats.sandboxes == 0, "sandboxes left behind: " .. #stats.sandboxes)
  return wall, stats, result
end

local function ours()
  local client = daytona.client{api_key = KEY, api_url = api}
  local jobs = {}
  for k = 1, N do
    jobs[k] = function()
      local sb = assert(client:create_sandbox{labels = {bench = "rlm"}})
      local tb = assert(client:toolbox(sb))
      local r = assert(tb:execute{command = "echo " .. k})
      assert(r.exitCode == 0 and r.result == k .. "\n", r.result)
      assert(client:delete_sandbox(sb.id))
    end
  end
  async.all(jobs)
  return N
end

local function interpreters()
  sys.setenv("DAYTONA_API_KEY", KEY)
  sys.setenv("DAYTONA_API_URL", api)
  local jobs = {}
  for k = 1, N do
    jobs[k] = function()
      local interp <close> = require("rlm").interpreter{backend = "daytona"}
      assert(interp:execute("SUBMIT(k=k)", {k = k}).k == k)
    end
  end
  async.all(jobs)
  return N
end

local function sdk()
  local r = assert(sys.run({"node", "bench/daytona_sdk.mjs", api, KEY, tostring(N)}, {timeout = 120}))
  if r.code ~= 0 then error("the SDK bench failed: " .. r.stderr) end
  local res = json.decode(r.stdout:match("[^\n]+$") or r.stdout)
  if res.ok ~= N then error("the SDK bench had failures: " .. r.stderr) end
  return res
end

local function report(name, wall, stats, extra)
  local req = stats.requests
  local polls = req["GET /api/sandbox/{id}"] or 0
  print(("%-34s %7.0f ms  %4d requests, %.1f per sandbox (%d state polls)  %3d connections%s"):format(
    name, wall * 1e3, stats.total, stats.total / N, polls, stats.new_connections, extra or ""))
end

print(("%d sandboxes in parallel: create (wait until started), execute `echo k`, delete"):format(N))
local wall, stats = measured(ours)
report("rlm client (rlm.daytona)", wall, stats)
local sdk_wall, sdk_stats, res = measured(sdk)
report("official TypeScript SDK 0.218", sdk_wall, sdk_stats,
       ("  (%.0f ms inside node; the rest is node starting)"):format(res.wall_ms))
wall, stats = measured(interpreters)
report("rlm.interpreter (driver + SUBMIT)", wall, stats)
-- What one interpreter's life costs, by request: the figure to hold down (17 per sandbox before
-- the driver's ready line was waited for inside the sandbox instead of polled from here).
local kinds = {}
for key, n in pairs(stats.requests) do kinds[#kinds + 1] = ("%s %.1f"):format(key, n / N) end
table.sort(kinds)
print("  per interpreter: " .. table.concat(kinds, ", "))
