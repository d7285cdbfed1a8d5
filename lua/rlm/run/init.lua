--- The RLM loop: a model explores `context` in a sandbox by writing code, one turn at a time,
-- until the code SUBMITs the output fields.
--
--   local res = require("rlm").run{task = "...", context = big_string, outputs = {"answer"}}
--   print(res.answer, res.iterations, res.usage.cost, res.reason)
--
-- Policy lives here and in rlm.prompts; budgets are enforced by the host for the whole tree of
-- child runs (rlm.budget), and every model call goes through rlm.llm, so no key ever enters a
-- sandbox and code in a sandbox cannot raise its own limits.
local async = require "rlm.async"
local common = require "rlm.run.common"
local loop = require "rlm.run.loop"
local resume = require "rlm.run.resume"
local trace = require "rlm.trace"
require "rlm.run.history"
require "rlm.run.batches"

local M = {}

M.defaults = common.defaults

local RESERVED = {fields = true, iterations = true, usage = true, reason = true, submitted = true,
                  extracted = true, trajectory = true, error = true, depth = true, run_id = true}

--- A call handler for a bare interpreter (rlm.interpreter{sub_model = ...}): the code gets
-- llm_query, llm_query_batched and rlm_query under one budget, without the loop around it.
function M.handler(opts)
  local self = loop.new_run(setmetatable({task = "(interpreter)", model = opts.sub_model or opts.model},
                                    {__index = opts}))
  return function(kind, args) return self:on_call(kind, args) end
end

--- Runs the loop; see the module comment and README for the options.
function M.run(opts)
  if type(opts) ~= "table" then error("rlm.run needs a table of options with a task", 2) end
  if not opts._depth then
    -- the caller's own table: aliases (sub_lm, max_recursion_depth ...) and checks
    opts = require("rlm.interpreter").unalias(opts, 2)
    loop.check_options(opts)
  end
  if opts.resume then opts = resume.from_recording(opts, opts.resume, false) end
  if type(opts.task) ~= "string" or opts.task == "" then
    error("rlm.run needs a non-empty 'task' string", 2)
  end
  local self = loop.new_run(opts)
  if opts.dry_run then return M.dry_run(self) end
  -- Misuse (an unknown backend, a bad limit) raises here, as rlm.interpreter does, before
  -- anything is recorded or started; only starting the sandbox can fail as data.
  local made, interp = pcall(require("rlm.interpreter").new, loop.interpreter_options(self, opts))
  if not made then error((tostring(interp):gsub("^[^:\n]+%.lua:%d+: ", "")), 2) end
  local owns_trace = opts._trace == nil
  -- The root's trajectory goes to a collector when one is named (a child's is in the root's).
  local otel_url = owns_trace and require("rlm.otel").endpoint(opts.otel)
  local chars = select(2, self:described())
  -- A resumed root appends to its own file; a child names its slot for a later resume.
  if opts._depth or not (opts._replay and opts._append) then
    -- A small context is kept in the record, so `rlm replay` and `--resume` need nothing else.
    self:record{type = "start", task = self.task, model = self.model, sub_model = self.sub_model,
                outputs = self.outputs, context_chars = chars, execute_timeout = opts.execute_timeout,
                max_output_chars = self.max_output_chars, slot = opts._slot,
                context = chars <= self.inline_context_chars and self.context or nil}
  end
  local ok, result = pcall(self.go, self, interp)
  if not ok then
    local msg = trace.redact(tostring(result))
    result = {reason = msg:find("interrupted (SIG", 1, true) and "interrupted" or "error",
              detail = msg, error = msg}
  elseif result.reason == "model_error" or result.reason == "sandbox_error" then
    result.error = result.detail
  end
  result.detail = result.detail and trace.redact(result.detail)
  result.differences = self.differences
  result.fields = result.fields or {}
  result.iterations = #self.steps
  result.depth, result.run_id = self.depth, self.id
  result.usage = self:usage()
  result.usage.cache_hits, result.usage.cache_saved = self.cache_hits, self.cache_saved
  result.submitted = result.submitted or false
  result.extracted = result.extracted or false
  for k, v in pairs(result.fields) do
    if not RESERVED[k] then result[k] = v end
  end
  self:record{type = "final", reason = result.reason, detail = result.detail, fields = result.fields,
              extracted = result.extracted, usage = result.usage, iterations = result.iterations}
  if owns_trace then
    result.trajectory = self.tracer.records
    self.tracer:close()
  end
  -- Ctrl-C or SIGTERM ends the program (the sandbox is already gone), however it was caught.
  if not ok and tostring(result.error):find("interrupted", 1, true) then error(result.error, 0) end
  async.check_interrupt()
  if otel_url then
    local sent, err = require("rlm.otel").export(otel_url, result.trajectory)
    if not sent then io.stderr:write("rlm: the OpenTelemetry trace was not sent: ", trace.redact(err), "\n") end
  end
  return result
end

--- The result of a dry run: nothing is started or sent; `preview` says what the run would
-- cost (rlm.preview).
function M.dry_run(self)
  self:render_start()
  local chars = select(2, common.describe(self.context))
  return {reason = "dry_run", preview = require("rlm.preview").run(self, chars), fields = {},
          iterations = 0, submitted = false, extracted = false, usage = self.budget:usage(),
          depth = self.depth, run_id = self.id}
end

--- Runs a recorded trajectory again against its recorded model replies and sub-call answers,
-- with no model call, and compares each block's output with the recording. Returns the result
-- with `differences` ({turn, block, recorded, replayed}, empty when all matched).
function M.replay(path, opts)
  local o = resume.from_recording(opts or {}, path, true)
  o.trace = nil
  local res = M.run(o)
  res.differences = res.differences or {}
  return res
end

-- A child run (rlm_query), as the root's run is started.
function common.Run:child_run(opts)
  return M.run(opts)
end

return M
