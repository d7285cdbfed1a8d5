--- Language model calls: one at a time, many at once, streamed; retried, timed and counted.
--
--   local llm = require "rlm.llm"
--   local res, err = llm.complete{model = "openai/gpt-4o", messages = {{role = "user",
--                                       content = "Hi"}}, system = "Be brief.", temperature = 0,
--                                       max_tokens = 200, stop = {"\n\n"}, timeout = 60,
--                                       retries = 5, backoff = 0.5,
--                                       reasoning_effort = "low"}   -- for a reasoning model
--   -- res = {text, finish_reason ("stop", "length", ...), model, usage = {input_tokens,
--   --        output_tokens}, cost, attempts}
--   -- a failed call gives nil, err with err = {kind, status, message, retry_after, attempts}
--   -- (tostring(err) is the message); misuse (no model, unknown provider, missing key)
--   -- raises before any request is sent
--   llm.complete{..., on_delta = function(text) io.write(text) end}   -- streams
--   local results = llm.batch({req1, req2, ...}, {concurrency = 16})
--   -- in input order; a failed slot is {error = message, kind, status, retry_after, attempts}
--   llm.usage()  -- {calls, errors, input_tokens, output_tokens, cost, unpriced, models = {...}}
--   llm.reset_usage()
--
-- Model strings are "provider/model" (litellm's form): "openai/gpt-4o",
-- "anthropic/claude-sonnet-4-5", "local/NAME", "openrouter/meta-llama/llama-3.1-8b-instruct".
-- A bare "gpt-..."/"o1..."/"claude-..." name means openai or anthropic. With no model, RLM_MODEL
-- is used. Providers live in llm.providers (add your own); prices in rlm.prices.
-- The wire formats, retries (429 with Retry-After, 5xx, connection failures) and deadlines are
-- in C (host/lllm.c); keys go from here straight into C and never into results or messages.
local core = require "rlm.core.llm"
local async = require "rlm.async"
local budget = require "rlm.budget"
local pacer_of = require("rlm.pacer").of
local secrets = require "rlm.secrets"
local sys = require "rlm.sys"

local M = {}

M.concurrency = 32       -- llm.batch's default cap on calls in flight
M.timeout = 120          -- seconds for a whole call, retries included
M.retries = 5
M.backoff = 0.5          -- seconds before the first retry; doubles each time (with jitter)
M.max_tokens = 4096      -- sent only where the wire format requires a limit (Anthropic)

--- Providers by name (rlm.providers: wire, base URL, key variable, ...); add your own here.
M.providers = require "rlm.providers"

local WIRE_PATHS = {openai = "/chat/completions", anthropic = "/v1/messages",
                    responses = "/responses"}

local function env(name)
  local v = name and os.getenv(name)
  if v == "" then return nil end
  return v
end

local function known_providers()
  local names = {}
  for name in pairs(M.providers) do names[#names + 1] = name end
  table.sort(names)
  return table.concat(names, ", ")
end

--- Resolves a model string (nil: RLM_MODEL) to provider entry, provider name, model name.
function M.resolve(model, level)
  level = (level or 1) + 1
  model = model or env("RLM_MODEL")
  if model == nil then
    error("no model: give --model provider/name (model = \"provider/name\" from Lua) or set RLM_MODEL", level)
  end
  if type(model) ~= "string" then error("llm model must be a string", level) end
  local provider, name = model:match("^([^/]+)/(.+)$")
  if provider and M.providers[provider] then return M.providers[provider], provider, name end
  if model:match("^claude") then return M.providers.anthropic, "anthropic", model end
  if model:match("^gpt%-") or model:match("^o%d") or model:match("^chatgpt") then
    return M.providers.openai, "openai", model
  end
  error(("model %q names no known provider; write provider/model (providers: %s; add one to "
         .. "require('rlm.llm').providers)"):format(model, known_providers()), level)
end

local function merged(a, b)
  if a == nil or b == nil then return a or b end
  local t = {}
  for k, v in pairs(a) do t[k] = v end
  for k, v in pairs(b) do t[k] = v end
  return t
end

-- What every request to one model with one key and base URL shares: the provider entry, the
-- "provider/model" label, the model's name, the key and the URL. Raises on misuse.
-- The endpoint of req, or nil and why when its provider needs a key and none is set (a
-- setting the caller may lack, not misuse). Raises on misuse.
local function find_endpoint(req, level)
  level = level + 1
  local entry, provider, name = M.resolve(req.model, level)
  local label = provider .. "/" .. name
  local key = req.api_key or env(entry.key_env)
  if key == "" then key = nil end
  if req.api_key then secrets.remember(req.api_key) end
  if key == nil and not entry.key_optional then
    return nil, ("%s needs an API key: set %s (or pass api_key)"):format(label,
      entry.key_env or "the provider's key variable")
  end
  local base = req.base_url or env(entry.base_url_env) or entry.base_url
  -- the model's own wire, when the provider serves it on another (entry.wires)
  local wire = entry.wires and budget.lookup(entry.wires, name) or entry.wire
  local path = wire == entry.wire and entry.path or WIRE_PATHS[wire]
  return {entry = entry, label = label, name = name, key = key, wire = wire,
          url = base:gsub("/+$", "") .. path}
end

-- What a thinking budget leaves under max_tokens for the answer after it, at least.
local ANSWER_ROOM = 1024

-- req's extra with the fields that ask for reasoning_effort on the wire: OpenAI's
-- reasoning_effort (reasoning.effort on the Responses API), or an Anthropic thinking budget of
-- reasoning_tokens[effort] (at least 1,024 tokens as the API requires, under max_tokens with
-- ANSWER_ROOM kept; none when that leaves too little).
local function with_reasoning(wire, effort, extra, max_tokens, level)
  local tokens = M.reasoning_tokens[effort]
  if not tokens then
    error(("reasoning_effort must be minimal, low, medium or high, not %s"):format(
      tostring(effort)), level + 1)
  end
  extra = merged(extra or {}, {})
  if wire == "responses" then
    extra.reasoning = {effort = effort}
  elseif wire ~= "anthropic" then
    extra.reasoning_effort = effort
  elseif max_tokens - ANSWER_ROOM >= M.reasoning_tokens.minimal then
    extra.thinking = {type = "enabled", budget_tokens = math.min(tokens, max_tokens - ANSWER_ROOM)}
  end
  return extra
end

-- The endpoint of req; raises when it cannot be had (a missing key included).
local function endpoint(req, level)
  local ep, why = find_endpoint(req, level + 1)
  if not ep then error(why, level + 1) end
  return ep
end

-- An error table as the bindings make them: kind and message, shown as the message.
local ERROR = {__tostring = function(e) return e.message end,
               __concat = function(a, b) return tostring(a) .. tostring(b) end}

-- The request for rlm.core.llm, its "provider/model" label and its on_delta. Raises on misuse.
-- ep: the request's endpoint when the caller has it (a batch works it out once per model).
local function prepare(req, level, ep)
  level = level + 1
  if type(req) ~= "table" then error("an llm request must be a table", level) end
  ep = ep or endpoint(req, level)
  local entry = ep.entry
  -- a bare prompt goes to C as it is, which writes it as the one user message
  local messages = req.messages
  local prompt = messages == nil and req.prompt or nil
  local on_delta = req.on_delta
  if on_delta ~= nil and type(on_delta) ~= "function" then
    error("llm request field 'on_delta' must be a function", level)
  end
  local wire = ep.wire
  local max_tokens = req.max_tokens or (wire == "anthropic" and M.max_tokens or nil)
  local plain_extra = merged(entry.extra, req.extra)
  local extra = plain_extra
  if req.reasoning_effort ~= nil then
    extra = with_reasoning(wire, req.reasoning_effort, extra, max_tokens, level)
  end
  return {
    effort = req.reasoning_effort, plain_extra = plain_extra,   -- for batch_prompts; C ignores them
    wire = wire, url = ep.url, key = ep.key,
    name = ep.label, model = ep.name, messages = messages, prompt = prompt, system = req.system,
    temperature = req.temperature, stop = req.stop,
    max_tokens = max_tokens, max_tokens_field = entry.max_tokens_field,
    stream = on_delta ~= nil or req.stream == true,
    extra = extra, headers = merged(entry.headers, req.headers),
    timeout = req.timeout or M.timeout, retries = req.retries or M.retries,
    backoff = req.backoff or M.backoff,
  }, ep.label, on_delta
end

-- The endpoint of req from cache (by model, key and base URL), worked out on first use.
local function cached_endpoint(cache, req, level)
  if type(req) ~= "table" then return nil end
  local by_key = cache[req.model or ""]
  if not by_key then by_key = {}; cache[req.model or ""] = by_key end
  local by_base = by_key[req.api_key or ""]
  if not by_base then by_base = {}; by_key[req.api_key or ""] = by_base end
  local ep = by_base[req.base_url or ""]
  if not ep then ep = endpoint(req, level + 1); by_base[req.base_url or ""] = ep end
  return ep
end

local function prepare_in_batch(endpoints, req)
  return prepare(req, 2, cached_endpoint(endpoints, req, 2))
end

--- The body fields that let a provider cache the prefix a series of requests shares (a run's
-- turns), under key: a table for a request's `extra` and whether the input written to the
-- cache is billed above the input rate; nil when the provider has no such field. Anthropic's
-- top-level cache_control marks the request's last block, so each turn writes its prefix and
-- the next reads it (Anthropic's prompt-caching page); OpenAI caches by itself, and
-- prompt_cache_key routes a run's requests to one cache (OpenAI's API reference). mode "auto"
-- asks only the provider's own server: a gateway or compatible server behind a *_BASE_URL may
-- refuse fields it does not know; true asks whatever the URL.
function M.cache_fields(model, key, mode)
  local entry = M.resolve(model, 2)
  local base = env(entry.base_url_env)
  if mode == "auto" and base and base:gsub("/+$", "") ~= entry.base_url then return nil end
  if entry.prompt_cache == "breakpoint" then return {cache_control = {type = "ephemeral"}}, true end
  if entry.prompt_cache == "key" then return {prompt_cache_key = key}, false end
  return nil
end

--- Raises the error a call would raise (unknown provider, missing key) without calling;
-- for checking configuration before creating anything expensive.
function M.check(model)
  prepare({model = model, messages = {}}, 1)
  return true
end

---------------------------------------------------------------------------------------------
-- Accounting

local totals

function M.reset_usage()
  totals = budget.new_sum()
  totals.models = {}
end
M.reset_usage()

--- The price entry {input =, output =} (USD per million tokens) for a "provider/model" label;
-- `extra` (a table of the same shape) is looked in first. (rlm.budget keeps prices and usage.)
M.price = budget.price

--- Context windows in tokens (prompt and output together), by "provider/model"; a sub-call's
-- prompt is checked against them before it is sent. Add or correct entries here or per run.
M.context_windows = {
  ["openai/gpt-4o"] = 128000, ["openai/gpt-4o-mini"] = 128000,
  ["openai/gpt-4.1"] = 1047576, ["openai/gpt-5"] = 400000,
  ["anthropic/claude-sonnet-4-5"] = 200000, ["anthropic/claude-sonnet-4"] = 200000,
  ["anthropic/claude-haiku-4-5"] = 200000, ["anthropic/claude-opus-4-1"] = 200000,
}

--- The context window of a label (`extra` first), or nil when unknown.
function M.context_window(label, extra)
  return extra and budget.lookup(extra, label) or budget.lookup(M.context_windows, label)
end

--- Output limits in tokens (the most one answer may hold, reasoning included), by
-- "provider/model", from the providers' model pages; a dated version takes its model's entry.
-- Add or correct entries here or per run (rlm.run's output_limits).
M.output_limits = {
  ["openai/gpt-4o"] = 16384, ["openai/gpt-4o-mini"] = 16384, ["openai/gpt-4.1"] = 32768,
  ["openai/gpt-5"] = 128000, ["openai/o1"] = 100000, ["openai/o1-mini"] = 65536,
  ["openai/o3"] = 100000, ["openai/o4-mini"] = 100000,
  ["anthropic/claude-sonnet-4-5"] = 64000, ["anthropic/claude-sonnet-4"] = 64000,
  ["anthropic/claude-3-7-sonnet"] = 64000, ["anthropic/claude-haiku-4-5"] = 64000,
  ["anthropic/claude-opus-4-5"] = 64000, ["anthropic/claude-opus-4-1"] = 32000,
  ["anthropic/claude-opus-4"] = 32000,
  ["anthropic/claude-3-5-haiku"] = 8192, ["anthropic/claude-3-5-sonnet"] = 8192,
  ["deepseek/deepseek-chat"] = 8192,
}

--- The output limit of a label (`extra` first), or nil when unknown.
function M.output_limit(label, extra)
  return extra and budget.lookup(extra, label) or budget.lookup(M.output_limits, label)
end

--- Models that reason before they answer, their reasoning counted in their output and set by
-- reasoning_effort (OpenAI's o-series and gpt-5); false where a name that starts the same
-- does not. Add local reasoning servers that take reasoning_effort here. Anthropic's models
-- reason when a request asks them to (reasoning_effort becomes a thinking budget).
M.reasoning_models = {["openai/o1"] = true, ["openai/o1-mini"] = false, ["openai/o3"] = true,
                      ["openai/o4"] = true, ["openai/gpt-5"] = true, ["openai/gpt-5-chat"] = false}

--- The tokens of reasoning each effort may take before the answer: Anthropic's thinking budget,
-- and the room a reasoning model's cap keeps for it above the answer.
M.reasoning_tokens = {minimal = 1024, low = 4096, medium = 16384, high = 32768}

--- Whether a request to label can take reasoning_effort: a reasoning model, or any model on
-- the Anthropic wire.
function M.reasons(label)
  local entry = M.resolve(label, 2)
  return entry.wire == "anthropic" or budget.lookup(M.reasoning_models, label) == true
end

--- The output cap of one call to label whose answer may need `visible` tokens (nil: as many
-- as the model allows): a reasoning model's cap keeps room for its reasoning above them
-- (reasoning_tokens[effort], "medium" by default), and no cap passes the model's limit
-- (limits: a table over output_limits). nil when neither is known.
function M.output_cap(label, visible, effort, limits)
  local limit = M.output_limit(label, limits)
  local cap = visible or limit
  if cap and visible and (effort or budget.lookup(M.reasoning_models, label) == true) then
    cap = cap + M.reasoning_tokens[effort or "medium"]
  end
  if cap and limit then cap = math.min(cap, limit) end
  return cap
end

--- The "provider/model" label of a model string. Raises for an unknown provider.
function M.label(model)
  local _, provider, name = M.resolve(model, 2)
  return provider .. "/" .. name
end

--- Reads and checks prices files and tables (rlm.budget's).
M.load_prices, M.check_prices = budget.load_prices, budget.check_prices

--- Cost in USD of usage for model (a model string; nil: RLM_MODEL); second result false when
-- the model has no price.
function M.cost(model, usage)
  local ok, _, provider, name = pcall(M.resolve, model)
  return budget.cost(ok and M.price(provider .. "/" .. name) or (model and M.price(model)), usage)
end

-- Kinds of failure that mean no call was made, or none is known to have been: a request
-- refused before it was sent ("misuse"), Lua code that raised around it ("lua").
local UNSENT = {misuse = true, lua = true}

-- Adds a finished call (res, or err when it failed) to sum, and prices res (price: its label's
-- entry, false for none; res.model, when the answer named none, is the request's).
local function tally(sum, creq, res, price, err)
  if not res then
    if not UNSENT[err.kind] then sum.errors = sum.errors + 1 end
    return
  end
  if res.model == "" then res.model = creq.model end
  local cost = budget.cost(price or nil, res.usage)
  res.cost = cost
  budget.add_call(sum, res.usage, cost, price)
end

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

--- Totals since start (or reset_usage): calls, errors, input_tokens, output_tokens, cost (USD),
-- unpriced (calls whose model has no price), and the same per "provider/model" in models.
function M.usage()
  return copy(totals)
end

---------------------------------------------------------------------------------------------
-- Calls

local function run(creq, label, on_delta)
  local call <close> = core.start(creq)
  local id = call:id()
  repeat
    async.await(id)
    if on_delta then
      local text = call:take_deltas()
      if #text > 0 then on_delta(text) end
    end
  until call:done()
  async.forget(id)
  local res, err = call:result()
  local sum = budget.new_sum()
  tally(sum, creq, res, M.price(label) or false, err)   -- label is resolved already
  budget.add_sum(totals, label, sum)
  return res, err
end

-- The error of a request that was never sent: what was raised, without its position.
local function unsent(err)
  return {kind = "misuse", message = (tostring(err):gsub("^[^:]*:%d+: ", ""))}
end

local function misuse(err)
  return async.failure(unsent(err))
end

-- A batch: each request a task (async.map's workers, at most `concurrency` in flight), each
-- over its own call from the C request start. Returns results and errors by request, and what
-- was raised (an interrupt) when the batch stopped before its end: the calls that finished by
-- then are in the two lists, and the calls still running are cancelled. A request C refuses
-- fails its slot (kind "misuse"); what on_delta raised is that request's error (kind "lua").
-- After SIGINT/SIGTERM C starts no call, and the batch raises the interrupt.
local function run_tasks(creqs, concurrency, on_result)
  local results, errs, live = {}, {}, {}
  -- One attempt of request p: its result, or nil, err.
  local function attempt(p, n)
    local started, call = pcall(core.start, p)
    if not started then return nil, unsent(call) end
    local _ <close> = call
    live[n] = call
    local id, on_delta = call:id(), p.on_delta
    repeat
      async.await(id)
      local text = call:take_deltas()
      if on_delta and #text > 0 then on_delta(text) end
    until call:done()
    async.forget(id)
    live[n] = nil
    return call:result()
  end
  local ok, slots = pcall(async.map, creqs, function(p, n)
    -- A 429 comes back here rather than being retried in C: the provider's width narrows and
    -- the call goes again after the wait asked for, within its own deadline.
    local pacer, deadline, tries = pacer_of(p.name), sys.now() + p.timeout, 0
    p.hand_back_429 = 1
    while true do
      pacer:acquire()
      local res, err = attempt(p, n)
      local throttled = err and err.status == 429
      pacer:release(throttled)
      tries = tries + 1
      local wait = throttled and (err.retry_after or p.backoff * 2 ^ math.min(tries - 1, 5))
      if not throttled or sys.now() + wait >= deadline then
        results[n], errs[n] = res, err
        if on_result then on_result(n, res, err) end
        return
      end
      async.sleep(wait)
      p.timeout = deadline - sys.now()
    end
  end, concurrency)
  for _, call in pairs(live) do call:cancel() end
  if not ok then return results, errs, slots end
  local calm, raised = pcall(async.check_interrupt)
  if not calm then return results, errs, raised end
  for n, s in ipairs(slots) do
    if not s.ok then
      errs[n] = {kind = s.kind, message = s.error, status = s.status,
                 retry_after = s.retry_after, attempts = s.attempts}
    end
  end
  return results, errs
end

--- One call; waits for it (inside a task, other tasks run meanwhile). Returns the result, or
-- nil and the error table ({kind =, message =, ...}, shown as its message): a failed call,
-- or a provider whose key is not set (kind "no_key"). Raises on misuse.
function M.complete(req)
  if type(req) ~= "table" then error("an llm request must be a table", 2) end
  local ep, why = find_endpoint(req, 2)
  if not ep then return nil, setmetatable({kind = "no_key", message = why}, ERROR) end
  return run(prepare(req, 2, ep))
end

local function batch_concurrency(opts, level)
  local concurrency = opts and opts.concurrency or M.concurrency
  if type(concurrency) ~= "number" or concurrency ~= concurrency then
    error("llm.batch: concurrency must be a number", level + 1)
  end
  -- below 1: one at a time (as async.map takes it); a fraction is cut to a whole number
  return math.floor(math.max(1, math.min(concurrency, 1 << 30)))
end

-- Runs the prepared requests creqs and puts each result, or failed item, into out at its
-- slot; the usage is counted once per label. When the batch is stopped (an interrupt), the
-- calls that finished are counted and it raises again.
local function run_prepared(creqs, slots, out, concurrency, on_result)
  local results, errs, raised = run_tasks(creqs, concurrency, on_result and function(n, res, err)
    on_result(slots[n], res or async.failure(err))
  end)
  local prices, sums = {}, {}   -- by label, each looked up or made once (price false: none)
  for n, i in ipairs(slots) do
    local creq, res, err = creqs[n], results[n], errs[n]
    if res or err then
      local label = creq.name
      local price, sum = prices[label], sums[label]
      if price == nil then
        price, sum = M.price(label) or false, budget.new_sum()
        prices[label], sums[label] = price, sum
      end
      tally(sum, creq, res, price, err)
      out[i] = res or async.failure(err)
    end
  end
  for label, sum in pairs(sums) do budget.add_sum(totals, label, sum) end
  if raised ~= nil then error(raised, 0) end
  return out
end

--- Many calls at once, at most opts.concurrency (default llm.concurrency) in flight. Returns
-- the results in input order; a failed call's slot is a failed item (async.failure), and the
-- others are unaffected. A request that cannot be sent at all (no key, an
-- unknown provider) fails its own slot (kind "misuse"), not the batch.
function M.batch(reqs, opts)
  if type(reqs) ~= "table" then error("llm.batch takes a list of requests", 2) end
  local concurrency = batch_concurrency(opts, 2)
  local out, creqs, slots, endpoints = {}, {}, {}, {}
  for i, req in ipairs(reqs) do
    local ok, creq, _, on_delta = pcall(prepare_in_batch, endpoints, req)
    if ok then
      creq.on_delta = on_delta   -- beside the fields C reads, which ignores it
      local n = #creqs + 1
      creqs[n], slots[n] = creq, i
    else
      out[i] = misuse(creq)
    end
  end
  return run_prepared(creqs, slots, out, concurrency)
end

--- The same request once for each prompt, as one batch (what a sandbox's llm_query_batched
-- sends): req as complete takes it, its prompt or messages left out, with prompts[i] as call
-- i's prompt and, when opts.max_tokens (a list) has an entry, opts.max_tokens[i] as its output
-- cap. opts.concurrency as for batch; opts.on_result(i, result) is called as each call ends (a
-- result or a failed item, as in the list returned; it must not raise). Returns what batch
-- returns; a req that cannot be sent fails every slot (kind "misuse"). Cheaper than batch: one
-- request is prepared, not one each.
function M.batch_prompts(req, prompts, opts)
  if type(prompts) ~= "table" then error("llm.batch_prompts takes a list of prompts", 2) end
  local concurrency = batch_concurrency(opts, 2)
  local out, creqs, slots = {}, {}, {}
  local ok, base, _, on_delta = pcall(prepare, req, 1)
  if not ok then
    for i in ipairs(prompts) do out[i] = misuse(base) end
    return out
  end
  base.messages, base.on_delta = nil, on_delta
  local shared, caps = {__index = base}, opts and opts.max_tokens
  for i, prompt in ipairs(prompts) do
    local cap = caps and caps[i]
    creqs[i], slots[i] = setmetatable({prompt = prompt, max_tokens = cap}, shared), i
    if cap and base.effort then   -- a thinking budget must fit under this call's own cap
      creqs[i].extra = with_reasoning(base.wire, base.effort, base.plain_extra, cap, 1)
    end
  end
  return run_prepared(creqs, slots, out, concurrency, opts and opts.on_result)
end

return M
