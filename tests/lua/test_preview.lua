--- A cost preview before a run: `rlm ask --dry-run` and rlm.run{dry_run = true} send nothing
-- and give what the first call costs, the worst case and each model's price.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local rlm = require "rlm"

local tests = {}

tests["rlm ask --dry-run sends nothing and prints the first call, the worst case, the prices"] =
function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  local trace = T.tmpdir() .. "/run.jsonl"
  local argv = {"ask", "count the lines", "--context", "-", "--model", "openai/gpt-4o",
                "--sub-model", "openai/gpt-4o-mini", "--dry-run", "--trace", trace}
  local r = T.run_rlm(argv, {env = F.env(server), input = ("line\n"):rep(2000)})
  T.eq(r.code, 0, r.stderr)
  T.eq(F.stats(server).requests, 0, "nothing was sent")
  T.eq(require("rlm.sys").stat(trace), nil, "nothing was written")
  T.contains(r.stdout, "first call: openai/gpt-4o, about ")
  T.contains(r.stdout, "worst case: $")
  T.contains(r.stdout, "root openai/gpt-4o: 2.5, 1.25, -, 10;")
  T.contains(r.stdout, "sub  openai/gpt-4o-mini: 0.15, 0.075, -, 0.6;")
  T.contains(r.stdout, "nothing was sent")

  argv[#argv + 1] = "--json"
  argv[#argv + 1] = "--max-cost"
  argv[#argv + 1] = "0.5"
  r = T.run_rlm(argv, {env = F.env(server), input = ("line\n"):rep(2000)})
  T.eq(r.code, 0, r.stderr)
  local p = json.decode(r.stdout).preview
  T.eq(p.worst_case, {cost = 0.5, by = "max_cost"})
  T.eq(#p.models, 2)
  -- the first call as it will be sent: the stand-in counts its prompt the same way
  T.eq(F.stats(server).requests, 0, "nothing was sent")
  T.eq(T.run_rlm({"ask", "count the lines", "--context", "-", "--model", "openai/gpt-4o"},
                 {env = F.env(server), input = ("line\n"):rep(2000)}).code, 0)
  local sent = F.stats(server).prompt_sizes[1]
  T.truthy(math.abs(p.first_call.prompt_tokens - sent) <= 2,
           ("preview %d prompt tokens, sent %d"):format(p.first_call.prompt_tokens, sent))
  T.truthy(math.abs(p.first_call.cost - p.first_call.prompt_tokens * 2.5 / 1e6) < 1e-12)
  T.truthy(p.first_call.cost_longest > p.first_call.cost)
end

tests["rlm.run{dry_run = true} returns a preview; without a limit the worst case is the calls'"] =
function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  local res = rlm.run{task = "t", context = ("c"):rep(40000), model = "openai/gpt-4o",
                      sub_model = "openai/gpt-4o-mini", dry_run = true, max_iterations = 5,
                      max_llm_calls = 10}
  T.eq(res.reason, "dry_run")
  T.eq(F.stats(server).requests, 0)
  local w = res.preview.worst_case
  -- 11 root calls and 10 sub-calls, each a full window in and its output cap out (a root
  -- turn: gpt-4o's 16,384; a sub-call: max_output_tokens)
  local root = (128000 * 2.5 + 16384 * 10) / 1e6
  local sub = (128000 * 0.15 + 8192 * 0.6) / 1e6
  T.truthy(math.abs(w.cost - (11 * root + 10 * sub)) < 1e-9, tostring(w.cost))
  T.contains(w.by, "11 root calls")
  T.truthy(res.preview.typical.tokens >= 10000, "the context counts")
  res = rlm.run{task = "t", model = "openai/no-price", dry_run = true}
  T.contains(res.preview.worst_case.why, "openai/no-price has no price")
end

return tests
