--- The tools `rlm mcp` serves: M.definitions is the tool set, one table entry a tool (below);
-- M.new turns it into {name, title, description, inputSchema, outputSchema?, annotations,
-- run(args, ctx) -> MCP result} for rlm.mcp.server, which validates the arguments first.
--
--   local tools = require("rlm.mcp.tools").new{backend =, model =, execute_timeout =}
--   tools.list       the definitions, in the order clients see them
--   tools.close_session(session)   ends the session's persistent sandbox
--
-- User code that raises is data (the result says so in its text and structuredContent);
-- isError marks calls that could not do their job: bad arguments, a sandbox that would not
-- start, a run that failed.
local async = require "rlm.async"
local budget = require "rlm.budget"
local client_tools = require "rlm.mcp.client_tools"
local common = require "rlm.backend.common"
local json = require "rlm.json"
local loop = require "rlm.core.loop"
local mcp = require "rlm.mcp.server"
local prompts = require "rlm.prompts"
local registry = require "rlm.registry"
local user_tools = require "rlm.tools"

local M = {}

local SESSION_LIFETIME = 24 * 3600   -- the persistent sandbox lives as long as the session
-- ...but on Daytona one nobody uses stops, and so is deleted, after this long: the server frees
-- it sooner (sandbox_idle), so this only ends one the server lost (a crash, a kill -9).
local SESSION_IDLE = 15 * 60
local DECOMPOSE_CONCURRENCY = 2

-- ---------------------------------------------------------------- helpers

M.base64_encode = common.base64_encode
M.base64_decode = common.base64_decode

local function str(description, extra)
  local s = {type = "string", description = description}
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

-- rlm-mcp's sandboxes kept files under /home/daytona itself; here that is the workspace.
local HOME, WORKSPACE = common.HOME, common.WORKSPACE

