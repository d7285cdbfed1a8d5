--- Sub-calls from a run's code (llm_query, llm_query_batched, rlm_query, budget), each
-- checked and reserved against the budget before it is sent, and the sub-call cache.
local async = require "rlm.async"
local budget_mod = require "rlm.budget"
local cache = require "rlm.cache"
local common = require "rlm.run.common"
local images_mod = require "rlm.images"
local json = require "rlm.json"
local llm = require "rlm.llm"
local sys = require "rlm.sys"

local Run, EMPTY = common.Run, common.EMPTY

-- What a trajectory keeps of each sub-call prompt: its head (a prompt may carry megabytes of
-- context, which the sandbox and the trajectory's own start record already hold).
local PROMPT_KEPT = 2000

-- The record of a batch of sub-calls: each prompt (its head) and answer, with the model, its
-- tokens and cost (usage and costs: per item, nil for a refused, failed or cached one).
function Run:sub_prompt_record(kind, prompts, texts, started, label, usage, costs)
  local chars_in, chars_out = 0, 0
  local items = {}
  for i, p in ipairs(prompts) do
    chars_in = chars_in + #p
    chars_out = chars_out + #tostring(texts[i])
    local u = usage and usage[i]
    items[i] = {prompt = #p > PROMPT_KEPT and p:sub(1, PROMPT_KEPT) or p, prompt_chars = #p,
                input_tokens = u and u.input_tokens, output_tokens = u and u.output_tokens,
                cache_read_tokens = u and u.cache_read_tokens,
                cost = costs[i]}
  end
  self:record{type = "subcall", kind = kind, turn = self.turn, count = #prompts, model = label,
              prompt_chars = chars_in, reply_chars = chars_out,
              duration = sys.now() - started, replies = texts, items = items}
end

-- The label of a model the code may use (model: nil for the sub-model), or nil, err.
function Run:allowed_model(model)
  local ok, label = pcall(llm.label, model or self.sub_model)
  if not ok then return nil, tostring(label):gsub("^[^:]*:%d+: ", "") end
  if not self.sub_models[label] then
    local names = {}
    for name in pairs(self.sub_models) do names[#names + 1] = name end
    table.sort(names)
    return nil, ("model %s is not allowed in this run; the code may use %s (the run's sub_models)")
      :format(label, table.concat(names, ", "))
  end
  return label
end

-- Why a prompt cannot be sent to label (its context window), or nil.
function Run:too_big(label, prompt, window)
  if window == nil then window = llm.context_window(label, self.context_windows) end
  local typical = math.ceil(#prompt / 4)
  if window and typical > window then
    return ("context_window: the prompt is about %d tokens (%d characters), more than %s's context "
      .. "window of %d tokens; split it into smaller prompts"):format(typical, #prompt, label, window)
  end
end

-- The output cap for each call of a batch: what a sub-call's reply may use (output_reserve),
-- and under a token or cost limit at most an even share of what remains (at least
-- BATCH_MIN_OUTPUT), so one item's reservation does not crowd out the rest.
local BATCH_MIN_OUTPUT = 256

function Run:batch_output(prompts, label)
  -- cap: the most one answer may hold (rlm.llm's output limits, reasoning room); reserve: what
  -- the budget holds for it, from the replies this run has had (budget:output_reserve).
  local longest = 0
  for _, p in ipairs(prompts) do longest = math.max(longest, #p) end
  local cap, send = self:output_cap(label, longest, true)
  local reserve = self:output_reserve("sub", label, cap)
  if #prompts < 2 then return reserve, send, cap end
  local r = self.budget:remaining()
  local keep, keep_cost = self.budget:kept()
  local prompt_tokens = 0
  for _, p in ipairs(prompts) do prompt_tokens = prompt_tokens + budget_mod.estimate_tokens(#p) end
  local share = reserve
  if r.tokens then
    share = math.min(share, math.floor((r.tokens - keep - prompt_tokens) / #prompts))
  end
  local price = self:price(label)
  if r.cost and price and price.output > 0 then
    local room = r.cost - keep_cost - prompt_tokens * price.input / 1e6
    share = math.min(share, math.floor(room * 1e6 / price.output / #prompts))
  end
  return math.min(reserve, math.max(share, BATCH_MIN_OUTPUT)), send, cap
end

-- ---------- the sub-call cache (rlm.cache) ----------

-- A cached answer {text, usage} for a sub-call, or nil.
function Run:cached(label, prompt)
  return self.cache and cache.get(self.cache, label, prompt) or nil
end

-- Keeps a sub-call's answer in the cache. A failed write is kept in cache_error: the code still
-- gets the answer it paid for, and the run ends with the error after the turn (loop.lua).
function Run:remember(label, prompt, res)
  if not self.cache then return end
  local ok, err = cache.put(self.cache, label, prompt, res)
  if not ok then self.cache_error = self.cache_error or err end
end

-- Why a sent sub-call gave no answer, as "cause: message" (the cause a word the code can test:
-- timeout, http, too_large, cut, refusal, ...), or nil for an answer.
local function failure(r)
  if r.error then return ("%s: %s"):format(r.kind or "error", tostring(r.error)) end
  if r.finish_reason == "refusal" then
    local text = (r.refusal or r.text or ""):gsub("%s+", " ")
    return "refusal: the model refused" .. (text:find("%S") and ": " .. text or "")
  end
end

-- The one rule for a sub-call that fails, whatever the cause (a budget limit, the context
-- window, a timeout, an HTTP error, an answer too large, a refusal): its text is
-- "cause: why", and a single call (llm_query, rlm_query) raises it as RuntimeError in the code,
-- while in a batch that item is the string "[ERROR] cause: why" and the others are answers.
local SINGLE = {llm_query = true, rlm_query_fallback = true}

-- A refusal that a later wave may not meet: what calls in flight hold comes back when they end.
local function may_pass_later(why)
  return why:find("^max_cost:") or why:find("^max_tokens:")
end

-- Sends one wave of a batch: the calls of `calls` (each {prompt_chars, ... , slot}) the budget
-- grants now, their answers put into out (texts, usage, costs) at their slots. Returns the
-- calls refused, with their refusals, and whether any was granted; or nil and what the batch
-- raised (every reservation settled first). b: the batch (model, label, price, timeout, cap,
-- send, keys, sends_of(slot), on_answer).
function Run:batch_wave(calls, b, out)
  local granted, whys = self.budget:reserve_all(calls)
  local sends, caps, tickets, slots, refused, refusals = {}, {}, {}, {}, {}, {}
  for c, call in ipairs(calls) do
    local ticket = granted[c]
    if ticket then
      local n = #sends + 1
      sends[n], tickets[n], slots[n] = b.sends_of(call.slot), ticket, call.slot
      caps[n] = ticket.max_tokens or b.send and b.cap or nil
    else
      refused[#refused + 1], refusals[#refused + 1] = call, whys[c]
    end
  end
  if #sends == 0 then return refused, refusals, false end
  local on_result = b.on_answer and function(n, r)
    local why = failure(r)
    b.on_answer(slots[n], why and "[ERROR] " .. why or r.text)
  end
  -- The run's calls from every thread of its code share one width (batch_concurrency).
  local width = math.min(#sends, self.batch_concurrency)
  self.call_width.acquire(width)
  local ok, results = pcall(llm.batch_prompts, {model = b.model, timeout = b.timeout,
                                                reasoning_effort = self:effort(b.label)}, sends,
                            {concurrency = self.batch_concurrency, max_tokens = caps,
                             on_result = on_result})
  self.call_width.release(width)
  if not ok then
    self.budget:settle_all(tickets, b.label, EMPTY, EMPTY)
    async.check_interrupt()
    return nil, tostring(results)
  end
  local spent, spent_costs = {}, {}   -- by call
  for n, r in ipairs(results) do
    local slot = slots[n]
    local why = failure(r)
    if not r.error then   -- a refusal was answered, and billed
      local cost = self:cost_of(b.label, r.usage, b.price)
      spent[n], spent_costs[n] = r.usage or EMPTY, cost
      out.usage[slot], out.costs[slot] = r.usage, cost
    end
    if why then
      out.texts[slot] = "[ERROR] " .. why
      out.failure = out.failure or why
    else
      out.texts[slot] = r.text
      self:remember(b.label, b.keys[slot], r)
    end
  end
  self.budget:settle_all(tickets, b.label, spent, spent_costs)
  async.check_interrupt()
  return refused, refusals, true
end

-- Sub-calls from code: each prompt is checked and reserved before anything is sent; what
-- cannot be sent or answered fails as the rule above says, so one bad item does not lose a
-- batch. Under a cost or token limit a batch goes in waves: what is refused while calls are in
-- flight is tried again when their answers have released what they held, until a wave is
-- granted nothing. on_answer(i, text), when given, hears each prompt's answer as soon as it is
-- known (llm_query_batched_iter). images: by prompt, a list of images or nil.
function Run:llm_query(prompts, model, kind, on_answer, images)
  local label, err = self:allowed_model(model)
  if not label then return nil, err end
  model = model or self.sub_model
  local started = sys.now()
  local out = {texts = {}, usage = {}, costs = {}}
  local texts = out.texts
  local output, send, cap = self:batch_output(prompts, label)
  -- looked up once for the batch (false: none)
  local price = self:price(label) or false
  local window = llm.context_window(label, self.context_windows) or false
  local out_of_time, timeout = self:time_left() == 0, self:call_timeout()
  local keys = {}        -- what the cache knows each prompt by: its text, and its images
  -- First what each prompt is (too big, cached, out of time, or a call to reserve), then the
  -- calls reserved together, in order, as one reservation after another would be.
  local calls = {}
  for i, p in ipairs(prompts) do
    local imgs = images and images[i]
    local why = self:too_big(label, p, window)
    if imgs and not why then why = select(2, images_mod.check(imgs, label)) end
    keys[i] = imgs and (p .. "\0" .. images_mod.key(imgs)) or p
    local hit = not why and self:cached(label, keys[i])
    if hit then
      -- No call is made: nothing is reserved or counted but the hit and what it saved.
      texts[i] = hit.text
      self.cache_hits = self.cache_hits + 1
      self.cache_saved = self.cache_saved + self:cost_of(label, hit.usage, price)
    elseif not why and out_of_time then
      why = ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time"))
    elseif not why then
      calls[#calls + 1] = {prompt_chars = #p + (imgs and #imgs * images_mod.RESERVE_TOKENS * 4 or 0),
                           output = output, sub = true, price = price or nil, label = label,
                           kind = "sub", slot = i}
    end
    if why then
      texts[i] = "[ERROR] " .. why
      out.failure = out.failure or why
    end
  end
  if on_answer then
    for i in ipairs(prompts) do
      if texts[i] then on_answer(i, texts[i]) end
    end
  end
  local batch = {model = model, label = label, price = price, timeout = timeout, cap = cap,
                 send = send, keys = keys, on_answer = on_answer,
                 sends_of = function(i)
                   local imgs = images and images[i]
                   return imgs and images_mod.content(label, prompts[i], imgs) or prompts[i]
                 end}
  local sent = true
  while #calls > 0 and sent do
    if SINGLE[kind] and out.failure then break end
    local refused, whys, any = self:batch_wave(calls, batch, out)
    if not refused then return nil, whys end
    sent, calls = any, {}
    local again = {}
    for c, call in ipairs(refused) do
      if any and may_pass_later(whys[c]) then
        again[#calls + 1] = prompts[call.slot]
        calls[#calls + 1] = call
      else
        texts[call.slot] = "[ERROR] " .. whys[c]
        out.failure = out.failure or whys[c]
        if on_answer then on_answer(call.slot, texts[call.slot]) end
      end
    end
    output = #calls > 0 and self:batch_output(again, label)
    for _, call in ipairs(calls) do call.output = output end
  end
  if SINGLE[kind] and out.failure then return nil, out.failure end
  self:sub_prompt_record(kind, prompts, texts, started, label, out.usage, out.costs)
  return texts
end

function Run:rlm_query(task, context, at, item)
  if self.depth + 1 >= self.max_depth then
    local prompt = context and (task .. "\n\nContext:\n" .. tostring(context)) or task
    return self:llm_query({prompt}, nil, "rlm_query_fallback")
  end
  -- A child that could not make a single call is not started at all.
  local r = self.budget:remaining()
  if r.calls and r.calls < 1 then
    return nil, ("max_llm_calls: all %d calls are used; no child run can start"):format(
      self.budget:binding("calls", "max_llm_calls"))
  end
  if self:time_left() == 0 then
    return nil, ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time"))
  end
  local started = sys.now()
  -- the child's place in the tree: a resumed run's child replays what it recorded there (at:
  -- the call's place in its turn; item: its place in an rlm_query_batched)
  local slot = ("%s/%d.%d%s"):format(self.slot, self.turn or 0, at or #(self.step_calls or {}) + 1,
                                     item and ("." .. item) or "")
  -- At most max_parallel_children of this run's children at once, from any thread of its code.
  self.child_width.acquire()
  local ok, child = pcall(self.child_run, self, setmetatable({
    task = task, context = context, outputs = {"answer"},
    max_iterations = self.opts.child_max_iterations,
    model = self.sub_model, prompts = self.prompts,
    _budget = self.budget:child(self.child_budget), _depth = self.depth + 1, _trace = self.tracer,
    _tool_counts = self.tool_counts, _slot = slot, _replay = self:child_replay(slot),
    _parent = self.id, on_event = self.on_event,
    -- in the parent's sandbox when the backend can and the child needs no other machine
    beside = self.interp,
  }, {__index = self.opts}))
  self.child_width.release()
  if not ok then error(child, 0) end
  self:record{type = "subcall", kind = "rlm_query", turn = self.turn, child = child.run_id,
              duration = sys.now() - started, reason = child.reason}
  local answer = child.answer
  if answer == nil then
    return nil, ("%s: the child run ended without an answer%s"):format(tostring(child.reason),
      child.detail and " (" .. child.detail .. ")" or "")
  end
  return {type(answer) == "string" and answer or json.encode(answer)}
end

-- Children side by side (rlm_query_batched): each task's answer, or "[ERROR] why" in its slot.
function Run:rlm_query_batched(tasks, contexts, at)
  if type(tasks) ~= "table" then return nil, "rlm_query_batched: tasks must be a list" end
  contexts = type(contexts) == "table" and contexts or EMPTY
  local slots = async.map(tasks, function(task, i)
    local context = contexts[i]
    if context == json.null then context = nil end
    return self:rlm_query(task, context, at, i)
  end)
  async.check_interrupt()
  local texts = {}
  for i, slot in ipairs(slots) do
    if not slot.ok then
      texts[i] = "[ERROR] " .. tostring(slot.error)
    elseif slot[1] then
      texts[i] = slot[1][1]
    else
      texts[i] = "[ERROR] " .. tostring(slot[2])
    end
  end
  return texts
end

-- The interpreter's handler for code that calls out (llm_query and friends). Each answer goes
-- into the step's record, replayed ones too, so a resume or a replay can give it again: in the
-- order the calls came, though calls side by side may end in another. A live one is also
-- recorded at once, so a crash later in the turn does not pay for it again.
function Run:on_call(kind, args)
  local calls = self.step_calls
  local at = calls and #calls + 1
  if calls then calls[at] = {kind = kind} end
  local results, err, replayed = self:recorded_call(kind)
  if not replayed then
    local before = self.budget:usage()
    args._at = at
    results, err = self:answer_call(kind, args)
    if calls then
      self:record{type = "answer", turn = self.turn, call = at, kind = kind,
                  results = results, error = err, usage = common.spent_since(self.budget, before)}
    end
  end
  if calls then calls[at].results, calls[at].error = results, err end
  return results, err
end

-- The next recorded answer while a recording is replayed (results, err, true); the code must
-- ask in the same order. A turn a crash cut short goes on live once its answers are used up.
function Run:recorded_call(kind)
  if not self.recorded_calls then return nil, nil, false end
  local call = self.recorded_calls[1]
  if self.live_after_recorded and (not call or call.kind ~= kind) then
    self.recorded_calls = nil
    return nil, nil, false
  end
  table.remove(self.recorded_calls, 1)
  if not call or call.kind ~= kind then
    return nil, ("replay: the code called %s where the recording has %s"):format(
      kind, call and call.kind or "no more calls"), true
  end
  -- an answer recorded on its own brings what it cost
  if call.usage then self.budget:add_spent(call.usage, "recorded sub-calls") end
  if call.results == nil or call.results == json.null then return nil, call.error, true end
  return call.results, nil, true
end

-- A call of one of the user's tools (rlm.tools): its max_calls and price held for the whole
-- tree, counted (by_model "tool:NAME"), recorded like a sub-call.
function Run:tool_call(args)
  local t = self.interp and self.interp.tool_index and self.interp.tool_index[args.name]
  if not t then return nil, ("no tool named %s"):format(tostring(args.name)) end
  local counts = self.tool_counts
  local n = (counts[t.name] or 0) + 1
  if t.max_calls and n > t.max_calls then
    return nil, ("max_calls: %s may be called %d times in this run"):format(t.name, t.max_calls)
  end
  local label = "tool:" .. t.name
  local ticket, why = self.budget:reserve_cost(t.price or 0, label)
  if not ticket then return nil, why end
  counts[t.name] = n
  local started = sys.now()
  local ok, res, err = pcall(require("rlm.tools").invoke, t, type(args.args) == "table" and args.args or {})
  if not ok then res, err = nil, tostring(res) end
  self.budget:settle(ticket, label, res ~= nil and EMPTY or nil, res ~= nil and (t.price or 0) or 0)
  async.check_interrupt()
  local reply = res ~= nil and json.encode(res) or ("[ERROR] " .. tostring(err))
  self:record{type = "subcall", kind = "tool", tool = t.name, turn = self.turn, count = 1,
              model = label, prompt_chars = #json.encode(json.object(args.args or {})),
              reply_chars = #reply, duration = sys.now() - started, replies = {reply},
              items = {{prompt = json.encode(json.object(args.args or {})), cost = res ~= nil and t.price or nil}}}
  if res == nil then return nil, err end
  return {res}
end

-- A request of the code through its proxy (rlm.netproxy, args._proxy): a host's max_calls
-- and price held for the whole tree, counted (by_model "http:HOST"), recorded like a sub-call,
-- refusals too. The record has the code's URL and what came back, never a header.
function Run:http_call(args)
  local proxy = args._proxy
  if not proxy then return nil, "the code has no network: the run gives no network allow list" end
  local e, ticket = proxy:entry_of(args), nil
  local label = "http:" .. (e and e.host or proxy:host_of(args))
  if e then
    local counts = self.tool_counts
    local n = (counts[label] or 0) + 1
    if e.max_calls and n > e.max_calls then
      return nil, ("max_calls: %s may be reached %d times in this run"):format(e.host, e.max_calls)
    end
    local why
    ticket, why = self.budget:reserve_cost(e.price or 0, label)
    if not ticket then return nil, why end
    counts[label] = n
  end
  local started = sys.now()
  local ok, results, info = pcall(proxy.request, proxy, args)
  if not ok then results, info = nil, {host = label:sub(6), refused = tostring(results)} end
  -- paid when sent: an upstream that answered past max_bytes or too late did the work
  local reached = info.refused == nil
  if ticket then
    self.budget:settle(ticket, label, reached and EMPTY or nil, info.sent and (e.price or 0) or 0)
  end
  async.check_interrupt()
  local netproxy = require "rlm.netproxy"
  self:record{type = "subcall", kind = "http", turn = self.turn, count = 1, model = label,
              method = netproxy.shown_method(args), url = netproxy.shown_url(args),
              host = info.host, status = info.status, bytes = info.bytes, refused = info.refused,
              duration = sys.now() - started}
  if not results then return nil, info.refused end
  return results
end

function Run:answer_call(kind, args)
  for k, v in pairs(args) do
    if v == json.null then args[k] = nil end      -- Python's None
  end
  if kind == "llm_query" then
    return self:llm_query({args.prompt}, args.model, kind, nil, args.images and {args.images})
  elseif kind == "llm_query_batched" then
    return self:llm_query(args.prompts or {}, args.model, kind)
  elseif kind == "llm_query_batched_start" then
    return self:start_batch(args.prompts or {}, args.model)
  elseif kind == "llm_query_batched_next" then
    return self:next_answers(args.batch)
  elseif kind == "rlm_query" then
    return self:rlm_query(args.task, args.context, args._at)
  elseif kind == "tool" then
    return self:tool_call(args)
  elseif kind == "http" then
    return self:http_call(args)
  elseif kind == "rlm_query_batched" then
    return self:rlm_query_batched(args.tasks, args.contexts, args._at)
  elseif kind == "budget" then
    local v = self.budget:view(self.max_depth - self.depth - 1)
    v.seconds = self:time_left()
    for _, k in ipairs{"calls", "tokens", "cost", "seconds"} do
      if v[k] == nil then v[k] = json.null end
    end
    return {json.object(v)}
  end
  return nil, "unknown call: " .. tostring(kind)
end

return {cache_dir = cache.dir}
