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
local budget_mod = require "rlm.budget"
local json = require "rlm.json"
local llm = require "rlm.llm"
local parse = require "rlm.parse"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local EMPTY = {}   -- never written

local M = {}

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
  batch_concurrency = 64,     -- llm_query_batched calls in flight at once
  max_output_tokens = 8192,   -- the output cap sent with each call while max_tokens or max_cost holds
  extract_seconds = 5,        -- under max_time, kept back from the turns for the final extraction
  history = "compact",        -- "compact" | "full" | function(messages, info) -> messages
  compact_at = 0.8,           -- the share of the context window at which history is compacted
}

-- What rlm.run takes besides M.defaults and the interpreter's options (passed on to it).
local RUN_OPTIONS = {task = "string", context = "any", model = "string", sub_model = "string",
  max_tokens = "number", max_cost = "number", max_time = "number", execute_timeout = "number",
  trace = "string", on_event = "function", events = "function", prompts = "table",
  child_budget = "any",
  sub_models = "table", prices = "table", prices_file = "string", context_windows = "table",
  context_window = "number", resume = "any", cache = "any", child_max_iterations = "number",
  history = "any",
  -- internal: a child run's share of its parent
  _budget = "any", _depth = "any", _trace = "any", _parent = "any", _replay = "any", _append = "any"}

-- Interpreter options rlm.run does not pass on: it answers the calls itself.
local NOT_PASSED = {on_call = true, model = true, sub_model = true, max_llm_calls = true,
                    llm_call_timeout = true, max_depth = true, max_tokens = true, max_cost = true,
                    child_max_iterations = true, async_execute = true}

local RESERVED = {fields = true, iterations = true, usage = true, reason = true, submitted = true,
                  extracted = true, trajectory = true, error = true, depth = true, run_id = true}

local run_counter = 0

local function option(opts, name)
  local v = opts[name]
  if v == nil then v = M.defaults[name] end
  return v
end

-- The first n characters of UTF-8 text, never cutting one in two; bytes that are not UTF-8
-- are cut at n bytes and shown as U+FFFD, so the prompt stays valid JSON for strict parsers.
local function head_chars(text, n)
  if utf8.len(text) then
    local stop = utf8.offset(text, n + 1)
    return stop and text:sub(1, stop - 1) or text
  end
  return (text:sub(1, n):gsub("[\128-\255]", "\xEF\xBF\xBD"))
end

-- Length in characters (bytes when the text is not UTF-8).
local function char_count(text)
  return utf8.len(text) or #text
end

