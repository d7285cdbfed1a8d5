-- The RLM loop on the daytona backend, against the Daytona stand-in and the LLM stand-in.
-- The cases of test_rlm.lua that exercise the sandbox run here unchanged with every run forced onto
-- daytona; each also checks how many sandboxes it made and that none is left. The cases below
-- them look at what only Daytona has: a sandbox per child run when asked for (children run beside
-- their parent otherwise: test_daytona_children.lua), and a hang on a remote sandbox.
local T = require "support"
local F = require "rlm_fixtures"
local D = require "daytona_fixtures"
local backend = require "rlm.backend.daytona"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

-- Every rlm.run of the shared cases goes to daytona, even one that names another backend.
local daytona_rlm = setmetatable({
  run = function(opts)
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.backend = "daytona"
    return rlm.run(o)
  end,
}, {__index = rlm})

-- Runs fn(s) on a fresh stand-in; then `sandboxes` must have been created and all deleted.
local function on_standin(sandboxes, fn)
  return function()
    local s = D.standin()
    fn(s)
    T.eq(backend.settle(5), 0, "deletions still running")
    T.eq(s:requests("POST /api/sandbox"), sandboxes, "sandboxes created")
    T.eq(s:requests("DELETE /api/sandbox/{id}"), sandboxes, "sandboxes deleted")
    T.eq(s:live(), {}, "sandboxes left in the stand-in")
  end
end

