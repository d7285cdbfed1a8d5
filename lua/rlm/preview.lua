--- What a run would cost, worked out before anything is sent: `rlm ask --dry-run`,
-- rlm.run{dry_run = true}, the estimate in MCP tool results and `rlm bench --dry-run` all use
-- this one module. Figures come from the price table (rlm.prices, a run's prices), the models'
-- context windows and output limits, and the prompts as they would be sent.
local budget = require "rlm.budget"
local llm = require "rlm.llm"

local M = {}

M.CHARS_PER_TOKEN = 4          -- what providers average for English text and code
M.DIRECT_WINDOW = 128000       -- tokens the direct baseline assumes when the model's is unknown
local DIRECT_WINDOW = M.DIRECT_WINDOW

--- Typical tokens and cost of one query over `length` tokens of context, by method (opts:
-- model, sub_model, prices, and judged, judge_model for a judged bench task): the RLM reads the
-- context once through sub-calls plus about four root turns; the direct baseline sends the
-- context cut to its window; a judged task adds a short judge call. cost is nil without a price.
function M.estimate(opts, length)
  local root = llm.price(llm.label(opts.model), opts.prices)
  local sub = llm.price(llm.label(opts.sub_model), opts.prices)
  local judge = opts.judged and llm.price(llm.label(opts.judge_model), opts.prices)
  local judge_cost = opts.judged and (judge and (1500 * judge.input + 100 * judge.output) / 1e6) or 0
  local rlm_in_sub, rlm_in_root, rlm_out = length, 4 * 3000, 4 * 400
  local rlm_cost = root and sub and judge_cost and (rlm_in_root * root.input + rlm_out * root.output
                                     + rlm_in_sub * sub.input + length // 50 * sub.output) / 1e6 + judge_cost
  local window = llm.context_window(llm.label(opts.model)) or DIRECT_WINDOW
  local direct_in = math.min(length, window - 1000)
  local direct_cost = root and judge_cost and (direct_in * root.input + 200 * root.output) / 1e6 + judge_cost
  return {rlm = {tokens = rlm_in_sub + rlm_in_root + rlm_out, cost = rlm_cost},
          direct = {tokens = direct_in + 200, cost = direct_cost}}
end

-- What the run knows of a model: its price (USD per million tokens), context window and the
-- output a call may have.
local function model_facts(run, label, role)
  local p = run:price(label)
  return {model = label, role = role, input = p and p.input, output = p and p.output,
          cached_input = p and (p.cached_input or p.input),
          cache_write = p and p.cache_write,
          context_window = llm.context_window(label, run.context_windows),
          -- a root turn may write its model's limit; a sub-call is held to max_output_tokens
          output_limit = (run:output_cap(label, 0, role ~= "root"))}
end

-- The most one call on m can cost (its window of input, written to a cache when that costs
-- more, and its output limit), or nil and why it has no bound.
local function call_bound(m)
  if not m.input then return nil, m.model .. " has no price" end
  if not m.context_window then return nil, m.model .. " has no known context window" end
  local input = math.max(m.input, m.cache_write or m.input)
  return (m.context_window * input + m.output_limit * m.output) / 1e6
end

-- The most the run may spend: max_cost; else its calls at their bounds (every root turn with a
-- compaction, the extraction, max_llm_calls sub-calls on the dearest sub-model), within
-- max_tokens at the dearest rate. Returns {cost, by} or {why} when nothing bounds it.
local function worst_case(run, models)
  local limits = run.budget.limits
  if limits.max_cost then return {cost = limits.max_cost, by = "max_cost"} end
  local root_calls = 2 * run.max_iterations + 1
  local root, why = call_bound(models[1])
  local sub = 0
  for i = 2, #models do
    local c, w = call_bound(models[i])
    if not c then root, why = nil, w break end
    sub = math.max(sub, c)
  end
  local by_calls = root and root * root_calls + sub * (limits.max_llm_calls or math.huge)
  local by_tokens
  if limits.max_tokens then
    local rate = 0
    for _, m in ipairs(models) do
      if not m.input then rate = nil break end
      rate = math.max(rate, m.cache_write or m.input, m.output)
    end
    by_tokens = rate and limits.max_tokens * rate / 1e6
  end
  if by_tokens and (not by_calls or by_tokens < by_calls) then
    return {cost = by_tokens, by = "max_tokens"}
  end
  if by_calls and by_calls < math.huge then
    return {cost = by_calls, by = ("%d root calls (turns, compactions, the extraction) and %d "
      .. "sub-calls at their context windows and output limits"):format(root_calls,
      limits.max_llm_calls)}
  end
  return {why = why or "max_llm_calls is unlimited"}
end

--- The preview of a run (a Run from rlm.run.loop whose first request is rendered): the first
-- call (model, prompt tokens, its cost with no reply and with the longest reply it may have),
-- a typical run's cost (M.estimate), the worst case, and each model the run may use.
function M.run(run, context_chars)
  local root_label = llm.label(run.model)
  local models = {model_facts(run, root_label, "root")}
  local subs = {}
  for label in pairs(run.sub_models) do subs[#subs + 1] = label end
  table.sort(subs)
  for _, label in ipairs(subs) do models[#models + 1] = model_facts(run, label, "sub") end
  local root = models[1]
  local tokens = math.ceil((#run.system + #run.first_message) / M.CHARS_PER_TOKEN)
  local writes = run.prompt_cache and select(2, llm.cache_fields(run.model, run.id, run.prompt_cache))
  local input = root.input and (writes and budget.write_rate(root) or root.input)
  local first = {model = root_label, prompt_tokens = tokens, output_limit = root.output_limit,
                 cost = input and tokens * input / 1e6,
                 cost_longest = input and (tokens * input + root.output_limit * root.output) / 1e6}
  local typical = M.estimate({model = run.model, sub_model = run.sub_model, prices = run.prices},
                             context_chars // M.CHARS_PER_TOKEN).rlm
  return {first_call = first, typical = typical, worst_case = worst_case(run, models),
          models = models}
end

local function usd(v)
  return v and ("$%.4f"):format(v) or "(no price)"
end

local function rate(v)
  return v and ("%g"):format(v) or "-"
end

--- The preview as lines of text.
function M.lines(p)
  local f, w = p.first_call, p.worst_case
  local out = {
    ("first call: %s, about %d prompt tokens: %s, %s with the longest reply it may have (%d tokens)")
      :format(f.model, f.prompt_tokens, usd(f.cost), usd(f.cost_longest), f.output_limit),
    ("typical run: about %d tokens, %s (the context read once through sub-calls, four turns)")
      :format(p.typical.tokens, usd(p.typical.cost)),
    w.cost and ("worst case: %s (%s)"):format(usd(w.cost), w.by)
      or ("worst case: no bound (%s)"):format(w.why),
    "prices (USD per million tokens: input, cached input, cache write, output):",
  }
  for _, m in ipairs(p.models) do
    out[#out + 1] = ("  %-4s %s: %s, %s, %s, %s; window %s, output limit %d"):format(m.role,
      m.model, rate(m.input), rate(m.cached_input), rate(m.cache_write), rate(m.output),
      m.context_window or "unknown", m.output_limit)
  end
  return out
end

return M