local function describe(value)
  if type(value) == "string" then
    return "a str", char_count(value), head_chars(value, 500)
  elseif value == nil then
    return "None", 0, "(no context)"
  end
  local text = json.encode(value)
  local kind = (json.is_array(value) or (#value > 0)) and "a list (from JSON)" or "a dict (from JSON)"
  return kind, char_count(text), head_chars(text, 500)
end

-- Puts `context` into the sandbox: small values as an injected variable, large ones as a file
-- read there, so 100 MB never travel inside a JSON request or a prompt.
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
    and ("with open(%q, 'rb') as _f:\n    context = _f.read().decode('utf-8', 'surrogateescape')\ndel _f"):format(path)
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

--- A run: the state of one loop in the tree (root or child).
local Run = {}
Run.__index = Run

function Run:event(e)
  e.depth, e.run = self.depth, self.id
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

-- Settles a reserved call with what it used.
function Run:settle(ticket, label, res)
  if not res then return self.budget:settle(ticket, label) end
  self.budget:settle(ticket, label, res.usage or {}, self:cost_of(label, res.usage))
end

local function prompt_chars(req)
  local n = #(req.system or "")
  for _, m in ipairs(req.messages) do n = n + #m.content end
  return n
end

-- One model call for the loop (a turn or the extraction), through the budget. how: final (the
-- extraction: may use the time and tokens kept for it).
-- Returns the llm result, or nil, err, "budget" when the budget refuses it.
function Run:model_call(model, req, how)
  how = how or {}
  local label = llm.label(model)
  if self:time_left(how.final) == 0 then
    return nil, ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time")),
           "budget"
  end
  local ticket, why = self.budget:reserve{prompt_chars = prompt_chars(req), label = label,
    output = self.max_output_tokens, sub = self.depth > 0, price = self:price(label), final = how.final}
  if not ticket then return nil, why, "budget" end
  req.model, req.max_tokens, req.timeout = model, ticket.max_tokens, self:call_timeout(how.final)
  local ok, res, err = pcall(llm.complete, req)
  self:settle(ticket, label, ok and res or nil)
  async.check_interrupt()
  if not ok then return nil, tostring(res) end
  if not res then return nil, tostring(err) end
  return res
end

-- What a trajectory keeps of each sub-call prompt: its head (a prompt may carry megabytes of
-- context, which the sandbox and the trajectory's own start record already hold).
local PROMPT_KEPT = 2000

-- The record of a batch of sub-calls: each prompt (its head) and answer, with the model, its
-- tokens and cost (usage and costs: per item, nil for a refused, failed or cached one).
function Run:sub_prompt_record(kind, prompts, texts, started, label, usage, costs)
  local chars_in, chars_out = 0, 0
  local items = {}
  for i, p in ipairs(prompts) do
    chars_in = chars_in + #p
    chars_out = chars_out + #tostring(texts[i])
    local u = usage and usage[i]
    items[i] = {prompt = #p > PROMPT_KEPT and p:sub(1, PROMPT_KEPT) or p, prompt_chars = #p,
                input_tokens = u and u.input_tokens, output_tokens = u and u.output_tokens,
                cost = costs[i]}
  end
  self:record{type = "subcall", kind = kind, turn = self.turn, count = #prompts, model = label,
              prompt_chars = chars_in, reply_chars = chars_out,
              duration = sys.now() - started, replies = texts, items = items}
end

-- The label of a model the code may use (model: nil for the sub-model), or nil, err.
function Run:allowed_model(model)
  local ok, label = pcall(llm.label, model or self.sub_model)
  if not ok then return nil, tostring(label):gsub("^[^:]*:%d+: ", "") end
  if not self.sub_models[label] then
    local names = {}
    for name in pairs(self.sub_models) do names[#names + 1] = name end
    table.sort(names)
    return nil, ("model %s is not allowed in this run; the code may use %s (the run's sub_models)")
      :format(label, table.concat(names, ", "))
  end
  return label
end

-- Why a prompt cannot be sent to label (its context window), or nil.
function Run:too_big(label, prompt, window)
  if window == nil then window = llm.context_window(label, self.context_windows) end
  local typical = math.ceil(#prompt / 4)
  if window and typical > window then
    return ("context_window: the prompt is about %d tokens (%d characters), more than %s's context "
      .. "window of %d tokens; split it into smaller prompts"):format(typical, #prompt, label, window)
  end
end

-- The output cap for each call of a batch: under a token or cost limit, an even share of what
-- remains (at least BATCH_MIN_OUTPUT), so one item's reservation does not crowd out the rest.
local BATCH_MIN_OUTPUT = 256

function Run:batch_output(prompts, label)
  local want = self.max_output_tokens
  if #prompts < 2 then return want end
  local r = self.budget:remaining()
  local keep, keep_cost = self.budget:kept()
  local prompt_tokens = 0
  for _, p in ipairs(prompts) do prompt_tokens = prompt_tokens + budget_mod.estimate_tokens(#p) end
  if r.tokens then
    want = math.min(want, math.floor((r.tokens - keep - prompt_tokens) / #prompts))
  end
  local price = self:price(label)
  if r.cost and price and price.output > 0 then
    local room = r.cost - keep_cost - prompt_tokens * price.input / 1e6
    want = math.min(want, math.floor(room * 1e6 / price.output / #prompts))
  end
  return math.max(want, BATCH_MIN_OUTPUT)
end

-- ---------- the sub-call cache ----------


-- The cache's folder for opts.cache (true: $XDG_CACHE_HOME/rlm, else ~/.cache/rlm), or nil.
local function cache_dir(cache)
  if not cache then return nil end
  if type(cache) == "string" then return cache end
  return sys.cache_dir() or "/tmp/.cache/rlm"
end

-- The cache entry's path and key for one sub-call.
function Run:cache_entry(label, prompt)
  local key = json.encode{model = label, prompt = prompt}
  local h = sys.hash(key)
  return ("%s/subcalls/%s/%s.json"):format(self.cache, h:sub(1, 2), h), key
end

-- A cached answer {text, usage} for a sub-call, or nil.
function Run:cached(label, prompt)
  if not self.cache then return nil end
  local path, key = self:cache_entry(label, prompt)
  local data = sys.read_file(path)
  local entry = data and json.decode(data)
  if type(entry) == "table" and entry.key == key and type(entry.text) == "string" then return entry end
  return nil
end

function Run:remember(label, prompt, res)
  if not self.cache then return end
  local path, key = self:cache_entry(label, prompt)
  sys.mkdir_p(path:match("^(.*)/[^/]+$"))
  sys.write_file(path, json.encode{key = key, text = res.text, usage = res.usage})
end

-- Sub-calls from code: each prompt is checked and reserved before anything is sent; what the
-- budget cannot afford comes back as an error string in its slot, as a failed call does, so
-- the code sees it and the rest of the batch runs.
function Run:llm_query(prompts, model, kind)
  local label, err = self:allowed_model(model)
  if not label then return nil, err end
  model = model or self.sub_model
  local started = sys.now()
  local texts, sends, caps, tickets, slots = {}, {}, {}, {}, {}
  local refusal   -- a refusal's text, for llm_query (one prompt) to raise
  local output = self:batch_output(prompts, label)
  -- looked up once for the batch (false: none)
  local price = self:price(label) or false
  local window = llm.context_window(label, self.context_windows) or false
  local out_of_time, timeout = self:time_left() == 0, self:call_timeout()
  -- First what each prompt is (too big, cached, out of time, or a call to reserve), then the
  -- calls reserved together, in order, as one reservation after another would be.
  local calls, waiting = {}, {}
  for i, p in ipairs(prompts) do
    local why = self:too_big(label, p, window)
    local hit = not why and self:cached(label, p)
    if hit then
      -- No call is made: nothing is reserved or counted but the hit and what it saved.
      texts[i] = hit.text
      self.cache_hits = self.cache_hits + 1
      self.cache_saved = self.cache_saved + self:cost_of(label, hit.usage, price)
    elseif not why and out_of_time then
      why = ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time"))
    elseif not why then
      calls[#calls + 1] = {prompt_chars = #p, output = output, sub = true, price = price or nil,
                           label = label}
      waiting[#calls] = i
    end
    if why then
      texts[i] = "[ERROR] " .. why
      refusal = refusal or why
    end
  end
  local granted, whys = self.budget:reserve_all(calls)
  for c, i in ipairs(waiting) do
    local ticket = granted[c]
    if ticket then
      local n = #sends + 1
      sends[n], caps[n], tickets[n], slots[n] = prompts[i], ticket.max_tokens, ticket, i
    else
      texts[i] = "[ERROR] " .. whys[c]
      refusal = refusal or whys[c]
    end
  end
  if kind == "llm_query" and refusal then return nil, refusal end
  local ok, results = pcall(llm.batch_prompts, {model = model, timeout = timeout}, sends,
                            {concurrency = self.batch_concurrency, max_tokens = caps})
  if not ok then
    self.budget:settle_all(tickets, label, EMPTY, EMPTY)
    async.check_interrupt()
    return nil, tostring(results)
  end
  -- A failed item becomes an error string in its slot, as DSPy does, so one bad call does not
  -- lose the batch; the code can test for the prefix.
  local usage, costs, spent, spent_costs = {}, {}, {}, {}   -- by prompt; by call
  for n, r in ipairs(results) do
    local slot = slots[n]
    if r.error then
      texts[slot] = "[ERROR] " .. tostring(r.error)
    else
      local cost = self:cost_of(label, r.usage, price)
      spent[n], spent_costs[n] = r.usage or EMPTY, cost
      texts[slot], usage[slot], costs[slot] = r.text, r.usage, cost
      self:remember(label, prompts[slot], r)
    end
  end
  self.budget:settle_all(tickets, label, spent, spent_costs)
  async.check_interrupt()
  self:sub_prompt_record(kind, prompts, texts, started, label, usage, costs)
  return texts
end

function Run:rlm_query(task, context)
  if self.depth + 1 >= self.max_depth then
    local prompt = context and (task .. "\n\nContext:\n" .. tostring(context)) or task
    return self:llm_query({prompt}, nil, "rlm_query_fallback")
  end
  -- A child that could not make a single call is not started at all.
  local r = self.budget:remaining()
  if r.calls and r.calls < 1 then
    return nil, ("max_llm_calls: all %d calls are used; no child run can start"):format(
      self.budget:binding("calls", "max_llm_calls"))
  end
  if self:time_left() == 0 then
    return nil, ("max_time: the run's %g s are up"):format(self.budget:binding("seconds", "max_time"))
  end
  local started = sys.now()
  local child = M.run(setmetatable({
    task = task, context = context, outputs = {"answer"},
    max_iterations = self.opts.child_max_iterations,
    model = self.sub_model, prompts = self.prompts,
    _budget = self.budget:child(self.child_budget), _depth = self.depth + 1, _trace = self.tracer,
    _parent = self.id, on_event = self.on_event,
  }, {__index = self.opts}))
  self:record{type = "subcall", kind = "rlm_query", turn = self.turn, child = child.run_id,
              duration = sys.now() - started, reason = child.reason}
  local answer = child.answer
  if answer == nil then return nil, "the child run ended without an answer: " .. tostring(child.reason) end
  return {type(answer) == "string" and answer or json.encode(answer)}
end

-- The interpreter's handler for code that calls out (llm_query and friends).
function Run:on_call(kind, args)
  if self.recorded_calls then return self:recorded_call(kind) end
  local results, err = self:answer_call(kind, args)
  -- Each answer goes into the step's record, so a resume or a replay can give it again.
  if self.step_calls then
    self.step_calls[#self.step_calls + 1] = {kind = kind, results = results, error = err}
  end
  return results, err
end

-- The next recorded answer, while a recording is replayed; the code must ask in the same order.
function Run:recorded_call(kind)
  local call = table.remove(self.recorded_calls, 1)
  if not call or call.kind ~= kind then
    return nil, ("replay: the code called %s where the recording has %s"):format(
      kind, call and call.kind or "no more calls")
  end
  if call.results == nil or call.results == json.null then return nil, call.error end
  return call.results
end

function Run:answer_call(kind, args)
  for k, v in pairs(args) do
    if v == json.null then args[k] = nil end      -- Python's None
  end
  if kind == "llm_query" then
    return self:llm_query({args.prompt}, args.model, kind)
  elseif kind == "llm_query_batched" then
    return self:llm_query(args.prompts or {}, args.model, kind)
  elseif kind == "rlm_query" then
    return self:rlm_query(args.task, args.context)
  elseif kind == "budget" then
    local v = self.budget:view(self.max_depth - self.depth - 1)
    v.seconds = self:time_left()
    for _, k in ipairs{"calls", "tokens", "cost", "seconds"} do
      if v[k] == nil then v[k] = json.null end
    end
    return {json.object(v)}
  end
  return nil, "unknown call: " .. tostring(kind)
end

-- The absolute time by which a block must end (the run's deadline, less the extraction's
-- share), or nil without max_time.
function Run:deadline()
  local left = self:time_left()
  return left and sys.now() + left
end

function Run:render(name, vars)
  return require("rlm.prompts").render(self.prompts[name], vars)
end

-- Runs one reply's code; returns the submitted fields (validated) or nil, and the output text.
function Run:run_code(blocks, final)
  local outputs, feedback, submitted = {}, nil, nil
  local vars = self.variables
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
    if r.error then break end
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
  if #blocks == 0 and not final then
    feedback = "Your reply had no ```repl code block. Write code to make progress.\n"
  end
  self.variables = vars
  return submitted, table.concat(outputs, "\n"), vars, feedback
end

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

function Run:extract_prompt(reason)
  -- Within half the context window too, so the extraction itself always fits.
  local chars = self.context_window and math.min(EXTRACT_CHARS, self.context_window * 3 // 2)
    or EXTRACT_CHARS
  return self:render("extract", {task = self.task, reason = reason,
                                 trajectory = self:trajectory_text(chars),
                                 outputs = table.concat(self.outputs, ", ")})
end

-- Keeps back from every other call what the final extraction needs (a conservative estimate):
-- a run stopped by a limit still ends with an answer.
function Run:keep_for_extraction()
  local tokens = budget_mod.estimate_tokens(#self.system + #self:extract_prompt("x") + 200) + 512
  local p = self:price(llm.label(self.model))
  self.budget.keep = {tokens = tokens, cost = p and tokens * math.max(p.input, p.output) / 1e6 or 0}
end

function Run:extract(reason)
  local prompt = self:extract_prompt(reason)
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
  return budget_mod.estimate_tokens(prompt_chars{system = self.system, messages = messages})
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

-- What the budget spent since `before` (a usage table).
local function spent_since(budget, before)
  local now = budget:usage()
  return {calls = now.calls - before.calls, llm_calls = now.llm_calls - before.llm_calls,
          input_tokens = now.input_tokens - before.input_tokens,
          output_tokens = now.output_tokens - before.output_tokens, cost = now.cost - before.cost}
end

-- The reply of a turn: the recorded one while a recording is replayed (its sub-call answers
-- queued for the code), else the model's.
function Run:turn_reply(messages)
  local recorded = self.replay and self.replay.steps[self.turn]
  if recorded then
    self.recorded_calls = {table.unpack(recorded.calls or {})}
    local u = recorded.usage or {}
    self.budget:add_spent({input_tokens = u.input_tokens, output_tokens = u.output_tokens,
                           cost = self:cost_of(llm.label(self.model), u)}, llm.label(self.model))
    self.budget:add_spent(recorded.sub_usage, "recorded sub-calls")
    return {text = recorded.reply, usage = recorded.usage}, nil, nil, recorded
  end
  self.recorded_calls = nil
  return self:model_call(self.model, {system = self.system, messages = messages})
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

function Run:loop()
  local desc_type, chars, preview = describe(self.context)
  local vars = {
    task = self.task, context_type = desc_type, context_chars = chars, context_preview = preview,
    outputs = table.concat(self.outputs, ", "),
    submit_signature = table.concat(self.outputs, "=..., ") .. "=...",
    max_iterations = self.max_iterations, max_llm_calls = self.budget.limits.max_llm_calls or "unlimited",
    max_output_chars = self.max_output_chars, sub_capacity = self.sub_capacity,
  }
  self.system = self:render("system", vars)
  self.first_message = self:render("first", vars)
  local messages = {{role = "user", content = self.first_message}}
  local loaded, why, r = sandbox_step(load_context, self.interp, self.context, self.inline_context_chars)
  if not loaded then return {reason = "sandbox_error", detail = why} end
  self.variables = r and r.variables
  self.variables_more = r and r.variables_more

  for turn = 1, self.max_iterations do
    self.turn = turn
    local t0 = sys.now()
    if self.replay and not self.replay.steps[turn] then
      if self.replay.only then return {reason = "replayed"} end
      self.replay = nil
      self:record{type = "resume", turn = turn}
    end
    -- A turn is sent only if the extraction can still be afforded after it.
    if self.depth == 0 then self:keep_for_extraction() end
    if not self.replay then
      messages = self:fit_history(messages)
    elseif self.replay.compactions[turn] then
      messages = self:summarised(messages, self.replay.compactions[turn].summary)
    end
    local reply, err, refused, recorded = self:turn_reply(messages)
    if refused then return {reason = budget_reason(err), detail = err, extract = true} end
    if not reply then
      return {reason = "model_error", detail = "model call failed: " .. tostring(err), extract = true}
    end
    local request_chars = prompt_chars{system = self.system, messages = messages}
    messages[#messages + 1] = {role = "assistant", content = reply.text}
    self.steps_code, self.step_calls = {}, {}
    local before = self.budget:usage()
    local blocks, final = parse.code_blocks(reply.text), parse.final(reply.text)
    local ran, submitted, output, pyvars, feedback = sandbox_step(self.run_code, self, blocks, final)
    if not ran then return {reason = "sandbox_error", detail = submitted, extract = true} end
    if recorded then self:compare(recorded) end
    local step = {type = "step", turn = turn, prompt_chars = request_chars, reply = reply.text,
                  code = self.steps_code, output = output, calls = self.step_calls,
                  feedback = feedback, variables = variables_line(pyvars, self.variables_more),
                  usage = reply.usage, sub_usage = spent_since(self.budget, before),
                  duration = sys.now() - t0}
    self.steps[#self.steps + 1] = step
    self:record(step)
    self:warn_budget()
    self:event{type = "turn", turn = turn, max_iterations = self.max_iterations,
               usage = self.budget:usage()}
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
      error(("max_cost needs a price for %s: give one with prices = {[%q] = {input = USD, output "
        .. "= USD}} (per million tokens), or a prices file (prices_file, RLM_PRICES)"):format(
        label, label), 0)
    end
  end
end

local function new_run(opts)
  run_counter = run_counter + 1
  local depth = opts._depth or 0
  local prompts = setmetatable({}, {__index = require "rlm.prompts"})
  for k, v in pairs(opts.prompts or {}) do prompts[k] = v end
  local model = opts.model or sys.getenv("RLM_MODEL")
  if not model then
    error("no model: pass model = \"provider/name\" or set RLM_MODEL (e.g. openai/gpt-4o)", 0)
  end
  -- A missing key must fail here, before any sandbox exists, not at the first turn.
  local ok, err = pcall(llm.check, model)
  if ok and opts.sub_model then ok, err = pcall(llm.check, opts.sub_model) end
  if not ok then error(tostring(err):gsub("^[^:]*:%d+: ", ""), 0) end
  local self = setmetatable({
    opts = opts, task = opts.task, context = opts.context,
    outputs = option(opts, "outputs"), model = model, sub_model = opts.sub_model or model,
    max_iterations = option(opts, "max_iterations"), max_depth = option(opts, "max_depth"),
    max_output_chars = option(opts, "max_output_chars"),
    llm_call_timeout = option(opts, "llm_call_timeout"), sub_capacity = option(opts, "sub_capacity"),
    inline_context_chars = option(opts, "inline_context_chars"),
    batch_concurrency = option(opts, "batch_concurrency"),
    max_output_tokens = option(opts, "max_output_tokens"),
    extract_seconds = depth == 0 and opts.max_time
      and math.min(option(opts, "extract_seconds"), opts.max_time * 0.1) or 0,
    child_budget = opts.child_budget, context_windows = opts.context_windows,
    history = option(opts, "history"), compact_at = option(opts, "compact_at"),
    replay = opts._replay, differences = opts._replay and {} or nil,
    cache = cache_dir(opts.cache), cache_hits = 0, cache_saved = 0,
    prompts = prompts, depth = depth, parent = opts._parent,
    id = ("r%d-%d"):format(sys.getpid(), run_counter),
    on_event = opts.on_event, steps = {},
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
  if self.history ~= "full" and self.history ~= "compact" and type(self.history) ~= "function" then
    error('history must be "full", "compact" or a function(messages, info) -> messages', 0)
  end
  self.tracer = opts._trace or trace.writer(opts.trace, opts._append, opts.events)
  return self
end

--- A call handler for a bare interpreter (rlm.interpreter{sub_model = ...}): the code gets
-- llm_query, llm_query_batched and rlm_query under one budget, without the loop around it.
function M.handler(opts)
  local self = new_run(setmetatable({task = "(interpreter)", model = opts.sub_model or opts.model},
                                    {__index = opts}))
  return function(kind, args) return self:on_call(kind, args) end
end

-- The root run of a trajectory file: its start record, its steps by turn (the last record of a
-- turn wins: a resumed run appends) and its compactions by turn.
local function recorded_run(path)
  local records, cut = trace.read(path)
  if not records then error("cannot read the trajectory: " .. tostring(cut), 0) end
  local start, steps, compactions = nil, {}, {}
  for _, r in ipairs(records) do
    if (r.depth or 0) == 0 then
      if r.type == "start" and not start then start = r
      elseif r.type == "step" and r.turn then steps[r.turn] = r
      elseif r.type == "compaction" and r.turn then compactions[r.turn] = r end
    end
  end
  if not start then error(path .. " holds no run (no start record)", 0) end
  local list = {}
  while steps[#list + 1] do list[#list + 1] = steps[#list + 1] end
  return {start = start, steps = list, compactions = compactions, cut = cut}
end

-- The options of a run that resumes or replays `path`: what the recording says, under what
-- opts give (the context must be given again when it was too big to record).
local function from_recording(opts, path, only)
  local rec = recorded_run(path)
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
  o._replay = {steps = rec.steps, compactions = rec.compactions, only = only}
  if not only and opts.trace == nil then o.trace, o._append = path, true end
  return o
end

-- Whether a name is an interpreter option: of the run's backend, else (a name that is not
-- the run's own) of any backend. Only the run's backend is loaded for the names a run takes,
-- so a local run loads no other backend's client.
local function interpreter_option_check(opts)
  local interpreter = require "rlm.interpreter"
  local chosen = option(opts, "backend") or interpreter.defaults.backend
  return function(k)
    return interpreter.accepts(k, chosen)
      or not (RUN_OPTIONS[k] or M.defaults[k] ~= nil) and interpreter.accepts(k)
  end
end

-- The interpreter options among opts (env, network, volume_name, snapshot, daytona = {...}
-- and the rest), with the run's own settings and its call handler.
local function interpreter_options(self, opts)
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
local function check_options(opts)
  local interpreter = require "rlm.interpreter"
  local accepts = interpreter_option_check(opts)
  local names = {}
  for k in pairs(RUN_OPTIONS) do names[#names + 1] = k end
  for k in pairs(M.defaults) do names[#names + 1] = k end
  for k in pairs(interpreter.options) do names[#names + 1] = k end
  for k in pairs(opts) do
    if type(k) ~= "string" or not (RUN_OPTIONS[k] or M.defaults[k] ~= nil or accepts(k)) then
      error(require("rlm.args").unknown("rlm.run option", k, names), 0)
    end
  end
  for k, v in pairs(opts) do
    local want = RUN_OPTIONS[k] or (M.defaults[k] ~= nil and type(M.defaults[k])) or "any"
    if want ~= "any" and type(v) ~= want then
      error(("rlm.run option %s must be a %s, not a %s"):format(k, want, type(v)), 0)
    end
    if want == "number" and v < 0 then error(("rlm.run option %s must be >= 0"):format(k), 0) end
  end
end

-- Starts the run's interpreter; or nil and why the sandbox could not start.
local function start_interpreter(interp)
  return sandbox_step(function()
    local ok, err = pcall(interp.start, interp)
    if not ok then interp:shutdown() error(err, 0) end
    return interp
  end)
end

-- The loop in its sandbox, and the extraction when it ended without SUBMIT.
function Run:go(interp)
  local started, err = start_interpreter(interp)
  if not started then return {reason = "sandbox_error", detail = err} end
  local _ <close> = interp
  self.interp = interp
  local r = self:loop()
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

--- Runs the loop; see the module comment and README for the options.
function M.run(opts)
  if type(opts) ~= "table" then error("rlm.run needs a table of options with a task", 2) end
  if not opts._depth then
    -- the caller's own table: aliases (sub_lm, max_recursion_depth ...) and checks
    opts = require("rlm.interpreter").unalias(opts, 2)
    check_options(opts)
  end
  if opts.resume then opts = from_recording(opts, opts.resume, false) end
  if type(opts.task) ~= "string" or opts.task == "" then
    error("rlm.run needs a non-empty 'task' string", 2)
  end
  local self = new_run(opts)
  -- Misuse (an unknown backend, a bad limit) raises here, as rlm.interpreter does, before
  -- anything is recorded or started; only starting the sandbox can fail as data.
  local made, interp = pcall(require("rlm.interpreter").new, interpreter_options(self, opts))
  if not made then error((tostring(interp):gsub("^[^:\n]+%.lua:%d+: ", "")), 2) end
  local owns_trace = opts._trace == nil
  local chars = select(2, describe(self.context))
  if not opts._replay or not opts._append then
    -- A small context is kept in the record, so `rlm replay` and `--resume` need nothing else.
    self:record{type = "start", task = self.task, model = self.model, sub_model = self.sub_model,
                outputs = self.outputs, context_chars = chars, execute_timeout = opts.execute_timeout,
                max_output_chars = self.max_output_chars,
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
  result.usage = self.budget:usage()
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
  return result
end

--- Runs a recorded trajectory again against its recorded model replies and sub-call answers,
-- with no model call, and compares each block's output with the recording. Returns the result
-- with `differences` ({turn, block, recorded, replayed}, empty when all matched).
function M.replay(path, opts)
  local o = from_recording(opts or {}, path, true)
  o.trace = nil
  local res = M.run(o)
  res.differences = res.differences or {}
  return res
end

return M
