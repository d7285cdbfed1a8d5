--- LLM binding figures against the stand-in: concurrent batch versus sequential calls at 300 ms
-- latency, per-call overhead with no latency, and streaming decode speed.
local sys = require "rlm.sys"
local json = require "rlm.json"
local llm = require "rlm.llm"
local T = require "support"

local KEY = "sk-bench"

local function standin(extra)
  local argv = {"tests/standins/llm", "--api-key", KEY}
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  return T.server(argv)
end

local function requests(s, n, model)
  local reqs = {}
  for i = 1, n do
    reqs[i] = {model = model or "openai/gpt-4o", api_key = KEY, base_url = s.url .. "/v1",
               prompt = "prompt " .. i}
  end
  return reqs
end

local function timed(fn)
  local t0 = sys.now()
  fn()
  return sys.now() - t0
end

local function check(results)
  for i, r in ipairs(results) do assert(r.text, r.error or ("no text in slot " .. i)) end
end

local slow = standin{"--latency-ms", "300"}
local n = 64
local reqs = requests(slow, n)
llm.complete(reqs[1])   -- warm the connection pool alike for every run

local t_all = timed(function() check(llm.batch(reqs, {concurrency = n})) end)
print(("batch     %d calls x 300 ms, concurrency %d      %.3f s"):format(n, n, t_all))
local t_cap = timed(function() check(llm.batch(reqs)) end)
print(("batch     %d calls x 300 ms, default cap %d      %.3f s"):format(n, llm.concurrency, t_cap))
local t_seq = timed(function()
  for _, r in ipairs(reqs) do assert(llm.complete(r)) end
end)
print(("sequence  %d calls x 300 ms, one after another   %.3f s (%.1fx the batch)"):format(
  n, t_seq, t_seq / t_all))

local fast = standin()
local m = 500
local quick = requests(fast, m)
llm.complete(quick[1])
local t_one = timed(function() for _, r in ipairs(quick) do assert(llm.complete(r)) end end)
print(("overhead  %d sequential calls, no latency        %.3f ms per call (stand-in included)"):format(
  m, t_one / m * 1e3))
local t_many = timed(function() check(llm.batch(quick, {concurrency = 16})) end)
print(("overhead  %d calls batched 16 at a time          %.3f ms per call"):format(m, t_many / m * 1e3))

local dir = assert(sys.mkdtemp("rlm-bench"))
local reply = ("All work and no play makes a dull model. "):rep(5000)
local script = dir .. "/script.json"
assert(sys.write_file(script, json.encode{rules = {{match = "long", reply = reply}}}))
local long = standin{"--script", script}
for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
  local deltas = 0
  local req = {model = model, api_key = KEY, prompt = "long", max_tokens = 100000,
               base_url = model:match("^anthropic") and long.url or long.url .. "/v1",
               on_delta = function() deltas = deltas + 1 end}
  local res
  local t = timed(function() res = assert(llm.complete(req)) end)
  assert(res.text == reply)
  print(("stream    %-28s %d KB in %d callbacks, %.3f s (stand-in included)"):format(
    model, #reply // 1024, deltas, t))
end
sys.remove(dir, true)
