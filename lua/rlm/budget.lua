--- One budget for a whole tree of runs: the root and every child `rlm_query` share it, so
-- nothing a sandbox does can raise its own limits. Limits that are nil are unlimited.
local sys = require "rlm.sys"

local Budget = {}
Budget.__index = Budget

local M = {}

--- limits: max_llm_calls (sub-calls from code), max_tokens (all calls, in + out),
-- max_cost (USD, all calls), max_time (seconds of wall time), max_depth.
function M.new(limits)
  return setmetatable({
    limits = limits,
    started = sys.now(),
    llm_calls = 0,          -- sub-calls made from sandbox code (llm_query and friends)
    calls = 0,              -- every model call, root turns included
    input_tokens = 0,
    output_tokens = 0,
    cost = 0,
    by_model = {},
    stopped = nil,          -- why the tree must stop, once a hard limit is crossed
  }, Budget)
end

--- Reserves n sub-calls before making them; the refusal text is the one DSPy and fleet-rlm
-- users know, so prompts written for them keep working.
function Budget:reserve_calls(n)
  local max = self.limits.max_llm_calls
  if max and self.llm_calls + n > max then
    return nil, ("LLM call limit exceeded: %d + %d > %d. Use Python code for aggregation "
      .. "instead of making more LLM calls."):format(self.llm_calls, n, max)
  end
  self.llm_calls = self.llm_calls + n
  return true
end

--- Records one finished call's usage and cost.
function Budget:add(model, usage, cost)
  local i, o = usage and usage.input_tokens or 0, usage and usage.output_tokens or 0
  self.calls = self.calls + 1
  self.input_tokens = self.input_tokens + i
  self.output_tokens = self.output_tokens + o
  self.cost = self.cost + (cost or 0)
  local m = self.by_model[model] or {calls = 0, input_tokens = 0, output_tokens = 0, cost = 0}
  m.calls, m.input_tokens, m.output_tokens = m.calls + 1, m.input_tokens + i, m.output_tokens + o
  m.cost = m.cost + (cost or 0)
  self.by_model[model] = m
end

function Budget:elapsed()
  return sys.now() - self.started
end

--- Seconds left before max_time, or nil when there is no time limit.
function Budget:time_left()
  local max = self.limits.max_time
  return max and math.max(0, max - self:elapsed())
end

--- The reason the tree must stop now (tokens, cost or time over their limit), or nil.
function Budget:exceeded()
  if self.stopped then return self.stopped end
  local l = self.limits
  local reason
  if l.max_tokens and self.input_tokens + self.output_tokens >= l.max_tokens then
    reason = ("token budget exhausted: %d of %d tokens used"):format(
      self.input_tokens + self.output_tokens, l.max_tokens)
  elseif l.max_cost and self.cost >= l.max_cost then
    reason = ("cost budget exhausted: $%.4f of $%.4f spent"):format(self.cost, l.max_cost)
  elseif l.max_time and self:elapsed() >= l.max_time then
    reason = ("time budget exhausted: %.1f s of %g s"):format(self:elapsed(), l.max_time)
  end
  self.stopped = reason
  return reason
end

--- The usage table a result carries.
function Budget:usage()
  return {
    llm_calls = self.llm_calls, calls = self.calls,
    input_tokens = self.input_tokens, output_tokens = self.output_tokens,
    total_tokens = self.input_tokens + self.output_tokens,
    cost = self.cost, by_model = self.by_model, elapsed = self:elapsed(),
  }
end

return M