--- A path as the backends take it: /home/daytona/... outside the workspace and the memory
-- volume (rlm-mcp's layout) is read as under the workspace.
local function sandbox_path(path)
  if path == nil or path == HOME or path == HOME .. "/" then return path and WORKSPACE end
  local rest = path:match("^" .. HOME .. "/(.*)$")
  local top = rest and rest:match("^[^/]*")
  if rest and top ~= "workspace" and top ~= "memory" then return WORKSPACE .. "/" .. rest end
  return path
end
M.sandbox_path = sandbox_path

--- The byte range [first, last) of data to send from offset, at most length bytes, never
-- cutting a UTF-8 character when the encoding is utf-8. Returns first, last.
function M.part(data, offset, length, encoding)
  local first = math.min(offset, #data)
  local last = math.min(#data, first + length)
  if encoding == "utf-8" then
    -- Back off to the start of a character (continuation bytes are 0x80-0xBF).
    while last < #data and last > first and data:byte(last + 1) >= 0x80 and data:byte(last + 1) < 0xC0 do
      last = last - 1
    end
    while first < #data and first > 0 and data:byte(first + 1) >= 0x80 and data:byte(first + 1) < 0xC0 do
      first = first - 1
    end
  end
  return first, last
end

local function object(properties, required)
  return {type = "object", properties = properties, required = json.array(required or {}),
          additionalProperties = false}
end

-- The `workspace` argument of the tools that keep a sandbox between calls, and its echo.
local WORKSPACE = {type = "string", description = "the handle an earlier call returned: run in " ..
  "that call's sandbox (files and variables kept). Without it: this session's sandbox, or, on " ..
  "protocol 2026-07-28 (no sessions), a new one whose handle the result gives"}

local function in_workspace(schema)
  schema.properties.workspace = WORKSPACE
  return schema
end

local function out_workspace(schema)
  schema.properties.workspace = {type = "string", description = "the sandbox's handle (workspace)"}
  return schema
end

-- A payload (output, answers) up to INLINE bytes travels twice: in the text for the model and
-- in structuredContent, as the spec suggests for older clients. A bigger one travels once, in
-- the text; structuredContent then lists its fields in `omitted`. An answer over what one
-- message carries at all is saved as a file in the sandbox (keep_oversize).
local INLINE = 64 * 1024

local BIG_FIELDS = {
  omitted = {type = "array", items = {type = "string"}, description = "fields left out here " ..
             "because they were big: their text is in the content, sent once"},
  saved_to = {type = "string", description = "the answer was too big for one message: it is " ..
              "this file in the sandbox (read it with sandbox_download)"},
  saved_bytes = {type = "integer", description = "the size of that file"},
}

local function with_big_fields(properties)
  for k, v in pairs(BIG_FIELDS) do properties[k] = v end
  return properties
end

local function payload_once(structured, fields)
  local size = 0
  for _, f in ipairs(fields) do
    local v = structured[f]
    if type(v) == "string" then size = size + #v elseif v ~= nil then size = size + #json.encode(v) end
  end
  if size <= INLINE then return structured end
  local omitted = json.array()
  for _, f in ipairs(fields) do
    if structured[f] ~= nil and structured[f] ~= "" then
      structured[f] = nil
      omitted[#omitted + 1] = f
    end
  end
  structured.omitted = omitted
  return structured
end

local RUN_OUTPUT = object(with_big_fields{
  stdout = {type = "string"}, stderr = {type = "string"},
  error = {type = "string", description = "the Python exception, when the code raised"},
  duration = {type = "number"}, timed_out = {type = "boolean"},
  state_lost = {type = "boolean"},
  submitted = {type = "object", description = "fields passed to SUBMIT(...), if it was called"},
  workspace = {type = "string", description = "the sandbox's handle (workspace)"},
}, {"duration"})

-- The MCP result of one execute(): text for the model, the same facts as structuredContent.
local function run_result(out, run)
  local parts = {}
  if #run.stdout > 0 then parts[#parts + 1] = run.stdout end
  if #run.stderr > 0 then parts[#parts + 1] = "[stderr]\n" .. run.stderr end
  if run.error then parts[#parts + 1] = "[error] " .. (run.traceback or run.error) end
  if out then parts[#parts + 1] = "[submitted] " .. json.encode(out) end
  local structured = {stdout = run.stdout, stderr = run.stderr, error = run.error,
                      duration = run.duration, timed_out = run.timed_out,
                      state_lost = run.state_lost, submitted = out and json.object(out) or nil}
  return mcp.text_result(#parts > 0 and table.concat(parts, "\n") or "(no output)",
                         payload_once(structured, {"stdout", "stderr", "submitted"}))
end

-- A lock whose holder may be cancelled: release wakes every waiter and each checks again, so
-- a waiter that was closed while queued cannot strand the others. acquire() returns a guard
-- for `local g <close> = ...`, released also when a cancelled call's task is closed.
local function new_lock()
  local lock = {held = false, waiters = {}}
  local guard = setmetatable({}, {__close = function()
    lock.held = false
    local waiters = lock.waiters
    lock.waiters = {}
    for _, id in ipairs(waiters) do loop.ready(id) end
  end})
  function lock.acquire()
    while lock.held do
      local id = loop.new_id()
      lock.waiters[#lock.waiters + 1] = id
      async.await(id)
    end
    lock.held = true
    return guard
  end
  return lock
end

-- Runs fn as a task that a cancellation of the call closes (its sandboxes end with it).
local function cancellable(ctx, fn)
  local task = async.spawn(fn)
  ctx.on_cancel(function()
    if coroutine.status(task.co) == "suspended" then coroutine.close(task.co) end
  end)
  return task
end

-- ---------------------------------------------------------------- the server's state

--- Seconds a tool's code may run by default (rlm mcp --execute-timeout changes it).
M.CALL_TIMEOUT = 300

local Server = {}
Server.__index = Server

-- A call's code runs for minutes, not the sandbox's lifetime: a stuck call would hold the
-- session's sandbox (and its lock) for a day. Its code has the operator's tools (rlm mcp
-- --tools) and the tools of the client's servers.
function Server:interpreter(lifetime, idle, servers)
  local backend = self.cfg.backend or require("rlm.interpreter").defaults.backend
  return require("rlm").interpreter{backend = backend, timeout = lifetime,
                                    execute_timeout = self.cfg.execute_timeout or M.CALL_TIMEOUT,
                                    idle_timeout = backend == "daytona" and idle or nil,
                                    tools = user_tools.combine(self.cfg.tools, servers),
                                    network = self.cfg.network}
end

-- The session's sandbox and the client's tool servers: a new sandbox gets the servers of this
-- call (else those the session gave before); a running one changes to this call's servers when
-- they differ. The tools are had here, so a server that cannot be reached fails this call.
function Server:session_tools(st, servers)
  if st.interp == nil or st.interp.closed then
    local use = servers or st.tool_servers
    local interp = self:interpreter(SESSION_LIFETIME, SESSION_IDLE, use)
    local ok, err = pcall(interp.load_tools, interp)
    if not ok then interp:shutdown(); error(err, 0) end
    st.interp, st.tool_servers = interp, use
  elseif servers and json.encode(servers) ~= json.encode(st.tool_servers or {}) then
    st.interp:set_tools(user_tools.combine(self.cfg.tools, servers))
    st.tool_servers = servers
  end
end

-- The session's persistent sandbox, started on first use. Calls on it take turns: the caller
-- holds the returned guard (`local turn <close>`) while it uses the sandbox.
function Server:session_interp(ctx)
  local st = ctx.state
  st.lock = st.lock or new_lock()
  local turn = st.lock.acquire()
  if st.interp == nil or st.interp.closed then
    -- this call runs in a new sandbox: it is the one to say that the old one was freed
    ctx.sandbox_freed, st.freed_after = st.freed_after, nil
  end
  local ok, err = pcall(self.session_tools, self, st, ctx.tool_servers)
  if not ok then
    getmetatable(turn).__close()
    error(err, 0)
  end
  -- A cancelled call must not leave the session's driver running its code.
  ctx.on_cancel(function()
    if st.interp then st.interp:shutdown(); st.interp = nil end
  end)
  return st.interp, turn
end

function Server:close_session(session)
  local interp = session.state.interp
  session.state.interp = nil
  if interp then interp:shutdown() end
end

-- The session was idle for `seconds`: its sandbox goes (unless a call holds it), and the next
-- call on it is told that the state was lost.
function Server:free_sandbox(session, seconds)
  local st = session.state
  if not st.interp or (st.lock and st.lock.held) then return end
  st.interp:shutdown()
  st.interp, st.freed_after = nil, seconds
end

-- A session tool's result, with a note first when the session's sandbox had been freed (and
-- state_lost in its structured result, where the tool's output schema has it).
local function with_freed_note(def, result, seconds)
  local note = ("[note] This session's sandbox was idle for more than %s s and was freed: its " ..
    "variables and files are gone, and this call ran in a new one."):format(
    ("%g"):format(seconds))
  table.insert(result.content, 1, {type = "text", text = note})
  local schema = def.outputSchema
  if type(result.structuredContent) == "table" and schema and schema.properties.state_lost then
    result.structuredContent.state_lost = true
  end
  return result
end

-- ---------------------------------------------------------------- workspaces
-- The stateless revision (2026-07-28) has no sessions: a client keeps a sandbox between calls by
-- passing the handle the first call returned (`workspace`). A workspace is a session's state
-- without the session; its sandbox is freed after WORKSPACE_SANDBOX_IDLE seconds unused, and the
-- workspace itself is forgotten after WORKSPACE_IDLE (or, past MAX_WORKSPACES, the oldest unused).
local WORKSPACE_SANDBOX_IDLE, WORKSPACE_IDLE, MAX_WORKSPACES = 600, 3600, 1000

function Server:sweep_workspaces(now)
  local n, oldest, oldest_at = 0, nil, math.huge
  for handle, ws in pairs(self.workspaces) do
    local idle = now - ws.used
    local busy = ws.state.lock and ws.state.lock.held
    if not busy and idle > WORKSPACE_IDLE then
      self:close_session(ws)
      self.workspaces[handle] = nil
    else
      if not busy and idle > WORKSPACE_SANDBOX_IDLE then self:free_sandbox(ws, WORKSPACE_SANDBOX_IDLE) end
      n = n + 1
      if not busy and ws.used < oldest_at then oldest, oldest_at = handle, ws.used end
    end
  end
  if n >= MAX_WORKSPACES and oldest then
    self:close_session(self.workspaces[oldest])
    self.workspaces[oldest] = nil
  end
end

-- Points ctx.state at the workspace args.workspace names, or at a new one when a stateless
-- request names none (its handle is returned). nil, err for a handle this server does not know.
function Server:use_workspace(args, ctx)
  local now = require("rlm.sys").now()
  self:sweep_workspaces(now)
  local handle = args.workspace
  if handle == nil and not (ctx.session and ctx.session.stateless) then return nil end
  if handle == nil then
    handle = "ws-" .. require("rlm.sys").random_hex(12)
    self.workspaces[handle] = {state = {}}
  end
  local ws = self.workspaces[handle]
  if not ws then
    return nil, ("no workspace %s: it ended after %d s unused, or the server restarted. Call " ..
      "without `workspace` to start a new one."):format(handle, WORKSPACE_IDLE)
  end
  ws.used = now
  ctx.state = ws.state
  return handle
end

-- The result of a call in a workspace: its handle in structuredContent, and said in the text
-- when the call started it.
local function with_workspace(result, handle, started)
  if type(result.structuredContent) == "table" then result.structuredContent.workspace = handle end
  if started and not result.isError then
    result.content[#result.content + 1] = {type = "text", text = ("[workspace] %s: pass " ..
      "workspace=\"%s\" to later calls to keep this sandbox's files and variables."):format(handle, handle)}
  end
  return result
end

-- ---------------------------------------------------------------- answers too big to send

-- True when result's JSON is over what one message may carry (cfg.max_result, less room for
-- what the server adds around it).
function Server:too_big(result)
  local cap = self.cfg.max_result
  if not cap then return false end
  local ok, text = pcall(json.encode, result)
  return not ok or #text > cap - 4096
end

-- A result too big for one message: its text becomes a file in the session's sandbox (or the
-- workspace handle names), and the result says where and how to read it; its small facts stay.
function Server:keep_oversize(def, result, ctx, handle)
  local texts = {}
  for _, c in ipairs(result.content or {}) do
    if c.type == "text" then texts[#texts + 1] = c.text end
  end
  local text = table.concat(texts, "\n")
  local path = ("results/%s-%s.txt"):format(def.name, require("rlm.sys").random_hex(4))
  local interp, turn <close> = self:session_interp(ctx)
  local ok, err = interp:upload(sandbox_path(path), text)
  if not ok then
    return mcp.error_result(("The answer is %d bytes, more than one message carries, and " ..
      "saving it in the sandbox failed: %s"):format(#text, tostring(err)))
  end
  local structured = {}
  for k, v in pairs(type(result.structuredContent) == "table" and result.structuredContent or {}) do
    local fits, enc = pcall(json.encode, v)
    if fits and #enc <= 4096 then structured[k] = v end
  end
  structured.saved_to, structured.saved_bytes = path, #text
  local note = ("The answer is %d bytes, more than one message carries here (rlm mcp " ..
    "--max-result %d). It is saved in the sandbox as %s: read it with sandbox_download " ..
    "(path=\"%s\"%s), which sends it in parts (offset, length)."):format(#text,
    self.cfg.max_result, path, path, handle and (', workspace="' .. handle .. '"') or "")
  return mcp.text_result(note, structured, result.isError)
end

local USAGE_KEYS = {"calls", "llm_calls", "input_tokens", "output_tokens", "total_tokens", "cost",
                    "cache_read_tokens", "cache_write_tokens", "prompt_cache_saved"}

function Server:add_usage(usage)
  if type(usage) ~= "table" then return end
  self.totals.runs = self.totals.runs + 1
  budget.add_usage(self.totals, usage, USAGE_KEYS)
end

-- What the run of opts would cost (rlm.preview), worked out before it starts; nil when a dry
-- run cannot tell (the run itself then says why).
local function estimate(opts)
  local dry = {dry_run = true}
  for k, v in pairs(opts) do if k ~= "on_event" then dry[k] = v end end
  local ok, res = pcall(require("rlm").run, dry)
  return ok and res.preview or nil
end

-- One rlm.run with progress reported per turn (or by stage(e)); returns the result table, with
-- the estimate made before it started.
function Server:run_loop(ctx, opts, stage)
  opts.model, opts.backend = self.cfg.model, self.cfg.backend
  opts.tools = user_tools.combine(self.cfg.tools, ctx.tool_servers)
  opts.network = self.cfg.network
  local before = estimate(opts)
  -- The call's max_cost is shared by its runs (rlm_decompose makes several): each gets what is left.
  if ctx.max_cost then opts.max_cost = math.max(0, ctx.max_cost - (ctx.spent or 0)) end
  opts.on_event = function(e)
    if e.type == "budget_warning" then
      ctx.log("warning", ("budget: %s has %.4g of %.4g left"):format(e.limit, e.remaining, e.of), "rlm")
    end
    if e.type == "turn" and (e.depth or 0) == 0 then
      if stage then stage(e) else
        ctx.progress(e.turn, e.max_iterations, ("turn %d of at most %d"):format(e.turn, e.max_iterations))
      end
      -- A log line per turn: what a client shows of a long run even without progress.
      local u = e.usage or {}
      local cache = budget.cache_words(u)
      ctx.log("info", ("turn %d of at most %d: %d tokens, %d sub-calls, $%.4f, %.1f s%s"):format(
        e.turn, e.max_iterations, u.total_tokens or 0, u.llm_calls or 0, u.cost or 0,
        u.elapsed or 0, cache ~= "" and ", " .. cache or ""), "rlm")
    end
  end
  -- Each call of a tool, as the trajectory records it: a line of the call's log.
  opts.events = function(r)
    if r.type == "subcall" and r.kind == "tool" then
      local failed = r.replies and r.replies[1] and r.replies[1]:match("^%[ERROR%] ([^\n]*)")
      ctx.log(failed and "warning" or "info", ("tool %s: %s (%.2f s)"):format(r.tool,
        failed and ("failed: " .. failed) or ("answered " .. r.reply_chars .. " chars"),
        r.duration or 0), "rlm")
    end
  end
  -- A cancelled call's task is closed mid-run: the count drops in a <close> handler.
  self.running = self.running + 1
  local counted <close> = setmetatable({}, {__close = function() self.running = self.running - 1 end})
  local ok, res = pcall(require("rlm").run, opts)
  if not ok then error(res, 0) end
  self:add_usage(res.usage)
  res.estimate = before
  ctx.spent = (ctx.spent or 0) + (type(res.usage) == "table" and res.usage.cost or 0)
  return res
end

-- The MCP result of a run: the one output as text (several: a JSON object), the run's facts as
-- structuredContent; a run without an answer is an error result that says why.
local function loop_result(res, outputs)
  local fields = res.fields or {}
  local structured = payload_once({fields = json.object(fields), reason = res.reason,
                      detail = res.detail, iterations = res.iterations, submitted = res.submitted,
                      extracted = res.extracted, usage = res.usage, estimate = res.estimate}, {"fields"})
  if not res.submitted and not res.extracted then
    return mcp.text_result(("The run ended without an answer: %s%s"):format(tostring(res.reason),
                           res.detail and " (" .. res.detail .. ")" or ""), structured, true)
  end
  local text
  if #outputs == 1 then
    local v = fields[outputs[1]]
    text = type(v) == "string" and v or json.encode(v == nil and json.null or v)
  else
    text = json.encode(json.object(fields))
  end
  return mcp.text_result(text, structured)
end

local function number(description, minimum, maximum)
  return {type = "number", minimum = minimum, maximum = maximum, description = description}
end

local function integer(description, minimum, maximum)
  return {type = "integer", minimum = minimum, maximum = maximum, description = description}
end

-- What the sandbox's Python has: code written for it reaches for numpy and pandas first.
local PACKAGES = " Python's standard library is there; other packages (numpy, pandas, ...) only " ..
  "when installed for the sandbox's Python (Debian's python3-* packages, or RLM_VENV): check " ..
  "with importlib.util.find_spec before relying on one."
-- What a model should know before its first call of a run or of code.
local RUN_NOTE = " Cost and time: a run makes model calls billed to this server's key (often " ..
  "2 to 20 turns, plus sub-calls; minutes for big inputs); max_cost caps this call's spend in " ..
  "USD (no cap by default), rlm_status shows the usage so far. The model's code runs in a fresh " ..
  "sandbox without network and with Python's standard library (numpy, pandas and other " ..
  "packages only where the sandbox image has them); it cannot see files sent with " ..
  "sandbox_upload: pass the material as context. An answer over 64 KiB comes once, in the " ..
  "text; one too big for a message is saved as a file in the sandbox (saved_to)."

local function sandbox_note()
  local l = require("rlm.limits")
  return (" The sandbox has no network; its code may use %s of memory and write files of up " ..
    "to %s; output over 64 KiB comes once, in the text."):format(l.human(l.defaults.memory),
    l.human(l.defaults.file_size))
end

-- The input of an RLM run tool: its own properties and max_cost.
local function run_input(properties, required)
  properties.max_cost = {type = "number", minimum = 0, description = "the most this call may " ..
    "spend on model calls, in USD, all turns and sub-calls together (default: no cap); a run " ..
    "that would pass it stops without an answer"}
  properties.tool_servers = client_tools.SCHEMA
  return object(properties, required)
end

-- What an RLM run answers in structuredContent (more fields may come; none is required).
local LOOP_OUTPUT = {type = "object", additionalProperties = true, properties = with_big_fields{
  fields = {type = "object", description = "the output fields the run submitted"},
  reason = {type = "string", description = "why the run ended: submitted, or a limit"},
  detail = {type = "string"}, iterations = {type = "integer"},
  submitted = {type = "boolean"}, extracted = {type = "boolean"},
  usage = {type = "object", description = "model calls, tokens and cost (USD) of this call"},
  subtasks = {type = "array", description = "rlm_decompose: each sub-task and its answer"},
  workspace = {type = "string", description = "the sandbox's handle (workspace) holding saved_to"},
}}

local DAY = 24 * 3600
local CODE_TIMEOUT = number("seconds before the code is stopped (default 300, at most a day)", 0.1, DAY)

-- ---------------------------------------------------------------- files in parts

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Writes data to path: its size, or nil, err.
local function write_file(interp, path, data)
  local ok, err = interp:upload(path, data)
  if not ok then return nil, err end
  return #data
end

-- Adds data at the end of path (made when missing): the file's size after, or nil, err. The
-- part travels as a file of its own beside the target, which a shell command then appends, so
-- no part of the file is read back.
local function append_part(interp, path, data)
  local part = path .. ".rlm-part"
  local ok, err = interp:upload(part, data)
  if not ok then return nil, err end
  local res, why = interp:shell(("cat %s >> %s && rm -f %s && wc -c < %s"):format(
    sh_quote(part), sh_quote(path), sh_quote(part), sh_quote(path)), 120)
  if not res then return nil, "appending to " .. path .. ": " .. tostring(why) end
  if res.exit ~= 0 then return nil, ("appending to %s: %s"):format(path, res.output) end
  return tonumber(res.output:match("%d+"))
end

local REASONING = str("how much a reasoning model thinks before each answer (rlm.run's " ..
  "reasoning_effort; default: the model's own)", {enum = {"minimal", "low", "medium", "high"}})

-- ---------------------------------------------------------------- the tool set
-- One entry a tool, in the order clients see them: name, title, description, inputSchema,
-- outputSchema (optional), annotations, aliases (rlm-mcp's argument names), and how it runs:
--   loop = function(args) -> opts, outputs     an RLM run (rlm.run options; its prompt text is
--                                              in rlm.prompts as mcp_*)
--   session = function(interp, args) -> result  on the session's persistent sandbox, in turn
--   run = function(server, args, ctx) -> result anything else
-- and task = "optional" for the long ones: on protocol 2026-07-28 they run as tasks for clients
-- that take them (rlm.mcp.tasks).
M.definitions = {
  {
    name = "rlm_execute", title = "Run a task with a Recursive Language Model",
    description = "Solve a task with the RLM loop: a model explores `context` (any size) by " ..
      "writing Python in a sandbox, calling sub-models on pieces, until it submits the answer. " ..
      "Use it for tasks over long documents, logs or data that do not fit in a prompt." .. RUN_NOTE,
    inputSchema = run_input({
      task = str("what to do, in plain words", {minLength = 1}),
      context = str("the material to work on (text or JSON); may be very large"),
      outputs = {type = "array", items = {type = "string"},
                 description = "names of the output fields (default: answer)"},
      max_iterations = integer("turns before the run gives up (default 20)", 1, 100),
      reasoning_effort = REASONING,
    }, {"task"}),
    outputSchema = LOOP_OUTPUT,
    task = "optional",   -- a client that takes tasks gets a handle at once
    annotations = {readOnlyHint = false, openWorldHint = true},
    loop = function(args)
      local outputs = (args.outputs and #args.outputs > 0) and args.outputs or {"answer"}
      return {task = args.task, context = args.context, outputs = outputs,
              max_iterations = args.max_iterations}, outputs
    end,
  },
  {
    name = "rlm_analyze", title = "Answer a question about data",
    description = "Answer a question about `data` (text, CSV, JSON, logs; any size) with the " ..
      "RLM loop, which reads the data in a sandbox instead of a prompt." .. RUN_NOTE,
    inputSchema = run_input({
      data = str("the data to analyze"),
      question = str("the question to answer", {minLength = 1}),
      reasoning_effort = REASONING,
    }, {"data", "question"}),
    outputSchema = LOOP_OUTPUT,
    task = "optional",   -- a client that takes tasks gets a handle at once
    annotations = {readOnlyHint = true, openWorldHint = true},
    loop = function(args)
      return {task = prompts.render(prompts.mcp_analyze, {question = args.question}),
              context = args.data, outputs = {"answer"}}, {"answer"}
    end,
  },
  {
    name = "rlm_code", title = "Write and test code",
    description = "Write code for a task and test it in the sandbox before answering; returns " ..
      "the code, what the tests printed and a short explanation." .. RUN_NOTE,
    inputSchema = run_input({
      task = str("what the code must do", {minLength = 1}),
      language = str("the language (default python; others run through subprocess)"),
      tests = str("test cases or checks the code must pass"),
      context = str("existing code or data the task refers to"),
      reasoning_effort = REASONING,
    }, {"task"}),
    aliases = {description = "task"},
    outputSchema = LOOP_OUTPUT,
    task = "optional",   -- a client that takes tasks gets a handle at once
    annotations = {readOnlyHint = true, openWorldHint = true},
    loop = function(args)
      local task = prompts.render(prompts.mcp_code, {language = args.language or "python",
        checks = args.tests and (" against these checks:\n" .. args.tests .. "\n") or "",
        task = args.task})
      local outputs = {"code", "test_output", "explanation"}
      return {task = task, context = args.context, outputs = outputs}, outputs
    end,
  },
  {
    name = "rlm_decompose", title = "Split a task into sub-tasks and run them",
    description = "Plan: split the task into independent sub-tasks; run each with the RLM loop " ..
      "(two at a time); then combine their answers into one." .. RUN_NOTE,
    inputSchema = run_input({
      task = str("the task to split", {minLength = 1}),
      context = str("material every sub-task may use"),
      max_subtasks = integer("at most this many sub-tasks (default 5)", 1, 10),
      reasoning_effort = REASONING,
    }, {"task"}),
    aliases = {complex_task = "task", num_subtasks = "max_subtasks"},
    outputSchema = LOOP_OUTPUT,
    task = "optional",   -- a client that takes tasks gets a handle at once
    annotations = {readOnlyHint = false, openWorldHint = true},
    run = function(server, args, ctx)
      local n = args.max_subtasks or 5
      local plan = server:run_loop(ctx, {
        task = prompts.render(prompts.mcp_plan, {max_subtasks = n, task = args.task}),
        context = args.context, outputs = {"subtasks"}, max_iterations = 6,
        reasoning_effort = args.reasoning_effort},
        function() ctx.progress(0.5, n + 2, "planning") end)
      local subtasks = plan.fields and plan.fields.subtasks
      if type(subtasks) ~= "table" or #subtasks == 0 then
        return loop_result(plan, {"subtasks"})
      end
      local done = 1
      ctx.progress(done, #subtasks + 2, ("%d sub-tasks"):format(#subtasks))
      local sem = async.semaphore(DECOMPOSE_CONCURRENCY)
      local tasks = {}
      for i = 1, math.min(#subtasks, n) do
        local sub = tostring(subtasks[i])
        tasks[i] = cancellable(ctx, function()
          sem.acquire()
          local ok, res = pcall(server.run_loop, server, ctx, {task = sub, context = args.context,
            outputs = {"answer"}, reasoning_effort = args.reasoning_effort}, function() end)
          sem.release()
          done = done + 1
          ctx.progress(done, #subtasks + 2, "sub-task " .. i .. " finished")
          local answer = ok and res.fields and res.fields.answer
          return {task = sub, answer = answer ~= nil and answer or json.null,
                  error = (not ok) and tostring(res) or nil}
        end)
      end
      local results = json.array()
      for i, t in ipairs(tasks) do results[i] = t:join() end
      local final = server:run_loop(ctx, {
        task = prompts.render(prompts.mcp_combine, {task = args.task}),
        context = {task = args.task, subtasks = results}, outputs = {"answer"}},
        function() end)
      local res = loop_result(final, {"answer"})
      res.structuredContent.subtasks = results
      return res
    end,
  },
  {
    name = "sandbox_exec", title = "Run Python once",
    description = "Run a block of Python in a fresh, isolated sandbox and return its output. " ..
      "Nothing is kept between calls (use sandbox_exec_stateful for that)." .. sandbox_note() .. PACKAGES,
    inputSchema = object({code = str("Python source to run"), timeout = CODE_TIMEOUT,
                          tool_servers = client_tools.SCHEMA}, {"code"}),
    outputSchema = RUN_OUTPUT,
    annotations = {readOnlyHint = false, destructiveHint = false, idempotentHint = true,
                   openWorldHint = false},
    run = function(server, args, ctx)
      local interp <close> = server:interpreter(math.max(60, (args.timeout or 0) + 30), nil,
                                                ctx.tool_servers)
      interp:start()
      return run_result(interp:execute(args.code, nil, {timeout = args.timeout}))
    end,
  },
  {
    name = "sandbox_exec_stateful", title = "Run Python in the session's sandbox",
    description = "Run Python in this session's persistent sandbox: variables, imports and " ..
      "files stay between calls. `reset` clears the variables first (files stay). Cancelling " ..
      "a call ends the sandbox; the next call starts a fresh one." .. sandbox_note() .. PACKAGES,
    inputSchema = in_workspace(object({
      code = str("Python source to run"),
      reset = {type = "boolean", description = "clear the Python state before running"},
      timeout = CODE_TIMEOUT,
      tool_servers = {type = "array", items = client_tools.SCHEMA.items, description =
        client_tools.SCHEMA.description .. " They stay the sandbox's until a call gives others."},
    }, {"code"})),
    outputSchema = RUN_OUTPUT,
    annotations = {readOnlyHint = false, destructiveHint = false, openWorldHint = false},
    session = function(interp, args)
      if args.reset then interp:reset() end
      return run_result(interp:execute(args.code, nil, {timeout = args.timeout}))
    end,
  },
  {
    name = "sandbox_upload", title = "Write a file into the session's sandbox",
    description = "Write a file into the persistent sandbox (relative paths are under the " ..
      "workspace, the code's working directory). A file bigger than one request carries goes " ..
      "in parts: the first call writes it, each next one passes append=true.",
    inputSchema = in_workspace(object({
      path = str("where to write it", {minLength = 1}),
      content = str("the file's content"),
      encoding = {type = "string", enum = json.array{"utf-8", "base64"},
                  description = "how content is encoded (default utf-8)"},
      append = {type = "boolean", description = "add content at the end of the file instead " ..
                "of replacing it (how a big file is sent in parts)"},
    }, {"path", "content"})),
    outputSchema = out_workspace(object({path = {type = "string"}, bytes = {type = "integer"},
      size = {type = "integer", description = "the file's size after this call"}},
      {"path", "bytes", "size"})),
    annotations = {readOnlyHint = false, destructiveHint = true, openWorldHint = false},
    run = function(server, args, ctx)
      local data = args.content
      if args.encoding == "base64" then   -- before the sandbox: bad input starts nothing
        local decoded, err = M.base64_decode(data)
        if not decoded then return mcp.error_result(err) end
        data = decoded
      end
      local interp, turn <close> = server:session_interp(ctx)
      local size, err = (args.append and append_part or write_file)(interp, sandbox_path(args.path), data)
      if not size then return mcp.error_result(err) end
      return mcp.text_result(("wrote %d bytes to %s (now %d bytes)"):format(#data, args.path, size),
                             {path = args.path, bytes = #data, size = size})
    end,
  },
  {
    name = "sandbox_download", title = "Read a file from the session's sandbox",
    description = "Read a file from the persistent sandbox. Text comes back as it is, other " ..
      "bytes as base64 (or ask for an encoding). A file too big for one answer comes in parts: " ..
      "the answer says where the next part starts (offset, in bytes of the file).",
    inputSchema = in_workspace(object({
      path = str("the file to read", {minLength = 1}),
      encoding = {type = "string", enum = json.array{"auto", "utf-8", "base64"},
                  description = "auto (default): utf-8 when this part's bytes are text, else base64"},
      offset = integer("the first byte to read (default 0)", 0),
      length = integer("at most this many bytes (default: as many as one answer carries)", 1),
    }, {"path"})),
    outputSchema = out_workspace(object({path = {type = "string"}, bytes = {type = "integer"},
                           encoding = {type = "string"}, offset = {type = "integer"},
                           length = {type = "integer"},
                           next_offset = {type = "integer", description = "where the rest starts"}},
                          {"path", "bytes", "encoding", "offset", "length"})),
    annotations = {readOnlyHint = true, openWorldHint = false},
    session = function(interp, args, server)
      local offset, want = args.offset or 0, args.length or server.cfg.part_bytes
      -- Only the asked range is read, and up to 3 bytes each side of it: where a UTF-8
      -- character starts.
      local from = math.max(0, offset - 3)
      local window, size = interp:download(sandbox_path(args.path), from, offset - from + want + 3)
      if not window then return mcp.error_result("cannot read " .. args.path .. ": " .. tostring(size)) end
      local encoding = args.encoding or "auto"
      local first, last = M.part(window, math.min(offset - from, #window), want, "utf-8")
      if encoding == "auto" then   -- decided by this part's bytes
        encoding = utf8.len(window:sub(first + 1, last)) and "utf-8" or "base64"
      end
      if encoding ~= "utf-8" then first, last = M.part(window, math.min(offset - from, #window), want, encoding) end
      local piece = window:sub(first + 1, last)
      first, last = math.min(first + from, size), math.min(last + from, size)
      local content = encoding == "base64" and M.base64_encode(piece) or piece
      local more = last < size
      local structured = {path = args.path, bytes = size, encoding = encoding, offset = first,
                          length = #piece, next_offset = more and last or nil}
      -- The payload goes once, as text; the structured part describes it.
      local res = mcp.text_result(content, structured)
      if more then
        res.content[2] = {type = "text", text = ("(bytes %d to %d of %d; call sandbox_download " ..
          "with offset=%d for the rest)"):format(first, last, size, last)}
      end
      return res
    end,
  },
  {
    name = "sandbox_files", title = "List files in the session's sandbox",
    description = "List the files under a directory of the persistent sandbox (default the " ..
      "workspace), recursively, with their types and sizes.",
    inputSchema = in_workspace(object({dir = str("the directory to list")})),
    aliases = {path = "dir"},
    outputSchema = out_workspace(object({files = {type = "array", items = object({
      path = {type = "string"}, type = {type = "string"}, size = {type = "integer"}})}},
      {"files"})),
    annotations = {readOnlyHint = true, openWorldHint = false},
    session = function(interp, args)
      local files, err = interp:files(sandbox_path(args.dir))
      if not files then return mcp.error_result("cannot list " .. tostring(args.dir or "the workspace") .. ": " .. tostring(err)) end
      local lines, list = {}, json.array()
      for i, f in ipairs(files) do
        list[i] = {path = f.path, type = f.type, size = f.size}
        lines[i] = ("%s\t%s\t%s"):format(f.type or "?", tostring(f.size or ""), f.path)
      end
      return mcp.text_result(#lines > 0 and table.concat(lines, "\n") or "(no files)", {files = list})
    end,
  },
  {
    name = "sandbox_shell", title = "Run a shell command in the session's sandbox",
    description = "Run a shell command in the persistent sandbox (in the workspace) and " ..
      "return its exit status and combined output." .. sandbox_note(),
    inputSchema = in_workspace(object({
      command = str("the command line (run by sh -c)", {minLength = 1}),
      timeout = number("seconds before it is stopped (default 60, at most a day)", 0.1, DAY),
    }, {"command"})),
    outputSchema = out_workspace(object(with_big_fields{exit = {type = "integer"},
                                                        output = {type = "string"}}, {"exit"})),
    annotations = {readOnlyHint = false, destructiveHint = true, openWorldHint = false},
    session = function(interp, args)
      local res, err = interp:shell(args.command, args.timeout or 60)
      if not res then return mcp.error_result("the command could not run: " .. tostring(err)) end
      local text = ("[exit %d]\n%s"):format(res.exit, res.output)
      return mcp.text_result(text, payload_once({exit = res.exit, output = res.output}, {"output"}))
    end,
  },
  {
    name = "rlm_status", title = "Server status",
    description = "The server's backend and model, the sandboxes alive now, the runs in " ..
      "progress and the model usage so far.",
    inputSchema = object({}),
    outputSchema = object({
      version = {type = "string"}, backend = {type = "string"}, model = {type = "string"},
      sandboxes = {type = "integer"}, sandbox_ids = {type = "array", items = {type = "string"}},
      runs_in_progress = {type = "integer"}, usage = {type = "object"},
    }, {"version", "backend", "sandboxes", "runs_in_progress", "usage"}),
    annotations = {readOnlyHint = true, openWorldHint = false},
    run = function(server, _, ctx)
      -- The count is the server's; the ids only this session's own (others' are not its business).
      local ids = json.array()
      local mine = ctx.state.interp and ctx.state.interp.sandbox
      if mine then ids[1] = tostring(mine.id) end
      local live, totals = #registry.list(), server.totals
      local status = {version = require("rlm.core.host").version,
                      backend = server.cfg.backend or require("rlm.interpreter").defaults.backend,
                      model = server.cfg.model, sandboxes = live, sandbox_ids = ids,
                      runs_in_progress = server.running, usage = totals}
      local cache = budget.cache_words(totals)
      local text = ("backend %s, model %s, %d live sandbox(es), %d run(s) in progress; " ..
        "usage: %d runs, %d model calls, %d tokens, $%.4f%s"):format(status.backend,
        status.model or "(none: set RLM_MODEL)", live, server.running, totals.runs, totals.calls,
        totals.total_tokens, totals.cost, cache ~= "" and "; " .. cache or "")
      return mcp.text_result(text, status)
    end,
  },
}

-- The server's run(args, ctx) for one definition.
local function runner(server, def)
  local run = def.run
  if def.loop then
    run = function(_, args, ctx)
      local opts, outputs = def.loop(args)
      opts.reasoning_effort = args.reasoning_effort
      return loop_result(server:run_loop(ctx, opts), outputs)
    end
  elseif def.session then
    run = function(_, args, ctx)
      local interp, turn <close> = server:session_interp(ctx)
      return def.session(interp, args, server)
    end
  end
  local keeps_sandbox = def.inputSchema.properties.workspace ~= nil
  return function(args, ctx)
    local servers, refused = client_tools.check(args.tool_servers, server.cfg.tool_server_hosts)
    if refused then return mcp.error_result(refused) end
    ctx.tool_servers = servers
    local handle, err
    if keeps_sandbox then
      handle, err = server:use_workspace(args, ctx)
      if err then return mcp.error_result(err) end
    end
    local started = handle ~= nil and args.workspace == nil
    ctx.max_cost = args.max_cost
    local result = run(server, args, ctx)
    if ctx.sandbox_freed then result = with_freed_note(def, result, ctx.sandbox_freed) end
    if server:too_big(result) then
      if not handle then                 -- stateless: the file needs a workspace to stay in
        handle = server:use_workspace({}, ctx)
        started = handle ~= nil
      end
      ctx.tool_servers = nil             -- the file goes to a sandbox; no tools need it
      result = server:keep_oversize(def, result, ctx, handle)
    end
    if handle then result = with_workspace(result, handle, started) end
    return result
  end
end

--- The tool set for one server: {list = tools for rlm.mcp.server, close_session = fn}.
function M.new(cfg)
  -- totals.calls: every model call; llm_calls: the sub-calls made from sandbox code.
  local server = setmetatable({cfg = cfg or {}, running = 0, workspaces = {},
    totals = {runs = 0, calls = 0, llm_calls = 0, input_tokens = 0, output_tokens = 0,
              total_tokens = 0, cost = 0.0, cache_read_tokens = 0, cache_write_tokens = 0,
              prompt_cache_saved = 0.0}}, Server)
  local list = {}
  for i, def in ipairs(M.definitions) do
    local tool = {run = runner(server, def)}
    for k, v in pairs(def) do
      if k ~= "loop" and k ~= "session" and k ~= "run" then tool[k] = v end
    end
    list[i] = tool
  end
  return {list = list, close_session = function(session) server:close_session(session) end,
          free_sandbox = function(session, seconds) server:free_sandbox(session, seconds) end}
end

return M
