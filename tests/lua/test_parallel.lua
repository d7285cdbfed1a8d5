-- Calls from sandbox code that are made side by side (threads, rlm_query_batched) reach the
-- model side by side, under the host's width caps and budgets. Concurrency is proved by what
-- the LLM stand-in saw in flight at once (--together holds each request until that many are
-- there), never by how long anything took.
local T = require "support"
local F = require "rlm_fixtures"
local rlm = require "rlm"
local json = require "rlm.json"

local tests = {}

-- A child's task is "CHILD n"; its model answers with code that submits "child n".
local CHILD_RULE = {match = "Task: CHILD (\\d+)",
                    reply_expr = "'```repl\\nSUBMIT(answer=\"child ' + m.group(1) + '\")\\n```'"}

local function interpreter(extra)
  local opts = {model = "openai/sub-model", max_depth = 2}
  for k, v in pairs(extra or {}) do opts[k] = v end
  return rlm.interpreter(opts)
end

tests["llm_query from eight threads is eight calls in flight at once"] = function()
  local server = F.model({rules = {{match = "^Q(\\d+)", reply_expr = "'A' + m.group(1)"}}},
                         {"--together", "8"})
  local interp <close> = interpreter()
  local out, run = interp:execute([[
import threading
answers = [None] * 8
def ask(i):
    answers[i] = llm_query("Q%d" % i)
threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
SUBMIT(answer=",".join(answers))]])
  T.eq(run.error, nil)
  T.eq(out.answer, "A0,A1,A2,A3,A4,A5,A6,A7")
  local stats = F.stats(server)
  T.eq(stats.requests, 8)
  T.eq(stats.max_in_flight, 8, "the model saw all eight at once")
end

tests["calls from threads still end before the block does"] = function()
  F.model({rules = {{match = "^slow", reply = "late", latency_ms = 300}}})
  local interp <close> = interpreter()
  local out, run = interp:execute([[
import threading
got = []
t = threading.Thread(target=lambda: got.append(llm_query("slow")))
t.start()
SUBMIT(answer="main")]])
  T.eq(out.answer, "main")
  T.eq(run.error, nil)
  -- the thread's call was answered before the block's done event, so the next block sees it
  local _, run2 = interp:execute("t.join(); print(got)")
  T.eq(run2.stdout, "['late']\n")
end

tests["rlm_query_batched runs eight children side by side"] = function()
  local server = F.model({rules = {CHILD_RULE}}, {"--together", "8"})
  local interp <close> = interpreter()
  local out, run = interp:execute([[
answers = rlm_query_batched(["CHILD %d" % i for i in range(8)], [None] * 8)
SUBMIT(answer="|".join(answers))]])
  T.eq(run.error, nil)
  T.eq(out.answer, "child 0|child 1|child 2|child 3|child 4|child 5|child 6|child 7")
  local stats = F.stats(server)
  T.eq(stats.requests, 8, "one turn per child")
  T.eq(stats.max_in_flight, 8, "the model saw all eight children at once")
end

tests["rlm_query from threads runs children side by side"] = function()
  local server = F.model({rules = {CHILD_RULE}}, {"--together", "4"})
  local interp <close> = interpreter()
  local out = interp:execute([[
import threading
answers = [None] * 4
def ask(i):
    answers[i] = rlm_query("CHILD %d" % i)
threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
SUBMIT(answer="|".join(answers))]])
  T.eq(out.answer, "child 0|child 1|child 2|child 3")
  T.eq(F.stats(server).max_in_flight, 4)
end

tests["max_parallel_children caps children in flight exactly"] = function()
  local server = F.model({rules = {CHILD_RULE}}, {"--together", "3"})
  local interp <close> = interpreter{max_parallel_children = 3}
  local out = interp:execute([[
answers = rlm_query_batched(["CHILD %d" % i for i in range(8)])
SUBMIT(answer="|".join(answers))]])
  T.eq(out.answer, "child 0|child 1|child 2|child 3|child 4|child 5|child 6|child 7")
  local stats = F.stats(server)
  T.eq(stats.requests, 8)
  T.eq(stats.max_in_flight, 3, "three at once, never more")
end

tests["batch_concurrency caps llm_query from threads too"] = function()
  local server = F.model({rules = {{match = "^Q(\\d+)", reply_expr = "'A' + m.group(1)"}}},
                         {"--together", "2"})
  local interp <close> = interpreter{batch_concurrency = 2}
  local out = interp:execute([[
import threading
answers = [None] * 6
def ask(i):
    answers[i] = llm_query("Q%d" % i)
threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
for t in threads: t.start()
for t in threads: t.join()
SUBMIT(answer=",".join(answers))]])
  T.eq(out.answer, "A0,A1,A2,A3,A4,A5")
  T.eq(F.stats(server).max_in_flight, 2)
end

tests["children side by side spend one budget exactly"] = function()
  local server = F.model({rules = {CHILD_RULE}}, {"--together", "5"})
  local interp <close> = interpreter{max_llm_calls = 5}
  local out = interp:execute([[
answers = rlm_query_batched(["CHILD %d" % i for i in range(8)])
ok = [a for a in answers if a.startswith("child ")]
failed = [a for a in answers if a.startswith("[ERROR]")]
SUBMIT(answer="%d ok, %d failed" % (len(ok), len(failed)))]])
  T.eq(out.answer, "5 ok, 3 failed")
  local stats = F.stats(server)
  T.eq(stats.requests, 5, "no call past max_llm_calls")
  T.eq(stats.max_in_flight, 5)
end

tests["each child's events carry its own id and its parent's"] = function()
  F.model({rules = {CHILD_RULE,
    {match = "Task: parent", reply = F.code(
      "SUBMIT(answer='|'.join(rlm_query_batched(['CHILD 1', 'CHILD 2'])))")}}})
  local events = {}
  local res = rlm.run{task = "parent", context = "ctx", max_depth = 2,
                      on_event = function(ev) events[#events + 1] = ev end}
  T.eq(res.answer, "child 1|child 2")
  local runs, parents = {}, {}
  for _, ev in ipairs(events) do
    if ev.run then runs[ev.run] = true end
    if ev.parent then parents[ev.run] = ev.parent end
  end
  local children = 0
  for id in pairs(parents) do
    children = children + 1
    T.truthy(runs[parents[id]], "a child's parent is a run of this tree")
  end
  T.eq(children, 2, "two children, each with its own id: " .. json.encode(parents))
end

return tests
