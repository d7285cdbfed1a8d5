--- RLM loop figures: host overhead per turn, and a batch of 64 llm_query calls from sandbox
-- code against a model that takes 300 ms per answer.
local T = require "support"
local F = require "rlm_fixtures"
local llm = require "rlm.llm"
local rlm = require "rlm"
local sys = require "rlm.sys"

-- 1. Overhead per turn: a zero-latency model that never submits, trivial code every turn.
-- We time the model calls and the sandbox executes ourselves; what is left is the host's own
-- work per turn (prompt rendering, parsing, JSON, bookkeeping, trajectory).
F.model{rules = {{match = "turns ran out", reply = '{"answer": 1}'},
                 {match = ".", reply = F.code("x = 1")}}}
local turns = 100
local model_time, exec_time = 0, 0
local complete = llm.complete
llm.complete = function(req)
  local t0 = sys.now()
  local a, b, c = complete(req)
  model_time = model_time + (sys.now() - t0)
  return a, b, c
end
local interp_mod = require "rlm.interpreter"
local Interp = getmetatable(interp_mod.new{backend = "local"}).__index
local execute = Interp.execute
Interp.execute = function(self, ...)
  local t0 = sys.now()
  local a, b = execute(self, ...)
  exec_time = exec_time + (sys.now() - t0)
  return a, b
end
local t0 = sys.now()
local res = rlm.run{task = "overhead", context = "x", max_iterations = turns}
local total = sys.now() - t0
llm.complete, Interp.execute = complete, execute
local per = total / res.iterations
print(("turn      %d turns: %.2f ms per turn = model %.2f + sandbox %.2f + host %.2f ms (incl. start-up and extraction)"):format(
  res.iterations, per * 1e3, model_time / res.iterations * 1e3, exec_time / res.iterations * 1e3,
  (total - model_time - exec_time) / res.iterations * 1e3))
T.cleanup()

-- 2. 64 llm_query_batched prompts from sandbox code, 300 ms each.
F.model({rules = {
  {match = "^Q\\d+$", reply = "ok", latency_ms = 300},
  {match = "Task: fan out", reply = F.code(
    "import time\nt = time.time()\nr = llm_query_batched(['Q%d' % i for i in range(64)])\n" ..
    "SUBMIT(answer=len(r), seconds=time.time() - t)")},
}})
res = rlm.run{task = "fan out", context = "x", outputs = {"answer", "seconds"}, max_llm_calls = 64}
assert(res.answer == 64, res.reason)
print(("fan-out   64 llm_query_batched calls x 300 ms from sandbox code: %.0f ms (one after another: %.0f ms)"):format(
  res.seconds * 1e3, 64 * 300))
T.cleanup()
