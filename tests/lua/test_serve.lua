--- `rlm serve` beyond what the OpenAI client checks (tests/sdk/serve.test.mjs): who may bind
-- where, runs past --max-runs, a client that goes away, a run without an answer.
local T = require "support"
local F = require "rlm_fixtures"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local TOKEN = "serve-token-0123456789abcdef"

-- Starts rlm serve with the environment env; returns its base URL and process.
local function serve(env, extra)
  local argv = {T.rlm, "serve", "--http", "127.0.0.1:0"}
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local proc = assert(sys.spawn{argv = argv, env = env, stdin = "null", stderr = "inherit"})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 20); proc:close() end)
  local line = assert(sys.read_line(proc, 60))
  return assert(line:match("^READY (http://127%.0%.0%.1:%d+)$"), line), proc
end

local function chat(url, task, opts)
  opts = opts or {}
  return http.request{url = url .. "/v1/chat/completions", method = "POST", timeout = opts.timeout or 300,
    headers = {["content-type"] = "application/json", authorization = "Bearer " .. TOKEN},
    body = json.encode{model = "rlm", stream = opts.stream, messages = {{role = "user", content = task}}}}
end

local function sandboxes(proc)
  local n = 0
  for _, p in ipairs(T.descendants(proc:pid())) do
    if p.cmdline:find("bwrap", 1, true) or p.cmdline:find("python3", 1, true) then n = n + 1 end
  end
  return n
end

tests["binding beyond loopback needs RLM_SERVE_TOKEN"] = function()
  local r = T.run_rlm({"serve", "--http", "0.0.0.0:0"}, {env = {PATH = sys.getenv("PATH")}})
  T.eq(r.code, 1, r.stderr)
  T.contains(r.stderr, "set RLM_SERVE_TOKEN")
end

tests["past --max-runs a request is 429; a client that goes away ends its run's sandbox"] = function()
  local server = F.model{rules = {
    {match = "Task: slow", reply = F.code("import time\nprint('started', flush=True)\ntime.sleep(120)")},
    {match = ".", reply = F.code("SUBMIT(answer='late')")},
  }}
  local url, proc = serve(F.env(server, {RLM_SERVE_TOKEN = TOKEN}), {"--max-runs", "1"})
  local async = require "rlm.async"
  local first = async.spawn(function() return chat(url, "slow", {stream = true, timeout = 8}) end)
  -- The run has its sandbox once the model's first request has been answered and code runs.
  local deadline = sys.now() + 120
  while sandboxes(proc) == 0 and sys.now() < deadline do async.sleep(0.2) end
  T.truthy(sandboxes(proc) > 0, "the first run's sandbox started")
  local busy = assert(chat(url, "slow"))
  T.eq(busy.status, 429, busy.body)
  T.eq(busy.headers["retry-after"], "5")
  T.eq(json.decode(busy.body).error.code, "rate_limit_exceeded")
  local ok = first:result()          -- the client's own timeout ends its request
  T.truthy(ok, "the first request ended")
  deadline = sys.now() + 120
  while sandboxes(proc) > 0 and sys.now() < deadline do async.sleep(0.2) end
  T.eq(sandboxes(proc), 0, "the sandbox of the abandoned run is gone")
  T.eq(F.stats(server).requests, 1, "the abandoned run made no further model call")
end

tests["a run without an answer is a 502 that says why"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("print('never done')")}}}
  local url = serve(F.env(server, {RLM_SERVE_TOKEN = TOKEN}), {"--max-iterations", "1"})
  local res = assert(chat(url, "endless"))
  T.eq(res.status, 502, res.body)
  local err = json.decode(res.body).error
  T.contains(err.message, "the run ended without an answer: max_iterations")
  T.eq(err.code, "max_iterations")
end

return tests
