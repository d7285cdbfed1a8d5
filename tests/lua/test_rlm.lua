local T = require "support"
local F = require "rlm_fixtures"
local rlm = require "rlm"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

-- A 5 MB log with a known number of ERROR lines.
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
print(len(context), len(chunks))
answers = llm_query_batched(["TALLY:\n" + c for c in chunks])
total = sum(int(a) for a in answers)
SUBMIT(answer=total)]]

local function chunking_script()
  return {rules = {
    {match = "^TALLY", reply_expr = "str(prompt.count(' ERROR '))"},
    {match = "Task: How many ERROR", reply = F.code(CHUNKING_CODE)},
  }, default = "I am not sure."}
end

local function chunking_run(backend)
  local server = F.model(chunking_script())
  local context, errors = big_log()
  T.truthy(#context > 5e6, "context is " .. #context .. " bytes")
  local trace_path = T.tmpdir() .. "/run.jsonl"
  local res = rlm.run{task = "How many ERROR lines are in the log?", context = context,
                      sub_model = "openai/sub-model", backend = backend, trace = trace_path}
  T.eq(res.reason, "submitted")
  T.eq(res.answer, errors)
  T.eq(res.iterations, 1)
  T.eq(res.usage.llm_calls, 12, "sub-calls: one per 5000-line chunk")
  T.eq(res.usage.by_model["openai/sub-model"].calls, 12)
  T.truthy(res.usage.input_tokens > 1e6, "sub-call tokens are counted")
  local st = F.stats(server)
  for _, m in ipairs(st.models or {}) do T.truthy(m == "root-model" or m == "sub-model", m) end
  -- The context never travels in a prompt: the root's prompts stay small.
  local records = require("rlm.trace").read(trace_path)
  local step
  for _, r in ipairs(records) do if r.type == "step" then step = r end end
  T.truthy(step.prompt_chars < 5000, "root prompt is " .. step.prompt_chars .. " chars")
  return res
end

tests["a 5 MB context is chunked by the model's code and aggregated from llm_query_batched"] = function()
  chunking_run("local")
end

tests["rlm_query runs a child one level deeper and its calls count against the parent"] = function()
  F.model{rules = {
    {match = "Task: CHILD TASK", reply = F.code("SUBMIT(answer='child saw ' + str(len(context)) + ' chars')")},
    {match = "Task: parent", reply = F.code("r = rlm_query('CHILD TASK', 'x' * 1234)\nSUBMIT(answer=r)")},
  }}
  local res = rlm.run{task = "parent", context = "ctx", max_depth = 2}
  T.eq(res.answer, "child saw 1234 chars")
  T.eq(res.usage.calls, 2, "parent turn + child turn")
  local depths = {}
  for _, r in ipairs(res.trajectory) do
    if r.type == "step" then depths[#depths + 1] = r.depth end
  end
  table.sort(depths)
  T.eq(depths, {0, 1})
end

tests["at max_depth rlm_query falls back to a plain llm_query"] = function()
  F.model{rules = {
    {match = "^CHILD TASK", reply = "fallback answer"},
    {match = "Task: parent", reply = F.code("SUBMIT(answer=rlm_query('CHILD TASK', 'ctx'))")},
  }}
  local res = rlm.run{task = "parent", context = "ctx", max_depth = 1}
  T.eq(res.answer, "fallback answer")
  T.eq(res.usage.llm_calls, 1)
end

tests["a model that never submits stops at max_iterations with the extraction answer"] = function()
  F.model{rules = {
    {match = "run ended before SUBMIT was called \\(max_iterations", reply = 'Here: {"answer": "extracted 7"}'},
    {match = ".", reply = F.code("print('still looking')")},
  }}
  local res = rlm.run{task = "never ends", context = "abc", max_iterations = 3}
  T.eq(res.iterations, 3)
  T.eq(res.submitted, false)
  T.eq(res.extracted, true)
  T.eq(res.answer, "extracted 7")
  T.eq(res.reason, "extracted")
  T.contains(res.detail, "max_iterations: no SUBMIT after 3 turns")
end

tests["a model that loops on llm_query is told at max_llm_calls and adapts"] = function()
  local server = F.model{rules = {
    {match = "^ping", reply = "pong"},
    {match = "LLM call limit exceeded: 5 \\+ 1 > 5", reply = F.code("SUBMIT(answer='adapted')")},
    {match = ".", reply = F.code("for i in range(1000):\n    llm_query('ping')")},
  }}
  local res = rlm.run{task = "loop", context = "abc", max_llm_calls = 5, max_iterations = 10}
  T.eq(res.reason, "submitted")
  T.eq(res.answer, "adapted")
  T.eq(res.usage.llm_calls, 5)
  T.eq(res.iterations, 2, "the limit does not end the run: the next turn happens")
  T.eq(F.stats(server).requests, 2 + 5)
end

tests["a sandbox that hangs is stopped by execute_timeout and the run goes on"] = function()
  F.model{rules = {
    {match = "TimeoutError", reply = F.code("SUBMIT(answer='recovered')")},
    {match = ".", reply = F.code("import time\ntime.sleep(100)")},
  }}
  local t0 = sys.now()
  local res = rlm.run{task = "hang", context = "abc", execute_timeout = 1}
  T.eq(res.answer, "recovered")
  T.eq(res.iterations, 2)
  T.truthy(sys.now() - t0 < 60, "took " .. (sys.now() - t0) .. " s (the code sleeps 100 s)")
end

tests["a missing output field is fed back, not accepted"] = function()
  F.model{rules = {
    {match = "SUBMIT is missing evidence", reply = F.code("SUBMIT(answer='a', evidence=['e1'])")},
    {match = ".", reply = F.code("SUBMIT(answer='a')")},
  }}
  local res = rlm.run{task = "two fields", context = "abc", outputs = {"answer", "evidence"}}
  T.eq(res.answer, "a")
  T.eq(res.evidence, {"e1"})
  T.eq(res.iterations, 2)
end

tests["FINAL and FINAL_VAR finish a run"] = function()
  F.model{rules = {
    {match = "Task: final text", reply = "I know it.\nFINAL(forty two)"},
    {match = "Task: final var", reply = F.code("result = {'n': 42}") .. "\nFINAL_VAR(result)"},
  }}
  T.eq(rlm.run{task = "final text", context = "x"}.answer, "forty two")
  T.eq(rlm.run{task = "final var", context = "x"}.answer, {n = 42})
end

tests["a custom prompt template changes what the model receives"] = function()
  local server = F.model{rules = {
    {match = "^CUSTOM OPENING for custom", reply = F.code("SUBMIT(answer='custom seen')")},
    {match = ".", reply = F.code("SUBMIT(answer='default seen')")},
  }}
  local res = rlm.run{task = "custom", context = "x",
                      prompts = {first = "CUSTOM OPENING for {{task}} ({{context_chars}} chars)"}}
  T.eq(res.answer, "custom seen")
  local st = F.stats(server)
  T.contains(json.encode(st.last_body or st.last_request or st), "CUSTOM OPENING for custom (1 chars)")
end

tests["token and cost budgets stop the run cleanly"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("print('x' * 100)")}}}
  local res = rlm.run{task = "budget", context = "abc", max_tokens = 1, max_iterations = 5}
  T.eq(res.reason, "budget:max_tokens")
  T.contains(res.detail, "max_tokens: this call needs about")
  T.eq(res.iterations, 0)
  T.eq(F.stats(server).requests, 0, "a turn that cannot be afforded is not sent")
