--- One rule for a sub-call that fails, the same for every cause: llm_query and rlm_query raise
-- RuntimeError("cause: why"); in llm_query_batched that item is "[ERROR] cause: why" and the
-- others are answers. One test per cause, through `rlm ask` against a stand-in.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

local tests = {}

-- The code every case runs: each way to call, and what came back (an answer, or the cause).
local PROBE = [[
def probe(f):
    try:
        return "answer " + f()
    except RuntimeError as e:
        return "raised " + str(e).split(":")[0]
single = probe(lambda: llm_query("PROBE"))
child = probe(lambda: rlm_query("PROBE"))
batch = llm_query_batched(["PROBE", "fine"])
SUBMIT(answer=" | ".join([single, child] + [b.split(":")[0] for b in batch]))]]

-- `rlm ask` with the PROBE code as the root's first reply and rule for the sub-call "PROBE";
-- returns the answer line. rlm_query falls back to llm_query at --max-depth 1.
local function ask(probe_rule, args, env_extra)
  probe_rule.match = "^PROBE"
  local server = F.model{rules = {
    probe_rule,
    {match = "^fine", reply = "fine"},
    {match = "Task: probe", reply = F.code(PROBE)},
  }}
  local env = sys.environ()
  for k, v in pairs(env_extra or {}) do env[k] = v end
  local argv = {"ask", "probe", "--max-depth", "1", "--max-iterations", "2", "--quiet"}
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local r = T.run_rlm(argv, {env = env, timeout = 300})
  T.eq(r.code, 0, r.stderr)
  return r.stdout, server
end

tests["a budget limit: max_llm_calls"] = function()
  T.eq(ask({reply = "never sent"}, {"--max-llm-calls", "0"}),
       "raised max_llm_calls | raised max_llm_calls | [ERROR] max_llm_calls | [ERROR] max_llm_calls\n")
end

tests["a timeout"] = function()
  T.eq(ask({reply = "late", latency_ms = 8000}, {"--llm-call-timeout", "2"}),
       "raised timeout | raised timeout | [ERROR] timeout | fine\n")
end

tests["an HTTP error"] = function()
  T.eq(ask({fault = "401"}), "raised http | raised http | [ERROR] http | fine\n")
end

tests["a refusal"] = function()
  T.eq(ask({refusal = "I can't help with that."}),
       "raised refusal | raised refusal | [ERROR] refusal | fine\n")
end

tests["an answer too large: a server that sends without end"] = function()
  local endless = T.server{"tests/standins/endless"}
  T.eq(ask({reply = "unused"}, {"--sub-model", "local/endless"},
           {RLM_LOCAL_BASE_URL = endless.url .. "/v1"}),
       "raised too_large | raised too_large | [ERROR] too_large | [ERROR] too_large\n")
end

tests["a prompt too big for the model's context window"] = function()
  F.model{rules = {
    {match = "Task: probe", reply = F.code(PROBE:gsub('"PROBE"', '"PROBE" * 400'))},
    {match = "^fine", reply = "fine"},
  }}
  local res = require("rlm").run{task = "probe", max_depth = 1, max_iterations = 2,
                                 context_windows = {["openai/root-model"] = 200}}
  T.eq(res.answer, "raised context_window | raised context_window | [ERROR] context_window | fine")
end

return tests
