--- Budgets as a hard wall across the whole tree, tried with a scripted model: what the model
-- server counts is what was spent, whatever the code in the sandbox does.
local T = require "support"
local F = require "rlm_fixtures"
local budget = require "rlm.budget"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

-- What the model server billed (prompt and output tokens) and how many requests per model.
local function billed(server)
  local st = F.stats(server)
  local per_model = {}
  for _, m in ipairs(st.models or {}) do per_model[m] = (per_model[m] or 0) + 1 end
  return st.input_tokens + st.output_tokens, per_model, st
end

-- 40 sub-calls from one block, each prompt `chars` long.
local function forty_calls(chars)
  return F.code(([[
out = []
for i in range(40):
    try:
        out.append(llm_query("SUB " + "w" * %d))
    except RuntimeError as e:
        out.append("refused: " + str(e))
print(sum(1 for o in out if o.startswith("refused")), "refused")
print(out[-1][:200])
]]):format(chars))
end

tests["40 sub-calls in one block never take the server past max_tokens"] = function()
  for _, chars in ipairs{40000, 4000, 400} do        -- ~10k, ~1k and ~100 tokens each
    local server = F.model{rules = {
      {match = "^SUB ", reply = string.rep("answer ", 60)},
      {match = "run ended before SUBMIT", reply = '{"answer": "partial"}'},
      {match = ".", reply = forty_calls(chars)},
    }}
    local res = rlm.run{task = "spend", context = "abc", sub_model = "openai/sub-model",
                        max_tokens = 5000, max_iterations = 5}
    local total, per_model = billed(server)
    T.truthy(total <= 5000, ("%d-char prompts: the server billed %d tokens"):format(chars, total))
    T.eq(res.usage.total_tokens, total, "the host's count is the server's")
    T.eq(res.reason, "budget:max_tokens")
    T.eq(res.answer, "partial", "the extraction was kept affordable")
    if chars == 40000 then T.eq(per_model["sub-model"], nil, "no 10k-token call was affordable") end
    if chars == 400 then T.truthy((per_model["sub-model"] or 0) > 0, "small calls fitted") end
  end
end

tests["max_cost holds with priced models; an unpriced model is refused before anything starts"] =
function()
  local prices = {["openai/root-model"] = {input = 1, output = 2},
                  ["openai/sub-model"] = {input = 1, output = 2}}
  local server = F.model{rules = {
    {match = "^SUB ", reply = string.rep("answer ", 60)},
    {match = "run ended before SUBMIT", reply = '{"answer": "partial"}'},
    {match = ".", reply = forty_calls(4000)},
  }}
  local res = rlm.run{task = "spend", context = "abc", sub_model = "openai/sub-model",
                      max_cost = 0.01, prices = prices, max_iterations = 5}
  local st = F.stats(server)
  T.truthy(res.usage.cost <= 0.01, ("spent $%.5f"):format(res.usage.cost))
  -- the server's own count, priced: every request went through the host, so the same split
  local sub = res.usage.by_model["openai/sub-model"]
  T.truthy(sub and sub.calls < 40, "only what fitted was sent")
  T.eq(res.usage.input_tokens + res.usage.output_tokens, st.input_tokens + st.output_tokens)
  T.eq(res.reason, "budget:max_cost")

  local before = F.stats(server).requests
  T.raises(function()
    rlm.run{task = "x", context = "y", sub_model = "openai/unpriced", max_cost = 0.01,
            prices = {["openai/root-model"] = {input = 1, output = 2}}}
  end, "max_cost needs a price for openai/unpriced")
  T.eq(F.stats(server).requests, before, "nothing was sent")
end

tests["llm_query(model=) is limited to the run's sub_models"] = function()
  local server = F.model{rules = {
    {match = "^Q", reply = "fine"},
    {match = ".", reply = F.code([[
try:
    r = llm_query("Q", model="openai/expensive-model")
except RuntimeError as e:
    r = str(e)
SUBMIT(answer=r)]])},
  }}
  local res = rlm.run{task = "pick", context = "abc", sub_model = "openai/sub-model"}
  T.contains(res.answer, "model openai/expensive-model is not allowed in this run")
  local _, per_model = billed(server)
  T.eq(per_model["expensive-model"], nil)
  res = rlm.run{task = "pick", context = "abc", sub_model = "openai/sub-model",
                sub_models = {"openai/sub-model", "openai/expensive-model"}}
  T.eq(res.answer, "fine")
