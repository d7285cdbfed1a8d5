--- Coroutine scheduler over the host's one event loop (rlm.core.loop).
--
-- Anything that waits (an HTTP transfer, a child's pipe, a timer, another task) is an op id
-- that the C side marks ready. `await(id)` suspends the calling task until its id is ready;
-- called outside a task (the main program), it drives the loop itself, resuming every task
-- whose op completes meanwhile. So blocking-style code works anywhere, and code running in
-- tasks runs side by side: sandboxes, model calls and child runs all share one thread.
local loop = require "rlm.core.loop"

local M = {}

local AWAIT = {}          -- yield marker, so tasks never mistake a user's coroutine.yield
local tasks = setmetatable({}, {__mode = "k"})   -- coroutine -> task
local waiting = {}        -- op id -> waiter (task, or a table {fired=} for the main driver)
local pending = {}        -- op id -> true: ready before anyone waited on it
-- Tasks to resume, {task, value} each: a queue with a head index, so taking from the front
-- costs the same however many wait (2,000 sub-calls queue at once).
local runnable = {first = 1, last = 0}

local function push(item)
  runnable.last = runnable.last + 1
  runnable[runnable.last] = item
end

local Task = {}
Task.__index = Task

local function dispatch(id)
  local w = waiting[id]
  if w == nil then
    pending[id] = true
  elseif w.co then
    waiting[id] = nil
    push{w, id}
  else
    w.fired = w.fired or id
  end
end

-- Resumes a task; a task that fails keeps its error (with the task's traceback) for join().
local function resume(task, value)
  -- Two of a task's waits (an op and its timeout) can become ready in the same poll; the second
  -- wake-up may find the task already finished.
  if coroutine.status(task.co) == "dead" then return end
  local co = task.co
  local ok, marker = coroutine.resume(co, value)
  if not ok then
    task.done = true
    task.err = type(marker) == "string" and debug.traceback(co, marker) or marker
    loop.ready(task.id)
  elseif coroutine.status(co) ~= "dead" and marker ~= AWAIT then
    task.done = true
    task.err = "a task yielded outside rlm.async.await (use coroutine.wrap for generators)"
    loop.ready(task.id)
  end
end

local function run_runnable()
  while runnable.first <= runnable.last do
    local i = runnable.first
    local item = runnable[i]
    runnable[i], runnable.first = nil, i + 1
    resume(item[1], item[2])
  end
end

--- Runs fn(...) as a task; returns the task handle (see `join`).
function M.spawn(fn, ...)
  local args = table.pack(...)
  local task = setmetatable({id = loop.new_id()}, Task)
  task.co = coroutine.create(function()
    local res = table.pack(fn(table.unpack(args, 1, args.n)))
    task.done = true
    task.results = res
    loop.ready(task.id)
  end)
  tasks[task.co] = task
  push{task}
  return task
end

--- The task running now, or nil in the main program.
function M.current()
  return tasks[coroutine.running()]
end

-- The main program's wait for w.fired: runs ready tasks and polls the loop, until w fires or
-- `deadline` (a loop.now() time) passes. No timer op: the poll's own timeout serves.
local function drive(w, deadline)
  while true do
    run_runnable()
    if w.fired then return end
    local wait = 1.0
    if deadline then
      wait = deadline - loop.now()
      wait = wait < 0 and 0 or wait < 1.0 and wait or 1.0
    end
    for _, ready in ipairs(loop.poll(wait)) do dispatch(ready) end
    if w.fired or deadline and loop.now() >= deadline then return end
  end
end

--- Waits until op `id` is ready. With `timeout` (seconds) returns nil, "timeout" if it passes
-- first; otherwise returns true.
function M.await(id, timeout)
  if pending[id] then
    pending[id] = nil
    return true
  end
  local task = M.current()
  if not task then
    local w = {}
    waiting[id] = w
    local ok, err = pcall(drive, w, timeout and loop.now() + timeout)
    if waiting[id] == w then waiting[id] = nil end
    if not ok then error(err, 0) end
    if w.fired then return true end
    return nil, "timeout"
  end
  local timer = timeout and loop.timer(timeout)
  waiting[id] = task
  if timer then waiting[timer] = task end
  local got
  repeat
    got = coroutine.yield(AWAIT)
  until got == id or got == timer
  waiting[id] = nil
  if timer then
    waiting[timer] = nil
    loop.cancel(timer)
  end
  if got == timer and got ~= id then
    return nil, "timeout"
  end
  return true
end

--- Forgets a readiness nobody will wait for (an op that ended while unobserved).
function M.forget(id)
  pending[id] = nil
end

--- Raises "interrupted (SIGx)" again if a signal arrived, wherever it was caught: an interrupt
-- ends the program and is never turned into data (a reply error, a failed slot).
function M.check_interrupt()
  local sig = loop.interrupted()
  if sig then error(("interrupted (SIG%s)"):format(sig), 0) end
end

--- Sleeps without blocking other tasks.
function M.sleep(seconds)
  M.await(loop.timer(math.max(0, seconds)))
end

--- Waits for a task; returns its results, or raises its error.
function Task:join(timeout)
  if not self.done then
    local ok, why = M.await(self.id, timeout)
    if not ok then return nil, why end
  end
  M.forget(self.id)
  if self.err ~= nil then error(self.err, 0) end
  return table.unpack(self.results, 1, self.results.n)
end

--- Like join, but returns ok, results... / false, err instead of raising.
function Task:result()
  if not self.done then M.await(self.id) end
  M.forget(self.id)
  if self.err ~= nil then return false, self.err end
  return true, table.unpack(self.results, 1, self.results.n)
end

--- A counting semaphore for concurrency caps. acquire(k) takes k units at once (default 1; more
-- than n is taken as n), release(k) gives them back; waiters are served in order, each as a
-- whole, so two that take several units never hold part of them each and wait for the rest.
-- Waiters queue with a head index, as `runnable` does: a release costs the same however many
-- wait (2,000 sub-calls behind a cap of 64).
function M.semaphore(n)
  local s = {free = n, queue = {}, first = 1, last = 0}
  local function units(k) return math.min(k or 1, n) end
  function s.acquire(k)
    k = units(k)
    if s.free >= k and s.first > s.last then
      s.free = s.free - k
      return
    end
    local id = loop.new_id()
    s.last = s.last + 1
    s.queue[s.last] = {id = id, k = k}
    M.await(id)
  end
  function s.release(k)
    s.free = s.free + units(k)
    while s.first <= s.last and s.queue[s.first].k <= s.free do
      local w = s.queue[s.first]
      s.queue[s.first], s.first = nil, s.first + 1
      s.free = s.free - w.k
      loop.ready(w.id)
    end
  end
  return s
end

--- The one shape of a failed item in a batch (async.map, llm.batch, http.request_all):
-- {error = message, kind =, status =, retry_after =, attempts =} from a binding's error table
-- (kind, status, message, retry_after), or {error = message, kind = "lua"} from anything else
-- raised. error is text, so a caller can show it as is.
function M.failure(err)
  if type(err) == "table" and type(err.message) == "string" and err.kind then
    return {error = err.message, kind = err.kind, status = err.status,
            retry_after = err.retry_after, attempts = err.attempts}
  end
  return {error = tostring(err), kind = "lua"}
end

--- Calls fn(item, i) for every item with at most `concurrency` at once; returns the results
-- in input order. Each slot holds {ok=true, value}, or M.failure(raised) with ok=false;
-- nothing is lost when one item fails. The items are taken in input order by `concurrency`
-- worker tasks, not a task each: 2,000 sub-calls behind a cap of 64 make 64 coroutines.
function M.map(items, fn, concurrency)
  local count = 0
  for i in ipairs(items) do count = i end
  local out, taken = {}, 0
  local function settle(i, ok, ...)
    if ok then
      out[i] = {ok = true, ...}
    else
      local failed = M.failure((...))
      failed.ok = false
      out[i] = failed
    end
  end
  local function work()
    while taken < count do
      taken = taken + 1
      local i = taken
      settle(i, pcall(fn, items[i], i))
    end
  end
  local workers = {}
  for w = 1, math.min(math.max(1, concurrency or count), count) do workers[w] = M.spawn(work) end
  for _, worker in ipairs(workers) do worker:join() end
  return out
end

--- Runs every function as a task and returns each one's first result in order; raises the
-- first error after all have finished.
function M.all(fns)
  local slots = M.map(fns, function(fn) return fn() end)
  local out = {}
  for i, s in ipairs(slots) do
    if not s.ok then error(s.error, 0) end
    out[i] = s[1]
  end
  return out
end

return M
