--- Resume is lossless and idempotent: a resumed run records the turns it replayed with their
-- answers, so it can crash and resume again, and `rlm replay` of the file finds nothing changed;
-- a turn cut short keeps its model reply and the sub-call answers it got; a trajectory is only
-- appended to or replaced whole.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

-- Starts `rlm ask ARGS` in the background; returns the process.
local function start(args, env)
  local argv = {T.rlm, "ask", table.unpack(args)}
  local proc = assert(sys.spawn{argv = argv, env = env, stdin = "null", stdout = "null",
                                stderr = "null"})
  T.defer(function() proc:close() end)
  return proc
end

-- Waits until the stand-in has had n requests (within a generous bound), then a little more.
local function wait_requests(server, n)
  local deadline = sys.now() + 60
  while F.stats(server).requests < n and sys.now() < deadline do sys.sleep(0.05) end
  T.eq(F.stats(server).requests, n, "requests seen before the kill")
  sys.sleep(0.3)
end

local function kill9(proc)
  proc:kill(9)
  T.eq({sys.wait(proc, 30)}, {"signal", 9})
end

-- The records of turn `turn` of the root run with the given type.
local function root_records(path, kind, turn)
  local out = {}
  for _, r in ipairs(assert(trace.read(path))) do
    if r.type == kind and (r.depth or 0) == 0 and (turn == nil or r.turn == turn) then
      out[#out + 1] = r
    end
  end
  return out
end

local function replay_clean(path, server)
  local before = F.stats(server).requests
  local r = T.run_rlm({"replay", path}, {env = F.env(server)})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "no differences")
  T.eq(F.stats(server).requests, before, "replay sends no request")
end

