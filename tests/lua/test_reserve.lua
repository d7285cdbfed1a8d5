--- Reservations sized to what a call can use, tried through `rlm ask` against the LLM stand-in:
-- a cost limit is spent, not kept idle, and never exceeded; a refusal says what is held back.
local T = require "support"
local F = require "rlm_fixtures"
local prices = require "rlm.prices"
local rlm = require "rlm"

local tests = {}

-- The stand-in's bill in USD at the built-in prices, over every model it served.
local function billed_cost(server)
  local total = 0
  for model, b in pairs(F.stats(server).billed) do
    local p = assert(prices["openai/" .. model], model)
    total = total + (b.input * p.input + b.cache_read * (p.cached_input or p.input)
      + b.cache_write * (p.cache_write or p.input) + b.output * p.output) / 1e6
  end
  return total
end

local BATCH = F.code([[
out = llm_query_batched(['SUB %d ' % i + 'w' * 4000 for i in range(200)])
print(sum(1 for o in out if o.startswith('[ERROR]')), 'refused')]])

tests["--max-cost 0.02 with a 200-sub-call batch spends at least 80% of it and never more"] =
function()
  local server = F.model{rules = {
    {match = "^SUB ", reply = ("answer "):rep(60)},
    {match = "run ended before SUBMIT", reply = '{"answer": "partial"}'},
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer='done')")},
    {match = ".", reply = BATCH},
  }}
  local r = T.run_rlm({"ask", "spend", "--model", "openai/gpt-4o-mini", "--max-cost", "0.02",
                       "--max-llm-calls", "500",
                       "--json"}, {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  local spent = billed_cost(server)
  T.truthy(spent <= 0.02, ("billed $%.5f under --max-cost 0.02"):format(spent))
  T.truthy(spent >= 0.016, ("billed $%.5f: at least 80%% of $0.02 spent"):format(spent))
  local res = require("rlm.json").decode(r.stdout)
  T.truthy(math.abs(res.usage.cost - spent) <= spent * 0.01, "the run's count is the bill")
  local subs = F.stats(server).requests
  T.truthy(subs > 60 and subs < 200, ("%d requests: many sub-calls went, not all"):format(subs))
end

-- $0.01 is about two gpt-4o turns and an extraction: the run makes its calls, or ends with
-- the extraction it kept for and one line saying what was held back.
tests["--max-cost 0.01 with a gpt-4o root makes its calls, or says what it holds back"] =
function()
  local server = F.model{rules = {
    {match = "run ended before SUBMIT", reply = '{"answer": "5000"}'},
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer=str(n))")},
    {match = ".", reply = F.code("n = len(context)\nprint(n)")},
  }}
  local r = T.run_rlm({"ask", "count", "--context", "-", "--model", "openai/gpt-4o",
                       "--max-cost", "0.01"}, {env = F.env(server), input = ("c"):rep(5000)})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "5000\n")
  T.eq(F.stats(server).requests, 2, "turn 1, then turn 2 or the extraction")
  T.truthy(billed_cost(server) <= 0.01)
  if r.stderr:find("answer extracted", 1, true) then
    local line = r.stderr:match("rlm ask: answer extracted: budget:max_cost %((.-)%)\n$")
    T.truthy(line, r.stderr)
    T.contains(line, "kept for the final extraction")
  end
end

tests["a refusal says in one line what is held back and why"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  local r = T.run_rlm({"ask", "count", "--model", "openai/gpt-4o", "--max-cost", "0.004"},
                      {env = F.env(server)})
  T.eq(r.code, 3, r.stderr)
  T.eq(F.stats(server).requests, 0, "nothing was sent")
  local line = r.stderr:match("rlm ask: no answer: budget:max_cost %((.-)%)\n$")
  T.truthy(line, r.stderr)
  T.contains(line, "kept for the final extraction")
  T.contains(line, "$0.004")
  T.truthy(not line:find("\n"), "one line")
end

-- A turn's output cap follows the replies the run has seen and what the budget affords, not a
-- flat 8,192 tokens, and its reservation is released when its answer arrives (the code then
-- sees all but what was spent).
tests["a turn reserves from the replies seen; the reservation goes when the answer comes"] =
function()
  local server = F.model{rules = {
    {match = "Turn 3 of", reply = F.code(
      "b = budget()\nSUBMIT(answer=str(abs(b['cost'] + b['used']['cost'] - 0.05) < 1e-9))")},
    {match = ".", reply = F.code("print(1)")},
  }}
  local res = rlm.run{task = "t", context = "c", model = "openai/gpt-4o", max_cost = 0.05}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(res.answer, "True", "nothing held once the answer came")
  -- $0.05 affords about 4,000 output tokens after the prompt and the extraction's keep
  local cap = F.stats(server).last_body.max_completion_tokens
  T.truthy(cap >= 1024 and cap < 2048, ("turn 3 asked for at most %d tokens"):format(cap))
  -- a generous budget holds the output limit: no reply is cut for a reservation's sake
  rlm.run{task = "t", context = "c", model = "openai/gpt-4o", max_cost = 5}
  T.eq(F.stats(server).last_body.max_completion_tokens,
       require("rlm.llm").output_limit("openai/gpt-4o"))
end

return tests
