--- Sandbox figures (local backend): start to first result, execute round trip, pool throughput.
-- Goals: start under 150 ms; round trip median under 2 ms.
local sys = require "rlm.sys"
local rlm = require "rlm"

local function percentile(xs, p)
  local s = table.move(xs, 1, #xs, 1, {})
  table.sort(s)
  return s[math.max(1, math.ceil(#s * p))]
end

-- Start to first result: a fresh interpreter, start(), one SUBMIT back.
local starts = {}
for k = 1, 20 do
  local t0 = sys.now()
  local interp <close> = rlm.interpreter{}
  local out = interp:execute("SUBMIT(x=1)")
  starts[k] = sys.now() - t0
  assert(out.x == 1)
end
print(("start     new sandbox to first result   median %.1f ms  p90 %.1f ms  (20 runs, goal < 150 ms)")
  :format(percentile(starts, 0.5) * 1e3, percentile(starts, 0.9) * 1e3))

-- Round trip of a trivial block over 1,000 calls on one warm sandbox.
do
  local interp <close> = rlm.interpreter{}
  interp:execute("x = 0")
  local rt = {}
  for k = 1, 1000 do
    local t0 = sys.now()
    interp:execute("x += 1")
    rt[k] = sys.now() - t0
  end
  local out = interp:execute("SUBMIT(x=x)")
  assert(out.x == 1000)
  print(("execute   trivial block round trip       median %.3f ms  p99 %.3f ms  (1000 calls, goal median < 2 ms)")
    :format(percentile(rt, 0.5) * 1e3, percentile(rt, 0.99) * 1e3))
end

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
