--- Sandbox figures (local backend): start to first result, execute round trip, pool throughput.
-- Goals: start under 150 ms; round trip median under 2 ms.
local sys = require "rlm.sys"
local rlm = require "rlm"

local function percentile(xs, p)
  local s = table.move(xs, 1, #xs, 1, {})
  table.sort(s)
  return s[math.max(1, math.ceil(#s * p))]
end

-- The same local sandbox without its hardening: bwrap with the flags it had before the sandbox
-- became a boundary (no seccomp, capability drop, user-namespace ban, read-only /proc and /dev,
-- sized tmpfs, limits, hidden arguments or descriptor passing; it still runs as the sandbox's
-- uid, which owns the folders). Only for this comparison; rlm has no such mode.
local function unhardened(interp)
  local real = interp.backend
  interp.backend = setmetatable({create = function(o)
    local sb = real.create(o)
    function sb.spawn_options(self, argv)
      local a = {self.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
                 "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                 "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
                 "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run/rlm",
                 "--dir", "/home/daytona", "--bind", self.workspace, "/home/daytona/workspace",
                 "--bind", self.memory, "/home/daytona/memory", "--chdir", "/home/daytona/workspace",
                 "--uid", "1000", "--gid", "1000", "--remount-ro", "/", "--"}
      table.move(argv, 1, #argv, #a + 1, a)
      return {argv = a, env = self:environment(), uid = self.uid, gid = self.uid}
    end
    return sb
  end}, {__index = real})
  return interp
end

local function new_interp(bare)
  local interp = rlm.interpreter{}
  return bare and unhardened(interp) or interp
end

-- Start to first result: a fresh interpreter, start(), one SUBMIT back.
local function start_times(bare)
  local starts = {}
  for k = 1, 20 do
    local t0 = sys.now()
    local interp <close> = new_interp(bare)
    local out = interp:execute("SUBMIT(x=1)")
    starts[k] = sys.now() - t0
    assert(out.x == 1)
  end
  return starts
end

-- Round trip of a trivial block over 1,000 calls on one warm sandbox.
local function round_trips(bare)
  local interp <close> = new_interp(bare)
  interp:execute("x = 0")
  local rt = {}
  for k = 1, 1000 do
    local t0 = sys.now()
    interp:execute("x += 1")
    rt[k] = sys.now() - t0
  end
  local out = interp:execute("SUBMIT(x=x)")
  assert(out.x == 1000)
  return rt
end

local hard_start, bare_start = start_times(false), start_times(true)
print(("start     new sandbox to first result   median %.1f ms  p90 %.1f ms  (20 runs, goal < 150 ms)")
  :format(percentile(hard_start, 0.5) * 1e3, percentile(hard_start, 0.9) * 1e3))
print(("          without the hardening         median %.1f ms  p90 %.1f ms")
  :format(percentile(bare_start, 0.5) * 1e3, percentile(bare_start, 0.9) * 1e3))
local hard_rt, bare_rt = round_trips(false), round_trips(true)
print(("execute   trivial block round trip       median %.3f ms  p99 %.3f ms  (1000 calls, goal median < 2 ms)")
  :format(percentile(hard_rt, 0.5) * 1e3, percentile(hard_rt, 0.99) * 1e3))
print(("          without the hardening         median %.3f ms  p99 %.3f ms")
  :format(percentile(bare_rt, 0.5) * 1e3, percentile(bare_rt, 0.99) * 1e3))

-- 1,000 short snippets: a pool of 8 against one sandbox (both reset between snippets).
-- Short snippets measure the host's per-snippet cost (one Lua thread drives every pipe);
-- CPU-bound ones show the pool using every core.
local function snippets(n, scale)
  local codes = {}
  for k = 1, n do codes[k] = ("s = sum(range(%d))\nSUBMIT(s=s)"):format(k * scale) end
  return codes
end
local function throughput(size, codes, scale)
  local pool <close> = rlm.pool{size = size}
  pool:start()
  local t0 = sys.now()
  local results = pool:map(codes)
  local took = sys.now() - t0
  for k = 1, #codes do assert(results[k][1].s == (k * scale) * (k * scale - 1) // 2) end
  return #codes / took
end
local cores = select(2, ("\n" .. assert(sys.read_file("/proc/cpuinfo"))):gsub("\nprocessor", ""))
for _, case in ipairs{{1000, 10, "1000 short snippets"}, {200, 2000, "200 CPU-bound snippets"}} do
  local codes = snippets(case[1], case[2])
  local one, eight = throughput(1, codes, case[2]), throughput(8, codes, case[2])
  print(("pool      %-28s 1 sandbox %.0f/s   pool of 8 %.0f/s   (%.1fx, %d cores)")
    :format(case[3], one, eight, eight / one, cores))
end

-- 10,000 globals: the done event lists 50 of them and counts the rest, so a trivial execute
-- stays near the empty session's.
do
  local interp <close> = rlm.interpreter{}
  interp:execute("pass")
  local function trivial(n)
    local ts = {}
    for k = 1, n do
      local t0 = sys.now()
      interp:execute("pass")
      ts[k] = sys.now() - t0
    end
    table.sort(ts)
    return ts[(n + 1) // 2] * 1e3
  end
  local empty = trivial(500)
  interp:execute("for k in range(10000):\n    globals()['v%d' % k] = k")
  print(("execute   trivial, 10,000 globals     median %.3f ms   (same session empty: %.3f ms)")
    :format(trivial(500), empty))
end

-- A 100 MB value each way, beside the floor: the same bytes through a pipe to `cat`.
local MB = 1024 * 1024
local big = string.rep("a", 100 * MB)
local function pipe_floor()
  local t0 = sys.now()
  local r = assert(sys.run({"/usr/bin/wc", "-c"}, {input = big, timeout = 60}))
  assert(tonumber(r.stdout:match("%d+")) == #big)
  return sys.now() - t0
end
local function peak_kb()
  return tonumber(assert(sys.read_file("/proc/self/status")):match("VmHWM:%s*(%d+)"))
end
do
  local interp <close> = rlm.interpreter{limits = {submit = "256M", output = "256M"}}
  interp:execute("pass")
  local t0 = sys.now()
  local out, run = interp:execute("SUBMIT(n=len(v))", {v = big})
  assert(out, run.error)
  local into = sys.now() - t0
  assert(out.n == #big)
  t0 = sys.now()
  out, run = interp:execute("SUBMIT(s='b' * (100 * 1024 * 1024))")
  assert(out, run.error)
  local back = sys.now() - t0
  assert(#out.s == #big)
  print(("big value 100 MB variable in %.2f s, SUBMIT back %.2f s; floor (a pipe) %.2f s; " ..
         "host peak %.0f MB (%.1fx the value)"):format(into, back, pipe_floor(),
         peak_kb() / 1024, peak_kb() * 1024 / #big))
end
