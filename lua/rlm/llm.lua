--- Language model calls: one at a time, many at once, streamed; retried, timed and counted.
--
--   local llm = require "rlm.llm"
--   local res, err = llm.complete{model = "openai/gpt-4o", messages = {{role = "user",
--                                       content = "Hi"}}, system = "Be brief.", temperature = 0,
--                                       max_tokens = 200, stop = {"\n\n"}, timeout = 60,
--                                       retries = 5, backoff = 0.5}
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
local prices = require "rlm.prices"

local M = {}

M.concurrency = 32       -- llm.batch's default cap on calls in flight
M.timeout = 120          -- seconds for a whole call, retries included
M.retries = 5
M.backoff = 0.5          -- seconds before the first retry; doubles each time (with jitter)
M.max_tokens = 4096      -- sent only where the wire format requires a limit (Anthropic)

--- Providers: wire format, base URL (and the variable that overrides it), key variable.
-- key_optional: servers that need no key (a key from the variable or api_key is still sent).
-- path: appended to the base URL (default: the wire's usual path). headers, extra: added to
-- every request's headers and JSON body.
M.providers = {
  openai = {wire = "openai", base_url = "https://api.openai.com/v1",
            base_url_env = "OPENAI_BASE_URL", key_env = "OPENAI_API_KEY",
            max_tokens_field = "max_completion_tokens"},
  anthropic = {wire = "anthropic", base_url = "https://api.anthropic.com",
               base_url_env = "ANTHROPIC_BASE_URL", key_env = "ANTHROPIC_API_KEY"},
  ["local"] = {wire = "openai", base_url = "http://127.0.0.1:8000/v1",
               base_url_env = "RLM_LOCAL_BASE_URL", key_env = "RLM_LOCAL_API_KEY",
               key_optional = true},
  ollama = {wire = "openai", base_url = "http://127.0.0.1:11434/v1",
            base_url_env = "OLLAMA_BASE_URL", key_optional = true},
  openrouter = {wire = "openai", base_url = "https://openrouter.ai/api/v1",
                base_url_env = "OPENROUTER_BASE_URL", key_env = "OPENROUTER_API_KEY"},
  groq = {wire = "openai", base_url = "https://api.groq.com/openai/v1",
          base_url_env = "GROQ_BASE_URL", key_env = "GROQ_API_KEY"},
  deepseek = {wire = "openai", base_url = "https://api.deepseek.com/v1",
              base_url_env = "DEEPSEEK_BASE_URL", key_env = "DEEPSEEK_API_KEY"},
  mistral = {wire = "openai", base_url = "https://api.mistral.ai/v1",
             base_url_env = "MISTRAL_BASE_URL", key_env = "MISTRAL_API_KEY"},
  together_ai = {wire = "openai", base_url = "https://api.together.xyz/v1",
                 base_url_env = "TOGETHER_BASE_URL", key_env = "TOGETHER_API_KEY"},
}

local WIRE_PATHS = {openai = "/chat/completions", anthropic = "/v1/messages"}

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
    error("no model: pass model = \"provider/model\" or set RLM_MODEL", level)
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
local function endpoint(req, level)
  level = level + 1
  local entry, provider, name = M.resolve(req.model, level)
  local label = provider .. "/" .. name
  local key = req.api_key or env(entry.key_env)
  if key == "" then key = nil end
  if req.api_key then require("rlm.trace").remember(req.api_key) end
  if key == nil and not entry.key_optional then
    error(("%s needs an API key: set %s (or pass api_key)"):format(label,
      entry.key_env or "the provider's key variable"), level)
  end
  local base = req.base_url or env(entry.base_url_env) or entry.base_url
  return {entry = entry, label = label, name = name, key = key,
          url = base:gsub("/+$", "") .. (entry.path or WIRE_PATHS[entry.wire])}
end

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
  local wire = entry.wire
  return {
    wire = wire, url = ep.url, key = ep.key,
    name = ep.label, model = ep.name, messages = messages, prompt = prompt, system = req.system,
    temperature = req.temperature, stop = req.stop,
    max_tokens = req.max_tokens or (wire == "anthropic" and M.max_tokens or nil),
    max_tokens_field = entry.max_tokens_field,
    stream = on_delta ~= nil or req.stream == true,
    extra = merged(entry.extra, req.extra), headers = merged(entry.headers, req.headers),
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
  totals = {calls = 0, errors = 0, input_tokens = 0, output_tokens = 0, cost = 0, unpriced = 0,
            models = {}}
end
M.reset_usage()

-- The entry for a "provider/model" label: the exact key, else the longest key that prefixes it
-- (dated model versions such as claude-sonnet-4-5-20250929).
local function by_label(tbl, label)
  if tbl[label] then return tbl[label] end
  local best
  for key in pairs(tbl) do
    if label:sub(1, #key) == key and (best == nil or #key > #best) then best = key end
  end
  return best and tbl[best]
end

--- The price entry {input =, output =} (USD per million tokens) for a "provider/model" label;
-- `extra` (a table of the same shape) is looked in first.
function M.price(label, extra)
  return extra and by_label(extra, label) or by_label(prices, label)
end

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
  return extra and by_label(extra, label) or by_label(M.context_windows, label)
end

--- The "provider/model" label of a model string. Raises for an unknown provider.
function M.label(model)
  local _, provider, name = M.resolve(model, 2)
  return provider .. "/" .. name
end

--- Reads a prices file: a JSON object {"provider/model": {"input": USD, "output": USD}} (per
-- million tokens). Raises with the file and entry at fault.
function M.load_prices(path)
  local f, err = io.open(path, "rb")
  if not f then error("cannot read the prices file: " .. tostring(err), 0) end
  local text = f:read("a")
  f:close()
  local ok, t = pcall(require("rlm.json").decode, text)
  if not ok or type(t) ~= "table" then
    error(("the prices file %s is not a JSON object"):format(path), 0)
  end
  return M.check_prices(t, "the prices file " .. path)
end

--- t when every entry is {input = USD, output = USD} (per million tokens, >= 0); else raises
-- naming `where` and the entry at fault.
function M.check_prices(t, where)
  for label, p in pairs(t) do
    if type(p) ~= "table" or type(p.input) ~= "number" or type(p.output) ~= "number"
        or p.input < 0 or p.output < 0 then
      error(("%s: %s needs {input = USD, output = USD} per million tokens"):format(
        where, tostring(label)), 0)
    end
  end
  return t
end

--- Cost in USD of usage for model (a model string; nil: RLM_MODEL); second result false when
-- the model has no price.
local function priced_cost(p, usage)
  if not p or not usage then return 0, p ~= nil end
  return ((usage.input_tokens or 0) * p.input + (usage.output_tokens or 0) * p.output) / 1e6, true
end

function M.cost(model, usage)
  local ok, _, provider, name = pcall(M.resolve, model)
  return priced_cost(ok and M.price(provider .. "/" .. name) or (model and M.price(model)), usage)
end

local function count(t, res, priced)
  if res then
    t.calls = t.calls + 1
    t.input_tokens = t.input_tokens + res.usage.input_tokens
    t.output_tokens = t.output_tokens + res.usage.output_tokens
    t.cost = t.cost + res.cost
    if not priced then t.unpriced = t.unpriced + 1 end
  else
    t.errors = t.errors + 1
  end
end

local function account(label, res, priced)
  local m = totals.models[label]
  if m == nil then
    m = {calls = 0, errors = 0, input_tokens = 0, output_tokens = 0, cost = 0, unpriced = 0}
    totals.models[label] = m
  end
  count(totals, res, priced)
  count(m, res, priced)
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
  local priced
  if res then
    if res.model == "" then res.model = creq.model end
    res.cost, priced = priced_cost(M.price(label), res.usage)   -- label is resolved already
  end
  account(label, res, priced)
  return res, err
end

--- One call; waits for it (inside a task, other tasks run meanwhile).
function M.complete(req)
  return run(prepare(req, 2))
end

--- Many calls at once, at most opts.concurrency (default llm.concurrency) in flight. Returns
-- the results in input order; a failed call's slot is a failed item (async.failure), and the
-- others are unaffected. A request that cannot be sent at all (no key, an
-- unknown provider) fails its own slot (kind "misuse"), not the batch.
function M.batch(reqs, opts)
  if type(reqs) ~= "table" then error("llm.batch takes a list of requests", 2) end
  local prepared, endpoints = {}, {}
  for i, req in ipairs(reqs) do
    local ok, creq, _, on_delta = pcall(prepare_in_batch, endpoints, req)
    if ok then creq.on_delta = on_delta end   -- beside the fields C reads, which ignores it
    prepared[i] = ok and creq or {misuse = tostring(creq):gsub("^[^:]*:%d+: ", "")}
  end
  local slots = async.map(prepared, function(p)
    if p.misuse then return async.failure{kind = "misuse", message = p.misuse} end
    local res, err = run(p, p.name, p.on_delta)
    return res or async.failure(err)
  end, opts and opts.concurrency or M.concurrency)
  local out = {}
  for i, s in ipairs(slots) do
    if s.ok then out[i] = s[1] else s.ok = nil; out[i] = s end
  end
  return out
end

return M
