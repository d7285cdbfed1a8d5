--- Resume and replay: a run that goes on from a recorded trajectory, or runs it again on its
-- recorded model replies and sub-call answers and compares the outputs.
local common = require "rlm.run.common"
local llm = require "rlm.llm"
local trace = require "rlm.trace"

local Run, describe = common.Run, common.describe

local M = {}

-- The reply of a turn: the recorded one while a recording is replayed (its sub-call answers
-- queued for the code), else the model's. A turn a crash cut short (self.partial: its reply and
-- the answers it got) is replayed as far as it got, then goes on live.
function Run:turn_reply(messages)
  local recorded = self.replay and self.replay.steps[self.turn] or self.partial
  self.partial = nil
  if recorded then
    self.recorded_calls = {table.unpack(recorded.calls or {})}
    self.live_after_recorded = recorded.partial
    local u = recorded.usage or {}
    self.budget:add_spent({input_tokens = u.input_tokens, output_tokens = u.output_tokens,
                           cost = self:cost_of(llm.label(self.model), u)}, llm.label(self.model))
    -- a cut turn's answers each bring their own usage as they are given again
    if not recorded.partial then self.budget:add_spent(recorded.sub_usage, "recorded sub-calls") end
    return {text = recorded.reply, usage = recorded.usage, finish_reason = recorded.finish_reason},
      nil, nil, recorded
  end
  self.recorded_calls = nil
  local res, err, refused = self:model_call(self.model, {system = self.system, messages = messages},
                                            {turn = true})
  -- Kept at once: a crash in this turn's code must not pay for the reply again.
  if res then
    self:record{type = "reply", turn = self.turn, reply = res.text,
                finish_reason = res.finish_reason, usage = res.usage}
  end
  return res, err, refused
end

-- The differences between a replayed turn's outputs and the recording's.
function Run:compare(recorded)
  local want = recorded.code or {}
  for i, block in ipairs(self.steps_code) do
    local was = want[i] and want[i].output
    if was ~= block.output then
      self.differences[#self.differences + 1] = {turn = self.turn, block = i,
                                                 recorded = was, replayed = block.output}
    end
  end
end

-- A run's records gathered: its start, its steps by turn (the last record of a turn wins: a
-- resumed run appends), its compactions by turn, its replies by turn and its answers by turn
-- and place.
local function gather(run, r)
  if r.type == "start" then run.start = run.start or r
  elseif not r.turn then return
  elseif r.type == "step" then run.steps[r.turn] = r
  elseif r.type == "compaction" then run.compactions[r.turn] = r
  elseif r.type == "reply" then run.replies[r.turn] = r
  elseif r.type == "answer" and r.call then
    run.answers[r.turn] = run.answers[r.turn] or {}
    run.answers[r.turn][r.call] = r
  end
end

-- What a run replays: its steps from turn 1 on, its compactions, and the turns a crash cut short
-- (partial: {reply, finish_reason, usage, calls, partial = true} by turn: the reply and the
-- answers the turn got, each the last recorded at its place).
local function replayable(run)
  local steps = {}
  while run.steps[#steps + 1] do steps[#steps + 1] = run.steps[#steps + 1] end
  local partial = {}
  for turn, r in pairs(run.replies) do
    if not run.steps[turn] then
      local calls, got = {}, run.answers[turn] or {}
      while got[#calls + 1] do calls[#calls + 1] = got[#calls + 1] end
      partial[turn] = {reply = r.reply, finish_reason = r.finish_reason, usage = r.usage,
                       calls = calls, partial = true}
    end
  end
  return {start = run.start, steps = steps, compactions = run.compactions, partial = partial}
end

-- Every run of a trajectory file by its slot: "" for the root (depth 0, whatever process wrote
-- it), "/T.C" for the child run the root's code started with the C-th call of turn T, and so on
-- down (a child's start record names its slot; its other records carry its run id).
local function recorded_runs(path)
  local records, err = trace.read(path)
  if not records then error("cannot read the trajectory: " .. tostring(err), 0) end
  local slot_of, runs = {}, {}
  for _, r in ipairs(records) do
    local slot
    if (r.depth or 0) == 0 then slot = ""
    elseif r.type == "start" and r.slot then slot_of[r.run] = r.slot; slot = r.slot
    else slot = slot_of[r.run] end
    if slot then
      runs[slot] = runs[slot] or {steps = {}, compactions = {}, replies = {}, answers = {}}
      gather(runs[slot], r)
    end
  end
  if not (runs[""] and runs[""].start) then error(path .. " holds no run (no start record)", 0) end
  local out = {}
  for slot, run in pairs(runs) do out[slot] = replayable(run) end
  return out
end

-- The replay of the child run started at slot, from the recording a resumed run read (its
-- turns replayed, then live), or false when it has none.
function Run:child_replay(slot)
  local rec = self.recording and self.recording[slot]
  if not rec then return false end
  return {steps = rec.steps, compactions = rec.compactions, partial = rec.partial, only = false}
end

-- The options of a run that resumes or replays `path`: what the recording says, under what
-- opts give (the context must be given again when it was too big to record).
function M.from_recording(opts, path, only)
  local runs = recorded_runs(path)
  local rec = runs[""]
  local s = rec.start
  local o = setmetatable({resume = false, task = opts.task or s.task, model = opts.model or s.model,
                          sub_model = opts.sub_model or s.sub_model,
                          outputs = opts.outputs or s.outputs,
                          -- what shapes the outputs compared: the recording's settings
                          execute_timeout = opts.execute_timeout or s.execute_timeout,
                          max_output_chars = opts.max_output_chars or s.max_output_chars},
                         {__index = opts})
  if opts.context == nil then
    if s.context == nil and (s.context_chars or 0) > 0 then
      error(("%s does not hold its %d-character context: give it again (--context FILE)"):format(
        path, s.context_chars), 0)
    end
    o.context = s.context
  end
  local got = select(2, describe(o.context))
  if s.context_chars and got ~= s.context_chars then
    error(("the context differs from the recorded run's (%d characters, recorded %d)"):format(
      got, s.context_chars), 0)
  end
  o._replay = {steps = rec.steps, compactions = rec.compactions, partial = rec.partial, only = only}
  o._recording = runs
  if not only and opts.trace == nil then o.trace, o._append = path, true end
  return o
end

return M