end

tests["12 child runs under max_llm_calls = 3 make 3 model calls; a grant caps a child"] = function()
  local server = F.model{rules = {
    {match = "Task: child", model = "sub-model", reply = F.code("SUBMIT(answer='c')")},
    {match = "Task: greedy", model = "sub-model", reply = F.code([[
n = 0
for i in range(20):
    try:
        llm_query("Q")
        n += 1
    except RuntimeError:
        break
SUBMIT(answer=str(n))]])},
    {match = "^Q", reply = "q"},
    {match = "Task: twelve", reply = F.code([[
got = []
for i in range(12):
    try:
        got.append(rlm_query("child %d" % i))
    except RuntimeError as e:
        got.append("refused")
SUBMIT(answer=got)]])},
    {match = "Task: granted", reply = F.code("SUBMIT(answer=rlm_query('greedy'))")},
  }}
  local res = rlm.run{task = "twelve", context = "abc", sub_model = "openai/sub-model",
                      max_llm_calls = 3, max_depth = 3}
  local _, per_model = billed(server)
  T.eq(per_model["sub-model"], 3, "three child calls in all")
  T.eq(res.usage.llm_calls, 3)
  local answered = 0
  for _, a in ipairs(res.answer) do if a == "c" then answered = answered + 1 end end
  T.eq(answered, 3)

  -- a child with a grant of 3 calls: its turn, then 2 llm_query calls, whatever the parent has
  res = rlm.run{task = "granted", context = "abc", sub_model = "openai/sub-model",
                max_llm_calls = 50, max_depth = 3, child_budget = {calls = 3}}
  T.eq(res.answer, "2")
  T.eq(res.usage.llm_calls, 3, "the parent's totals include the child's")
end

tests["max_time ends a sleeping block and a chain of slow sub-calls in time"] = function()
  F.model{rules = {
    {match = "^SLOW", reply = "done", latency_ms = 6000},
    {match = "run ended before SUBMIT", reply = '{"answer": "late"}'},
    {match = "Task: sleep", reply = F.code("import time\ntime.sleep(60)")},
    {match = "Task: calls", reply = F.code("for i in range(10):\n    llm_query('SLOW %d' % i)")},
  }}
  for _, task in ipairs{"sleep", "calls"} do
    local t0 = sys.now()
    local res = rlm.run{task = task, context = "abc", sub_model = "openai/sub-model", max_time = 3}
    local took = sys.now() - t0
    -- without max_time the run would take 60 s
    T.truthy(took >= 2 and took < 30, ("%s: the run took %.2f s under max_time = 3"):format(task, took))
    T.eq(res.reason, "budget:max_time", res.detail)
  end
end

tests["a 64-prompt batch with 50 calls left runs 50, the code sees 14 errors, the run goes on"] =
function()
  local server = F.model{rules = {
    {match = "^B ", reply = "ok"},
    {match = "refused 14", reply = F.code("SUBMIT(answer=budget())")},
    {match = ".", reply = F.code([[
out = llm_query_batched(["B %d" % i for i in range(64)])
bad = [o for o in out if o.startswith("[ERROR] max_llm_calls")]
print("refused", len(bad), "ok", out.count("ok"))]])},
  }}
  local res = rlm.run{task = "batch", context = "abc", sub_model = "openai/sub-model",
                      max_llm_calls = 50, max_depth = 1}
  T.eq(res.reason, "submitted")
  local warned
  for _, rec in ipairs(res.trajectory) do
    if rec.type == "budget_warning" then warned = rec end
  end
  T.eq(warned and warned.limit, "max_llm_calls", "a warning once calls ran low")
  T.eq(res.iterations, 2)
  local _, per_model = billed(server)
  T.eq(per_model["sub-model"], 50)
  local seen = res.answer
  T.eq(seen.calls, 0, "budget() agrees: no calls left")
  T.eq(seen.used.llm_calls, res.usage.llm_calls)
  T.eq(seen.tokens, json.null)
  T.eq(seen.depth, 0)
end