end

tests["a dead model server is a clear error in the result, and no sandbox is left"] = function()
  local saved = sys.getenv("OPENAI_BASE_URL")
  T.defer(function() sys.setenv("OPENAI_BASE_URL", saved) end)
  sys.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
  sys.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
  local res = rlm.run{task = "x", context = "y", model = "openai/m", llm_call_timeout = 2}
  T.eq(res.reason, "model_error")
  T.contains(res.detail, "model call failed")
  T.eq(res.extracted, false, "no turn, nothing to extract from")
  T.eq(#require("rlm.registry").list(), 0)
end

tests["keys never appear in trajectories or results"] = function()
  F.model{rules = {{match = ".", reply = F.code("import os\nSUBMIT(answer=sorted(os.environ))")}}}
  local res = rlm.run{task = "env", context = "x"}
  local text = json.encode(res.trajectory) .. json.encode(res.fields)
  T.truthy(not text:find("sk-test-key-0123456789", 1, true), "key leaked")
  for _, name in ipairs(res.answer) do T.truthy(not name:find("API_KEY"), name) end
end

tests["rlm ask prints the answer and a progress line per turn; rlm trace renders HTML"] = function()
  local server = F.model(chunking_script())
  local dir = T.tmpdir()
  local context = big_log()
  assert(sys.write_file(dir .. "/log.txt", context))
  local env = sys.environ()
  local r = T.run_rlm({"ask", "How many ERROR lines are in the log?", "--context", dir .. "/log.txt",
                       "--sub-model", "openai/sub-model", "--trace", dir .. "/t.jsonl"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  local _, errors = big_log()
  T.eq(r.stdout, errors .. "\n")
  T.contains(r.stderr, "turn 1/20")
  r = T.run_rlm({"trace", dir .. "/t.jsonl", "--html", dir .. "/t.html"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  local html = assert(sys.read_file(dir .. "/t.html"))
  T.contains(html, "Turn 1")
  T.contains(html, "llm_query_batched")
  T.contains(html, "submitted")
  r = T.run_rlm({"ask", "--json", "How many ERROR lines are in the log?", "--context", dir .. "/log.txt"}, {env = env})
  local out = json.decode(r.stdout)
  T.eq(out.fields.answer, errors)
end

-- rlm.run takes batch_concurrency as any number >= 0 (check_options), and llm_query_batched
-- runs with it: below 1 one call at a time, a fraction cut (the C batch once refused them all).
tests["llm_query_batched runs with any batch_concurrency rlm.run accepts"] = function()
  F.model{rules = {
    {match = "^SUB", reply = "sub ok"},
    {match = "Task: batched", reply = F.code("r = llm_query_batched(['SUB a', 'SUB b'])\nSUBMIT(answer='|'.join(r))")},
  }}
  for _, n in ipairs{4.0, 0} do
    local res = rlm.run{task = "batched", context = "ctx", batch_concurrency = n, max_iterations = 2}
    T.eq(res.answer, "sub ok|sub ok", "batch_concurrency = " .. tostring(n) .. ": " .. tostring(res.detail))
  end
end

return tests
