--- One budget for a whole tree of runs, owned by the host: the root, every child `rlm_query`
-- and every sub-call share it, so nothing a sandbox does can raise its own limits.
--
-- Every model call reserves before it is sent (its prompt estimated, its output capped, its cost
-- from the price table) and settles when it returns, so what cannot be afforded is never sent
-- and calls in flight can never add up past a limit. A child run gets a budget of its own whose
-- parent is the caller's: it spends within its grant (if any) and within every ancestor's
-- remainder, and each ancestor's totals include it. Limits that are nil are unlimited.
--
-- It is also the one place a call's cost is worked out from the price table and usage is added
-- up: a budget's totals, rlm.llm's (llm.usage()) and the MCP server's all go through here.
local prices = require "rlm.prices"
local sys = require "rlm.sys"

local M = {}

--- The fewest output tokens worth sending a call for.
M.MIN_OUTPUT = 16

--- A prompt's size in tokens, estimated high: about 3 characters per token where providers
-- average about 4 for English text and code, so the reservation covers the real count.
function M.estimate_tokens(chars)
  return math.ceil(chars / 3) + 8
end

---------------------------------------------------------------------------------------------
-- Prices and usage

--- The entry of tbl for a "provider/model" label: the exact key, else the longest key that
-- prefixes it (dated model versions such as claude-sonnet-4-5-20250929).
function M.lookup(tbl, label)
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
  return extra and M.lookup(extra, label) or M.lookup(prices, label)
end

--- Cost in USD of usage ({input_tokens, output_tokens, cache_read_tokens,
-- cache_write_tokens}: input_tokens holds the cached parts) at price (nil: none, costs 0), as
-- the providers bill it: the input read from a prompt cache at cached_input, the input written
-- to one at write_rate (the input rate and 1.25x it when the price does not say); second result false
-- when there is no price.
function M.cost(price, usage)
  if not price or not usage then return 0, price ~= nil end
  local input = usage.input_tokens or 0
  local read = math.min(usage.cache_read_tokens or 0, input)
  local written = math.min(usage.cache_write_tokens or 0, input - read)
  return ((input - read - written) * price.input + read * (price.cached_input or price.input)
    + written * M.write_rate(price) + (usage.output_tokens or 0) * price.output) / 1e6, true
end