tests["a prompt over the sub-model's context window is an error the code sees, not a request"] =
function()
  local server = F.model{rules = {
    {match = "^BIG", reply = "never"},
    {match = ".", reply = F.code([[
out = llm_query_batched(["BIG " + "x" * 8000, "BIG small"])
SUBMIT(answer=out)]])},
  }}
  local res = rlm.run{task = "window", context = "abc", sub_model = "openai/sub-model",
                      context_windows = {["openai/sub-model"] = 1000}}
  T.contains(res.answer[1], "[ERROR] context_window: the prompt is about 2001 tokens")
  T.contains(res.answer[1], "context window of 1000 tokens")
  T.eq(res.answer[2], "never")
  local _, per_model = billed(server)
  T.eq(per_model["sub-model"], 1)
end

-- A batch's reservation (reserve_all, one walk of the chain) against the same calls reserved
-- one after another: every ticket, every refusal and what remains must be the same, under
-- each kind of limit and a parent's.
tests["reserve_all grants and refuses exactly what reserve after reserve does"] = function()
  local price = {input = 3, output = 15}
  local configs = {
    {limits = {max_llm_calls = 5}},
    {limits = {max_tokens = 5000}},
    {limits = {max_cost = 0.02}},
    {limits = {max_tokens = 20000, max_cost = 0.05, max_llm_calls = 9}},
    {limits = {max_time = 0}},
    {limits = {max_tokens = 4000}, parent = {max_llm_calls = 4}},
    {limits = {}, parent = {max_cost = 0.01}, keep = {tokens = 100, cost = 0.001}},
    -- calls limits only: the calls left cover the 8 sub-calls, exactly, or fall one short
    {limits = {}},
    {limits = {max_llm_calls = 50}},
    {limits = {max_llm_calls = 8}},
    {limits = {max_llm_calls = 7}},
    {limits = {}, parent = {max_llm_calls = 8}},
    {limits = {max_time = 1e9}, parent = {max_llm_calls = 20}},
  }
  for n, cfg in ipairs(configs) do
    local function make()
      local parent = cfg.parent and budget.new(cfg.parent)
      local b = parent and parent:child(nil) or budget.new(cfg.limits)
      if parent then b.limits = cfg.limits end
      if cfg.keep then (parent or b).keep = cfg.keep end
      return b
    end
    local calls = {}
    for i = 1, 12 do
      calls[i] = {prompt_chars = 100 * i, output = 300 + 50 * (i % 4), sub = i % 3 ~= 0,
                  price = price, label = "p/m"}
    end
    local one, all = make(), make()
    local tickets, whys = all:reserve_all(calls)
    for i, call in ipairs(calls) do
      local t, why = one:reserve(call)
      T.eq(json.encode(tickets[i] or json.null), json.encode(t or json.null),
           ("config %d call %d: ticket"):format(n, i))
      T.eq(whys[i], why, ("config %d call %d: refusal"):format(n, i))
    end
    local r1, r2 = one:remaining(), all:remaining()
    for _, k in ipairs{"calls", "tokens", "cost"} do
      T.truthy((r1[k] == nil and r2[k] == nil) or math.abs(r1[k] - r2[k]) < 1e-12,
               ("config %d: %s left %s vs %s"):format(n, k, tostring(r1[k]), tostring(r2[k])))
    end
    T.eq(all.held.calls, one.held.calls, ("config %d: calls held"):format(n))
    T.eq(all.held.tokens, one.held.tokens, ("config %d: tokens held"):format(n))
  end
end

