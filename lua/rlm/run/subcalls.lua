--- Sub-calls from a run's code (llm_query, llm_query_batched, rlm_query, budget), each
-- checked and reserved against the budget before it is sent, and the sub-call cache.
local async = require "rlm.async"
local budget_mod = require "rlm.budget"
local common = require "rlm.run.common"
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
  local reserve = self:output_reserve("sub", label)
  if #prompts < 2 then return reserve end
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
  return math.min(reserve, math.max(share, BATCH_MIN_OUTPUT))
end

-- ---------- the sub-call cache ----------


-- The cache's folder for opts.cache (true: $XDG_CACHE_HOME/rlm, else ~/.cache/rlm), or nil.
local function cache_dir(cache)
  if not cache then return nil end
  if type(cache) == "string" then return cache end
  return sys.cache_dir() or "/tmp/.cache/rlm"
end

-- The cache entry's path and key for one sub-call.
function Run:cache_entry(label, prompt)
  local key = json.encode{model = label, prompt = prompt}
  local h = sys.hash(key)
  return ("%s/subcalls/%s/%s.json"):format(self.cache, h:sub(1, 2), h), key
end

-- A cached answer {text, usage} for a sub-call, or nil.
function Run:cached(label, prompt)
  if not self.cache then return nil end
  local path, key = self:cache_entry(label, prompt)
  local data = sys.read_file(path)
  local entry = data and json.decode(data)
  if type(entry) == "table" and entry.key == key and type(entry.text) == "string" then return entry end
  return nil
end

function Run:remember(label, prompt, res)
  if not self.cache then return end
  local path, key = self:cache_entry(label, prompt)
  sys.mkdir_p(path:match("^(.*)/[^/]+$"))
  sys.write_file(path, json.encode{key = key, text = res.text, usage = res.usage})
end

-- Whether a refusal may pass once calls in flight are settled: reservations are released then,
-- and what they did not use (and what replies have been) may afford it.
local function may_pass_later(why)
  return why:find("^max_cost:") or why:find("^max_tokens:")
end

