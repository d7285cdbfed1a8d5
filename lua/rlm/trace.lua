--- Trajectories: one JSON record per line, written as the run goes so a crash or Ctrl-C still
-- leaves the steps so far on disk. Secrets are scrubbed from every record.
local json = require "rlm.json"
local redact = require "rlm.core.redact"
local secrets = require "rlm.secrets"
local sys = require "rlm.sys"

local M = {}

--- Replaces every known secret value in s with "[redacted]" (list: the secrets; nil, the known
-- ones).
function M.redact(s, list)
  if type(s) ~= "string" then return s end
  return redact.text(s, list or secrets.values())
end

local Writer = {}
Writer.__index = Writer

-- A file to append to that ends mid-record (a crash while it was written) is first replaced
-- whole by its complete records (a new file renamed over it): records appended after a cut line
-- would be glued to it, and a file is never cut in place.
local function drop_cut_record(path)
  local data = sys.read_file(path)
  if not data or data == "" or data:sub(-1) == "\n" then return end
  local whole = data:match("^(.*\n)") or ""
  local ok, err = sys.write_file(path, whole)
  if not ok then error("cannot write the trajectory: " .. tostring(err), 0) end
end

--- A trajectory sink: records are kept in memory (for the result) and, with a path, written
-- to that file, one JSON object per line (append: added after what the file holds, as a
-- resumed run does); sink(record), when given, gets each record as it is written. Every write
-- is checked: one that fails (a full disk) raises, so a run never goes on with a cut record.
function M.writer(path, append, sink)
  local f
  if path then
    if append then
      drop_cut_record(path)
    elseif (sys.stat(path) or {}).type == "file" then
      -- a new run's file replaces the old one whole (a reader of the old one keeps it)
      local ok, err = sys.remove(path)
      if not ok then error("cannot write the trace file: " .. tostring(err), 0) end
    end
    local err
    f, err = io.open(path, append and "a" or "w")
    if not f then error("cannot write the trace file: " .. err, 0) end
  end
  return setmetatable({file = f, path = path, records = {}, sink = sink}, Writer)
end

function Writer:write(record)
  -- A copy, nested tables too: a record kept in memory must not change when the tables it was
  -- made from change later (a budget's live by_model, say). The secrets are read each time: a
  -- key may be given mid-run.
  record = redact.copy(record, secrets.values())
  record.t = record.t or sys.time()
  self.records[#self.records + 1] = record
  if self.file then
    local ok, err = self.file:write(json.encode(record), "\n")
    if ok then ok, err = self.file:flush() end
    if not ok then
      error(("cannot write the trajectory %s: %s"):format(self.path, tostring(err)), 0)
    end
  end
  -- the same stream, live, for a watcher (rlm ask --events)
  if self.sink then self.sink(record) end
  return record
end

function Writer:close()
  if self.file then self.file:close(); self.file = nil end
end

--- The runs of a trajectory's records by id, and in the order they started: each {id, depth,
-- start, prompt, final, steps (by turn: a resumed run's later record wins), compactions (by
-- turn), subcalls (in order)}.
function M.runs(records)
  local runs, order = {}, {}
  for _, r in ipairs(records) do
    local run = r.run and runs[r.run]
    if r.run and not run then
      run = {id = r.run, depth = r.depth or 0, steps = {}, compactions = {}, subcalls = {}}
      runs[r.run], order[#order + 1] = run, run
    end
    if run then
      if r.type == "start" then run.start = run.start or r
      elseif r.type == "prompt" then run.prompt = r
      elseif r.type == "step" and r.turn then run.steps[r.turn] = r
      elseif r.type == "compaction" and r.turn then run.compactions[r.turn] = r
      elseif r.type == "subcall" then run.subcalls[#run.subcalls + 1] = r
      elseif r.type == "final" then run.final = r end
    end
  end
  return runs, order
end

--- Reads a JSONL trajectory back into a list of records. A last line cut short (a crash mid-
-- write) is left out, and `cut` (the second result) says so; a bad line elsewhere is an error.
function M.read(path)
  local data, err = sys.read_file(path)
  if not data then return nil, err end
  local records, n, cut = {}, 0, false
  local complete = data:sub(-1) == "\n"
  for line in data:gmatch("[^\n]+") do
    n = n + 1
    local rec, perr = json.decode(line)
    if type(rec) ~= "table" then
      local last = not complete and data:sub(-#line) == line
      if not last then return nil, ("%s:%d: %s"):format(path, n, perr or "not a JSON object") end
      cut = true
    else
      records[#records + 1] = rec
    end
  end
  return records, cut
end

return M
