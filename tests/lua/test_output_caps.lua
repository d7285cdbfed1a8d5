--- Output caps per model and reasoning effort: a turn may write up to its model's output limit,
-- a sub-call's answer is held to max_output_tokens with room for a reasoning model's reasoning,
-- and reasoning_effort reaches the wire (checked on the bodies the stand-in received).
local T = require "support"
local F = require "rlm_fixtures"
local llm = require "rlm.llm"
local sys = require "rlm.sys"

local tests = {}

tests["output_cap: the model's limit, room for reasoning, an override"] = function()
  T.eq(llm.output_limit("openai/gpt-4o-2024-08-06"), 16384, "a dated version takes its model's")
  T.eq(llm.output_limit("local/unknown"), nil)
  T.eq(llm.output_cap("anthropic/claude-sonnet-4-5"), 64000, "a turn: the whole limit")
  T.eq(llm.output_cap("anthropic/claude-sonnet-4-5", 8192), 8192)
  T.eq(llm.output_cap("openai/o3", 8192), 8192 + 16384, "medium reasoning by default")
  T.eq(llm.output_cap("openai/o3", 8192, "high"), 8192 + 32768)
  T.eq(llm.output_cap("openai/o3", 90000, "high"), 100000, "never past the limit")
  T.eq(llm.output_cap("openai/o1-mini", 8192), 8192, "not a reasoning model to configure")
  T.eq(llm.output_cap("openai/gpt-4o", nil, nil, {["openai/gpt-4o"] = 3000}), 3000)
  T.eq(llm.output_cap("local/unknown"), nil)
  T.truthy(llm.reasons("anthropic/claude-standin") and llm.reasons("openai/gpt-5-mini"))
  T.truthy(not llm.reasons("openai/gpt-4o") and not llm.reasons("openai/gpt-5-chat-latest"))
end

tests["reasoning_effort: an unknown effort is misuse, before anything is sent"] = function()
  F.model{default = "nothing"}
  T.raises(function() llm.complete{model = "openai/o3", prompt = "x", reasoning_effort = "max"} end,
           "reasoning_effort must be minimal, low, medium or high, not max")
  T.raises(function() require("rlm").run{task = "t", reasoning_effort = "max"} end,
           'reasoning_effort must be "minimal", "low", "medium" or "high"')
end

-- The caps and effort each request carried, as the stand-in received them: the root turn
-- writes code that puts its own into a variable, and the sub-call answers with its own.
local function seen_expr(field, knob)
  return ("'%%s %%s' %% (body.get(%q), json.dumps(body.get(%q), sort_keys=True))"):format(field, knob)
end

local function ask(model, field, knob, extra)
  local server = F.model{rules = {
    {match = "^what cap", reply_expr = seen_expr(field, knob)},
    {match = "Task: caps", reply_expr = "'```repl\\nturn = %r\\nsub = llm_query(\"what cap\")\\n"
      .. "SUBMIT(answer=turn + \" | \" + sub)\\n```\\n' % (" .. seen_expr(field, knob) .. ",)"},
  }}
  local argv = {"ask", "caps", "--max-iterations", "2", "--quiet"}
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local env = sys.environ()
  env.ANTHROPIC_BASE_URL, env.ANTHROPIC_API_KEY = server.url, "sk-test-key-0123456789"
  env.RLM_MODEL = model
  local r = T.run_rlm(argv, {env = env})
  T.eq(r.code, 0, r.stderr)
  return r.stdout
end

tests["rlm ask: an OpenAI reasoning model's turns take its limit, sub-calls room to reason"] =
function()
  -- Before: no cap and no effort at all without a budget ("None null | None null").
  T.eq(ask("openai/o3", "max_completion_tokens", "reasoning_effort", {"--reasoning-effort", "high"}),
       ('100000 "high" | %d "high"\n'):format(8192 + 32768))
  T.eq(ask("openai/o3", "max_completion_tokens", "reasoning_effort"),
       ("100000 null | %d null\n"):format(8192 + 16384))
end

tests["a child run's turns are capped as sub-calls, not at the model's limit"] = function()
  F.model{rules = {
    {match = "Task: child", reply_expr = "'```repl\\nSUBMIT(answer=%r)\\n```\\n' % ("
      .. "str(body.get('max_completion_tokens')),)"},
    {match = "Task: parent", reply = F.code("SUBMIT(answer=rlm_query('child'))")},
  }}
  local res = require("rlm").run{task = "parent", model = "openai/o3", max_iterations = 2}
  T.eq(res.answer, tostring(8192 + 16384))
end

tests["rlm ask: a Claude model's turns take 64000, not 4096; effort is a thinking budget"] = function()
  local claude = "anthropic/claude-sonnet-4-5"
  local budget = '{"budget_tokens": 4096, "type": "enabled"}'
  T.eq(ask(claude, "max_tokens", "thinking", {"--reasoning-effort", "low"}),
       ("64000 %s | %d %s\n"):format(budget, 8192 + 4096, budget))
  T.eq(ask(claude, "max_tokens", "thinking"), "64000 null | 8192 null\n")
end

tests["an unknown model is sent no cap; output_limits gives it one"] = function()
  local function seen(opts)
    F.model{rules = {
      {match = "^what cap", reply_expr = seen_expr("max_completion_tokens", "reasoning_effort")},
      {match = "Task: caps", reply_expr = "'```repl\\nturn = %r\\nSUBMIT(answer=turn + \" | \" + "
        .. "llm_query(\"what cap\"))\\n```\\n' % (" .. seen_expr("max_completion_tokens",
        "reasoning_effort") .. ",)"},
    }}
    opts.task, opts.max_iterations = "caps", 2
    return require("rlm").run(opts).answer
  end
  T.eq(seen{}, "None null | None null")
  T.eq(seen{output_limits = {["openai/root-model"] = 5000}}, "5000 null | 5000 null")
  local turn = seen{output_limits = {["openai/root-model"] = 50000}, reasoning_effort = "low",
                    context_windows = {["openai/root-model"] = 30000}}
  -- not a reasoning model: no effort, no room for reasoning; the window leaves room for the
  -- prompt (a few thousand characters)
  local cap = tonumber(turn:match("^(%d+) null | 8192 null$"))
  T.truthy(cap and cap > 27000 and cap < 30000, turn)
end

return tests
