--- How many calls a provider takes at once, learnt from its 429s: the width of llm.batch.
--
-- A batch starts as wide as its cap. A 429 narrows the provider's width to the calls it still
-- holds (those it accepted); every `width` answers in a row widen it by one, so a width that
-- was narrowed by a passing limit comes back. One pacer per model label, shared by every batch
-- of the process: the next batch starts at what the last one learnt.
local async = require "rlm.async"
local loop = require "rlm.core.loop"

local M = {}

local Pacer = {}
Pacer.__index = Pacer

local pacers = {}   -- label -> pacer

--- The pacer of a model label.
function M.of(label)
  local p = pacers[label]
  if not p then
    p = setmetatable({width = math.huge, in_flight = 0, answered = 0,
                      waiting = {first = 1, last = 0}}, Pacer)
    pacers[label] = p
  end
  return p
end

-- Wakes as many waiters as the width has room for.
function Pacer:wake()
  local q = self.waiting
  while q.first <= q.last and self.in_flight < self.width do
    local id = q[q.first]
    q[q.first], q.first = nil, q.first + 1
    self.in_flight = self.in_flight + 1   -- taken for the waiter, which then goes at once
    loop.ready(id)
  end
end

--- Waits until the provider's width has room for one more call, and counts it in flight.
function Pacer:acquire()
  if self.in_flight < self.width and self.waiting.first > self.waiting.last then
    self.in_flight = self.in_flight + 1
    return
  end
  local q, id = self.waiting, loop.new_id()
  q.last = q.last + 1
  q[q.last] = id
  async.await(id)
end

--- Counts a call out of flight: throttled when the provider answered it 429.
function Pacer:release(throttled)
  self.in_flight = self.in_flight - 1
  if throttled then
    self.width, self.answered = math.max(1, math.min(self.width, self.in_flight)), 0
  elseif self.width < math.huge then
    self.answered = self.answered + 1
    if self.answered >= self.width then
      self.width, self.answered = self.width + 1, 0
    end
  end
  self:wake()
end

return M
