-- rlm_query children on the daytona backend run beside their parent: a second driver in the
-- parent's sandbox, in a folder of its own, with a session of its own in the toolbox process
-- API. Against the Daytona stand-in (tests/standins/daytona) and the LLM stand-in; every case
-- counts the sandboxes the stand-in created and checks that none is left.
local T = require "support"
local F = require "rlm_fixtures"
local D = require "daytona_fixtures"
local backend = require "rlm.backend.daytona"
local rlm = require "rlm"
local sys = require "rlm.sys"
local contract = require "backend_contract"

local tests = {}

local SESSION_CREATE = "POST /toolbox/{sid}/process/session"
local SESSION_DELETE = "DELETE /toolbox/{sid}/process/session/{session_id}"

-- Runs fn(s) on a fresh stand-in; then exactly `sandboxes` must have been created, all deleted.
local function on_standin(sandboxes, fn)
  return function()
    local s = D.standin()
    fn(s)
    T.eq(backend.settle(5), 0, "deletions still running")
    T.eq(s:requests("POST /api/sandbox"), sandboxes, "sandboxes created")
    T.eq(s:live(), {}, "sandboxes left in the stand-in")
  end
end

-- A child: which names it found already set (a driver of its own finds none), its answer (the
-- context upper-cased), its working directory; a file in that directory.
local CHILD_CODE = [[
import os
seen = sorted(n for n in ('parent_secret', 'mine') if n in globals())
mine = context
open('note.txt', 'w').write(context)
SUBMIT(answer='%s|%s|%s' % (context.upper(), ','.join(seen) or '-', os.getcwd()))]]

local PARENT_CODE = [[
import os
parent_secret = 'p'
singles = [rlm_query('CHILD TASK', c) for c in ('a', 'b', 'c')]
batch = rlm_query_batched(['CHILD TASK'] * 4, ['d', 'e', 'f', 'g'])
home = '/home/daytona'
left = sorted(n for n in os.listdir(home) if n not in ('workspace', 'memory', '.rlm', 'children'))
left += ['children/' + n for n in sorted(os.listdir(home + '/children'))]
SUBMIT(answer={'answers': singles + batch, 'left': left, 'mine': 'mine' in globals(),
               'note': os.path.exists('note.txt'), 'cwd': os.getcwd()})]]

