--- Host figures: start-up time, and concurrent versus sequential HTTP on the event loop.
local sys = require "rlm.sys"
local http = require "rlm.http"
local T = require "support"

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

-- Start-up: whole processes, fork to exit, measured from this process, each beside its floor:
-- `rlm -e ''` beside `lua5.4 -e ''` (the interpreter alone), and `rlm exec 'print(1)'` beside
-- bubblewrap running python3 with the same sandbox (what the sandbox costs at the least). The
-- two take turns, one run each, so that both see the same moments of a noisy machine.
local function run_once(argv)
  local t0 = sys.now()
  local r = assert(sys.run(argv))
  assert(r.code == 0, table.concat(argv, " ") .. ": " .. r.stderr)
  return sys.now() - t0
end

local function startup(argv, floor_argv, runs)
  local times, floors = {}, {}
  for i = 1, runs do
    times[i] = run_once(argv)
    if floor_argv then floors[i] = run_once(floor_argv) end
  end
  return median(times) * 1e3, floor_argv and median(floors) * 1e3
end

local rlm_e, lua_e = startup({T.rlm, "-e", ""}, sys.which("lua5.4") and {"lua5.4", "-e", ""}, 200)
print(("startup   rlm -e ''            median %.2f ms   (floor: lua5.4 -e '' %s, %.1fx)"):format(
  rlm_e, lua_e and ("%.2f ms"):format(lua_e) or "not installed", lua_e and rlm_e / lua_e or 0))

local BARE_BWRAP = {"bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
                    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                    "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
                    "--tmpfs", "/tmp", "/usr/bin/python3", "-c", "print(1)"}
local exec, bare = startup({T.rlm, "exec", "print(1)"}, BARE_BWRAP, 30)
print(("startup   rlm exec 'print(1)'  median %.2f ms   (floor: bwrap + python3 -c %.2f ms, %.2fx)"):format(
  exec, bare, exec / bare))
-- A child's start should not grow with what rlm holds (fork copied the page tables, and then
-- every page rlm wrote): /bin/true started and waited for, with nothing held and with 100 MB.
local function spawn_ms(n)
  local t0 = sys.now()
  for _ = 1, n do sys.wait(assert(sys.spawn{argv = {"/bin/true"}, stdin = "null"})) end
  return (sys.now() - t0) / n * 1e3
end
local light = spawn_ms(200)
local held = ("x"):rep(100 * 1000 * 1000)
local heavy = spawn_ms(200)
print(("spawn     /bin/true, start to exit  %.2f ms   with 100 MB held %.2f ms"):format(light, heavy))
held = nil   -- let it go before the next figures
collectgarbage()

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