-- Cases of test_rlm.lua and the sandboxes each makes: one per run (rlm_query children run in
-- their parent's).
local SHARED = {
  ["a 5 MB context is chunked by the model's code and aggregated from llm_query_batched"] = 1,
  ["rlm_query runs a child one level deeper and its calls count against the parent"] = 1,
  ["at max_depth rlm_query falls back to a plain llm_query"] = 1,
  ["a sandbox that hangs is stopped by execute_timeout and the run goes on"] = 1,
  ["a model that never submits stops at max_iterations with the extraction answer"] = 1,
  ["a model that loops on llm_query is told at max_llm_calls and adapts"] = 1,
  ["a missing output field is fed back, not accepted"] = 1,
  ["FINAL and FINAL_VAR finish a run"] = 2,
  ["keys never appear in trajectories or results"] = 1,
  ["a dead model server is a clear error in the result, and no sandbox is left"] = 1,
}

do
  local env = setmetatable({require = function(name)
    if name == "rlm" then return daytona_rlm end
    return require(name)
  end}, {__index = _G})
  local shared = assert(loadfile("tests/lua/test_rlm.lua", "t", env))()
  for name, sandboxes in pairs(SHARED) do
    local case = shared[name]
    -- A case renamed in test_rlm.lua must be renamed here too, not silently dropped.
    tests["daytona: " .. name] = case and on_standin(sandboxes, function() case() end) or function()
      error("test_rlm.lua has no case named " .. name)
    end
  end
end

-- The same log as test_rlm.lua's: 60000 lines, ERROR on every 7th and 13th.
local function big_log()
  local lines, errors = {}, 0
  for i = 1, 60000 do
    local level = (i % 7 == 0 or i % 13 == 0) and "ERROR" or "INFO"
    if level == "ERROR" then errors = errors + 1 end
    lines[i] = ("2026-11-22T08:%02d:%02d host-%03d %s request %d handled with padding %s"):format(
      i % 60, i % 60, i % 997, level, i, string.rep("x", 20))
  end
  return table.concat(lines, "\n"), errors
end

local CHUNKING_CODE = [[
lines = context.split("\n")
chunks = ["\n".join(lines[i:i + 5000]) for i in range(0, len(lines), 5000)]
answers = llm_query_batched(["TALLY:\n" + c for c in chunks])
SUBMIT(answer=sum(int(a) for a in answers))]]

tests["daytona: the 5 MB context goes up as one file and the 12 sub-calls as one round trip"] =
  on_standin(1, function(s)
    F.model{rules = {
      {match = "^TALLY", reply_expr = "str(prompt.count(' ERROR '))"},
      {match = "Task: count", reply = F.code(CHUNKING_CODE)},
    }}
    local context, errors = big_log()
    local res = rlm.run{task = "count", context = context, backend = "daytona"}
    T.eq(res.answer, errors)
    T.eq(res.usage.llm_calls, 12)
    local st = s:stats().requests
    T.eq(st["POST /toolbox/{sid}/files/bulk-upload"], 2, "the driver, then the context file")
    -- wait for the driver, load the context, run the turn's code, answer its one batch, and
    -- one poll that stands while the batch is answered (for calls from other threads): never
    -- one trip per sub-call
    T.eq(st["POST /toolbox/{sid}/process/execute"], 5)
  end)

local CHILD_CODE = [[
import os
SUBMIT(answer='%d chars, parent marker seen: %s' % (
    len(context), os.path.exists('/home/daytona/workspace/parent-marker.txt')))]]

local PARENT_CODE = [[
open('/home/daytona/workspace/parent-marker.txt', 'w').write('p')
SUBMIT(answer=[rlm_query('CHILD TASK %d' % i, 'c' * (100 * i)) for i in (1, 2, 3)])]]

tests["daytona: with child_sandbox = 'own' each rlm_query child has a sandbox of its own; all go"] =
  on_standin(4, function(s)
    F.model{rules = {
      {match = "Task: CHILD TASK", reply = F.code(CHILD_CODE)},
      {match = "Task: parent", reply = F.code(PARENT_CODE)},
    }}
    local live_during_children = {}
    local res = rlm.run{task = "parent", context = "ctx", backend = "daytona", max_depth = 2,
                        child_sandbox = "own",
                        on_event = function(e)
                          if e.type == "turn" and e.depth == 1 then
                            live_during_children[#live_during_children + 1] = #s:live()
                          end
                        end}
    T.eq(res.reason, "submitted")
    T.eq(res.answer, {"100 chars, parent marker seen: False", "200 chars, parent marker seen: False",
                      "300 chars, parent marker seen: False"})
    T.eq(live_during_children, {2, 2, 2}, "the parent's sandbox and one child's")
    T.eq(res.usage.calls, 4, "parent turn + three child turns")
  end)

-- The record of the run's first turn.
local function first_step(res)
  for _, r in ipairs(res.trajectory) do
    if r.type == "step" and (r.depth or 0) == 0 then return r end
  end
  error("the trajectory has no step")
end

tests["daytona: a hang is stopped by execute_timeout; the sandbox and its state live on"] =
  on_standin(1, function()
    F.model{rules = {
      {match = "TimeoutError", reply = F.code("SUBMIT(answer=kept + ', context ' + context)")},
      {match = "Task: hang", reply = F.code("kept = 'still here'\nimport time\ntime.sleep(100)")},
    }}
    local t0 = sys.now()
    local res = rlm.run{task = "hang", context = "abc", backend = "daytona", execute_timeout = 1}
    T.eq(res.answer, "still here, context abc")
    T.eq(res.iterations, 2)
    T.truthy(sys.now() - t0 < 60, "took " .. (sys.now() - t0) .. " s (the code sleeps 100 s)")
    T.contains(first_step(res).output, "TimeoutError")
  end)

local DEAF_CODE = [[
import signal, time
for s in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
    signal.signal(s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF])
while True:
    try:
        time.sleep(100)
    except BaseException:
        pass]]

-- The restarted driver has lost every variable; the loop must put `context` back.
local function deaf_run(backend_name)
  F.model{rules = {
    {match = "restarted", reply = F.code("SUBMIT(answer='recovered with %d chars' % len(context))")},
    {match = "Task: deaf", reply = F.code(DEAF_CODE)},
  }}
  local t0 = sys.now()
  local res = rlm.run{task = "deaf", context = "abcdef", backend = backend_name, execute_timeout = 1}
  T.eq(res.answer, "recovered with 6 chars", tostring(res.reason) .. ": " .. tostring(res.detail))
  T.eq(res.iterations, 2)
  T.contains(first_step(res).output, "the sandbox was restarted")
  T.truthy(sys.now() - t0 < 60, "took " .. (sys.now() - t0) .. " s (the code never ends)")
end

tests["daytona: code deaf to the timeout is killed by the backstop; the run goes on with its context"] =
  on_standin(1, function() deaf_run("daytona") end)

-- The same on the local backend: the bug this found was in the loop, not in a backend.
tests["local: code deaf to the timeout is killed by the backstop; the run goes on with its context"] =
  function() deaf_run("local") end

tests["daytona: rlm ask --backend daytona answers over a 5 MB file and leaves no sandbox"] =
  on_standin(1, function(s)
    F.model{rules = {
      {match = "^TALLY", reply_expr = "str(prompt.count(' ERROR '))"},
      {match = "Task: How many", reply = F.code(CHUNKING_CODE)},
    }}
    local dir = T.tmpdir()
    local context, errors = big_log()
    assert(sys.write_file(dir .. "/log.txt", context))
    local r = T.run_rlm({"ask", "How many ERROR lines?", "--context", dir .. "/log.txt",
                         "--backend", "daytona"}, {env = D.env(s, D.model_env())})
    T.eq(r.code, 0, r.stderr)
    T.eq(r.stdout, errors .. "\n")
    T.contains(r.stderr, "turn 1/20")
  end)

return tests
