--- A long context: `rlm ask --context FILE` from start to its first model call, and the peak
-- memory of the host (rlm) and of the sandbox (its Python), beside the floor in the same run:
-- `cat FILE | python3` into the same kind of sandbox (bwrap, python3 reading it as text), then
-- one call to the same stand-in. Sizes in MB from RLM_BENCH_CONTEXT_MB (default 100; `make
-- bench BENCH_CONTEXT_MB=100,1024` adds 1 GB).
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

local MB = 1024 * 1024
-- The model's one reply: the sandbox's peak (kB), printed as the answer.
local PEAK = [[peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
SUBMIT(answer=peak)]]
local server = F.model{rules = {{match = ".", reply = F.code(PEAK)}}}
local dir = T.tmpdir()

local FLOOR = [[
import json, subprocess, sys, urllib.request
path, url = sys.argv[1], sys.argv[2]
READ = ("import sys; s = sys.stdin.read(); print(len(s)); "
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1])")
with open(path, "rb") as f:
    out = subprocess.run(["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                          "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                          "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--die-with-parent",
                          "/usr/bin/python3", "-c", READ],
                         stdin=f, capture_output=True, check=True).stdout.split()
body = json.dumps({"model": "root-model", "messages": [{"role": "user", "content": "go"}]})
req = urllib.request.Request(url + "/v1/chat/completions", body.encode(),
                             {"Content-Type": "application/json",
                              "Authorization": "Bearer sk-test-key-0123456789"})
urllib.request.urlopen(req).read()
print(out[1].decode())
]]

local function make_file(size)
  local path = dir .. "/context.txt"
  local f = assert(io.open(path, "wb"))
  local chunk = (("0123456789abcdef"):rep(6) .. "\n"):rep(10000)
  local written = 0
  while written < size do
    f:write(chunk)
    written = written + #chunk
  end
  f:close()
  return path, written
end

local function requests() return F.stats(server).requests end

-- A process's peak resident memory (VmHWM) in bytes, or 0 once it is gone.
local function peak_of(pid)
  local status = sys.read_file(("/proc/%d/status"):format(pid)) or ""
  return (tonumber(status:match("VmHWM:%s*(%d+)")) or 0) * 1024
end

-- Runs argv: seconds to the stand-in's first request from it, its own peak (bytes, read until
-- it ends) and the sandbox's (the kB it printed last).
local function first_call(argv, env)
  local before = requests()
  local t0 = sys.now()
  local p = assert(sys.spawn{argv = argv, env = env, stdin = "null", stderr = "null"})
  local took, host_peak = nil, 0
  while true do
    host_peak = math.max(host_peak, peak_of(p:pid()))
    if not took and requests() > before then took = sys.now() - t0 end
    if p:status() then break end
    sys.sleep(0.01)
  end
  local out, line = nil, nil
  repeat
    line = sys.read_line(p, 5)
    out = line or out
  until not line
  sys.wait(p, 300)
  p:close()
  return took, host_peak, (tonumber(out) or 0) * 1024
end

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

local floor_py = dir .. "/floor.py"
assert(sys.write_file(floor_py, FLOOR))
local sizes = {}
for mb in (sys.getenv("RLM_BENCH_CONTEXT_MB") or "100"):gmatch("%d+") do sizes[#sizes + 1] = tonumber(mb) end
for _, mb in ipairs(sizes) do
  local path, size = make_file(mb * MB)
  local runs = mb >= 1024 and 1 or 3
  local ours, floor = {first = {}, host = {}, sandbox = {}}, {first = {}, host = {}, sandbox = {}}
  for _ = 1, runs do   -- in turns, so a busy moment of the machine lands on both sides
    for _, side in ipairs{{ours, {T.rlm, "ask", "first call", "--context", path, "--quiet"}},
                          {floor, {"/usr/bin/python3", floor_py, path, server.url}}} do
      local into, argv = side[1], side[2]
      local t, host, sandbox = first_call(argv, F.env(server))
      table.insert(into.first, t)
      table.insert(into.host, host)
      table.insert(into.sandbox, sandbox)
    end
  end
  local a, b = median(ours.first), median(floor.first)
  print(("--context %5d MB  first model call: rlm %.2f s, floor %.2f s (%.2fx)   peak host %.2fx, "
         .. "sandbox %.2fx the file (floor: host %.2fx, sandbox %.2fx)%s"):format(
    size // MB, a, b, a / b, median(ours.host) / size, median(ours.sandbox) / size,
    median(floor.host) / size, median(floor.sandbox) / size,
    runs > 1 and ("  medians of %d"):format(runs) or ""))
  sys.remove(path)
end