--- USD per million input tokens written to a prompt cache: the price's cache_write, else 1.25x
-- input (Anthropic's rate for its 5-minute cache; the providers that report writes bill so).
function M.write_rate(price)
  return price.cache_write or price.input * 1.25
end

--- What prompt caching saved on a sum of calls on one model (input_tokens, cache_read_tokens,
-- cache_write_tokens) at price, in USD: the reads' discount less the writes' surcharge; 0
-- without a price.
function M.cache_saved(price, sum)
  if not price then return 0 end
  local read, written = sum.cache_read_tokens or 0, sum.cache_write_tokens or 0
  return (read * (price.input - (price.cached_input or price.input))
    - written * (M.write_rate(price) - price.input)) / 1e6
end

--- A few words on what prompt caching did in usage (cache_read_tokens, cache_write_tokens and
-- prompt_cache_saved, USD), for progress lines and reports; "" when it did nothing.
function M.cache_words(u)
  local read, written = u.cache_read_tokens or 0, u.cache_write_tokens or 0
  if read == 0 and written == 0 then return "" end
  local words = ("cache %d read, %d written"):format(read, written)
  if u.prompt_cache_saved then words = words .. (", saved $%.4f"):format(u.prompt_cache_saved) end
  return words
end

local function rate(v, optional)
  if v == nil then return optional end
  return type(v) == "number" and v >= 0
end

--- t when every entry is {input = USD, output = USD[, cached_input = USD, cache_write = USD]}
-- (per million tokens, >= 0); else raises naming `where` and the entry at fault.
function M.check_prices(t, where)
  for label, p in pairs(t) do
    if type(p) ~= "table" or not rate(p.input) or not rate(p.output)
        or not rate(p.cached_input, true) or not rate(p.cache_write, true) then
      error(("%s: %s needs {input = USD, output = USD} per million tokens (and optionally "
        .. "cached_input, cache_write)"):format(where, tostring(label)), 0)
    end
  end
  return t
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

--- A sum of model calls: calls (answered), errors (sent, no answer), input_tokens,
-- output_tokens, cost, unpriced (answered calls whose model has no price).
function M.new_sum()
  return {calls = 0, errors = 0, input_tokens = 0, output_tokens = 0, cache_read_tokens = 0,
          cache_write_tokens = 0, cost = 0, unpriced = 0}
end

--- Adds to sum a call that answered with usage, costing cost (priced false: no price).
function M.add_call(sum, usage, cost, priced)
  sum.calls, sum.input_tokens, sum.output_tokens = sum.calls + 1,
    sum.input_tokens + usage.input_tokens, sum.output_tokens + usage.output_tokens
  sum.cache_read_tokens = sum.cache_read_tokens + (usage.cache_read_tokens or 0)
  sum.cache_write_tokens = sum.cache_write_tokens + (usage.cache_write_tokens or 0)
  sum.cost = sum.cost + cost
  if not priced then sum.unpriced = sum.unpriced + 1 end
end

--- Adds sum to totals (a sum with `models`) and to totals.models[label], made on first use.
function M.add_sum(totals, label, sum)
  local m = totals.models[label]
  if m == nil then
    m = M.new_sum()
    totals.models[label] = m
  end
  for k, v in pairs(sum) do
    totals[k], m[k] = totals[k] + v, m[k] + v
  end
end

--- Adds a result's usage table (rlm.run's) to totals, for each name in keys.
function M.add_usage(totals, usage, keys)
  for _, k in ipairs(keys) do totals[k] = totals[k] + (tonumber(usage[k]) or 0) end
end

-- A budget's sum for model, made on first use.
local function model_sum(b, model)
  local m = b.by_model[model]
  if m == nil then
    m = {calls = 0, input_tokens = 0, output_tokens = 0, cache_read_tokens = 0,
         cache_write_tokens = 0, cost = 0}
    b.by_model[model] = m
  end
  return m
end

---------------------------------------------------------------------------------------------
-- Budgets

local Budget = {}
Budget.__index = Budget

