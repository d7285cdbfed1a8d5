--- What users feel, each beside its alternative or floor in the same run: an end-to-end run with
-- realistic model latency beside the model's own time; 1,000 sub-calls from sandbox code beside
-- a Python thread pool; a batch against a provider's 429s beside one capped from the start; 8
-- children of rlm_query_batched beside the model's time; 50 sandboxes at once beside 50 bare
-- bwrap + python3 processes; MCP calls per second from 50 clients beside the protocol alone. bench/context.lua holds the long --context figures.
local T = require "support"
local F = require "rlm_fixtures"
local async = require "rlm.async"
local rlm = require "rlm"
local sys = require "rlm.sys"

local function median(xs)
  table.sort(xs)
  return xs[(#xs + 1) // 2]
end

local function requests(server) return F.stats(server).requests end

-- 1. End to end: `rlm ask` over a 2 MB file, three root turns (2 s each, jittered to 1-3 s)
-- with 20 and then 10 sub-calls (0.5 s, jittered to 0.25-0.75 s). The floor is the model's own
-- time: the seconds in which the stand-in was answering at least one request.
local TURNS = {
  "```repl\nchunks = [context[i:i + 100000] for i in range(0, len(context), 100000)]\n"
    .. "notes = llm_query_batched(['Summarise: ' + c[:2000] for c in chunks])\nprint(len(notes))\n```",
  "```repl\nmore = llm_query_batched(['Summarise part %d' % i for i in range(10)])\nprint(more[:2])\n```",
  "```repl\nSUBMIT(answer='%d notes' % (len(notes) + len(more)))\n```",
}
do
  local server = F.model({rules = {
    {match = "^Summarise", reply = "a short note", latency_ms = 500},
    {match_system = "REPL", replies = TURNS, latency_ms = 2000},
  }}, {"--jitter"})
  local dir = T.tmpdir()
  local path = dir .. "/notes.txt"
  assert(sys.write_file(path, ("a line of notes to be read and summarised\n"):rep(48000)))
  local walls, firsts, outside, model = {}, {}, {}, {}
  for _ = 1, 3 do
    require("rlm.http").request{url = server.url .. "/_reset", method = "POST"}
    local t0 = sys.now()
    local p = assert(sys.spawn{argv = {T.rlm, "ask", "notes", "--context", path, "--quiet"},
                               env = F.env(server), stdin = "null", stdout = "null", stderr = "null"})
    local first
    while not p:status() do
      if not first and requests(server) > 0 then first = sys.now() - t0 end
      sys.sleep(0.005)
    end
    local wall = sys.now() - t0
    p:close()
    local busy = F.stats(server).busy_seconds
    walls[#walls + 1], firsts[#firsts + 1] = wall, first or wall
    model[#model + 1], outside[#outside + 1] = busy, (wall - busy) / wall
  end
  print(("end to end  rlm ask, 3 turns of 1-3 s, 30 sub-calls of 0.25-0.75 s: wall %.2f s, the "
         .. "model %.2f s, %.1f%% outside the model; first call after %.2f s  (medians of 3)"):format(
    median(walls), median(model), median(outside) * 100, median(firsts)))
  T.cleanup()
end

-- 2. 1,000 sub-calls at 300 ms from sandbox code at the default cap, beside a Python thread
-- pool of 8 sending the same 1,000 requests to the same stand-in.
local POOL = [[
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
url = sys.argv[1] + "/v1/chat/completions"
def ask(i):
    body = json.dumps({"model": "sub", "messages": [{"role": "user", "content": "Q%d" % i}]})
    req = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json",
                                 "Authorization": "Bearer sk-test-key-0123456789"})
    return json.loads(urllib.request.urlopen(req).read())["choices"][0]["message"]["content"]
t = time.time()
with ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(ask, range(1000)))
assert len(answers) == 1000
print(time.time() - t)
]]
do
  local server = F.model{rules = {
    {match = "^Q\\d+$", reply = "ok", latency_ms = 300},
    {match = "Task: fan out", reply = F.code(
      "import time\nt = time.time()\nr = llm_query_batched(['Q%d' % i for i in range(1000)])\n"
      .. "SUBMIT(answer=len(r), seconds=time.time() - t)")},
  }}
  local res = rlm.run{task = "fan out", context = "x", outputs = {"answer", "seconds"},
                      max_llm_calls = 1001}
  assert(res.answer == 1000, res.reason)
  local script = T.tmpdir() .. "/pool.py"
  assert(sys.write_file(script, POOL))
  local out = assert(sys.run({"/usr/bin/python3", script, server.url}, {timeout = 300}))
  local pool = tonumber(out.stdout)
  print(("sub-calls   1,000 llm_query_batched x 300 ms from sandbox code (cap %d): %.2f s; a "
         .. "Python thread pool of 8: %.2f s (%.1fx faster)"):format(
    require("rlm.run").defaults.batch_concurrency, res.seconds, pool, pool / res.seconds))
  T.cleanup()
end

-- 2b. A provider that answers 429 past 16 calls at once: a batch of 200 at width 64 (rlm.pacer
-- narrows it), beside the same batch capped at 16 from the start.
do
  local llm, http = require "rlm.llm", require "rlm.http"
  local server = F.model({rules = require("rlm.json").array{}},
                         {"--latency-ms", "300", "--max-concurrent", "16"})
  local prompts = {}
  for i = 1, 200 do prompts[i] = "prompt " .. i end
  local function batch(model, cap)
    http.request{url = server.url .. "/_reset", method = "POST"}
    local t0 = sys.now()
    local failed = 0
    for _, r in ipairs(llm.batch_prompts({model = model}, prompts, {concurrency = cap})) do
      if r.error then failed = failed + 1 end
    end
    return sys.now() - t0, failed, F.stats(server).throttled
  end
  local capped, wide, throttled, failed = {}, {}, {}, 0
  for round = 1, 3 do   -- in turns; a model name per batch, so each starts knowing nothing
    local t, f = batch("openai/capped-" .. round, 16)
    capped[#capped + 1], failed = t, failed + f
    local w, g, th = batch("openai/wide-" .. round, 64)
    wide[#wide + 1], throttled[#throttled + 1], failed = w, th, failed + g
  end
  print(("429s        200 calls x 300 ms at width 64, the provider refusing past 16: %.2f s with "
         .. "%d 429s; capped at 16 from the start: %.2f s (%.2fx); %d calls failed  (medians of 3)")
    :format(median(wide), median(throttled), median(capped), median(wide) / median(capped), failed))
  T.cleanup()
end

-- 2c. Children side by side: a root turn calls rlm_query_batched with 8 tasks; each child's model
-- answers its one turn in 1.5 s with code that SUBMITs, so each child also starts its own
-- sandbox. The floor is the model's time: 1.5 s x 1 turn.
do
  local CHILD_SECONDS = 1.5
  local server = F.model{rules = {
    {match = "Task: CHILD (\\d+)", latency_ms = CHILD_SECONDS * 1000,
     reply_expr = "'```repl\\nSUBMIT(answer=\"child ' + m.group(1) + '\")\\n```'"},
    {match = "Task: parent", reply = F.code(
      "import time\nt = time.time()\nr = rlm_query_batched(['CHILD %d' % i for i in range(8)])\n"
      .. "SUBMIT(answer=sum(a.startswith('child ') for a in r), seconds=time.time() - t)")},
  }}
  local walls, widths = {}, {}
  for _ = 1, 3 do
    require("rlm.http").request{url = server.url .. "/_reset", method = "POST"}
    local res = rlm.run{task = "parent", context = "x", max_depth = 2,
                        outputs = {"answer", "seconds"}}
    assert(res.answer == 8, res.reason)
    walls[#walls + 1], widths[#widths + 1] = res.seconds, F.stats(server).max_in_flight
  end
  print(("children    8 rlm_query_batched children, one turn of %.1f s each: %.2f s; the floor "
         .. "%.1f s x 1 turn (%.2fx); the model saw %d at once  (medians of 3)"):format(
    CHILD_SECONDS, median(walls), CHILD_SECONDS, median(walls) / CHILD_SECONDS, median(widths)))
  T.cleanup()
end

-- 3. 50 sandboxes started at once, each running one block, beside 50 bare bwrap + python3
-- processes started at once, each printing a line.
local BWRAP = {"bwrap", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
               "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--proc", "/proc",
               "--dev", "/dev", "--unshare-all", "--die-with-parent", "/usr/bin/python3", "-c",
               "print(1)"}
do
  local n = 50
  local items = {}
  for i = 1, n do items[i] = i end
  local t0 = sys.now()
  local slots = async.map(items, function()
    local interp <close> = rlm.interpreter{backend = "local"}
    local _, r = interp:execute("print(1)")
    assert(r.stdout == "1\n", r.error)
  end, n)
  local ours = sys.now() - t0
  for _, s in ipairs(slots) do assert(s.ok, s.error) end
  t0 = sys.now()
  local procs = {}
  for i = 1, n do
    procs[i] = assert(sys.spawn{argv = BWRAP, stdin = "null", stdout = "null", stderr = "null"})
  end
  for _, p in ipairs(procs) do sys.wait(p, 120) p:close() end
  local floor = sys.now() - t0
  print(("sandboxes   %d local sandboxes at once, each to its first result: %.2f s; %d bare "
         .. "bwrap + python3 printing a line: %.2f s (%.2fx)"):format(n, ours, n, floor, ours / floor))
end

-- 4. `rlm mcp --http` with 50 clients, each with its session, calling for a few seconds: a tool
-- that runs a block in the session's sandbox, beside rlm_status (the protocol alone).
do
  local http, json = require "rlm.http", require "rlm.json"
  local proc = assert(sys.spawn{argv = {T.rlm, "mcp", "--http", "127.0.0.1:0"}, stdin = "null",
                                stderr = "null"})
  local line = sys.read_line(proc, 30)
  local url = assert(line and line:match("^READY (http://127%.0%.0%.1:%d+)$"), line) .. "/mcp"
  local function post(msg, sid)
    return assert(http.request{url = url, method = "POST", retries = 0, timeout = 120,
      body = json.encode(msg), headers = {["Content-Type"] = "application/json",
        Accept = "application/json, text/event-stream", ["Mcp-Session-Id"] = sid,
        ["MCP-Protocol-Version"] = sid and "2025-06-18" or nil}})
  end
  local function session()
    local res = post{jsonrpc = "2.0", id = 0, method = "initialize", params = {
      protocolVersion = "2025-06-18", capabilities = json.object(),
      clientInfo = {name = "bench", version = "0"}}}
    local sid = res.headers["mcp-session-id"]
    post({jsonrpc = "2.0", method = "notifications/initialized"}, sid)
    return sid
  end
  -- Calls per second of tool `name` from `clients` sessions for `seconds`.
  local function rate(sids, name, args, seconds)
    local calls, stop = 0, sys.now() + seconds
    async.map(sids, function(sid)
      while sys.now() < stop do
        local res = post({jsonrpc = "2.0", id = 1, method = "tools/call",
                          params = {name = name, arguments = args}}, sid)
        assert(res.status == 200 and not res.body:find('"isError":true', 1, true), res.body)
        calls = calls + 1
      end
    end, #sids)
    return calls / (seconds + math.max(0, sys.now() - stop))
  end
  local sids = {}
  for i = 1, 50 do sids[i] = session() end
  rate(sids, "sandbox_exec_stateful", {code = "x = 1"}, 1)   -- every session's sandbox started
  local exec = rate(sids, "sandbox_exec_stateful", {code = "x = 1"}, 5)
  local status = rate(sids, "rlm_status", json.object(), 5)
  print(("mcp         50 clients of rlm mcp --http: %.0f sandbox_exec_stateful calls/s, beside "
         .. "%.0f rlm_status calls/s (the protocol alone)"):format(exec, status))
  proc:kill("TERM")
  sys.wait(proc, 30)
  proc:close()
end
