--- A run's history (kept whole, compacted or given to the run's function as it nears the
-- context window) and the final extraction of an answer from the work so far.
local budget_mod = require "rlm.budget"
local common = require "rlm.run.common"
local json = require "rlm.json"
local llm = require "rlm.llm"
local parse = require "rlm.parse"

local Run = common.Run

-- The work so far, newest turns first kept, within chars.
function Run:trajectory_text(chars)
  local parts, total = {}, 0
  for i = #self.steps, 1, -1 do
    local s = self.steps[i]
    local piece = ("--- turn %d ---\n%s\n%s"):format(s.turn, s.reply, s.output or "")
    total = total + #piece
    if total > chars then break end
    table.insert(parts, 1, piece)
  end
  return table.concat(parts, "\n")
end

local EXTRACT_CHARS = 60000
-- The output kept for the extraction's reply (a JSON object of the outputs); the extraction
-- itself may use whatever is left.
local EXTRACT_OUTPUT = 256
-- Characters of reason the kept prompt allows for.
local REASON_CHARS = 200

-- The extraction's prompt, its trajectory within chars (nil: as much as fits the window).
function Run:extract_prompt(reason, chars)
  -- Within half the context window too, so the extraction itself always fits.
  local most = self.context_window and math.min(EXTRACT_CHARS, self.context_window * 3 // 2)
    or EXTRACT_CHARS
  return self:render("extract", {task = self.task, reason = reason,
                                 trajectory = self:trajectory_text(math.min(most, chars or most)),
                                 outputs = table.concat(self.outputs, ", ")})
end

-- Keeps back from every other call what the final extraction would need if it were sent now
-- (its prompt at the input rate, a short reply at the output rate): a run stopped by a limit
-- still ends with an answer.
function Run:keep_for_extraction()
  local prompt = budget_mod.estimate_tokens(#self.system + #self:extract_prompt("") + REASON_CHARS)
  local p = self:price(llm.label(self.model))
  self.budget.keep = {tokens = prompt + EXTRACT_OUTPUT,
                      cost = p and (prompt * p.input + EXTRACT_OUTPUT * p.output) / 1e6 or 0}
end

-- The characters of trajectory the extraction can afford with what is left: the turn since
-- the last keep_for_extraction may have added more than was kept for.
function Run:extract_chars(reason)
  local left = self.budget:remaining()
  local room = math.huge   -- prompt tokens
  if left.tokens then room = left.tokens - EXTRACT_OUTPUT end
  local p = self:price(llm.label(self.model))
  if left.cost and p and p.input > 0 then
    room = math.min(room, (left.cost - EXTRACT_OUTPUT * p.output / 1e6) * 1e6 / p.input)
  end
  if room == math.huge then return nil end
  local fixed = #self.system + #self:extract_prompt(reason, 0)
  return math.max(0, (math.floor(room) - 8) * 3 - fixed)
end

function Run:extract(reason)
  local prompt = self:extract_prompt(reason, self:extract_chars(reason))
  local res, err = self:model_call(self.model, {system = self.system,
                                                messages = {{role = "user", content = prompt}}},
                                   {final = true})
  if not res then return nil, err end
  self:record{type = "extract", reply = res.text}
  local obj = parse.json_object(res.text, json)
  if not obj then return nil, "the extraction reply was not a JSON object" end
  return obj
end

-- ---------- history ----------

-- The size of a request in tokens, estimated high.
function Run:request_tokens(messages)
  return budget_mod.estimate_tokens(common.prompt_chars{system = self.system, messages = messages})
end

-- Older turns summarised into the first message by the model (the sandbox keeps its state);
-- the last reply and its output stay as they are. Without an answer from the model, the older
-- turns are dropped with a note saying so.
function Run:compact(messages, before)
  local parts = {self.summary and ("Earlier summary:\n" .. self.summary) or nil}
  for i = 2, #messages - 2 do
    parts[#parts + 1] = ("[%s]\n%s"):format(messages[i].role == "assistant" and "you" or "REPL",
                                            messages[i].content)
  end
  local text = table.concat(parts, "\n\n")
  -- The summary request must fit the window too: the middle of a long history goes first.
  local room = math.floor(self.context_window * self.compact_at * 0.5) * 3
  if #text > room then
    text = text:sub(1, room // 2) .. "\n[...]\n" .. text:sub(-(room // 2))
  end
  local res, err = self:model_call(self.model, {system = self.system, messages = {{role = "user",
    content = self:render("compact", {task = self.task, history = text})}}})
  local summary = res and res.text or ("(the earlier turns were dropped unsummarised: %s)"):format(err)
  local out = self:summarised(messages, summary)
  self:record{type = "compaction", turn = self.turn, dropped = #messages - 3,
              before_tokens = before, after_tokens = self:request_tokens(out), summary = summary}
  return out
end

-- The history with everything before the last reply replaced by summary.
function Run:summarised(messages, summary)
  self.summary = summary
  return {{role = "user", content = self.first_message .. "\n\n"
            .. self:render("summary", {summary = summary, turns = self.turn - 1})},
          messages[#messages - 1], messages[#messages]}
end

-- The history as it may be sent: kept whole while it fits compact_at of the model's context
-- window, then compacted (history = "compact"), left alone ("full"), or given to the run's
-- history function(messages, {window, limit, tokens}) -> messages.
function Run:fit_history(messages)
  local window = self.context_window
  if self.history == "full" or not window then return messages end
  local tokens, limit = self:request_tokens(messages), window * self.compact_at
  if tokens <= limit then return messages end
  if type(self.history) == "function" then
    local out = self.history(messages, {window = window, limit = limit, tokens = tokens})
    if type(out) ~= "table" or #out == 0 then
      error("history: the function must return a non-empty list of messages", 0)
    end
    return out
  end
  if #messages < 4 then return messages end
  return self:compact(messages, tokens)
end

return {}
