-- delegation: a parent run that gives each section of a document to a child run.
local rlm = require "rlm"
local json = require "rlm.json"
local sys = require "rlm.sys"

local params = ... or {}
local opt = params.options or {}      -- its key=value arguments (SKILL.md: parameters)

local HANDBOOK = [[
## Onboarding
New engineers get a laptop on day one, pair with a buddy for two weeks and ship a change in week one.
## On-call
Each team runs a weekly rotation. Pages must be acknowledged within 15 minutes; handover is on Mondays.
## Releases
Releases go out on Tuesdays and Thursdays after the test suite passes; hotfixes need two reviewers.
## Security
Secrets live in the vault, never in code. Laptops use disk encryption; access is reviewed each quarter.
]]

local context = opt.file and assert(sys.read_file(opt.file)) or HANDBOOK
local task = "Summarise each '## ' section of the document in one sentence, delegating each " ..
  "section to a helper with rlm_query, then SUBMIT the summaries as one text, one line per section."

local res = rlm.run{task = task, context = context, backend = params.backend, model = opt.model,
                    sub_model = opt.sub_model, max_depth = tonumber(opt.max_depth) or 2, tools = params.tools,
                    max_iterations = 10}
print("answer:")
print(type(res.answer) == "string" and res.answer or json.encode(res.answer))
print("runs:")
for _, r in ipairs(res.trajectory) do
  if r.type == "final" then
    print(("  %sdepth %d: %d turn(s), %s"):format(string.rep("  ", r.depth), r.depth, r.iterations, r.reason))
  end
end
print(("totals for the tree: %d model calls, %d sub-calls, %d tokens, $%.4f, %.1f s"):format(
  res.usage.calls, res.usage.llm_calls, res.usage.total_tokens, res.usage.cost, res.usage.elapsed))
return res.submitted and 0 or 1
