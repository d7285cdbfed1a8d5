--- The loop: a run's set-up, its turns (a model reply, its code run in the sandbox, until
-- SUBMIT) and its options.
local async = require "rlm.async"
local budget_mod = require "rlm.budget"
local common = require "rlm.run.common"
local json = require "rlm.json"
local llm = require "rlm.llm"
local parse = require "rlm.parse"
local subcalls = require "rlm.run.subcalls"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local Run, option, prompt_chars = common.Run, common.option, common.prompt_chars
local spent_since = common.spent_since

local M = {}

-- What rlm.run takes besides the defaults and the interpreter's options (passed on to it).
local RUN_OPTIONS = {task = "string", context = "any", model = "string", sub_model = "string",
  max_tokens = "number", max_cost = "number", max_time = "number", execute_timeout = "number",
  trace = "string", on_event = "function", events = "function", prompts = "table",
  child_budget = "any",
  sub_models = "table", prices = "table", prices_file = "string", context_windows = "table",
  context_window = "number", output_limits = "table", reasoning_effort = "string", resume = "any",
  cache = "any", child_max_iterations = "number", history = "any", prompt_cache = "any", otel = "any",
  dry_run = "boolean",
  -- internal: a child run's share of its parent
  _budget = "any", _depth = "any", _trace = "any", _parent = "any", _replay = "any", _append = "any",
  _tool_counts = "any", _slot = "any", _recording = "any"}

-- Interpreter options rlm.run does not pass on: it answers the calls itself.
local NOT_PASSED = {on_call = true, model = true, sub_model = true, max_llm_calls = true,
                    llm_call_timeout = true, max_depth = true, max_tokens = true, max_cost = true,
                    child_max_iterations = true, async_execute = true, batch_concurrency = true,
                    max_parallel_children = true}

local run_counter = 0

-- Puts `context` into the sandbox: small values as an injected variable, large ones as a file
-- read there, so 100 MB never travel inside a JSON request or a prompt. The driver reads text
-- into a str of its final length (read_text), holding no second copy as bytes.
local function load_context(interp, context, inline_limit)
  if context == nil then
    return interp:execute("context = None")
  end
  local is_text = type(context) == "string"
  local data = is_text and context or json.encode(context)
  if #data <= inline_limit then
    return interp:execute("pass", {context = context})
  end
  -- relative: beneath the workspace, the code's working directory, whatever the backend
  local path = ".rlm/context" .. (is_text and ".txt" or ".json")
  local ok, err = interp:upload(path, data)
  if not ok then error("cannot put the context into the sandbox: " .. err, 0) end
  local code = is_text
    and ("context = __rlm_read_text__(%q)"):format(path)
    or ("import json as _json\nwith open(%q) as _f:\n    context = _json.load(_f)\ndel _f, _json"):format(path)
  local _, r = interp:execute(code)
  if r.error then error("could not load the context into the sandbox: " .. r.error, 0) end
  return nil, r
end

-- Variables named in each turn's prompt (the driver lists as many, lua/rlm/driver.py
-- MAX_VARIABLES); the rest are counted (SHOW_VARS() lists them all).
local VARIABLES_SHOWN = 50

