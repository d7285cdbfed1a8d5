--- Sandbox figures (local backend): start to first result, execute round trip, pool throughput.
-- Each figure beside its floor, measured in the same run.
local sys = require "rlm.sys"
local rlm = require "rlm"

local function percentile(xs, p)
  local s = table.move(xs, 1, #xs, 1, {})
  table.sort(s)
  return s[math.max(1, math.ceil(#s * p))]
end

-- The floors, under the very same sandbox (bwrap command line, limits, seccomp, uid): a bare
-- Python that prints one line (the start), and a minimal persistent driver (the round trip):
-- it does the least a driver must, running each request's code with its stdout captured and
-- answering one JSON line with that output, and nothing else (no stderr, errors, timer,
-- variables or limits).
local MINIMAL_DRIVER = [[
import io, json, os, sys
ns = {}
for line in os.fdopen(0, "rb"):
    sys.stdout = out = io.StringIO()
    exec(json.loads(line)["code"], ns)
    sys.stdout = sys.__stdout__
    os.write(1, (json.dumps({"ev": "done", "stdout": out.getvalue()}) + "\n").encode())
]]

local function floor_process(sb, code)
  local o = sb:spawn_options{sb.python, "-c", code}
  o.stdin, o.stdout, o.stderr = "pipe", "pipe", "pipe"
  return assert(sys.spawn(o))
end

local function floor_start(sb)
  local t0 = sys.now()
  local p <close> = floor_process(sb, "print('ready')")
  assert(sys.read_line(p, 30) == "ready", p:read("stderr"))
  return sys.now() - t0
end

-- n round trips of the minimal driver p, added to rt.
local function floor_round_trips(p, n, rt)
  for _ = 1, n do
    local t0 = sys.now()
    assert(p:write('{"code":"x = 1"}\n'))
    assert(sys.read_line(p, 30), p:read("stderr"))
    rt[#rt + 1] = sys.now() - t0
  end
end

-- Start to first result: a fresh interpreter, start(), one SUBMIT back; beside it the floor.
local function start_times()
  local starts, floors = {}, {}
  for k = 1, 20 do
    local t0 = sys.now()
    local interp <close> = rlm.interpreter{}
    local out = interp:execute("SUBMIT(x=1)")
    starts[k] = sys.now() - t0
    assert(out.x == 1)
    floors[k] = floor_start(interp.sandbox)
  end
  return starts, floors
end

-- The innermost process under a bwrap process (the Python it runs), as Sandbox:driver_pid.
local CPUS = tonumber((assert(sys.run({"nproc"})).stdout))
local ALL_CPUS = "0-" .. (CPUS - 1)

local function innermost(pid)
  for _ = 1, 4 do
    local kids = sys.read_file(("/proc/%d/task/%d/children"):format(pid, pid))
    local child = kids and tonumber(kids:match("%d+"))
    if not child then break end
    pid = child
  end
  return pid
end

local function pin(pid, cpus)
  local r = assert(sys.run({"taskset", "-a", "-p", "-c", cpus, tostring(pid)}))
  assert(r.code == 0, r.stderr)
end

-- Round trip of a trivial block over 1,000 calls on one warm sandbox, and the floor's: taken
-- in turns, 100 of each at a time, so that both see the machine's same moments. Where each
-- side runs decides the figure more than the work does: on one core a round trip is the sum
-- of both sides' work, on two it is mostly the wake-ups, and left to itself the kernel puts
-- each pair its own way (a run read 3.9x, the next 0.35x). So both pairs are pinned alike:
-- `cpus` is {host, drivers}.
local function round_trips(cpus)
  local interp <close> = rlm.interpreter{}
  interp:execute("x = 0")
  local p <close> = floor_process(interp.sandbox, MINIMAL_DRIVER)
  floor_round_trips(p, 1, {})      -- the first waits for Python to start
  pin(sys.getpid(), cpus[1])
  pin(interp:pid(), cpus[2])
  pin(innermost(p:pid()), cpus[2])
  local rt, floor = {}, {}
  for _ = 1, 10 do
    for _ = 1, 100 do
      local t0 = sys.now()
      interp:execute("x += 1")
      rt[#rt + 1] = sys.now() - t0
    end
    floor_round_trips(p, 100, floor)
  end
  local out = interp:execute("SUBMIT(x=x)")
  assert(out.x == 1000)
  pin(sys.getpid(), ALL_CPUS)
  return rt, floor
end

local start, start_floor = start_times()
print(("start     new sandbox to first result   median %.1f ms  p90 %.1f ms   " ..
       "(floor: the same bwrap + python3 printing a line %.1f ms, %.2fx)"):format(
  percentile(start, 0.5) * 1e3, percentile(start, 0.9) * 1e3, percentile(start_floor, 0.5) * 1e3,
  percentile(start, 0.5) / percentile(start_floor, 0.5)))
for _, where in ipairs{{"one core ", {"0", "0"}}, {"two cores", {"0", "1"}}} do
  if where[2][2] == "1" and CPUS < 2 then break end
  local rt, rt_floor = round_trips(where[2])
  print(("execute   trivial block round trip, %s  median %.3f ms  p99 %.3f ms  " ..
         "(floor: a minimal driver in the same sandbox %.3f ms, %.2fx)"):format(where[1],
    percentile(rt, 0.5) * 1e3, percentile(rt, 0.99) * 1e3, percentile(rt_floor, 0.5) * 1e3,
    percentile(rt, 0.5) / percentile(rt_floor, 0.5)))
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

-- A 100 MB value each way, beside the floor: the same bytes through a pipe to `wc -c`. Memory
-- is what the host holds at its peak per direction, counted from the moment before (peak reset
-- with clear_refs, proc(5)): on the way in the value itself plus what the transfer added, on
-- the way back what it added (the received string among it). Earlier benches in this process
-- leave their own heap behind; that is not counted.
local MB = 1024 * 1024
local function memory(field)
  return tonumber(assert(sys.read_file("/proc/self/status")):match(field .. ":%s*(%d+)")) * 1024
end
local function reset_peak()
  collectgarbage(); collectgarbage()
  local f = assert(io.open("/proc/self/clear_refs", "w")); f:write("5"); f:close()
  return memory("VmRSS")
end
local function median3(xs)
  table.sort(xs)
  return xs[2]
end
do
  -- each way three times: the time is the median, the memory the highest peak
  local interp <close> = rlm.interpreter{limits = {submit = "256M", output = "256M"}}
  interp:execute("pass")
  local value = 100 * MB
  local big = string.rep("a", value)
  local into, floor, back, into_held, back_held = {}, {}, {}, 0, 0
  for i = 1, 3 do
    local before = reset_peak() - value
    local t0 = sys.now()
    local out, run = interp:execute("SUBMIT(n=len(v))", {v = big})
    assert(out, run.error)
    into[i], into_held = sys.now() - t0, math.max(into_held, memory("VmHWM") - before)
    assert(out.n == #big)
    t0 = sys.now()
    local r = assert(sys.run({"/usr/bin/wc", "-c"}, {input = big, timeout = 60}))
    floor[i] = sys.now() - t0
    assert(tonumber(r.stdout:match("%d+")) == #big)
  end
  big = nil
  interp:execute("del v")
  for i = 1, 3 do
    local before = reset_peak()
    local t0 = sys.now()
    local out, run = interp:execute("SUBMIT(s='b' * (100 * 1024 * 1024))")
    assert(out, run.error)
    back[i], back_held = sys.now() - t0, math.max(back_held, memory("VmHWM") - before)
    assert(#out.s == value)
  end
  print(("big value 100 MB variable in %.2f s (host held %.2fx the value at its peak), SUBMIT " ..
         "back %.2f s (%.2fx); floor: a pipe to wc -c %.2f s (medians of 3)"):format(median3(into),
         into_held / value, median3(back), back_held / value, median3(floor)))
end
