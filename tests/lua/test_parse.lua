local T = require "support"
local parse = require "rlm.parse"
local budget = require "rlm.budget"
local prompts = require "rlm.prompts"

local tests = {}

tests["code blocks: repl, python, py and bare fences run; other languages do not"] = function()
  local reply = table.concat({
    "Let me look.", "```repl", "print(len(context))", "```",
    "Some JSON:", "```json", '{"a": 1}', "```",
    "```python", "x = 1", "```",
    "```", "y = 2", "```",
    "```bash", "ls", "```",
    "```py", "z = 3", "```"}, "\n")
  T.eq(parse.code_blocks(reply), {"print(len(context))", "x = 1", "y = 2", "z = 3"})
end

tests["an unterminated block (a cut reply) still runs"] = function()
  T.eq(parse.code_blocks("```repl\nprint(1)\nprint(2)"), {"print(1)\nprint(2)"})
  T.eq(parse.code_blocks("no code here"), {})
end

tests["FINAL and FINAL_VAR lines outside code"] = function()
  T.eq(parse.final("done.\nFINAL(42 customers)\n"), {text = "42 customers"})
  T.eq(parse.final('FINAL("quoted")'), {text = "quoted"})
  T.eq(parse.final("  FINAL_VAR(result)"), {var = "result"})
  T.eq(parse.final("FINAL_VAR('result')"), {var = "result"})
  T.eq(parse.final("```repl\nFINAL(not this)\n```\nstill working"), nil)
  T.eq(parse.final("the FINAL(answer) is mid-line"), nil)
end

tests["budget refuses calls past the limit with the standard message"] = function()
  local b = budget.new{max_llm_calls = 3}
  local tickets = {}
  for k = 1, 3 do tickets[k] = assert(b:reserve{prompt_chars = 10, sub = true}) end
  local ok, msg = b:reserve{prompt_chars = 10, sub = true}
  T.eq(ok, nil)
  T.eq(msg, "max_llm_calls: LLM call limit exceeded: 3 + 1 > 3. Use Python code for aggregation "
    .. "instead of making more LLM calls.")
  assert(b:reserve{prompt_chars = 10}, "a root turn is not a call made for code")
  b:settle(tickets[1], "m", {input_tokens = 10, output_tokens = 5}, 0.5)
  T.eq(b:usage().total_tokens, 15)
  T.eq(b:usage().by_model.m.calls, 1)
  local c = budget.new{max_cost = 0.4}
  local t = assert(c:reserve{prompt_chars = 10, price = {input = 1, output = 1}})
  c:settle(t, "m", {input_tokens = 1, output_tokens = 1}, 0.5)
  T.contains(select(2, c:reserve{prompt_chars = 10, price = {input = 1, output = 1}}), "max_cost:")
end

tests["templates refuse unknown placeholders"] = function()
  T.eq(prompts.render("a {{x}} b", {x = 1}), "a 1 b")
  T.raises(function() prompts.render("{{nope}}", {x = 1}) end, "uses {{nope}}")
end

return tests
