--- The same input gives the same bytes in every process. Lua seeds its string hashes per
-- process, so anything written by iterating a table would change order from run to run: the
-- sub-call cache key, the context the model is shown, budget() as the code prints it, the
-- trajectory's records.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

local tests = {}

local SCRIPT = [[
local rlm = require "rlm"
local prices = {input = 1, output = 2}
local res = rlm.run{task = "same", trace = arg[1], sub_model = "openai/sub-model", max_cost = 1,
  context = {zeta = 1, alpha = {2, 3}, mid = "x", beta = {k = 1, a = 2, q = {z = 0, y = 1}}},
  prices = {["openai/root-model"] = prices, ["openai/sub-model"] = prices}}
io.write(res.answer, " ", res.reason)
]]

-- The times and the run's id are the only fields that may differ between two processes.
local function without_times(text)
  return (text:gsub('"(%w+)":(%-?[%d.e+-]+)', function(name, value)
    if name == "t" or name == "duration" or name == "elapsed" then return '"' .. name .. '":0' end
  end):gsub('"run":"r%d+%-', '"run":"r0-'))
end

tests["the same run in three processes writes the same trajectory, times and ids aside"] = function()
  F.model{rules = {
    {match = "Task: same", reply = F.code("print(context)\nprint(budget())\n"
      .. "r = llm_query_batched(['a', 'b', 'c'])\nprint(r)")},
    {match = "^[abc]$", reply_expr = "'sub ' + prompt"},
    {match = ".", reply = F.code("SUBMIT(answer=str(len(r)))")},
  }}
  local dir = T.tmpdir()
  local script = T.lua_script(SCRIPT)
  local first
  for i = 1, 3 do
    local path = dir .. "/t" .. i .. ".jsonl"
    local r = T.run_rlm({"run", script, path}, {env = sys.environ()})
    T.eq(r.code, 0, r.stderr)
    T.eq(r.stdout, "3 submitted")
    local text = without_times(assert(sys.read_file(path)))
    T.contains(text, "'alpha': [2, 3], 'beta': {'a': 2, 'k': 1, 'q': {'y': 1, 'z': 0}}, 'mid': 'x'",
               "the context, as the code printed it, in key order")
    T.contains(text, '"context":{"alpha":[2,3],"beta":{"a":2,"k":1,"q":{"y":1,"z":0}},"mid":"x"')
    T.contains(text, "{'calls': 50, 'cost': ", "budget() as the code printed it")
    first = first or text
    T.eq(text, first, "trajectory of process " .. i)
  end
end

tests["20 processes in turn with --cache: the first pays for the sub-calls, the others send none"] =
function()
  local server = F.model{rules = {
    {match = "^ITEM", reply_expr = "prompt.lower()"},
    {match = ".", reply = F.code("out = llm_query_batched(['ITEM %d' % i for i in range(5)])\n"
                                  .. "SUBMIT(answer=out[4])")},
  }}
  local env = F.env(server, {XDG_CACHE_HOME = T.tmpdir()})
  local function sub_calls()
    local n = 0
    for _, m in ipairs(F.stats(server).models) do if m == "sub-model" then n = n + 1 end end
    return n
  end
  for i = 1, 20 do
    local r = T.run_rlm({"ask", "cached", "--cache", "--quiet", "--sub-model", "openai/sub-model"},
                        {env = env})
    T.eq(r.code, 0, r.stderr)
    T.eq(r.stdout, "item 4\n")
    T.eq(sub_calls(), 5, "sub-calls sent after process " .. i)
  end
end

return tests