tests["daytona children: 3 rlm_query and a batch of 4 run in the parent's one sandbox"] =
  on_standin(1, function(s)
    F.model{rules = {
      {match = "Task: CHILD TASK", reply = F.code(CHILD_CODE)},
      {match = "Task: parent", reply = F.code(PARENT_CODE)},
    }}
    local res = rlm.run{task = "parent", context = "ctx", backend = "daytona",
                        max_parallel_children = 4}
    T.eq(res.reason, "submitted", tostring(res.detail))
    local a = res.answer
    T.eq(#a.answers, 7)
    local cwds = {}
    for i, letter in ipairs{"A", "B", "C", "D", "E", "F", "G"} do
      local answer, seen, cwd = a.answers[i]:match("^(%u)|([^|]*)|(.*)$")
      T.eq(answer, letter, a.answers[i])
      T.eq(seen, "-", "a child saw another driver's variables: " .. a.answers[i])
      T.truthy(cwd ~= "/home/daytona/workspace", "a child ran in the parent's folder")
      T.truthy(not cwds[cwd], "two children shared the folder " .. cwd)
      cwds[cwd] = true
    end
    T.eq(a.mine, false, "the parent saw a child's variable")
    T.eq(a.note, false, "a child's file landed in the parent's folder")
    T.eq(a.cwd, "/home/daytona/workspace")
    T.eq(a.left, {}, "children's folders left in the sandbox")
    T.eq(res.usage.calls, 8, "the parent's turn and one turn per child")
    -- one session for the parent's driver, one per child, and each child's deleted as it ended
    T.eq(s:requests(SESSION_CREATE), 8)
    T.eq(s:requests(SESSION_DELETE), 7)
  end)

tests["daytona children: a child's crashed driver is restarted alone; the parent keeps its state"] =
  on_standin(1, function(s)
    F.model{rules = {
      {match = "state was lost", reply = F.code("SUBMIT(answer='child again, ' + str('x' in globals()))")},
      {match = "Task: crashy", reply = F.code("x = 1\nimport os\nos.kill(os.getpid(), 9)")},
      {match = "Task: parent", reply = F.code(
        "kept = 'parent state'\nr = rlm_query('crashy')\nSUBMIT(answer=[r, kept])")},
    }}
    local res = rlm.run{task = "parent", context = "ctx", backend = "daytona"}
    T.eq(res.answer, {"child again, False", "parent state"}, tostring(res.detail))
    T.eq(s:requests(SESSION_CREATE), 3, "the parent's driver, the child's, the child's again")
  end)

tests["daytona children: an interpreter beside another shares its machine only when nothing differs"] =
  on_standin(2, function(s)
    local parent <close> = rlm.interpreter{backend = "daytona"}
    parent:execute("x = 'parent'\nopen('p.txt', 'w').write('p')")
    local child <close> = rlm.interpreter{backend = "daytona", beside = parent}
    local out = child:execute([[
import os
SUBMIT(x='x' in globals(), cwd=os.getcwd(), parent_file=os.path.exists('/home/daytona/workspace/p.txt'))]])
    T.eq(out.x, false, "the child saw the parent's variable")
    T.eq(out.parent_file, true, "beside the parent: the same machine")
    T.truthy(out.cwd ~= "/home/daytona/workspace", out.cwd)
    T.eq(s:requests("POST /api/sandbox"), 1)
    local elsewhere <close> = rlm.interpreter{backend = "daytona", beside = parent,
                                              snapshot = "another-image"}
    local far = elsewhere:execute([[
import os
SUBMIT(parent_file=os.path.exists('/home/daytona/workspace/p.txt'))]])
    T.eq(far.parent_file, false, "another snapshot is another machine")
    T.eq(s:requests("POST /api/sandbox"), 2)
    -- The child's folder goes with it; the parent's sandbox stays.
    child:shutdown()
    local left = parent:execute([[
import os
SUBMIT(left=os.listdir('/home/daytona/children'))]])
    T.eq(left.left, {}, "the child's folder is left")
    T.eq(#s:live(), 2)
  end)

tests["daytona children: a grandchild runs beside them too"] = on_standin(1, function()
  F.model{rules = {
    {match = "Task: GRANDCHILD", reply = F.code("import os\nSUBMIT(answer='g ' + os.getcwd())")},
    {match = "Task: CHILD", reply = F.code("SUBMIT(answer=rlm_query('GRANDCHILD'))")},
    {match = "Task: parent", reply = F.code("SUBMIT(answer=rlm_query('CHILD'))")},
  }}
  local res = rlm.run{task = "parent", context = "ctx", backend = "daytona", max_depth = 3}
  T.eq(res.answer, "g /home/daytona/children/c2", tostring(res.detail))
end)

local FAILED_CHILD_PARENT = [[
import os
try:
    rlm_query('CHILD TASK', 'a')
    why = 'no error'
except RuntimeError as e:
    why = str(e)
SUBMIT(answer=[why, sorted(os.listdir('/home/daytona/children'))])]]

tests["daytona children: a child whose driver fails leaves no driver or folder"] =
  on_standin(1, function(s)
    F.model{rules = {
      {match = "Task: CHILD TASK", reply = F.code(CHILD_CODE)},
      {match = "Task: parent", reply = F.code(FAILED_CHILD_PARENT)},
    }}
    -- The child's driver starts in its folder, and every request to it fails.
    s:fault{method = "POST", path = "/toolbox/", suffix = "/process/execute", status = 400,
            body_contains = "--client /home/daytona/children/c1/", count = 100}
    local res = rlm.run{task = "parent", context = "ctx", backend = "daytona", max_iterations = 1}
    T.eq(res.reason, "submitted", tostring(res.detail))
    T.contains(res.answer[1], "the child run ended without an answer")
    T.eq(res.answer[2], {}, "the child's folder is left")
    T.truthy(s:requests(SESSION_CREATE) >= 2, "the child's driver never started")
    T.eq(s:requests(SESSION_DELETE), s:requests(SESSION_CREATE) - 1, "a child's session is left")
  end)

local SLEEPY_PARENT = [[
r = rlm_query('SLEEPY CHILD')
SUBMIT(answer=r)]]

tests["daytona children: SIGINT while a child runs leaves no sandbox"] = on_standin(1, function(s)
  local model = F.model{rules = {
    {match = "Task: SLEEPY CHILD", reply = F.code("import time\ntime.sleep(60)\nSUBMIT(answer='late')")},
    {match = "Task: parent", reply = F.code(SLEEPY_PARENT)},
  }}
  local proc = assert(sys.spawn{argv = {T.rlm, "ask", "parent", "--backend", "daytona"},
                                env = D.env(s, D.model_env()), stdin = "null", stdout = "null",
                                stderr = "pipe"})
  T.defer(function() proc:kill("KILL"); proc:close() end)
  -- The child's driver has started and its code is running: two drivers, the child's turn asked.
  local deadline = sys.now() + 60
  while (s:requests(SESSION_CREATE) < 2 or F.stats(model).requests < 2) and sys.now() < deadline do
    sys.sleep(0.05)
  end
  T.eq(s:requests(SESSION_CREATE), 2, "the child's driver never started")
  sys.sleep(0.5)
  proc:kill("INT")
  T.eq({sys.wait(proc, 30)}, {"exit", 130})
  T.contains(proc:read("stderr"), "interrupted (SIGINT)")
  T.eq(s:live(), {}, "no sandbox left")
end)

-- The backend contract, every interpreter beside one host interpreter: a child's sandbox is a
-- sandbox like any other (those whose options differ get their own). Its folder goes with it.
for name, case in pairs(contract.run{backend = "daytona", around = function(case, b)
  local s = D.standin()
  b.env = s.env
  local host = rlm.interpreter{backend = "daytona"}
  T.defer(function() host:shutdown() end)
  host:start()
  local make = b.interp
  b.interp = function(opts)
    local o = {beside = host}
    for k, v in pairs(opts or {}) do o[k] = v end
    return make(o)
  end
  case(b)
  b.close()
  local out = host:execute([[
import os
SUBMIT(left=sorted(os.listdir('/home/daytona/children')) if os.path.isdir('/home/daytona/children') else [])]])
  T.eq(out.left, {}, "children's folders left")
  host:shutdown()
  T.eq(backend.settle(5), 0, "deletions still running")
  T.eq(s:live(), {}, "sandboxes left in the stand-in")
end}) do tests["daytona beside a host: " .. name] = case end

return tests
