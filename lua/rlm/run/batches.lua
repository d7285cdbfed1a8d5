--- Batches whose answers the code takes as they arrive (llm_query_batched_iter in the sandbox):
-- one call starts the batch in a task of its own and returns its number; each next call waits
-- until an answer the code has not had yet is in, and returns all such answers, [index from 0,
-- text] each, until every prompt has had one.
local async = require "rlm.async"
local common = require "rlm.run.common"
local json = require "rlm.json"
local loop = require "rlm.core.loop"

local Run = common.Run

-- Wakes the code's next call, when it waits.
local function wake(batch)
  if batch.waiter then loop.ready(batch.waiter) end
end

function Run:start_batch(prompts, model)
  local label, err = self:allowed_model(model)
  if not label then return nil, err end
  self.batches = self.batches or {count = 0}
  local id = self.batches.count + 1
  local batch = {arrived = {}, told = {}, taken = 0, total = #prompts}
  self.batches.count, self.batches[id] = id, batch
  local function arrived(i, text)
    if batch.told[i] then return end
    batch.told[i] = true
    batch.arrived[#batch.arrived + 1] = json.array{i - 1, text}
    wake(batch)
  end
  batch.task = async.spawn(function()
    local ok, texts, why = pcall(self.llm_query, self, prompts, model, "llm_query_batched", arrived)
    if ok and texts then
      for i, text in ipairs(texts) do arrived(i, text) end   -- those no call was made for
    else
      batch.err = ok and why or tostring(texts)
    end
    batch.done = true
    wake(batch)
  end)
  return {id}
end

function Run:next_answers(id)
  local batch = self.batches and self.batches[id]
  if not batch then return nil, ("no batch %s is running"):format(tostring(id)) end
  while batch.taken == #batch.arrived and not batch.done do
    batch.waiter = loop.new_id()
    async.await(batch.waiter)
    batch.waiter = nil
  end
  if batch.taken == #batch.arrived and batch.err then return nil, batch.err end
  local out = {}
  for n = batch.taken + 1, #batch.arrived do out[#out + 1] = batch.arrived[n] end
  batch.taken = #batch.arrived
  if batch.done and batch.taken == batch.total then self.batches[id] = nil end
  return out
end

return {}
