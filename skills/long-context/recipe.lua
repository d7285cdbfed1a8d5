-- long-context: an RLM run over a large file with chunking and llm_query_batched.
local rlm = require "rlm"
local json = require "rlm.json"
local sys = require "rlm.sys"

local params = ... or {}
local opt = params.options or {}      -- its key=value arguments (SKILL.md: parameters)

-- A synthetic service log: about 5 MB, with a known number of ERROR lines per service.
local function synthetic_log()
  local lines, errors = {}, 0
  local services = {"auth", "billing", "search", "upload"}
  for i = 1, 60000 do
    local svc = services[i % #services + 1]
    local level = (i % 7 == 0 or i % 13 == 0) and "ERROR" or "INFO"
    if level == "ERROR" then errors = errors + 1 end
    lines[i] = ("2026-11-22T%02d:%02d:%02d %-8s %-5s request %d served in %d ms %s"):format(
      i // 3600 % 24, i // 60 % 60, i % 60, svc, level, i, i % 997, string.rep(".", 12))
  end
  return table.concat(lines, "\n"), errors
end

local context, expected
if opt.file then
  context = assert(sys.read_file(opt.file))
else
  context, expected = synthetic_log()
end
local task = opt.task or "How many lines of the log have the level ERROR? Answer with the number."

print(("long-context: %d characters of context, task: %s"):format(#context, task))
local res = rlm.run{task = task, context = context, backend = params.backend, model = opt.model,
                    sub_model = opt.sub_model, trace = opt.trace, tools = params.tools,
                    on_event = function(e)
                      if e.type == "turn" then
                        io.stderr:write(("   turn %d: %d sub-calls, %d tokens so far\n"):format(
                          e.turn, e.usage.llm_calls, e.usage.total_tokens))
                      end
                    end}
print(("answer: %s"):format(type(res.answer) == "table" and json.encode(res.answer) or tostring(res.answer)))
print(("how: %s after %d turn(s); %d sub-calls; %d tokens; $%.4f; %.1f s"):format(
  res.reason .. (res.detail and " (" .. res.detail .. ")" or ""), res.iterations, res.usage.llm_calls, res.usage.total_tokens, res.usage.cost, res.usage.elapsed))
if expected then
  local right = tonumber(res.answer) == expected
  print(("check: the log has %d ERROR lines: %s"):format(expected, right and "right" or "WRONG"))
  return right and 0 or 1
end
return res.error and 1 or 0