-- A batch's settlement (settle_all, one walk of the chain) against settle after settle: the
-- same counts, tokens, by-model totals and reservations released, along the whole chain.
tests["settle_all leaves every level as settle after settle does"] = function()
  local price = {input = 3, output = 15}
  for _, limits in ipairs{{max_tokens = 100000, max_cost = 5}, {max_llm_calls = 40}, {}} do
    local function make()
      local root = budget.new{max_llm_calls = 100}
      local b = root:child(nil)
      b.limits = limits
      return b, root
    end
    local one, one_root = make()
    local all, all_root = make()
    local calls, usages, costs = {}, {}, {}
    for i = 1, 30 do
      calls[i] = {prompt_chars = 40 * i, output = 200, sub = i % 5 ~= 0, price = price, label = "p/m"}
      if i % 7 ~= 0 then   -- every seventh call brings no answer
        usages[i] = {input_tokens = 10 * i, output_tokens = 3 * i}
        costs[i] = (usages[i].input_tokens * 3 + usages[i].output_tokens * 15) / 1e6
      end
    end
    local tickets1, tickets2 = {}, {}
    for i, c in ipairs(calls) do tickets1[i] = assert(one:reserve(c)) end
    tickets2 = all:reserve_all(calls)
    for i, t in ipairs(tickets1) do one:settle(t, "p/m", usages[i], costs[i]) end
    all:settle_all(tickets2, "p/m", usages, costs)
    for _, pair in ipairs{{one, all}, {one_root, all_root}} do
      local a, b = pair[1], pair[2]
      for _, k in ipairs{"calls", "llm_calls", "failed", "input_tokens", "output_tokens"} do
        T.eq(b[k], a[k], k)
      end
      T.truthy(math.abs(a.cost - b.cost) < 1e-12, ("cost %g vs %g"):format(a.cost, b.cost))
      T.eq(b.held.calls, 0)
      T.eq(b.held.tokens, 0)
      T.truthy(math.abs(b.held.cost) < 1e-12, "cost still held: " .. b.held.cost)
      T.eq(b.by_model["p/m"].calls, a.by_model["p/m"].calls)
      T.eq(b.by_model["p/m"].input_tokens, a.by_model["p/m"].input_tokens)
      T.truthy(math.abs(a.by_model["p/m"].cost - b.by_model["p/m"].cost) < 1e-12)
    end
  end
  -- nothing to settle changes nothing
  local b = budget.new{}
  b:settle_all({}, "p/m", {}, {})
  T.eq(b.calls, 0)
  T.eq(b.by_model["p/m"], nil)
end

tests["reserve_all matches reserve after reserve to the last floating-point token"] = function()
  local function fresh()   -- a cap that lands near a whole number of tokens
    local b = budget.new{max_cost = 0.061}
    b.cost = 0.016
    b.held = {calls = 0, tokens = 0, cost = 0.005}
    b.keep = {tokens = 0, cost = 0.01}
    return b
  end
  local calls = {
    {prompt_chars = 2232, output = 620, sub = true, price = {input = 9, output = 24}, label = "p/m"},
    {prompt_chars = 1043, sub = true, price = {input = 9, output = 4}, label = "p/m"},
  }
  local one, seq = fresh(), {}
  for i, c in ipairs(calls) do seq[i] = assert(one:reserve(c)) end
  local tickets = fresh():reserve_all(calls)
  for i = 1, #calls do
    T.eq(tickets[i].max_tokens, seq[i].max_tokens, "max_tokens of call " .. i)
    T.eq(tickets[i].cost, seq[i].cost, "cost of call " .. i)
  end
end

tests["reservations: calls in flight never add up past a limit; grants nest"] = function()
  local b = budget.new{max_tokens = 1000, max_llm_calls = 3}
  local t1 = assert(b:reserve{prompt_chars = 300, output = 400, sub = true})
  T.eq(t1.max_tokens, 400)
  local t2 = assert(b:reserve{prompt_chars = 300, output = 400, sub = true})
  T.truthy(t2.max_tokens < 400, "the second call gets what the first left")
  local t3, why = b:reserve{prompt_chars = 300, output = 400, sub = true}
  T.eq(t3, nil)
  T.contains(why, "max_tokens:")
  b:settle(t1, "m", {input_tokens = 50, output_tokens = 10}, 0)
  T.truthy(b:remaining().tokens > 0)
  local child = b:child{calls = 1}
  assert(child:reserve{prompt_chars = 3, output = 10, sub = true})
  T.contains(select(2, child:reserve{prompt_chars = 3, output = 10, sub = true}), "max_llm_calls")
  T.raises(function() b:child{dollars = 1} end, "child_budget: dollars is not a grant")
  T.raises(function() b:child(2) end, "a fraction must be in (0, 1]")
end

