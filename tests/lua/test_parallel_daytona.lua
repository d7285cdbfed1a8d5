-- Calls made side by side from sandbox code on the daytona backend (tests/standins/daytona)
-- reach the host side by side, as they do on the local backend (test_parallel.lua). Concurrency
-- is proved by what the LLM stand-in saw in flight at once (--together holds each request until
-- that many are there), never by how long anything took.
local T = require "support"
local F = require "rlm_fixtures"
local D = require "daytona_fixtures"
local async = require "rlm.async"
local backend = require "rlm.backend.daytona"
local rlm = require "rlm"

local tests = {}

-- Runs a case on a fresh Daytona stand-in; afterwards no sandbox may be left.
local function on_standin(fn)
  return function()
    local s = D.standin()
    local made = {}
    s.interp = function(opts)
      local o = {backend = "daytona"}
      for k, v in pairs(opts or {}) do o[k] = v end
      local i = rlm.interpreter(o)
      made[#made + 1] = i
      T.defer(function() i:shutdown() end)
      return i
    end
    fn(s)
    for _, i in ipairs(made) do i:shutdown() end
    T.eq(backend.settle(30), 0, "deletions still running")
    T.eq(s:live(), {}, "sandboxes left in the stand-in")
  end
end

-- Python: n threads, thread i calls `call % i` and keeps what it got in answers[i].
local function threads(n, call)
  return ([[
import threading
answers = [None] * %d
def ask(i):
    try:
        answers[i] = %s
    except Exception as e:
        answers[i] = "failed: %%s" %% e
threads = [threading.Thread(target=ask, args=(i,)) for i in range(%d)]
for t in threads: t.start()
for t in threads: t.join()
]]):format(n, call, n)
end

-- Prompt Qi is answered Ai, the later prompts sooner: answers come back in another order than
-- the one they were asked in.
local function reversed_rules(n)
  local rules = {}
  for i = 0, n - 1 do
    rules[#rules + 1] = {match = ("^Q%d$"):format(i), reply = ("A%d"):format(i),
                         latency_ms = (n - i) * 40}
  end
  return {rules = rules}
end

tests["daytona: eight llm_query from eight threads are in flight at once, each answer its own"] =
  on_standin(function(s)
    local server = F.model(reversed_rules(8), {"--together", "8"})
    local i = s.interp{model = "openai/sub-model"}
    local out, run = i:execute(threads(8, 'llm_query("Q%d" % i)') ..
                               'SUBMIT(answer=",".join(answers))')
    T.eq(run.error, nil)
    T.eq(out.answer, "A0,A1,A2,A3,A4,A5,A6,A7", "each thread got its own prompt's answer")
    local stats = F.stats(server)
    T.eq(stats.requests, 8)
    T.eq(stats.max_in_flight, 8, "the model saw all eight at once")
    -- the dialogue is left clean: the next blocks, with a call and without, go on as before
    local again = i:execute('SUBMIT(answer=llm_query("Q3") + "/" + str(len(answers)))')
    T.eq(again.answer, "A3/8")
    T.eq(i:execute("SUBMIT(answer=6*7)").answer, 42)
  end)

tests["daytona: threads' llm_query spend one budget exactly"] = on_standin(function(s)
  local server = F.model({rules = {{match = "^Q(\\d+)", reply_expr = "'A' + m.group(1)"}}},
                         {"--together", "5"})
  local i = s.interp{model = "openai/sub-model", max_llm_calls = 5}
  local out, run = i:execute(threads(8, 'llm_query("Q%d" % i)') .. [[
ok = sorted(a for a in answers if a.startswith("A"))
failed = [a for a in answers if a.startswith("failed")]
SUBMIT(answer="%d ok, %d failed" % (len(ok), len(failed)), ok=ok)]])
  T.eq(run.error, nil)
  T.eq(out.answer, "5 ok, 3 failed")
  T.eq(#out.ok, 5)
  local stats = F.stats(server)
  T.eq(stats.requests, 5, "no call past max_llm_calls")
  T.eq(stats.max_in_flight, 5, "the five allowed went at once")
end)

tests["daytona: rlm_query from threads runs children side by side"] = on_standin(function(s)
  local server = F.model({rules = {{match = "Task: CHILD (\\d+)",
    reply_expr = "'```repl\\nSUBMIT(answer=\"child ' + m.group(1) + '\")\\n```'"}}},
    {"--together", "4"})
  local i = s.interp{model = "openai/sub-model", max_depth = 2}
  local out, run = i:execute(threads(4, 'rlm_query("CHILD %d" % i)') ..
                             'SUBMIT(answer="|".join(answers))')
  T.eq(run.error, nil)
  T.eq(out.answer, "child 0|child 1|child 2|child 3")
  local stats = F.stats(server)
  T.eq(stats.requests, 4, "one turn per child")
  T.eq(stats.max_in_flight, 4, "the four children's models at once")
end)

-- Connections broken between a request and its answer, while eight calls are open: the
-- transport sends each request again under its id, and the driver answers a repeat with what
-- it answered first. Nothing runs twice: the block (it appends to a file), a call (the host
-- counts each prompt), a reply (a second one would be refused by the driver, an error).
for _, case in ipairs{{name = "after the request was carried out", after = true},
                      {name = "before the request arrived", after = false}} do
  tests["daytona: connection resets " .. case.name .. " during concurrent calls run nothing twice"] =
    on_standin(function(s)
      local seen, faulted = {}, false
      local i
      i = s.interp{on_call = function(_, args)
        seen[args.prompt] = (seen[args.prompt] or 0) + 1
        if not faulted then
          faulted = true
          s:fault{method = "POST", path = "/toolbox/" .. i.sandbox.id .. "/process/execute",
                  reset = true, after = case.after, count = 4}
        end
        async.sleep(0.2)
        return {"r:" .. args.prompt}
      end}
      local out, run = i:execute([[
with open("runs.txt", "a") as f:
    f.write("run\n")
]] .. threads(8, 'llm_query("p%d" % i)') .. [[
SUBMIT(answer=",".join(answers), runs=open("runs.txt").read())]])
      T.eq(run.error, nil)
      T.truthy(not run.state_lost, "the driver was kept")
      T.eq(out.answer, "r:p0,r:p1,r:p2,r:p3,r:p4,r:p5,r:p6,r:p7")
      T.eq(out.runs, "run\n", "the block ran once")
      for n = 0, 7 do T.eq(seen["p" .. n], 1, "p" .. n .. " asked once") end
      T.eq(s:stats().faults_left, 0, "all four resets happened")
    end)
end

tests["daytona: big replies to calls open at once each reach their own thread"] =
  on_standin(function(s)
    -- each reply is too big for a command line: uploaded as a file of its own (replies ready
    -- together go as one request), while others are on their way
    local i = s.interp{on_call = function(_, args)
      async.sleep(0.1 * tonumber(args.prompt:sub(2)))
      return {args.prompt .. ":" .. string.rep(args.prompt, 15000)}
    end}
    local uploads = s:requests("POST /toolbox/{sid}/files/bulk-upload")
    local out, run = i:execute(threads(4, 'llm_query("p%d" % i)') .. [[
SUBMIT(answer=",".join("%s %d %s" % (a[:3], len(a), a == a[:3] + a[:2] * 15000)
                       for a in answers))]])
    T.eq(run.error, nil)
    T.eq(out.answer, "p0: 30003 True,p1: 30003 True,p2: 30003 True,p3: 30003 True")
    T.truthy(s:requests("POST /toolbox/{sid}/files/bulk-upload") > uploads,
             "the replies went up as files")
    local left = assert(i:shell("ls /home/daytona/.rlm | grep -c '^request' || true"))
    T.eq(left.output, "0\n", "each client removed its request file")
  end)

tests["stand-in: process/execute requests of one sandbox run at the same time"] =
  on_standin(function(s)
    local daytona = require "rlm.daytona"
    local client = daytona.client{api_key = D.KEY, api_url = s.url .. "/api"}
    local sb = assert(client:create_sandbox{})
    T.defer(function() client:delete_sandbox(sb.id) end)
    local tb = assert(client:toolbox(assert(client:wait_sandbox(sb.id, {"started"}, 60))))
    -- Each command marks its arrival, then waits for all six marks: run one at a time, the
    -- first would wait alone until its own limit.
    local script = [[touch /tmp/here-$0; i=0; while [ $(ls /tmp | grep -c here-) -lt 6 ]; do
  i=$((i+1)); [ $i -gt 600 ] && exit 3; sleep 0.1; done; echo all]]
    local results = async.map({1, 2, 3, 4, 5, 6}, function(n)
      return assert(tb:execute{command = ("sh -c '%s' %d"):format(script, n), timeout = 120})
    end)
    for n, r in ipairs(results) do
      T.truthy(r.ok, tostring(r.error))
      T.eq({r[1].exitCode, r[1].result}, {0, "all\n"}, "command " .. n)
    end
    client:delete_sandbox(sb.id)
  end)

return tests