--- limits: max_llm_calls (model calls made for code: sub-calls and child runs' calls),
-- max_tokens (all calls, in + out), max_cost (USD, all calls), max_time (seconds of wall time),
-- max_depth. parent: the budget this one spends within (a child run's caller).
function M.new(limits, parent)
  return setmetatable({
    limits = limits or {},
    parent = parent,
    started = sys.now(),
    llm_calls = 0,          -- calls made for code (llm_query, batches, child runs' turns)
    calls = 0,              -- every model call, root turns included
    failed = 0,             -- calls sent that brought no answer
    input_tokens = 0,       -- all input, the parts read from and written to prompt caches included
    output_tokens = 0,
    cache_read_tokens = 0,
    cache_write_tokens = 0,
    cost = 0,
    by_model = {},
    held = {calls = 0, tokens = 0, cost = 0},   -- reserved by calls in flight
    largest = {},           -- the longest reply (output tokens) seen, by kind and model
    keep = nil,             -- {tokens, cost} no call but the root's extraction may use
  }, Budget)
end

--- The output tokens to reserve for a call of kind ("turn", "sub") on model: twice the
-- longest reply of that kind this budget's tree has had from the model (at least floor), or
-- `unseen` before any; never more than limit (the model's output limit).
function Budget:output_reserve(kind, model, limit, floor, unseen)
  local seen = self.largest[kind .. " " .. model]
  if not seen then return math.min(limit, unseen or limit) end
  return math.min(limit, math.max(floor, 2 * seen))
end

-- Notes a reply of kind on model along the chain.
local function note_reply(b, kind, model, usage)
  local out = usage and usage.output_tokens
  if not (kind and out) then return end
  local key = kind .. " " .. model
  while b do
    if out > (b.largest[key] or 0) then b.largest[key] = out end
    b = b.parent
  end
end

--- What is kept back along the chain for the root's final extraction: tokens, cost.
function Budget:kept()
  local tokens, cost = 0, 0
  local b = self
  while b do
    if b.keep then tokens, cost = tokens + b.keep.tokens, cost + b.keep.cost end
    b = b.parent
  end
  return tokens, cost
end

-- What one level has left of each limit it sets (nil where it sets none), reservations counted:
-- calls, tokens, cost, seconds. Four values rather than a table: a sub-call asks this of every
-- level a few times.
local function level_left(b)
  local l, held = b.limits, b.held
  return l.max_llm_calls and l.max_llm_calls - b.llm_calls - held.calls,
    l.max_tokens and l.max_tokens - b.input_tokens - b.output_tokens - held.tokens,
    l.max_cost and l.max_cost - b.cost - held.cost,
    l.max_time and l.max_time - (sys.now() - b.started)
end

local function least(a, b)
  if a == nil or (b ~= nil and b < a) then return b end
  return a
end

local LEFT_INDEX = {calls = 1, tokens = 2, cost = 3, seconds = 4}

-- What remains along the chain, reservations counted: calls, tokens, cost, seconds, each the
-- least over this budget and its ancestors, never below 0; nil where no level sets a limit.
local function chain_left(b)
  local calls, tokens, cost, seconds
  while b do
    local c, t, m, s = level_left(b)
    calls, tokens, cost, seconds = least(calls, c), least(tokens, t), least(cost, m), least(seconds, s)
    b = b.parent
  end
  return calls and math.max(0, calls), tokens and math.max(0, tokens),
    cost and math.max(0, cost), seconds and math.max(0, seconds)
end

--- What remains: {calls, tokens, cost, seconds}, each the least over this budget and its
-- ancestors, never below 0; nil where nothing in the chain sets a limit.
function Budget:remaining()
  local calls, tokens, cost, seconds = chain_left(self)
  return {calls = calls, tokens = tokens, cost = cost, seconds = seconds}
end

--- Seconds left before the first max_time in the chain, or nil when there is none.
function Budget:time_left()
  return (select(4, chain_left(self)))
end

-- The level of the chain whose limit binds `what` (the least left), or nil.
local function binding_level(self, what)
  local best, value
  local b = self
  while b do
    local v = select(LEFT_INDEX[what], level_left(b))
    if v and (best == nil or v < value) then best, value = b, v end
    b = b.parent
  end
  return best
end

-- The limit (name and value) that binds `what` for this budget, for messages.
function Budget:binding(what, key)
  local best = binding_level(self, what)
  return best and best.limits[key]
end

-- Why a call needing `need` (tokens or USD, per `what`) is refused: the binding limit and
-- where it went (spent, held by calls in flight, kept for the extraction), in one line.
local function refusal(self, what, need, keep)
  local b = binding_level(self, what)
  if what == "cost" then
    return ("max_cost: this call needs $%.4f with room to answer; of the $%g limit $%.4f is spent, "
      .. "$%.4f held by calls in flight and $%.4f kept for the final extraction"):format(
      need, b.limits.max_cost, b.cost, b.held.cost, keep)
  end
  return ("max_tokens: this call needs about %d tokens with room to answer; of the %d tokens %d "
    .. "are used, %d held by calls in flight and %d kept for the final extraction"):format(
    need, b.limits.max_tokens, b.input_tokens + b.output_tokens, b.held.tokens, keep)
end

local function hold(self, ticket, sign)
  local b = self
  while b do
    b.held.calls = b.held.calls + sign * ticket.calls
    b.held.tokens = b.held.tokens + sign * ticket.tokens
    b.held.cost = b.held.cost + sign * ticket.cost
    b = b.parent
  end
end

--- Reserves one model call before it is sent. call: prompt_chars, output (the output cap wanted;
-- nil: the caller's default), sub (true: counts against max_llm_calls), price ({input, output}
-- USD per million tokens, or nil when the model has none), label (for messages), final (the
-- root's extraction: may use what is kept for it), kind ("turn", "sub": its reply is noted for
-- output_reserve when it is settled). Returns a ticket whose max_tokens is
-- the output cap to send (nil when no limit needs one), or nil and the refusal, which starts
-- with the name of the limit (max_llm_calls:, max_tokens:, max_cost:, max_time:).
-- The ticket for call given what the chain has left and what is kept for the extraction, or nil
-- and the refusal.
local function decide(self, call, left_calls, left_tokens, left_cost, left_seconds, keep, keep_cost)
  if left_seconds and left_seconds <= 0 then
    return nil, ("max_time: the run's %g s are up"):format(self:binding("seconds", "max_time"))
  end
  if call.sub and left_calls and left_calls < 1 then
    -- The refusal text DSPy and fleet-rlm users know, so prompts written for them keep working.
    local max = self:binding("calls", "max_llm_calls")
    return nil, ("max_llm_calls: LLM call limit exceeded: %d + 1 > %d. Use Python code for "
      .. "aggregation instead of making more LLM calls."):format(max, max)
  end
  local prompt = M.estimate_tokens(call.prompt_chars or 0)
  if call.final then keep, keep_cost = 0, 0 end
  local cap = call.output
  if left_tokens then
    local room = left_tokens - prompt - keep
    if room < M.MIN_OUTPUT then return nil, refusal(self, "tokens", prompt + M.MIN_OUTPUT, keep) end
    cap = math.min(cap or room, room)
  end
  local cost = 0
  if left_cost then
    local p = call.price
    if not p then
      return nil, ("max_cost: %s has no price, so a cost limit cannot hold it; give one in a "
        .. "prices file (--prices FILE.json, RLM_PRICES) or prices = {[%q] = {input = USD, "
        .. "output = USD}} from Lua (per million tokens)"):format(
        tostring(call.label), tostring(call.label))
    end
    local room = left_cost - keep_cost - prompt * p.input / 1e6
    local out_room = p.output > 0 and math.floor(room * 1e6 / p.output) or math.huge
    if out_room < M.MIN_OUTPUT then
      return nil, refusal(self, "cost", (prompt * p.input + M.MIN_OUTPUT * p.output) / 1e6, keep_cost)
    end
    cap = math.min(cap or out_room, out_room)
    cost = (prompt * p.input + cap * p.output) / 1e6
  end
  return {calls = call.sub and 1 or 0, tokens = left_tokens and prompt + cap or 0, cost = cost,
          max_tokens = (left_tokens or left_cost) and math.floor(cap) or nil, kind = call.kind}
end

function Budget:reserve(call)
  local left_calls, left_tokens, left_cost, left_seconds = chain_left(self)
  local ticket, why = decide(self, call, left_calls, left_tokens, left_cost, left_seconds,
                             self:kept())
  if ticket then hold(self, ticket, 1) end
  return ticket, why
end

--- Reserves a call of a fixed price (a user's tool: `cost` USD, 0 when unpriced) that is no
-- model call; settled with settle(ticket, "tool:NAME", usage, cost). Returns the ticket, or nil
-- and the refusal (max_time:, max_cost:).
function Budget:reserve_cost(cost, label)
  local _, _, left_cost, left_seconds = chain_left(self)
  if left_seconds and left_seconds <= 0 then
    return nil, ("max_time: the run's %g s are up"):format(self:binding("seconds", "max_time"))
  end
  if left_cost and cost > 0 then
    local _, keep_cost = self:kept()
    if left_cost - keep_cost < cost then
      return nil, ("max_cost: %s costs $%.4f a call and $%.4f of $%g remain (less $%.4f kept for "
        .. "the final answer)"):format(label, cost, left_cost, self:binding("cost", "max_cost"), keep_cost)
    end
  end
  local ticket = {calls = 0, tokens = 0, cost = left_cost and cost or 0}
  hold(self, ticket, 1)
  return ticket
end

--- Reserves a batch's calls in their order, exactly as one reserve after another would (each
-- grant is held before the next call is decided: the remainders are the same floating-point
-- sums), with what is kept for the extraction read once. Returns two lists: tickets[i], or
-- whys[i] for a call refused.
function Budget:reserve_all(calls)
  local tickets, whys = {}, {}
  local left_calls, left_tokens, left_cost, left_seconds = chain_left(self)
  -- Without a token or cost limit in the chain, a call's ticket holds no tokens or cost: when
  -- the calls left cover every sub-call, each is granted as reserve would grant it, and the
  -- chain is walked once for all (integer sums, the same in any order).
  if not left_tokens and not left_cost and (left_seconds == nil or left_seconds > 0) then
    local subs = 0
    for _, call in ipairs(calls) do if call.sub then subs = subs + 1 end end
    if left_calls == nil or subs <= left_calls then
      local sub, other = {calls = 1, tokens = 0, cost = 0}, {calls = 0, tokens = 0, cost = 0}
      for i, call in ipairs(calls) do tickets[i] = call.sub and sub or other end
      hold(self, {calls = subs, tokens = 0, cost = 0}, 1)
      return tickets, whys
    end
  end
  local keep, keep_cost = self:kept()
  for i, call in ipairs(calls) do
    local left_calls, left_tokens, left_cost, left_seconds = chain_left(self)
    local t, why = decide(self, call, left_calls, left_tokens, left_cost, left_seconds, keep,
                          keep_cost)
    if t then hold(self, t, 1) end
    tickets[i], whys[i] = t, why
  end
  return tickets, whys
end

--- Settles a reserved call: the reservation is released and what the call used (usage, cost;
-- nil when it brought no answer) is added here and to every ancestor.
function Budget:settle(ticket, model, usage, cost)
  hold(self, ticket, -1)
  note_reply(self, ticket.kind, model, usage)
  local i, o = usage and usage.input_tokens or 0, usage and usage.output_tokens or 0
  local r, w = usage and usage.cache_read_tokens or 0, usage and usage.cache_write_tokens or 0
  cost = cost or 0
  local b = self
  while b do
    b.calls = b.calls + 1
    b.llm_calls = b.llm_calls + ticket.calls
    if not usage then b.failed = b.failed + 1 end
    b.input_tokens = b.input_tokens + i
    b.output_tokens = b.output_tokens + o
    b.cache_read_tokens, b.cache_write_tokens = b.cache_read_tokens + r, b.cache_write_tokens + w
    b.cost = b.cost + cost
    local m = model_sum(b, model)
    m.calls, m.input_tokens, m.output_tokens = m.calls + 1, m.input_tokens + i, m.output_tokens + o
    m.cache_read_tokens, m.cache_write_tokens = m.cache_read_tokens + r, m.cache_write_tokens + w
    m.cost = m.cost + cost
    b = b.parent
  end
end

--- Settles a batch's reserved calls at once, as settle after settle would, to the last bit of
-- every float sum: tickets[i] with usages[i] and costs[i] (usages[i] nil: the call brought no
-- answer), all on one model. One walk of the chain, one by_model lookup a level.
function Budget:settle_all(tickets, model, usages, costs)
  local n = #tickets
  if n == 0 then return end
  local b = self
  while b do
    local held = b.held
    local m = model_sum(b, model)
    local h_calls, h_tokens, h_cost = held.calls, held.tokens, held.cost
    local llm_calls, failed, cost, m_cost = b.llm_calls, b.failed, b.cost, m.cost
    local i, o, r, w = 0, 0, 0, 0
    for k = 1, n do   -- in ticket order: a float sum depends on the order of its terms
      local ticket, usage, c = tickets[k], usages[k], costs[k] or 0
      h_calls, h_tokens, h_cost = h_calls - ticket.calls, h_tokens - ticket.tokens,
        h_cost - ticket.cost
      llm_calls = llm_calls + ticket.calls
      if usage then
        if b == self then note_reply(self, ticket.kind, model, usage) end
        i, o = i + (usage.input_tokens or 0), o + (usage.output_tokens or 0)
        r, w = r + (usage.cache_read_tokens or 0), w + (usage.cache_write_tokens or 0)
      else
        failed = failed + 1
      end
      cost, m_cost = cost + c, m_cost + c
    end
    held.calls, held.tokens, held.cost = h_calls, h_tokens, h_cost
    b.calls, b.llm_calls, b.failed, b.cost = b.calls + n, llm_calls, failed, cost
    b.input_tokens, b.output_tokens = b.input_tokens + i, b.output_tokens + o
    b.cache_read_tokens, b.cache_write_tokens = b.cache_read_tokens + r, b.cache_write_tokens + w
    m.calls, m.input_tokens, m.output_tokens, m.cost = m.calls + n, m.input_tokens + i,
      m.output_tokens + o, m_cost
    m.cache_read_tokens, m.cache_write_tokens = m.cache_read_tokens + r, m.cache_write_tokens + w
    b = b.parent
  end
end

--- Adds usage spent outside this process (a resumed run's recorded turns) here and to every
-- ancestor. usage: {input_tokens, output_tokens, cost, calls, llm_calls} (nil: nothing).
function Budget:add_spent(usage, model)
  if type(usage) ~= "table" then return end
  local i, o = tonumber(usage.input_tokens) or 0, tonumber(usage.output_tokens) or 0
  local b = self
  while b do
    b.calls = b.calls + (tonumber(usage.calls) or 1)
    b.llm_calls = b.llm_calls + (tonumber(usage.llm_calls) or 0)
    b.input_tokens, b.output_tokens = b.input_tokens + i, b.output_tokens + o
    b.cost = b.cost + (tonumber(usage.cost) or 0)
    local m = model_sum(b, model)
    m.input_tokens, m.output_tokens = m.input_tokens + i, m.output_tokens + o
    m.cost = m.cost + (tonumber(usage.cost) or 0)
    b = b.parent
  end
end

local GRANT_KEYS = {calls = "max_llm_calls", tokens = "max_tokens", cost = "max_cost",
                    seconds = "max_time"}

--- A child's budget: within this one, and within grant if given: {calls =, tokens =, cost =,
-- seconds =} (absent keys: no limit of the child's own), or a fraction in (0, 1] of what
-- remains of each limit now.
function Budget:child(grant)
  local limits = {}
  if type(grant) == "number" then
    if not (grant > 0 and grant <= 1) then error("child_budget: a fraction must be in (0, 1]", 0) end
    for k, v in pairs(self:remaining()) do
      local x = v * grant
      limits[GRANT_KEYS[k]] = (k == "calls" or k == "tokens") and math.floor(x) or x
    end
  elseif type(grant) == "table" then
    for k, v in pairs(grant) do
      if not GRANT_KEYS[k] or type(v) ~= "number" or v < 0 then
        error(("child_budget: %s is not a grant (give calls, tokens, cost, seconds: numbers >= 0)")
          :format(tostring(k)), 0)
      end
      limits[GRANT_KEYS[k]] = v
    end
  elseif grant ~= nil then
    error("child_budget must be a table {calls =, tokens =, cost =, seconds =} or a fraction", 0)
  end
  return M.new(limits, self)
end

function Budget:elapsed()
  return sys.now() - self.started
end

--- What the code sees through budget(): what remains, as plain values (nil: unlimited), and
-- what this run's tree has used.
function Budget:view(depth_left)
  local r = self:remaining()
  return {calls = r.calls, tokens = r.tokens, cost = r.cost, seconds = r.seconds,
          depth = depth_left, used = {calls = self.calls, llm_calls = self.llm_calls,
          tokens = self.input_tokens + self.output_tokens, cost = self.cost}}
end

--- The usage table a result carries.
function Budget:usage()
  return {
    llm_calls = self.llm_calls, calls = self.calls, failed_calls = self.failed,
    input_tokens = self.input_tokens, output_tokens = self.output_tokens,
    cache_read_tokens = self.cache_read_tokens, cache_write_tokens = self.cache_write_tokens,
    total_tokens = self.input_tokens + self.output_tokens,
    cost = self.cost, by_model = self.by_model, elapsed = self:elapsed(),
  }
end

return M
