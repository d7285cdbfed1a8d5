--- What the parts of a run share: the Run object (one loop in the tree, root or child), its
-- defaults, and the model call every part makes through the budget. rlm.run is the package:
-- run/loop.lua (the loop and a run's set-up), run/subcalls.lua (sub-calls from code, and their
-- cache), run/history.lua (history and extraction), run/resume.lua (resume and replay).
local async = require "rlm.async"
local budget_mod = require "rlm.budget"
local json = require "rlm.json"
local llm = require "rlm.llm"

local M = {}

M.EMPTY = {}   -- never written

M.defaults = {
  outputs = {"answer"},
  backend = nil,              -- the interpreter's default (local)
  max_iterations = 20,
  max_llm_calls = 50,
  max_depth = 2,
  llm_call_timeout = 60,
  max_output_chars = 10000,
  sub_capacity = 500000,      -- what the prompt tells the model a sub-call can read
  inline_context_chars = 65536, -- larger contexts are uploaded as a file, not sent inline
  timeout = 900,              -- sandbox lifetime
  batch_concurrency = 64,     -- a run's sub-calls in flight at once, from all its code's threads
  max_parallel_children = 16, -- a run's child runs (rlm_query, rlm_query_batched) at once
  max_output_tokens = 8192,   -- a sub-call's output cap and most reserve (a turn's: its model's limit)
  extract_seconds = 5,        -- under max_time, kept back from the turns for the final extraction
  history = "compact",        -- "compact" | "full" | function(messages, info) -> messages
  compact_at = 0.8,           -- the share of the context window at which history is compacted
  final_beside_code = "wait", -- a FINAL(text) beside code waits for the code's output; "accept"
  prompt_cache = "auto",      -- ask the provider to cache the prefix turns share: "auto" only
                              -- at its own URL, true at any URL, false never
}

function M.option(opts, name)
  local v = opts[name]
  if v == nil then v = M.defaults[name] end
  return v
end

-- The first n characters of text, never cutting one in two, chosen on a prefix (the whole text
-- is never scanned for it); bytes that are not UTF-8 are shown as U+FFFD, so the prompt stays
-- valid JSON for strict parsers.
local function head_chars(text, n)
  local head = text:sub(1, 4 * n + 4)   -- n characters take at most 4n bytes
  if #head < #text then
    -- a character cut at the end of the prefix is dropped, not shown as invalid
    head = head:gsub("[\192-\255][\128-\191]*$", "")
  end
  if utf8.len(head) then
    local stop = utf8.offset(head, n + 1)
    return stop and head:sub(1, stop - 1) or head
  end
  return (text:sub(1, n):gsub("[\128-\255]", "\xEF\xBF\xBD"))
end

-- Length in characters (bytes when the text is not UTF-8), counted in C at memory speed: the
-- first model call waits for it.
local function char_count(text)
  return json.utf8_count(text) or #text
end