tests["kill -9, resume, kill -9 again, resume: turns 1-2 replay with their answers both times"] =
function()
  local server = F.model{rules = {
    -- turn 3's sub-call is slow: both kills land while it is in flight
    {match = "^SUB slow", reply = "zzz", latency_ms = 3000},
    {match = "^SUB", reply_expr = "'sub ' + prompt[4:]"},
    {match = "Task: twice", reply = F.code("x = 1\ns = llm_query('SUB one')\nprint(s)")},
    {match = "Turn 2 of", reply = F.code("t = llm_query('SUB two')\nprint(x, s, t)")},
    {match = "Turn 3 of", reply = F.code("u = llm_query('SUB slow')\nprint(u)")},
    {match = "Turn 4 of", reply = F.code("SUBMIT(answer=f'{x}-{s}-{t}-{u}')")},
  }}
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local env = F.env(server, {TMPDIR = dir})
  local proc = start({"twice", "--trace", path, "--quiet"}, env)
  wait_requests(server, 6)          -- turns 1-3, two sub-calls, and the slow one in flight
  kill9(proc)
  proc = start({"--resume", path, "--quiet"}, env)
  wait_requests(server, 7)          -- only the slow sub-call again
  kill9(proc)
  T.eq(#root_records(path, "step", 1), 2, "turn 1 is recorded again by the resume")
  for _, step in ipairs(root_records(path, "step", 1)) do
    T.eq(#step.calls, 1, "each record of turn 1 holds its sub-call's answer")
    T.eq(step.calls[1].results, {"sub one"})
  end
  local r = T.run_rlm({"ask", "--resume", path, "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "1-sub one-sub two-zzz\n", "x, s and t came back from the twice replayed turns")
  T.eq(F.stats(server).requests, 9, "each resume asked for the slow sub-call only, then turn 4")
  local last = root_records(path, "step", 2)
  T.eq(last[#last].calls[1].results, {"sub two"})
  replay_clean(path, server)
end

tests["a kill mid-turn: the resume asks neither for the turn's reply nor for its answers so far"] =
function()
  local server = F.model{rules = {
    -- the second sub-call is slow: the kill lands while it is in flight
    {match = "^SUB b", reply = "bee", latency_ms = 3000},
    {match = "^SUB", reply_expr = "'sub ' + prompt[4:]"},
    {match = "Task: midturn", reply = F.code("a = llm_query('SUB a')\nb = llm_query('SUB b')\n"
                                              .. "print(a, b)")},
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer=a + '/' + b)")},
  }}
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local env = F.env(server, {TMPDIR = dir})
  local proc = start({"midturn", "--trace", path, "--quiet"}, env)
  wait_requests(server, 3)          -- turn 1, SUB a, and SUB b in flight
  kill9(proc)
  local r = T.run_rlm({"ask", "--resume", path, "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "sub a/bee\n")
  T.eq(F.stats(server).requests, 5, "SUB b (cut by the kill) and turn 2 only")
  local models = F.stats(server).models
  T.eq(#models, 5)
  replay_clean(path, server)
end

tests["a trajectory cut mid-record resumes, and is replaced whole, not cut or glued"] = function()
  local server = F.model{rules = {
    {match = "Task: cut", reply = F.code("x = 6\nprint(x)")},
    {match = "Turn 2 of", reply = F.code("y = x * 7\nprint(y)")},
    {match = "Turn 3 of", reply = F.code("SUBMIT(answer=str(y))")},
  }}
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local env = F.env(server, {TMPDIR = dir})
  local r = T.run_rlm({"ask", "cut", "--trace", path, "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  -- keep the start, turns 1-2, turn 3's reply, and half of turn 3's step: as a kill mid-write leaves it
  local text = assert(sys.read_file(path))
  local kept, n = {}, 0
  for line in text:gmatch("[^\n]+") do
    n = n + 1
    kept[#kept + 1] = line
    if line:find('"type":"step"', 1, true) and line:find('"turn":3', 1, true) then
      kept[#kept] = line:sub(1, #line // 2)
      break
    end
  end
  T.truthy(n >= 4, "the run wrote " .. n .. " records")
  local cut_text = table.concat(kept, "\n")
  assert(sys.write_file(path, cut_text))
  local held = assert(io.open(path, "rb"))   -- the file as it was, whatever takes its name
  T.defer(function() held:close() end)
  local before = F.stats(server).requests
  r = T.run_rlm({"ask", "--resume", path, "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "42\n")
  T.eq(F.stats(server).requests - before, 0, "turn 3's reply was kept before its step was cut")
  local records, cut = trace.read(path)
  T.truthy(records, cut)
  T.eq(cut, false, "no cut line is left")
  T.eq(held:read("a"), cut_text, "the cut file was replaced by a new one, not changed in place")
  local whole = assert(sys.read_file(path))
  T.eq(whole:sub(1, #cut_text - #kept[#kept]), cut_text:sub(1, #cut_text - #kept[#kept]),
       "the whole records before the cut are kept as they were")
  replay_clean(path, server)
end

tests["a kill inside a child run: the resume replays the child's own turns, not asks them again"] =
function()
  local server = F.model{rules = {
    {match = "^SUB slow", reply = "zzz", latency_ms = 3000},
    {match = "^SUB", reply_expr = "'sub ' + prompt[4:]"},
    -- the child (rlm_query) runs on the sub-model
    {model = "^kid", match = "Task: inner", reply = F.code("a = llm_query('SUB c1')\nprint(a)")},
    {model = "^kid", match = "Turn 2 of", reply = F.code("b = llm_query('SUB slow')\nprint(b)")},
    {model = "^kid", match = "Turn 3 of", reply = F.code("SUBMIT(answer=a + '+' + b)")},
    {match = "Task: outer", reply = F.code("r = rlm_query('inner')\nprint(r)")},
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer='got ' + r)")},
  }}
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local env = F.env(server, {TMPDIR = dir})
  local proc = start({"outer", "--sub-model", "openai/kid-model", "--trace", path, "--quiet"}, env)
  wait_requests(server, 5)          -- root turn 1, child turns 1-2, SUB c1, SUB slow in flight
  kill9(proc)
  local r = T.run_rlm({"ask", "--resume", path, "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "got sub c1+zzz\n")
  T.eq(F.stats(server).requests, 8, "SUB slow again, the child's turn 3, the root's turn 2")
  replay_clean(path, server)
end

tests["a new run over an old trajectory replaces the file whole, never cuts it in place"] =
function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='new')")}}}
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local old = '{"type":"start","task":"old"}\n{"type":"final","reason":"submitted"}\n'
  assert(sys.write_file(path, old))
  local held = assert(io.open(path, "rb"))   -- as `rlm trace --follow` holds it
  T.defer(function() held:close() end)
  local r = T.run_rlm({"ask", "new", "--trace", path, "--quiet"},
                      {env = F.env(server, {TMPDIR = dir})})
  T.eq(r.code, 0, r.stderr)
  T.eq(held:read("a"), old, "the old file was not cut or overwritten")
  T.contains(assert(sys.read_file(path)), '"task":"new"')
end

return tests
