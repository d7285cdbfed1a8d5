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

-- Host CPU per sub-call: 2,000 short prompts from sandbox code through llm_query_batched on a
-- model with no latency (interpreter handler -> Run:llm_query -> llm.batch -> the C binding),
-- beside two floors from the same run: llm.batch of the same requests without the sandbox and
-- the run's bookkeeping, and http.request_all of as many bare POSTs to the stand-in. CPU time
-- is the rlm process's only (the stand-in and the sandbox are other processes); each figure is
-- the median of three runs, as the machine's other load makes single runs vary by a third.
local http = require "rlm.http"
local rlm = require "rlm"
local subs, runs = 2000, 3

local function per_call(fn)
  local cpus, walls = {}, {}
  for r = 1, runs do
    local c0, t0 = sys.cpu_time(), sys.now()
    fn()
    cpus[r], walls[r] = (sys.cpu_time() - c0) / subs * 1e6, sys.now() - t0
  end
  table.sort(cpus)
  table.sort(walls)
  return cpus[(runs + 1) // 2], walls[(runs + 1) // 2]
end

local function report(what, us, wall)
  print(("subcalls  %-50s %5.1f us host CPU per call, %.2f s wall"):format(what, us, wall))
end

local url = fast.url .. "/v1"
local names = {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
local saved = {}
for _, name in ipairs(names) do saved[name] = sys.getenv(name) end
sys.setenv("OPENAI_BASE_URL", url)
sys.setenv("OPENAI_API_KEY", KEY)
do
  local interp <close> = rlm.interpreter{model = "openai/gpt-4o", max_llm_calls = subs * runs + 1}
  assert(select(2, interp:execute("r = llm_query_batched(['warm'])")).exit == 0)
  local code = ("r = llm_query_batched(['p%%d' %% i for i in range(%d)])\n" ..
                "print(len(r), sum(1 for x in r if x.startswith('[ERROR]')))"):format(subs)
  local us, wall = per_call(function()
    local run = select(2, interp:execute(code))
    assert(run.stdout == subs .. " 0\n", run.stdout .. run.stderr)
  end)
  report(("%d llm_query_batched prompts from sandbox code"):format(subs), us, wall)
end
for _, name in ipairs(names) do sys.setenv(name, saved[name]) end

local direct = requests(fast, subs)
report(("floor: llm.batch of the %d, concurrency 64"):format(subs),
       per_call(function() check(llm.batch(direct, {concurrency = 64})) end))

local posts = {}
local body = json.encode{model = "gpt-4o", messages = {{role = "user", content = "p"}}}
for i = 1, subs do
  posts[i] = {url = url .. "/chat/completions", method = "POST", body = body,
              headers = {["content-type"] = "application/json", authorization = "Bearer " .. KEY}}
end
report(("floor: http.request_all of %d POSTs, concurrency 64"):format(subs), per_call(function()
  for _, r in ipairs(http.request_all(posts, {concurrency = 64})) do
    assert(r.status == 200, r.error)
  end
end))

-- The floor under both: the same POSTs through a bare C libcurl multi loop (bench/curl_floor.c,
-- built by `make bench`), its median round of three.
local floor = assert(sys.run{"build/curl_floor", url .. "/chat/completions", tostring(subs), "64",
                             tostring(runs)})
assert(floor.status == "exit" and floor.code == 0, "build/curl_floor failed: " .. floor.stderr)
local cpus, walls = {}, {}
for us, wall in floor.stdout:gmatch("(%S+) (%S+)\n") do
  cpus[#cpus + 1], walls[#walls + 1] = tonumber(us), tonumber(wall)
end
table.sort(cpus)
table.sort(walls)
report(("floor: a bare C libcurl loop of %d POSTs, concurrency 64"):format(subs),
       cpus[(runs + 1) // 2], walls[(runs + 1) // 2])