local function variables_line(vars, more)
  more = more or 0
  if (not vars or #vars == 0) and more == 0 then return "(none)" end
  local parts = {}
  for i, v in ipairs(vars or {}) do
    if i > VARIABLES_SHOWN then break end
    local sized = type(v.size) == "number"     -- null (json.null) for values without a length
    parts[#parts + 1] = sized and ("%s: %s, %s"):format(v.name, v.type, v.size) or
      ("%s: %s"):format(v.name, v.type)
  end
  local rest = math.max(0, #(vars or {}) - VARIABLES_SHOWN) + more
  if rest > 0 then
    parts[#parts + 1] = ("... and %d more (SHOW_VARS() lists them)"):format(rest)
  end
  return table.concat(parts, "; ")
end

local function output_text(run)
  local parts = {}
  if run.stdout and #run.stdout > 0 then parts[#parts + 1] = run.stdout end
  if run.stderr and #run.stderr > 0 then parts[#parts + 1] = "[stderr]\n" .. run.stderr end
  if run.error then parts[#parts + 1] = "[error] " .. (run.traceback or run.error) end
  if #parts == 0 then return "(nothing was printed)" end
  return table.concat(parts, "\n")
end

local function missing_fields(out, outputs)
  local missing = {}
  for _, name in ipairs(outputs) do
    if out[name] == nil then missing[#missing + 1] = name end
  end
  return missing
end

-- SUBMIT fields the task does not ask for, sorted.
local function unknown_fields(out, outputs)
  local wanted, unknown = {}, {}
  for _, name in ipairs(outputs) do wanted[name] = true end
  for name in pairs(out) do
    if not wanted[name] then unknown[#unknown + 1] = tostring(name) end
  end
  table.sort(unknown)
  return unknown
end

-- The absolute time by which a block must end (the run's deadline, less the extraction's
-- share), or nil without max_time.
function Run:deadline()
  local left = self:time_left()
  return left and sys.now() + left
end

-- A FINAL(text) written beside code is a guess made before the code's output was seen: it is
-- taken only on a later reply, unless the run says otherwise (final_beside_code = "accept").
local function guess_beside_code(self, blocks, final)
  return final and final.text and #blocks > 0 and self.final_beside_code ~= "accept"
end

-- Runs one reply's code; returns the submitted fields (validated) or nil, the output text, the
-- variables and what to tell the model (notes: one line per block that did not run).
function Run:run_code(blocks, final, notes)
  local outputs, feedback, submitted = {}, nil, nil
  local vars = self.variables
  notes = {table.unpack(notes or {})}
  for i, code in ipairs(blocks) do
    local out, r = self.interp:execute(code, nil, {output_names = self.outputs,
                                                    deadline = self:deadline()})
    -- A restarted driver (code deaf to execute_timeout, a crash) lost every variable; the
    -- prompts promise `context` on every turn, so it goes back in.
    if r.state_lost then
      local reloaded = select(2, load_context(self.interp, self.context, self.inline_context_chars))
      r.variables, r.variables_more = reloaded.variables, reloaded.variables_more
    end
    if r.variables then vars, self.variables_more = r.variables, r.variables_more end
    outputs[#outputs + 1] = (#blocks > 1 and ("[block %d]\n"):format(i) or "") .. output_text(r)
    self.steps_code[#self.steps_code + 1] = {code = code, output = outputs[#outputs],
                                              error = r.error, duration = r.duration}
    if out then
      local missing, unknown = missing_fields(out, self.outputs), unknown_fields(out, self.outputs)
      if #missing == 0 and #unknown == 0 then submitted = out break end
      feedback = #unknown > 0 and ("SUBMIT got %s, which this task does not ask for; its outputs "
          .. "are %s.\n"):format(table.concat(unknown, ", "), table.concat(self.outputs, ", "))
        or ("SUBMIT is missing %s. Call SUBMIT(%s) with every output.\n"):format(
          table.concat(missing, ", "), table.concat(self.outputs, "=..., ") .. "=...")
    end
    if r.error then
      if i < #blocks then
        notes[#notes + 1] = ("A block raised an error, so the %d block(s) after it did not run.")
          :format(#blocks - i)
      end
      break
    end
  end
  if not submitted and guess_beside_code(self, blocks, final) then
    notes[#notes + 1] = "Your FINAL(...) was written before you saw what your code printed, so "
      .. "it was not taken: check the output above, then give the answer again."
    final = nil
  end
  if not submitted and final and not feedback then
    if final.var then
      local out, r = self.interp:execute(("SUBMIT(%s)"):format(final.var), nil,
                                          {output_names = self.outputs, deadline = self:deadline()})
      if out and #missing_fields(out, self.outputs) == 0 then
        submitted = out
      else
        feedback = ("FINAL_VAR(%s) did not give the outputs: %s\n"):format(final.var,
          r.error or "missing fields")
      end
    elseif #self.outputs == 1 then
      submitted = {[self.outputs[1]] = final.text}
    else
      feedback = "FINAL(text) gives one value but this task needs " ..
        table.concat(self.outputs, ", ") .. ": use SUBMIT with every output.\n"
    end
  end
  if #blocks == 0 and not final and #notes == 0 then
    feedback = "Your reply had no ```repl code block. Write code to make progress.\n"
  end
  if #notes > 0 then feedback = table.concat(notes, "\n") .. "\n" .. (feedback or "") end
  self.variables = vars
  return submitted, table.concat(outputs, "\n"), vars, feedback
end

-- ---------- the loop ----------

local WARN_AT = 0.2     -- a budget warning when less than this share of a limit remains
local LIMIT_OF = {calls = "max_llm_calls", tokens = "max_tokens", cost = "max_cost",
                  seconds = "max_time"}

-- Records (and tells on_event) once per limit when what remains of it falls under WARN_AT.
function Run:warn_budget()
  local r = self.budget:remaining()
  self.warned = self.warned or {}
  for what, key in pairs(LIMIT_OF) do
    local limit = self.budget:binding(what, key)
    if limit and limit > 0 and r[what] and r[what] < limit * WARN_AT and not self.warned[key] then
      self.warned[key] = true
      local e = {type = "budget_warning", turn = self.turn, limit = key, remaining = r[what], of = limit}
      self:record(e)
      self:event{type = "budget_warning", limit = key, remaining = r[what], of = limit}
    end
  end
end

-- A budget refusal's text ("max_tokens: ...") as a reason ("budget:max_tokens").
local function budget_reason(msg)
  local limit = tostring(msg):match("^(max_[%w_]+):")
  return limit and "budget:" .. limit or "budget"
end

-- Runs fn(...); a failure of the sandbox comes back as false, message; an interrupt goes on up.
local function sandbox_step(fn, ...)
  local res = table.pack(pcall(fn, ...))
  if res[1] then return table.unpack(res, 1, res.n) end
  async.check_interrupt()
  if tostring(res[2]):find("interrupted (SIG", 1, true) then error(res[2], 0) end
  return false, tostring(res[2])
end

-- A model that refuses the task (OpenAI's message.refusal, Anthropic's stop_reason "refusal")
-- ends the run: its reply is no code to run, and asking again or extracting would ask the same
-- model the same thing. The result says so in one line.
local REFUSAL_SHOWN = 300

function Run:refused(reply)
  local text = reply.refusal or reply.text or ""
  self:record{type = "refusal", turn = self.turn, reply = text, usage = reply.usage}
  local line = text:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
  if #line > REFUSAL_SHOWN then line = line:sub(1, REFUSAL_SHOWN) .. "..." end
  return {reason = "refused", detail = "the model refused the task" ..
          (line ~= "" and ": " .. line or " (it gave no reason)")}
end

-- Renders the system prompt and the first message, which every turn's request begins with.
function Run:render_start()
  local desc_type, chars, preview = self:described()
  local vars = {
    task = self.task, context_type = desc_type, context_chars = chars, context_preview = preview,
    outputs = table.concat(self.outputs, ", "),
    submit_signature = table.concat(self.outputs, "=..., ") .. "=...",
    max_iterations = self.max_iterations, max_llm_calls = self.budget.limits.max_llm_calls or "unlimited",
    max_output_chars = self.max_output_chars, sub_capacity = self.sub_capacity,
    tools = require("rlm.tools").prompt_text(self.interp and self.interp:load_tools() or {})
            .. require("rlm.netproxy").prompt_text(self.interp and self.interp.netproxy),
  }
  self.system = self:render("system", vars)
  self.first_message = self:render("first", vars)
end

function Run:loop()
  self:render_start()
  -- What the model is sent besides the steps, so a trajectory can be read back as the exact
  -- conversation (rlm trace export): the two first messages and the templates of the later ones.
  self:record{type = "prompt", system = self.system, first_message = self.first_message,
              turn_template = self.prompts.turn, summary_template = self.prompts.summary,
              max_iterations = self.max_iterations}
  local messages = {{role = "user", content = self.first_message}}

  for turn = 1, self.max_iterations do
    self.turn = turn
    local t0 = sys.now()
    local compaction = self.replay and self.replay.compactions[turn]
    if self.replay and not self.replay.steps[turn] then
      if self.replay.only then return {reason = "replayed"} end
      -- the turn a crash cut short, if any, is replayed as far as it got
      self.partial = self.replay.partial[turn]
      if not self.partial then compaction = nil end
      self.replay = nil
      self:record{type = "resume", turn = turn}
    end
    -- A turn is sent only if the extraction can still be afforded after it.
    if self.depth == 0 then self:keep_for_extraction() end
    if compaction then
      messages = self:summarised(messages, compaction.summary)
    elseif not self.replay then
      messages = self:fit_history(messages)
    end
    local reply, err, refused, recorded = self:turn_reply(messages)
    if refused then return {reason = budget_reason(err), detail = err, extract = true} end
    if not reply then
      return {reason = "model_error", detail = "model call failed: " .. tostring(err), extract = true}
    end
    if reply.finish_reason == "refusal" then return self:refused(reply) end
    local request_chars = prompt_chars{system = self.system, messages = messages}
    messages[#messages + 1] = {role = "assistant", content = reply.text}
    self.steps_code, self.step_calls = {}, {}
    local before = self.budget:usage()
    -- A reply cut at the output cap does not run its unfinished block (its first lines would).
    local read = parse.reply(reply.text, {cut = reply.finish_reason == "length"})
    if reply.finish_reason == "length" and not read.cut then
      read.notes[#read.notes + 1] = ("Your reply was cut off at the output limit (%s tokens).")
        :format(reply.usage and reply.usage.output_tokens or "?")
    end
    -- The first turn's code waits here for the sandbox and its context.
    local ready, why = self:sandbox_ready()
    if not ready then return {reason = "sandbox_error", detail = why} end
    local ran, submitted, output, pyvars, feedback = sandbox_step(self.run_code, self, read.code,
                                                                  parse.final(reply.text), read.notes)
    if not ran then return {reason = "sandbox_error", detail = submitted, extract = true} end
    local replayed = recorded and not recorded.partial
    if replayed then self:compare(recorded) end
    local step = {type = "step", turn = turn, prompt_chars = request_chars, reply = reply.text,
                  finish_reason = reply.finish_reason,
                  code = self.steps_code, output = output, calls = self.step_calls,
                  feedback = feedback, variables = variables_line(pyvars, self.variables_more),
                  usage = reply.usage,
                  sub_usage = replayed and recorded.sub_usage or spent_since(self.budget, before),
                  duration = sys.now() - t0}
    self.steps[#self.steps + 1] = step
    self:record(step)
    if self.cache_error then error(self.cache_error, 0) end
    self:warn_budget()
    self:event{type = "turn", turn = turn, max_iterations = self.max_iterations,
               usage = self:usage()}
    if submitted then return {fields = submitted, reason = "submitted", submitted = true} end
    messages[#messages + 1] = {role = "user", content = self:render("turn", {
      output = output, variables = variables_line(pyvars, self.variables_more), feedback = feedback or "",
      turn = turn + 1, max_iterations = self.max_iterations})}
  end
  return {reason = "max_iterations",
          detail = ("max_iterations: no SUBMIT after %d turns"):format(self.max_iterations),
          extract = true}
end

-- The run's prices: `prices` over the file named by prices_file or RLM_PRICES.
local function run_prices(opts)
  local file = opts.prices_file or sys.getenv("RLM_PRICES")
  local t = {}
  if file and file ~= "" then
    for k, v in pairs(budget_mod.load_prices(file)) do t[k] = v end
  end
  for k, v in pairs(budget_mod.check_prices(opts.prices or {}, "prices")) do t[k] = v end
  return t
end

-- The set of labels llm_query(model=) may name.
local function allowed_models(list)
  local set = {}
  for _, m in ipairs(list) do
    local ok, label = pcall(llm.label, m)
    if not ok then error("sub_models: " .. tostring(label):gsub("^[^:]*:%d+: ", ""), 0) end
    set[label] = true
  end
  return set
end

-- Under max_cost every model the run may call needs a price: refused before anything starts.
local function require_prices(self)
  if not self.budget.limits.max_cost then return end
  local labels = {[llm.label(self.model)] = true}
  for label in pairs(self.sub_models) do labels[label] = true end
  for label in pairs(labels) do
    if not self:price(label) then
      error(("max_cost needs a price for %s: give a prices file, {%q: {\"input\": USD, "
        .. "\"output\": USD}} per million tokens, with --prices FILE.json or RLM_PRICES (from Lua: "
        .. "prices = {[%q] = {input = USD, output = USD}} or prices_file)"):format(
        label, label, label), 0)
    end
  end
end

function M.new_run(opts)
  run_counter = run_counter + 1
  local depth = opts._depth or 0
  local prompts = setmetatable({}, {__index = require "rlm.prompts"})
  for k, v in pairs(opts.prompts or {}) do prompts[k] = v end
  local model = opts.model or sys.getenv("RLM_MODEL")
  if not model then
    error("no model: give --model provider/name (model = \"provider/name\" from Lua) or set "
      .. "RLM_MODEL (e.g. openai/gpt-4o)", 0)
  end
  -- A missing key must fail here, before any sandbox exists, not at the first turn; a replay
  -- (rlm replay) calls no model and a dry run sends nothing: neither needs one.
  local check = (opts.dry_run or (opts._replay and opts._replay.only)) and llm.label or llm.check
  local ok, err = pcall(check, model)
  if ok and opts.sub_model then ok, err = pcall(check, opts.sub_model) end
  if not ok then error(tostring(err):gsub("^[^:]*:%d+: ", ""), 0) end
  local self = setmetatable({
    opts = opts, task = opts.task, context = opts.context,
    outputs = option(opts, "outputs"), model = model, sub_model = opts.sub_model or model,
    max_iterations = option(opts, "max_iterations"), max_depth = option(opts, "max_depth"),
    max_output_chars = option(opts, "max_output_chars"),
    llm_call_timeout = option(opts, "llm_call_timeout"), sub_capacity = option(opts, "sub_capacity"),
    inline_context_chars = option(opts, "inline_context_chars"),
    batch_concurrency = option(opts, "batch_concurrency"),
    call_width = async.semaphore(math.max(1, math.floor(option(opts, "batch_concurrency")))),
    child_width = async.semaphore(math.max(1, math.floor(option(opts, "max_parallel_children")))),
    max_output_tokens = option(opts, "max_output_tokens"),
    extract_seconds = depth == 0 and opts.max_time
      and math.min(option(opts, "extract_seconds"), opts.max_time * 0.1) or 0,
    child_budget = opts.child_budget, context_windows = opts.context_windows,
    output_limits = opts.output_limits, reasoning_effort = opts.reasoning_effort,
    history = option(opts, "history"), compact_at = option(opts, "compact_at"),
    final_beside_code = option(opts, "final_beside_code"), prompt_cache = option(opts, "prompt_cache"),
    replay = opts._replay or nil, differences = opts._replay and {} or nil,
    -- where this run sits in its tree ("" the root), and a resumed tree's recorded runs
    slot = opts._slot or "", recording = opts._recording,
    cache = subcalls.cache_dir(opts.cache), cache_hits = 0, cache_saved = 0,
    prompts = prompts, depth = depth, parent = opts._parent,
    id = ("r%d-%d"):format(sys.getpid(), run_counter),
    on_event = opts.on_event, steps = {}, tool_counts = opts._tool_counts or {},
  }, Run)
  self.budget = opts._budget or budget_mod.new{
    max_llm_calls = option(opts, "max_llm_calls"), max_tokens = opts.max_tokens,
    max_cost = opts.max_cost, max_time = opts.max_time, max_depth = self.max_depth,
  }
  self.prices = run_prices(opts)
  self.sub_models = allowed_models(opts.sub_models or {self.sub_model})
  if depth == 0 then require_prices(self) end
  if opts.child_budget ~= nil then self.budget:child(opts.child_budget) end   -- misuse shows now
  self.context_window = opts.context_window
    or llm.context_window(llm.label(model), opts.context_windows)
  if self.prompt_cache ~= "auto" and type(self.prompt_cache) ~= "boolean" then
    error('prompt_cache must be "auto", true or false', 0)
  end
  if self.reasoning_effort and not llm.reasoning_tokens[self.reasoning_effort] then
    error('reasoning_effort must be "minimal", "low", "medium" or "high"', 0)
  end
  if self.final_beside_code ~= "wait" and self.final_beside_code ~= "accept" then
    error('final_beside_code must be "wait" or "accept"', 0)
  end
  if self.history ~= "full" and self.history ~= "compact" and type(self.history) ~= "function" then
    error('history must be "full", "compact" or a function(messages, info) -> messages', 0)
  end
  -- A dry run writes nothing: not even an empty trace file in place of a recording.
  self.tracer = opts._trace or trace.writer(not opts.dry_run and opts.trace or nil, opts._append,
                                            opts.events)
  return self
end

-- Whether a name is an interpreter option: of the run's backend, else (a name that is not
-- the run's own) of any backend. Only the run's backend is loaded for the names a run takes,
-- so a local run loads no other backend's client.
local function interpreter_option_check(opts)
  local interpreter = require "rlm.interpreter"
  local chosen = option(opts, "backend") or interpreter.defaults.backend
  return function(k)
    return interpreter.accepts(k, chosen)
      or not (RUN_OPTIONS[k] or common.defaults[k] ~= nil) and interpreter.accepts(k)
  end
end

-- The interpreter options among opts (env, network, volume_name, snapshot, daytona = {...}
-- and the rest), with the run's own settings and its call handler.
function M.interpreter_options(self, opts)
  local interpreter = require "rlm.interpreter"
  local accepts = interpreter_option_check(opts)
  local out = {}
  -- opts may be a child's view of its parent's (an __index chain): every level counts
  local level = opts
  while type(level) == "table" do
    for k in pairs(level) do
      if type(k) == "string" and out[k] == nil and not NOT_PASSED[k] and accepts(k) then
        out[k] = opts[k]
      end
    end
    local mt = getmetatable(level)
    level = mt and mt.__index
  end
  out.backend, out.timeout = option(opts, "backend"), option(opts, "timeout")
  out.max_output_chars = self.max_output_chars
  out.on_call = function(kind, args) return self:on_call(kind, args) end
  return out
end

-- Checks rlm.run's options: an unknown name (a typo) or a value of the wrong kind is misuse.
function M.check_options(opts)
  local interpreter = require "rlm.interpreter"
  local accepts = interpreter_option_check(opts)
  local names = {}
  for k in pairs(RUN_OPTIONS) do names[#names + 1] = k end
  for k in pairs(common.defaults) do names[#names + 1] = k end
  for k in pairs(interpreter.options) do names[#names + 1] = k end
  for k in pairs(opts) do
    if type(k) ~= "string" or not (RUN_OPTIONS[k] or common.defaults[k] ~= nil or accepts(k)) then
      error(require("rlm.args").unknown("rlm.run option", k, names), 0)
    end
  end
  for k, v in pairs(opts) do
    local want = RUN_OPTIONS[k] or (common.defaults[k] ~= nil and type(common.defaults[k])) or "any"
    if want ~= "any" and type(v) ~= want then
      error(("rlm.run option %s must be a %s, not a %s"):format(k, want, type(v)), 0)
    end
    if want == "number" and v < 0 then error(("rlm.run option %s must be >= 0"):format(k), 0) end
  end
end

-- Starts the run's interpreter and puts the context into it: true, or false and why the
-- sandbox cannot serve. Its variables become the run's. It first lets the event loop turn
-- once, so the first model request, this run's and those of the runs started beside it (the
-- children of an rlm_query_batched), is on its way before the start's own work (folders, a
-- uid, bubblewrap's fork) holds the one thread.
local function prepare_sandbox(self, interp)
  async.sleep(0)
  local started, err = sandbox_step(function()
    local ok, err = pcall(interp.start, interp)
    if not ok then interp:shutdown() error(err, 0) end
    return interp
  end)
  if not started then return false, err end
  local loaded, why, r = sandbox_step(load_context, interp, self.context, self.inline_context_chars)
  if not loaded then return false, why end
  self.variables, self.variables_more = r and r.variables, r and r.variables_more
  return true
end

-- Waits for the sandbox prepared beside the first model call: true, or false and why not. An
-- interrupt met there ends the run as it would have here.
function Run:sandbox_ready()
  local task = self.preparing
  if not task then return true end
  self.preparing = nil
  local ok, ready, why = task:result()
  if not ok then ready, why = false, tostring(ready) end
  if not ready and why:find("interrupted (SIG", 1, true) then error(why, 0) end
  return ready, why
end

-- The loop in its sandbox, and the extraction when it ended without SUBMIT. The sandbox starts
-- and takes the context while the first model call is in flight: that call needs only the
-- context's size and preview.
function Run:go(interp)
  local _ <close> = interp
  self.interp = interp
  -- The prompt lists the tools, so they are had before the first call.
  local had, why = pcall(interp.load_tools, interp)
  if not had then return {reason = "sandbox_error", detail = tostring(why)} end
  self.preparing = async.spawn(prepare_sandbox, self, interp)
  local r = self:loop()
  -- A loop that ended before its first code (a model error, a budget) lets the sandbox settle
  -- before it is shut down.
  self:sandbox_ready()
  -- No turn, nothing to extract from: an extraction would be paid for nothing.
  if r.extract and #self.steps > 0 then
    local fields, err = self:extract(r.detail or r.reason)
    if fields then
      r.fields, r.extracted = fields, true
      if r.reason == "max_iterations" then r.reason = "extracted" end
    else
      r.detail = (r.detail or r.reason) .. "; extraction failed: " .. tostring(err)
    end
  end
  return r
end

return M
