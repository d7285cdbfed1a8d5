local T = require "support"
local async = require "rlm.async"
local sys = require "rlm.sys"

local tests = {}

tests["tasks run side by side and join returns results"] = function()
  local log = {}
  local function step(what) log[#log + 1] = what end
  local a = async.spawn(function(x) step("a sleeps"); async.sleep(0.2); step("a wakes"); return x * 2, "a" end, 21)
  local b = async.spawn(function() step("b sleeps"); async.sleep(0.2); step("b wakes"); return "b" end)
  local v, tag = a:join()
  T.eq(v, 42)
  T.eq(tag, "a")
  T.eq(b:join(), "b")
  -- one after the other would be: a sleeps, a wakes, b sleeps, b wakes
  T.eq(log, {"a sleeps", "b sleeps", "a wakes", "b wakes"})
end

tests["a task's error is raised by join with its traceback"] = function()
  local t = async.spawn(function() error("inner failure") end)
  local err = T.raises(function() t:join() end, "inner failure")
  T.contains(err, "stack traceback")
  local ok, e = async.spawn(function() error("x") end):result()
  T.eq(ok, false)
  T.contains(e, "x")
end

tests["await times out"] = function()
  local t = async.spawn(function() async.sleep(60) end)
  local t0 = sys.now()
  local ok, why = t:join(0.1)
  T.eq(ok, nil)
  T.eq(why, "timeout")
  local took = sys.now() - t0
  T.truthy(took >= 0.09 and took < 30, ("joined after %.2f s, the task sleeps 60 s"):format(took))
end

tests["map keeps order and isolates failures"] = function()
  local out = async.map({3, 1, 2, "x"}, function(n)
    async.sleep(0.01 * (tonumber(n) or 0))
    return n * 10
  end, 2)
  T.eq(out[1][1], 30)
  T.eq(out[2][1], 10)
  T.eq(out[3][1], 20)
  T.eq(out[4].ok, false)
end

tests["map holds its cap, starts items in order and goes on past a failure"] = function()
  local active, peak, started = 0, 0, {}
  local out = async.map({1, 2, 3, 4, 5, 6, 7}, function(n)
    started[#started + 1] = n
    active = active + 1
    peak = math.max(peak, active)
    async.sleep(0.01 * (n % 3))
    active = active - 1
    if n == 2 then error("item two fails") end
    return n
  end, 3)
  T.eq(peak, 3)
  T.eq(table.concat(started, ","), "1,2,3,4,5,6,7")
  for i, slot in ipairs(out) do
    if i == 2 then
      T.eq(slot.ok, false)
      T.contains(slot.error, "item two fails")
    else
      T.eq(slot.ok, true)
      T.eq(slot[1], i)
    end
  end
  T.eq(#out, 7)
end

tests["map runs its items on as many tasks as the cap, not one each"] = function()
  local create, made = coroutine.create, 0
  coroutine.create = function(f) made = made + 1; return create(f) end
  local ok, out = pcall(async.map, {}, function() end, 4)
  local items = {}
  for i = 1, 200 do items[i] = i end
  local ok2, out2 = pcall(async.map, items, function(n) async.sleep(0); return n end, 4)
  coroutine.create = create
  T.truthy(ok and ok2, tostring(out) .. tostring(out2))
  T.eq(#out, 0)
  T.eq(out2[200][1], 200)
  T.eq(made, 4)
end

tests["map with a cap of 0 still runs, one at a time"] = function()
  local out = async.map({"a", "b"}, function(s) return s:upper() end, 0)
  T.eq(out[1][1], "A")
  T.eq(out[2][1], "B")
end

tests["user coroutines inside tasks still work"] = function()
  local t = async.spawn(function()
    local gen = coroutine.wrap(function() for i = 1, 3 do coroutine.yield(i) end end)
    local sum = 0
    for i in gen do sum = sum + i; async.sleep(0.01) end
    return sum
  end)
  T.eq(t:join(), 6)
end

tests["a semaphore hands several units at once, never part of them"] = function()
  local sem = async.semaphore(4)
  local held, peak, done = 0, 0, 0
  local tasks = {}
  for i = 1, 6 do
    tasks[i] = async.spawn(function()
      local k = i % 2 == 0 and 3 or 2
      sem.acquire(k)
      held = held + k
      peak = math.max(peak, held)
      async.sleep(0.01)
      held = held - k
      sem.release(k)
      done = done + 1
    end)
  end
  for _, t in ipairs(tasks) do t:join(30) end
  T.eq(done, 6, "every task got its units")
  T.truthy(peak <= 4 and peak >= 3, "units held at once: " .. peak)
  sem.acquire(9)   -- more than there are: all of them
  T.eq(sem.free, 0)
  sem.release(9)
  T.eq(sem.free, 4)
end

tests["semaphore caps concurrency"] = function()
  local sem = async.semaphore(2)
  local active, peak = 0, 0
  local tasks = {}
  for i = 1, 6 do
    tasks[i] = async.spawn(function()
      sem.acquire()
      active = active + 1
      peak = math.max(peak, active)
      async.sleep(0.02)
      active = active - 1
      sem.release()
    end)
  end
  for _, t in ipairs(tasks) do t:join() end
  T.eq(peak, 2)
end

tests["a task woken twice in one poll (its op and its timeout) finishes once"] = function()
  local loop = require "rlm.core.loop"
  local sys = require "rlm.sys"
  local id = loop.new_id()
  local t = async.spawn(function()
    async.await(id, 0.02)
    return "done"
  end)
  async.sleep(0)                           -- the task now waits on id, with its timer
  local busy = sys.now() + 0.05            -- past the timeout, without polling the loop
  while sys.now() < busy do end
  loop.ready(id)                           -- the op and the timer arrive in the same poll
  T.eq({t:result()}, {true, "done"})
end

return tests