-- An `rlm ask` whose code runs a batch of slow sub-calls; the signal comes `extra` seconds after
-- the stand-in has seen the root call and all 8 of the batch's (a request sent before the signal
-- but seen after it would look like one sent after).
local function interrupted_batch(sig, extra)
  local seen = 9
  local server = F.model{rules = {
    {match = "^SLOW", reply = "done", latency_ms = 30000},
    {match = ".", reply = F.code("out = llm_query_batched(['SLOW %d' % i for i in range(8)])\n"
                                  .. "out = llm_query_batched(['SLOW again %d' % i for i in range(8)])")},
  }}
  local tmp = T.tmpdir()
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = tmp,
               OPENAI_BASE_URL = server.url .. "/v1", OPENAI_API_KEY = "sk-test-key-0123456789",
               RLM_MODEL = "openai/root-model"}
  local proc = assert(sys.spawn{argv = {T.rlm, "ask", "slow", "--sub-model", "openai/sub-model"},
                                env = env, stdin = "null", stdout = "pipe", stderr = "pipe"})
  T.defer(function() proc:close() end)
  local deadline = sys.now() + 60
  while F.stats(server).requests < seen and sys.now() < deadline do sys.sleep(0.02) end
  local sent = F.stats(server).requests
  T.truthy(sent >= seen, ("the stand-in saw %d requests of %d in 60 s"):format(sent, seen))
  sys.sleep(extra)
  sent = F.stats(server).requests
  local t0 = sys.now()
  proc:kill(sig)
  local how, code = sys.wait(proc, 20)
  local took = sys.now() - t0
  sys.sleep(0.5)   -- a request sent after the signal would arrive in this
  return {how = how, code = code, took = took, sent = sent, after = F.stats(server).requests,
          stdout = proc:read("stdout"), stderr = proc:read("stderr"), tmp = tmp}
end

tests["SIGINT or SIGTERM during a batch ends the run at once, with nothing more sent"] = function()
  for _, case in ipairs{{"INT", 2, 0}, {"INT", 2, 1}, {"TERM", 15, 0.5}} do
    local r = interrupted_batch(case[2], case[3])
    local what = ("SIG%s %g s into the batch"):format(case[1], case[3])
    T.eq({r.how, r.code}, {"exit", 128 + case[2]}, what .. ": " .. r.stderr)
    -- the sub-calls answer after 30 s: an exit that waited for them would take that long
    T.truthy(r.took < 10, ("%s: exit took %.2f s"):format(what, r.took))
    T.eq(r.after, r.sent, what .. ": no request after the signal")
    T.eq(r.stdout, "", what .. ": no answer printed")
    T.eq(sys.list_dir(r.tmp), {}, what .. ": no sandbox left")
  end
end

-- settle_all is "as settle after settle would" to the last bit, as reserve_all is held to; the leftover of a float sum decides the next call's output cap.
tests["settle_all leaves the same floating-point remainders as settle after settle"] =
function()
  local price = {input = 25 / 7, output = 25 / 7}
  local outputs = {53, 132, 843, 551, 734, 827, 601, 233, 712, 174, 56}
  local chars = {3090, 4134, 364, 220, 1275, 3105, 1480, 3932, 4759, 3857, 1667}
  local used = {{2947, 91}, {1222, 360}, {864, 414}, {2876, 742}, {2640, 323}, {1824, 851},
                {1943, 692}, {2675, 866}, {2931, 135}, {1175, 161}, {2062, 225}}
  local calls, usages, costs = {}, {}, {}
  for i = 1, #outputs do
    calls[i] = {prompt_chars = chars[i], output = outputs[i], sub = true, price = price, label = "p/m"}
    usages[i] = {input_tokens = used[i][1], output_tokens = used[i][2]}
    costs[i] = (used[i][1] * price.input + used[i][2] * price.output) / 1e6
  end
  local function make() return budget.new{max_cost = 0.2}:child(nil) end
  local one, all = make(), make()
  local seq = {}
  for i, c in ipairs(calls) do seq[i] = assert(one:reserve(c)) end
  for i, t in ipairs(seq) do one:settle(t, "p/m", usages[i], costs[i]) end
  all:settle_all(all:reserve_all(calls), "p/m", usages, costs)
  T.eq(("%a"):format(all.held.cost), ("%a"):format(one.held.cost), "cost still held")
  local next_call = {prompt_chars = 100, output = 10 ^ 9, sub = true, price = price, label = "p/m"}
  T.eq(all:reserve(next_call).max_tokens, one:reserve(next_call).max_tokens, "the next call's cap")
end

return tests