--- The context's kind, its length in characters and a preview of it.
function M.describe(value)
  if type(value) == "string" then
    return "a str", char_count(value), head_chars(value, 500)
  elseif value == nil then
    return "None", 0, "(no context)"
  end
  local text = json.encode(value)
  local kind = (json.is_array(value) or (#value > 0)) and "a list (from JSON)" or "a dict (from JSON)"
  return kind, char_count(text), head_chars(text, 500)
end

--- A run: the state of one loop in the tree (root or child).
local Run = {}
Run.__index = Run

-- describe(self.context), worked out once for the run: a 1 GB context is not counted twice.
function Run:described()
  self.description = self.description or table.pack(M.describe(self.context))
  return table.unpack(self.description, 1, 3)
end

function Run:event(e)
  e.depth, e.run, e.parent = self.depth, self.id, self.parent
  if self.on_event then pcall(self.on_event, e) end
end

function Run:record(rec)
  rec.run, rec.depth, rec.parent = self.id, self.depth, self.parent
  return self.tracer:write(rec)
end

-- The deadline of one model call: llm_call_timeout, cut to the time the budget has left (less
-- what is kept for the extraction, unless this is the extraction).
function Run:call_timeout(final)
  local left = self:time_left(final)
  return left and math.min(self.llm_call_timeout, math.max(0.1, left)) or self.llm_call_timeout
end

-- Seconds left for the turns (final: for the extraction too), or nil without max_time.
function Run:time_left(final)
  local left = self.budget:time_left()
  if not left or final then return left end
  return math.max(0, left - self.extract_seconds)
end

function Run:price(label)
  return budget_mod.price(label, self.prices)
end

-- The cost in USD of usage on label, from the run's prices (0 when unpriced). price: the label's
-- price when the caller has it already (false: none), as a batch looks it up once.
function Run:cost_of(label, usage, price)
  local p = price
  if p == nil then p = self:price(label) end
  return (budget_mod.cost(p or nil, usage))
end

-- The fewest output tokens reserved for a turn (code) and a sub-call, once replies are seen;
-- and the share of the output the budget still affords that a call may hold whatever the
-- replies so far, so that a generous budget cuts no reply short.
local TURN_FLOOR, SUB_FLOOR, ROOM_SHARE = 1024, 256, 0.25

-- The most output one of this run's turns on label may be given (output_cap, no prompt counted).
function Run:output_limit(label)
  return (self:output_cap(label, 0, self.depth > 0))
end

-- The output tokens reserved for a call of kind ("turn", "sub") on label: twice the longest
-- such reply of the run's tree so far, or the output limit before any (budget:output_reserve);
-- at least the floor of its kind and ROOM_SHARE of what the budget affords.
function Run:output_reserve(kind, label, ceiling)
  local floor = kind == "turn" and TURN_FLOOR or SUB_FLOOR
  local left = self.budget:remaining()
  local keep, keep_cost = self.budget:kept()
  local afford = left.tokens and left.tokens - keep or math.huge
  local p = self:price(label)
  if left.cost and p and p.output > 0 then
    afford = math.min(afford, (left.cost - keep_cost) * 1e6 / p.output)
  end
  if afford < math.huge then floor = math.max(floor, math.floor(afford * ROOM_SHARE)) end
  return self.budget:output_reserve(kind, label, ceiling or self:output_limit(label), floor)
end

-- The budget's usage with what prompt caching saved (prompt_cache_saved, USD, at the run's
-- prices), summed over the models in the order of their names.
function Run:usage()
  local u = self.budget:usage()
  local labels = {}
  for label in pairs(u.by_model) do labels[#labels + 1] = label end
  table.sort(labels)
  local saved = 0
  for _, label in ipairs(labels) do
    saved = saved + budget_mod.cache_saved(self:price(label), u.by_model[label])
  end
  u.prompt_cache_saved = saved
  return u
end

-- Settles a reserved call with what it used.
function Run:settle(ticket, label, res)
  if not res then return self.budget:settle(ticket, label) end
  self.budget:settle(ticket, label, res.usage or {}, self:cost_of(label, res.usage))
end

-- What the budget spent since `before` (a usage table).
function M.spent_since(budget, before)
  local now = budget:usage()
  return {calls = now.calls - before.calls, llm_calls = now.llm_calls - before.llm_calls,
          input_tokens = now.input_tokens - before.input_tokens,
          output_tokens = now.output_tokens - before.output_tokens,
          cache_read_tokens = now.cache_read_tokens - before.cache_read_tokens,
          cache_write_tokens = now.cache_write_tokens - before.cache_write_tokens,
          cost = now.cost - before.cost}
end

-- The run's reasoning_effort for a call to label, when the model can take it.
function Run:effort(label)
  return self.reasoning_effort and llm.reasons(label) and self.reasoning_effort or nil
end

-- The output cap of one call of the run to label with a prompt of prompt_chars, and whether to
-- send it when no budget asks for one. A root turn (sub false) may write as much as its model allows
-- (llm.output_limit); a sub-call's answer is held to max_output_tokens; a reasoning model's cap
-- keeps room for its reasoning above that (llm.output_cap). A known window leaves room for the
-- prompt. A model whose limit is unknown is sent no cap (a server whose window is unknown may
-- refuse one it cannot fit), but reserved max_output_tokens.
function Run:output_cap(label, prompt_chars, sub)
  local known = llm.output_limit(label, self.output_limits)
  local cap = llm.output_cap(label, (sub or not known) and self.max_output_tokens or nil,
                             self:effort(label), self.output_limits)
  local window = llm.context_window(label, self.context_windows)
  if window then
    cap = math.max(budget_mod.MIN_OUTPUT,
                   math.min(cap, window - budget_mod.estimate_tokens(prompt_chars)))
  end
  return cap, known ~= nil
end

function M.prompt_chars(req)
  local n = #(req.system or "")
  for _, m in ipairs(req.messages) do n = n + #m.content end
  return n
end

-- One model call for the loop (a turn, a compaction or the extraction), through the budget.
-- how: turn (a turn: its prefix repeats, so caching is asked for), final (the extraction: may
-- use the time and tokens kept for it).
-- Returns the llm result, or nil, err, "budget" when the budget refuses it.
function Run:model_call(model, req, how)
  how = how or {}
  local label = llm.label(model)
  if self:time_left(how.final) == 0 then
    return nil, ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time")),
           "budget"
  end
  -- A turn's request is the last one's and two messages more: the provider may cache it. Where
  -- writing the cache costs more than input, the reservation prices the input at that rate.
  local price, writes_billed = self:price(label), false
  if how.turn and self.prompt_cache then
    req.extra, writes_billed = llm.cache_fields(model, self.id, self.prompt_cache)
  end
  if price and writes_billed then
    price = {input = math.max(price.input, budget_mod.write_rate(price)), output = price.output}
  end
  local chars = M.prompt_chars(req)
  -- A child run's turns are capped as sub-calls are: children run side by side under one budget.
  local cap, send = self:output_cap(label, chars, self.depth > 0)
  -- The extraction is the last call: it may have all that is left, up to its cap; a turn
  -- reserves what this run's replies suggest (output_reserve), within the cap.
  local output = how.final and cap or self:output_reserve("turn", label, cap)
  local ticket, why = self.budget:reserve{prompt_chars = chars, label = label,
    output = output, sub = self.depth > 0, price = price, final = how.final, kind = "turn"}
  if not ticket then return nil, why, "budget" end
  req.model, req.timeout = model, self:call_timeout(how.final)
  req.max_tokens = ticket.max_tokens or send and cap or nil
  req.reasoning_effort = self:effort(label)
  local ok, res, err = pcall(llm.complete, req)
  self:settle(ticket, label, ok and res or nil)
  async.check_interrupt()
  if not ok then return nil, tostring(res) end
  if not res then return nil, tostring(err) end
  return res
end

function Run:render(name, vars)
  return require("rlm.prompts").render(self.prompts[name], vars)
end

M.Run = Run

return M
