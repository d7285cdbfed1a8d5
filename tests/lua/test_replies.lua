--- Replies as real models write them, through `rlm ask` against a stand-in that gives each
-- shape (the public source of each shape is named in tests/lua/test_parse.lua).
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

-- Runs `rlm ask TASK` with a trajectory; returns the result, every step's output joined, and
-- the stand-in's requests' prompts (the user turns rlm sent, in order, from the trajectory).
local function ask(task, env)
  local path = T.tmpdir() .. "/t.jsonl"
  local r = T.run_rlm({"ask", task, "--trace", path, "--max-iterations", "4"}, {env = env})
  local outputs = {}
  for _, rec in ipairs(assert(trace.read(path))) do
    if rec.type == "step" then outputs[#outputs + 1] = rec.output .. "\n" .. (rec.feedback or "") end
  end
  return r, table.concat(outputs, "\n---\n")
end

tests["a reply cut at the output cap does not run its unfinished block, and the model is told"] =
function()
  -- Anthropic turns are sent max_tokens 4096; this reply is longer, so the stand-in cuts it.
  local long = "```repl\nprint('SIDE EFFECT')\n" .. ("x = 1\n"):rep(4000) .. "print('end')\n```\n"
  local server = F.model{rules = {
    {match = "cut off at the output limit", reply = F.code("SUBMIT(answer='told')")},
    {match = "Task: cut", reply = long},
    {match = ".", reply = F.code("SUBMIT(answer='not told')")},
  }}
  local env = sys.environ()
  env.ANTHROPIC_BASE_URL, env.ANTHROPIC_API_KEY = server.url, "sk-test-key-0123456789"
  env.RLM_MODEL = "anthropic/claude-standin"
  local r, outputs = ask("cut", env)
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "told\n")
  T.truthy(not outputs:find("SIDE EFFECT", 1, true), "the cut block did not run")
  T.contains(outputs, "Block 1 was not run: your reply was cut off at the output limit")
end

tests["FINAL(guess) beside code waits for the code's output"] = function()
  F.model{rules = {
    {match = "was not taken", reply = "The code printed 42.\nFINAL(42)"},
    {match = "Task: guess", reply = F.code("print(6 * 7)") .. "FINAL(41)\n"},
  }}
  local r, outputs = ask("guess", sys.environ())
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "42\n")
  T.contains(outputs, "42")
  T.contains(outputs, "written before you saw what your code printed")
end

tests["an illustrative ```python block beside a ```repl block is not run"] = function()
  F.model{rules = {
    {match = "Task: illustrate", reply = "For example:\n```python\nprint('ILLUSTRATION')\n```\n"
      .. "Now:\n```repl\nprint('REAL')\nSUBMIT(answer='done')\n```\n"},
  }}
  local r, outputs = ask("illustrate", sys.environ())
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "done\n")
  T.contains(outputs, "REAL")
  T.truthy(not outputs:find("ILLUSTRATION", 1, true), "the illustration did not run")
end

tests["draft code in <think> is never run; a fence inside a list runs dedented"] = function()
  F.model{rules = {
    {match = "Task: think", reply = "<think>\nMaybe\n```repl\nprint('DRAFT')\n```\n</think>\n"
      .. "Steps:\n1. Count:\n   ```repl\n   n = 3\n   if n:\n       print('COUNT', n)\n   ```\n"},
    {match = "COUNT 3", reply = F.code("SUBMIT(answer=str(n))")},
  }}
  local r, outputs = ask("think", sys.environ())
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "3\n")
  T.truthy(not outputs:find("DRAFT", 1, true), "the draft did not run")
end

tests["blocks after a failing block are skipped, and the model is told"] = function()
  F.model{rules = {
    {match = "did not run", reply = F.code("SUBMIT(answer='told')")},
    {match = "Task: fail", reply = F.code("print('ONE')\nraise ValueError('boom')")
      .. F.code("print('TWO')") .. F.code("print('THREE')")},
    {match = ".", reply = F.code("SUBMIT(answer='not told')")},
  }}
  local r, outputs = ask("fail", sys.environ())
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "told\n")
  T.contains(outputs, "ONE")
  T.truthy(not outputs:find("TWO", 1, true), "block 2 did not run")
  T.contains(outputs, "A block raised an error, so the 2 block(s) after it did not run.")
end

tests["FINAL_VAR and FINAL inside code finish at the call; what follows never runs"] = function()
  -- alexzhang13/rlm PR #115: models call FINAL_VAR(x) in the code as a natural pattern.
  F.model{rules = {
    {match = "Task: var", reply = F.code("answer = str(6 * 7)\nFINAL_VAR(answer)\n"
      .. "print('AFTER')\nSUBMIT(answer='second')")},
    {match = "Task: name", reply = F.code("total = 40 + 2\nFINAL_VAR('total')")},
    {match = "Task: both", reply = F.code("FINAL('first')\nFINAL_VAR('x')") .. "FINAL(prose)\n"},
  }}
  for task, want in pairs{var = "42\n", name = "42\n", both = "first\n"} do
    local r, outputs = ask(task, sys.environ())
    T.eq(r.code, 0, r.stderr)
    T.eq(r.stdout, want, task)
    T.truthy(not outputs:find("AFTER", 1, true), "nothing after the call ran")
  end
end

tests["a refusal ends the run and says so in one line, on both wires"] = function()
  -- OpenAI sends the text as message.refusal with content null; Anthropic stop_reason "refusal".
  local server = F.model{rules = {
    {match = "Task: refuse", refusal = "I can't help with that request.\nSorry."},
    {match = ".", reply = F.code("SUBMIT(answer='asked again')")},
  }}
  local env = sys.environ()
  env.ANTHROPIC_BASE_URL, env.ANTHROPIC_API_KEY = server.url, "sk-test-key-0123456789"
  for _, model in ipairs{"openai/root-model", "anthropic/claude-standin"} do
    env.RLM_MODEL = model
    local path = T.tmpdir() .. "/t.jsonl"
    local r = T.run_rlm({"ask", "refuse", "--trace", path, "--quiet"}, {env = env})
    T.eq(r.code, 3, r.stderr)
    T.eq(r.stdout, "")
    T.eq(r.stderr, "rlm ask: no answer: refused (the model refused the task: I can't help with "
      .. "that request. Sorry.)\n", model)
    local kinds = {}
    for _, rec in ipairs(assert(trace.read(path))) do kinds[#kinds + 1] = rec.type end
    T.eq(kinds, {"start", "prompt", "reply", "refusal", "final"}, "no step, no extraction: " .. model)
  end
  T.eq(F.stats(server).requests, 2, "one request a run: nothing asked again")
end

tests["a model served only on the Responses API runs the loop (o3-pro)"] = function()
  local server = F.model{rules = {
    {match = "^half", reply = "21"},
    {match = "Task: responses", reply = F.code("SUBMIT(answer=str(2 * int(llm_query('half'))))")},
  }}
  local env = sys.environ()
  env.RLM_MODEL = "openai/o3-pro"
  local r = ask("responses", env)
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "42\n")
  T.eq(F.stats(server).paths["/v1/responses"], 2, "the turn and the sub-call")
end

return tests
