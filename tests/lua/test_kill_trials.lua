--- kill -9 at random moments of a run (with a child run) and of its resumes: every trajectory
-- resumes to the answer of an uninterrupted run, no paid turn or sub-call is asked again (each
-- kill may lose at most the one request it cut in flight: the calls are sequential), and
-- `rlm replay` of the final file finds no difference. RLM_KILL_TRIALS sets the number of trials (default 10),
-- RLM_KILL_SEED the random seed (printed on failure).
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

local TRIALS = tonumber(sys.getenv("RLM_KILL_TRIALS") or "") or 10
local KILLS = 2          -- kills per trial: one in the run, one in its first resume
local REQUESTS = 8       -- three turns and two sub-calls; a child's two turns and its sub-call

local function script()
  return {rules = {
    {match = "^SUB", reply_expr = "'ans ' + prompt[4:]"},
    -- the child (rlm_query) runs on the sub-model, the root on the root model
    {model = "^kid", match = "Task: inner", reply = F.code("c = llm_query('SUB 3')\nprint(c)")},
    {model = "^kid", match = "Turn 2 of", reply = F.code("SUBMIT(answer=c)")},
    {model = "^root", match = "Task: kills", reply = F.code("x = llm_query('SUB 1')\nprint(x)")},
    {model = "^root", match = "Turn 2 of", reply = F.code("y = llm_query('SUB 2')\n"
                                                          .. "z = rlm_query('inner')\nprint(y, z)")},
    {model = "^root", match = "Turn 3 of", reply = F.code("SUBMIT(answer=x + '|' + y + '|' + z)")},
  }, default = "UNEXPECTED"}
end

-- The file's records in short (depth:type:turn:run), to tell what happened when a trial fails.
local function outline(path)
  local out = {}
  for _, r in ipairs(trace.read(path) or {}) do
    out[#out + 1] = ("%s:%s:%s:%s"):format(r.depth, r.type, r.turn or "", r.slot or r.run)
  end
  return table.concat(out, " ")
end

-- Whether the file holds a run to resume (a kill before the start record leaves none).
local function has_start(path)
  local records = sys.stat(path) and trace.read(path)
  for _, r in ipairs(records or {}) do
    if r.type == "start" then return true end
  end
  return false
end

local function argv_for(path)
  if has_start(path) then return {T.rlm, "ask", "--resume", path, "--quiet"} end
  return {T.rlm, "ask", "kills", "--sub-model", "openai/kid-model", "--trace", path, "--quiet"}
end

-- Starts the run (or its resume), kills it with SIGKILL after `after` seconds; returns whether
-- the kill landed (false: the run had ended, with exit 0).
local function run_and_kill(path, env, after, why)
  local proc = assert(sys.spawn{argv = argv_for(path), env = env, stdin = "null",
                                stdout = "null", stderr = "null"})
  local ended = {sys.wait(proc, after)}
  if ended[1] == nil then
    proc:kill(9)
    ended = {sys.wait(proc, 30)}
  end
  proc:close()
  if ended[1] == "signal" then
    T.eq(ended, {"signal", 9}, why)
    return true
  end
  T.eq(ended, {"exit", 0}, why)     -- it ended before the kill reached it
  return false
end

tests["kill -9 at random moments of runs and resumes: same answer, nothing paid twice"] =
function()
  local server = F.model(script(), {"--latency-ms", "50"})
  local dir = T.tmpdir()
  local env = F.env(server, {TMPDIR = dir})
  -- the uninterrupted run: its answer, its requests and how long it takes
  local t0 = sys.now()
  local base = T.run_rlm({table.unpack(argv_for(dir .. "/base.jsonl"), 2)}, {env = env})
  local span = sys.now() - t0
  T.eq(base.code, 0, base.stderr)
  T.eq(base.stdout, "ans 1|ans 2|ans 3\n")
  T.eq(F.stats(server).requests, REQUESTS)
  local seed = tonumber(sys.getenv("RLM_KILL_SEED") or "") or math.floor(sys.time() * 1000) % 1e9
  math.randomseed(seed)
  local landed_total = 0
  for trial = 1, TRIALS do
    local why = ("trial %d (RLM_KILL_SEED=%d)"):format(trial, seed)
    local path = ("%s/trial%d.jsonl"):format(dir, trial)
    local before = F.stats(server).requests
    local landed = 0
    for _ = 1, KILLS do
      if run_and_kill(path, env, math.random() * span * 1.1, why) then landed = landed + 1 end
    end
    local r = T.run_rlm({table.unpack(argv_for(path), 2)}, {env = env, timeout = 120})
    T.eq(r.code, 0, why .. ": " .. r.stderr)
    T.eq(r.stdout, base.stdout, why .. ": " .. outline(path))
    local spent = F.stats(server).requests - before
    T.truthy(spent >= REQUESTS and spent <= REQUESTS + landed,
             ("%s: %d requests for %d kills (want %d, plus at most one a kill)"):format(
               why, spent, landed, REQUESTS))
    local replay = T.run_rlm({"replay", path}, {env = env, timeout = 120})
    T.eq(replay.code, 0, why .. ": " .. replay.stdout .. replay.stderr)
    T.contains(replay.stdout, "no differences", why)
    landed_total = landed_total + landed
  end
  T.truthy(landed_total >= 1, "at least one kill landed in " .. TRIALS .. " trials")
end

return tests