-- Sends one wave of a batch: the calls of `calls` (each {prompt_chars, ... , slot}) the budget
-- grants now, their answers put into texts, usage and costs at their slots. Returns the calls
-- refused, with their refusals, and whether any was granted; or nil and what the batch raised
-- (every reservation settled first).
function Run:batch_wave(calls, prompts, model, label, price, timeout, out)
  local granted, whys = self.budget:reserve_all(calls)
  local sends, caps, tickets, slots, refused, refusals = {}, {}, {}, {}, {}, {}
  for c, call in ipairs(calls) do
    local ticket = granted[c]
    if ticket then
      local n = #sends + 1
      sends[n], caps[n], tickets[n], slots[n] = prompts[call.slot], ticket.max_tokens, ticket,
        call.slot
    else
      refused[#refused + 1], refusals[#refused + 1] = call, whys[c]
    end
  end
  if #sends == 0 then return refused, refusals, false end
  local ok, results = pcall(llm.batch_prompts, {model = model, timeout = timeout}, sends,
                            {concurrency = self.batch_concurrency, max_tokens = caps})
  if not ok then
    self.budget:settle_all(tickets, label, EMPTY, EMPTY)
    async.check_interrupt()
    return nil, tostring(results)
  end
  -- A failed item becomes an error string in its slot, as DSPy does, so one bad call does not
  -- lose the batch; the code can test for the prefix.
  local spent, spent_costs = {}, {}   -- by call
  for n, r in ipairs(results) do
    local slot = slots[n]
    if r.error then
      out.texts[slot] = "[ERROR] " .. tostring(r.error)
    else
      local cost = self:cost_of(label, r.usage, price)
      spent[n], spent_costs[n] = r.usage or EMPTY, cost
      out.texts[slot], out.usage[slot], out.costs[slot] = r.text, r.usage, cost
      self:remember(label, prompts[slot], r)
    end
  end
  self.budget:settle_all(tickets, label, spent, spent_costs)
  async.check_interrupt()
  return refused, refusals, true
end

-- Sub-calls from code: each prompt is checked and reserved before anything is sent; what the
-- budget cannot afford comes back as an error string in its slot, as a failed call does, so
-- the code sees it and the rest of the batch runs. Under a cost or token limit a batch goes in
-- waves: what is refused while calls are in flight is tried again when their answers have
-- released what they held, until a wave is granted nothing.
function Run:llm_query(prompts, model, kind)
  local label, err = self:allowed_model(model)
  if not label then return nil, err end
  model = model or self.sub_model
  local started = sys.now()
  local out = {texts = {}, usage = {}, costs = {}}
  local texts = out.texts
  local refusal   -- a refusal's text, for llm_query (one prompt) to raise
  local output = self:batch_output(prompts, label)
  -- looked up once for the batch (false: none)
  local price = self:price(label) or false
  local window = llm.context_window(label, self.context_windows) or false
  local out_of_time, timeout = self:time_left() == 0, self:call_timeout()
  -- First what each prompt is (too big, cached, out of time, or a call to reserve), then the
  -- calls reserved together, in order, as one reservation after another would be.
  local calls = {}
  for i, p in ipairs(prompts) do
    local why = self:too_big(label, p, window)
    local hit = not why and self:cached(label, p)
    if hit then
      -- No call is made: nothing is reserved or counted but the hit and what it saved.
      texts[i] = hit.text
      self.cache_hits = self.cache_hits + 1
      self.cache_saved = self.cache_saved + self:cost_of(label, hit.usage, price)
    elseif not why and out_of_time then
      why = ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time"))
    elseif not why then
      calls[#calls + 1] = {prompt_chars = #p, output = output, sub = true, price = price or nil,
                           label = label, kind = "sub", slot = i}
    end
    if why then
      texts[i] = "[ERROR] " .. why
      refusal = refusal or why
    end
  end
  local sent = true
  while #calls > 0 and sent do
    local refused, whys, any = self:batch_wave(calls, prompts, model, label, price, timeout, out)
    if not refused then return nil, whys end
    sent, calls = any, {}
    local again = {}
    for c, call in ipairs(refused) do
      if any and may_pass_later(whys[c]) then
        again[#calls + 1] = prompts[call.slot]
        calls[#calls + 1] = call
      else
        texts[call.slot] = "[ERROR] " .. whys[c]
        refusal = refusal or whys[c]
      end
    end
    output = #calls > 0 and self:batch_output(again, label)
    for _, call in ipairs(calls) do call.output = output end
  end
  if kind == "llm_query" and refusal then return nil, refusal end
  self:sub_prompt_record(kind, prompts, texts, started, label, out.usage, out.costs)
  return texts
end

function Run:rlm_query(task, context)
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
  local child = self:child_run(setmetatable({
    task = task, context = context, outputs = {"answer"},
    max_iterations = self.opts.child_max_iterations,
    model = self.sub_model, prompts = self.prompts,
    _budget = self.budget:child(self.child_budget), _depth = self.depth + 1, _trace = self.tracer,
    _parent = self.id, on_event = self.on_event,
  }, {__index = self.opts}))
  self:record{type = "subcall", kind = "rlm_query", turn = self.turn, child = child.run_id,
              duration = sys.now() - started, reason = child.reason}
  local answer = child.answer
  if answer == nil then return nil, "the child run ended without an answer: " .. tostring(child.reason) end
  return {type(answer) == "string" and answer or json.encode(answer)}
end

-- The interpreter's handler for code that calls out (llm_query and friends).
function Run:on_call(kind, args)
  if self.recorded_calls then return self:recorded_call(kind) end
  local results, err = self:answer_call(kind, args)
  -- Each answer goes into the step's record, so a resume or a replay can give it again.
  if self.step_calls then
    self.step_calls[#self.step_calls + 1] = {kind = kind, results = results, error = err}
  end
  return results, err
end

-- The next recorded answer, while a recording is replayed; the code must ask in the same order.
function Run:recorded_call(kind)
  local call = table.remove(self.recorded_calls, 1)
  if not call or call.kind ~= kind then
    return nil, ("replay: the code called %s where the recording has %s"):format(
      kind, call and call.kind or "no more calls")
  end
  if call.results == nil or call.results == json.null then return nil, call.error end
  return call.results
end

function Run:answer_call(kind, args)
  for k, v in pairs(args) do
    if v == json.null then args[k] = nil end      -- Python's None
  end
  if kind == "llm_query" then
    return self:llm_query({args.prompt}, args.model, kind)
  elseif kind == "llm_query_batched" then
    return self:llm_query(args.prompts or {}, args.model, kind)
  elseif kind == "rlm_query" then
    return self:rlm_query(args.task, args.context)
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

return {cache_dir = cache_dir}
