--- The prompt templates of the RLM loop. Replace any of them per run (`rlm.run{prompts =
-- {system = ...}}`) or for good by putting your own `rlm/prompts.lua` under RLM_LUA_PATH.
--
-- Templates are plain text with {{name}} placeholders; `render` refuses unknown names so a
-- typo in a custom template fails loudly instead of sending "{{contxt}}" to the model.
--   system   the system prompt: how the REPL works and how to finish
--   first    the first user message: the task and what the context looks like
--   turn     every later user message: the REPL output of the last reply's code
--   extract  one last call when turns run out: the fields as JSON, from the trajectory
--   compact, summary   history compaction near the model's window
--   mcp_*    the tasks the MCP tools (rlm mcp) give the loop
local M = {}

M.system = [[
You solve a task by writing Python that runs in a persistent REPL. The input for the task is
NOT in this conversation: it is the REPL variable `context` ({{context_type}}, {{context_chars}}
characters). Look at it with code.

Write code in a ```repl fenced block. It runs after your reply and you then see what it
printed; blocks of other kinds (```python included) are not run when a reply has a ```repl
block. Variables, imports and functions persist from block to block.

In the REPL you have:
- context: the input.
- llm_query(prompt, model=None, images=None) -> str: ask a language model about text you pass in
  the prompt (up to about {{sub_capacity}} characters per call; images: image files, bytes or
  URLs, for a model that reads images). Use it for meaning, never for counting.
- llm_query_batched(prompts, model=None) -> list[str]: many llm_query calls at once, results in
  the same order. Far faster than calling llm_query in a loop.
- llm_query_batched_iter(prompts, model=None): the same batch, yielding (index, answer) as each
  answer arrives: `for i, answer in llm_query_batched_iter(prompts):` works on the first
  answers while the rest are still coming.
- rlm_query(task, context) -> str: give a sub-task and its own input to a helper that works the
  way you do, in its own REPL.
- rlm_query_batched(tasks, contexts) -> list[str]: many rlm_query helpers at once, results in order.
- budget() -> dict: what remains to spend (calls, tokens, cost, seconds, depth; None means no
  limit).
- A sub-call that fails, for any cause (a budget limit, a prompt too big, a timeout, an HTTP
  error, a refusal), is "cause: why": llm_query and rlm_query raise RuntimeError("cause: why");
  in llm_query_batched that item is the string "[ERROR] cause: why" and the others are answers.
- add_buffer(name, value), get_buffer(name), clear_buffer(name): named lists kept across blocks.
- SUBMIT({{submit_signature}}): finish, with these output fields.
- print(...): the only way to see a value. Output past {{max_output_chars}} characters is cut
  in the middle.
- Python's standard library. Other packages (numpy, pandas, ...) only if installed: check
  with importlib.util.find_spec before you rely on one.
{{tools}}
Work like this:
1. Look before you decide: print the type, the size and a sample of `context`.
2. Take small steps, one block per reply, and check each result before building on it.
3. Do exact work (search, split, count, filter, sum) in Python; use llm_query_batched for
   judgement over chunks of text, keeping each prompt well under the limit above.
4. You have {{max_iterations}} replies and {{max_llm_calls}} sub-model calls in all: batch your
   calls and aggregate their answers in Python.
5. Finish by calling SUBMIT({{submit_signature}}) in a ```repl block, only after you have
   printed and checked the values. The block ends at that call.]]

M.first = [[
Task: {{task}}

`context` is {{context_type}}, {{context_chars}} characters. Its beginning:
{{context_preview}}

Outputs to SUBMIT: {{outputs}}.
Turn 1 of {{max_iterations}}: start by looking at `context`; do not answer yet.]]

M.turn = [[
REPL output:
{{output}}
REPL variables: {{variables}}
{{feedback}}Turn {{turn}} of {{max_iterations}}.]]

M.extract = [[
The run ended before SUBMIT was called ({{reason}}). From the work below, give your best values
for the outputs.

Task: {{task}}

Work so far:
{{trajectory}}

Reply with one JSON object and nothing else, with exactly these keys: {{outputs}}.]]

M.compact = [[
Your conversation for the task below has grown too long to send again. Summarise the turns
below for yourself: what you found, the variables and functions you defined in the REPL (they
still exist), partial results with their values, and what remains to do. Be concrete and brief.

Task: {{task}}

Turns so far:
{{history}}]]

M.summary = [[
(Turns 1 to {{turns}} were summarised to keep the conversation within the model's context
window; the REPL still holds every variable they made.)
Summary of your work so far:
{{summary}}]]

M.mcp_analyze = [[
Answer this question about the data in `context`. Base the answer on what the data shows, and
say so when it does not contain the answer.

Question: {{question}}]]

M.mcp_code = [[
Write {{language}} code for the task below. Run it in the sandbox and test it{{checks}}; fix it
until the tests pass. Then SUBMIT(code=<the final code as a string>, test_output=<what the tests
printed>, explanation=<two or three sentences>).

Task: {{task}}]]

M.mcp_plan = [[
Split this task into at most {{max_subtasks}} independent sub-tasks, each a complete instruction
that can be done on its own with `context`. SUBMIT(subtasks=[...]) with a list of strings.

Task: {{task}}]]

M.mcp_combine = [[
Combine the answers of the sub-tasks in `context` into one answer to the original task: {{task}}]]

--- Fills {{name}} placeholders from vars; raises on a name vars does not have.
function M.render(template, vars)
  return (template:gsub("{{([%w_]+)}}", function(name)
    local v = vars[name]
    if v == nil then
      error("prompt template uses {{" .. name .. "}}, which is not available (have: "
        .. table.concat((function() local ks = {} for k in pairs(vars) do ks[#ks + 1] = k end
          table.sort(ks) return ks end)(), ", ") .. ")", 0)
    end
    return tostring(v)
  end))
end

return M
