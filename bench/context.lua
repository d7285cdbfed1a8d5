--- A long context: the time from `rlm ask --context FILE` to its first model call, beside the
-- floor in the same run: a Python program that reads the file into the same kind of sandbox
-- (bwrap, python3 reading it as text) and then sends one call to the same stand-in.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

local MB = 1024 * 1024
local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
local dir = T.tmpdir()

local FLOOR = [[
import json, subprocess, sys, urllib.request
path, url = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    subprocess.run(["bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                    "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                    "--proc", "/proc", "--dev", "/dev", "--unshare-all", "--die-with-parent",
                    "/usr/bin/python3", "-c", "import sys; print(len(sys.stdin.read()))"],
                   stdin=f, stdout=subprocess.DEVNULL, check=True)
body = json.dumps({"model": "root-model", "messages": [{"role": "user", "content": "go"}]})
req = urllib.request.Request(url + "/v1/chat/completions", body.encode(),
                             {"Content-Type": "application/json",
                              "Authorization": "Bearer sk-test-key-0123456789"})
urllib.request.urlopen(req).read()
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

-- Seconds from starting argv to the stand-in's first request from it.
local function first_call(argv, env)
  local before = requests()
  local t0 = sys.now()
  local p = assert(sys.spawn{argv = argv, env = env, stdin = "null", stdout = "null",
                             stderr = "null"})
  while requests() == before do sys.sleep(0.005) end
  local took = sys.now() - t0
  sys.wait(p, 300)
  p:close()
  return took
end

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

local floor_py = dir .. "/floor.py"
assert(sys.write_file(floor_py, FLOOR))
local path, size = make_file(100 * MB)
local ours, floor = {}, {}
for _ = 1, 3 do   -- in turns, so a busy moment of the machine lands on both sides
  ours[#ours + 1] = first_call({T.rlm, "ask", "first call", "--context", path, "--quiet"},
                               F.env(server))
  floor[#floor + 1] = first_call({"/usr/bin/python3", floor_py, path, server.url}, F.env(server))
end
print(("first model call, --context %d MB   rlm %.2f s   floor %.2f s   %.2fx  (medians of 3)")
  :format(size // MB, median(ours), median(floor), median(ours) / median(floor)))
