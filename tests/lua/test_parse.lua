local T = require "support"
local parse = require "rlm.parse"
local budget = require "rlm.budget"
local prompts = require "rlm.prompts"

local tests = {}

tests["code blocks: python, py and bare fences run; other languages do not"] = function()
  local reply = table.concat({
    "Let me look.", "```python3", "print(len(context))", "```",
    "Some JSON:", "```json", '{"a": 1}', "```",
    "```python", "x = 1", "```",
    "```", "y = 2", "```",
    "```bash", "ls", "```",
    "```py", "z = 3", "```"}, "\n")
  T.eq(parse.code_blocks(reply), {"print(len(context))", "x = 1", "y = 2", "z = 3"})
end

tests["an unterminated block runs unless the reply was cut at the output limit"] = function()
  T.eq(parse.code_blocks("```repl\nprint(1)\nprint(2)"), {"print(1)\nprint(2)"})
  T.eq(parse.code_blocks("no code here"), {})
  local cut = parse.reply("Step one.\n```repl\nopen('side', 'w').write('x')\nresult = compute(",
                          {cut = true})
  T.eq(cut.code, {})
  T.eq(cut.cut, true)
  T.eq(#cut.notes, 1)
  T.contains(cut.notes[1], "cut off at the output limit")
  -- a cut reply's closed blocks still run
  T.eq(parse.reply("```repl\nx = 1\n```\n```repl\ny = ", {cut = true}).code, {"x = 1"})
end

-- Shapes real models write; each names the public run or report it follows.
tests["a ```python block beside a ```repl block illustrates and does not run"] = function()
  -- DSPy RLM runs (stanfordnlp/dspy issue #9573): the reply explains with a python block,
  -- then acts in a repl block; running both paid for llm_query_batched twice.
  local r = parse.reply(table.concat({
    "The pattern is:", "```python", "answers = llm_query_batched(chunks)", "```",
    "Now for real:", "```repl", "answers = llm_query_batched(chunks)", "print(len(answers))", "```"},
    "\n"))
  T.eq(r.code, {"answers = llm_query_batched(chunks)\nprint(len(answers))"})
  T.eq(#r.notes, 1)
  T.contains(r.notes[1], "Block 1 (a ```python block) was not run: only ```repl blocks run")
  -- without a repl block, python blocks are the code
  T.eq(parse.reply("```python\nx = 1\n```").code, {"x = 1"})
end

tests["thinking sections are never run"] = function()
  local draft = "<think>\nMaybe:\n```python\nos.remove('data')\n```\nNo.\n</think>\n"
  T.eq(parse.reply(draft .. "```repl\nprint(1)\n```").code, {"print(1)"})
  T.eq(parse.reply("<thinking>\n```repl\nbad()\n```\n</thinking>ok\n```repl\ngood()\n```").code,
       {"good()"})
  -- the template opened the section in the prompt: everything before a lone </think>
  T.eq(parse.reply("draft\n```repl\nbad()\n```\n</think>\n```repl\ngood()\n```").code,
       {"good()"})
  -- an unclosed section (the reply was cut while thinking) runs nothing
  T.eq(parse.reply("```repl\ngood()\n```\n<think>\n```repl\nbad()\n```").code, {"good()"})
  T.eq(parse.final("<think>FINAL(guess)</think>\nstill working"), nil)
end

-- Cleaning a reasoning model's answers is ordinary RLM work: the tags inside code are strings.
tests["thinking tags inside code are code"] = function()
  local code = 'clean = re.sub(r"<think>.*?</think>", "", s)\nprint(s.count("<think>"))\n'
    .. 'tail = r.split("</think>")[-1]'
  T.eq(parse.reply("```repl\n" .. code .. "\n```\nFINAL_VAR(tail)").code, {code})
  T.eq(parse.final("```repl\n" .. code .. "\n```\nFINAL_VAR(tail)"), {var = "tail"})
  T.eq(parse.reply("Here it is: ```repl\nx = 1\n```").code, {"x = 1"}, "a fence after text")
  T.eq(parse.reply("```repl\n\n```\n```python\ny = 2\n```").code, {"y = 2"},
       "an empty repl block does not silence the others")
end

tests["a fence indented inside a list is dedented, and its end is found"] = function()
  local reply = table.concat({
    "1. Count the lines:", "   ```repl", "   n = len(context.splitlines())", "   if n:",
    "       print(n)", "   ```", "2. Then report it.", "FINAL(n lines)"}, "\n")
  local r = parse.reply(reply)
  T.eq(r.code, {"n = len(context.splitlines())\nif n:\n    print(n)"})
  T.eq(parse.final(reply), {text = "n lines"})
end

tests["FINAL and FINAL_VAR lines outside code"] = function()
  T.eq(parse.final("done.\nFINAL(42 customers)\n"), {text = "42 customers"})
  T.eq(parse.final('FINAL("quoted")'), {text = "quoted"})
  T.eq(parse.final("  FINAL_VAR(result)"), {var = "result"})
  T.eq(parse.final("FINAL_VAR('result')"), {var = "result"})
  T.eq(parse.final("```repl\nFINAL(not this)\n```\nstill working"), nil)
  T.eq(parse.final("the FINAL(answer) is mid-line"), nil)
end

-- A corpus of reply shapes from public runs and reports, each with its source and what rlm
-- runs of it (the shapes are written anew here, short; not copied).
local CORPUS = {
  {source = "stanfordnlp/dspy PR #9309: prose mixed with code, several blocks, an unlabelled "
     .. "fence (a strict parser refused such replies)",
   reply = "First the size.\n```\nprint(len(context))\n```\nThen a sample:\n```python\n"
     .. "print(context[:80])\n```\nI will read both.",
   code = {"print(len(context))", "print(context[:80])"}},
  {source = "stanfordnlp/dspy issue #9632 (PR #9639): a local Qwen model's action with no code",
   reply = "Reasoning: None\nCode: None", code = {}},
  {source = "stanfordnlp/dspy issue #9573 (PR #9801): code whose string holds a fenced block; "
     .. "fenced with four backticks, as CommonMark nests them",
   reply = "````repl\nnote = \"\"\"\n```python\nx = 1\n```\n\"\"\"\nprint(note.count('x'))\n````\n",
   code = {"note = \"\"\"\n```python\nx = 1\n```\n\"\"\"\nprint(note.count('x'))"}},
  {source = "alexzhang13/rlm PR #115: FINAL_VAR called inside the code (the driver ends the "
     .. "block there; no FINAL line outside code is read)",
   reply = "```repl\nanswer = str(sum(counts))\nFINAL_VAR(answer)\n```",
   code = {"answer = str(sum(counts))\nFINAL_VAR(answer)"}, final = false},
  {source = "alexzhang13/rlm issue #22: FINAL_VAR(answer) on its own line after the code",
   reply = "```repl\nanswer = 'x'\n```\nFINAL_VAR(answer)",
   code = {"answer = 'x'"}, final = {var = "answer"}},
  {source = "huggingface/OpenEnv PR #282: FINAL(answer) written in the code, beside the "
     .. "reference's answer-dict finish",
   reply = "```repl\nanswer = {'content': best, 'ready': True}\nFINAL(best)\n```",
   code = {"answer = {'content': best, 'ready': True}\nFINAL(best)"}, final = false},
}

tests["a corpus of real reply shapes, each with its source"] = function()
  for _, case in ipairs(CORPUS) do
    T.eq(parse.reply(case.reply).code, case.code, case.source)
    if case.final ~= nil then T.eq(parse.final(case.reply), case.final or nil, case.source) end
  end
  -- a four-backtick fence is not closed by three, and closes with four or more
  T.eq(parse.reply("````repl\na = 1\n```\nb = 2\n`````\n").code, {"a = 1\n```\nb = 2"})
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
