--- The interpreter: a Python sandbox that keeps its state between execute() calls.
--
--   local interp <close> = require("rlm").interpreter{backend = "local", timeout = 900, ...}
--   local out, run = interp:execute("SUBMIT(answer=6*7)")     -- out.answer == 42
--
-- Policy lives here (protocol, timeouts, restarts, the call handler, the registry); a backend
-- only moves bytes and manages processes or remote sandboxes.
--
-- ## The backend contract (lua/rlm/backend/<name>.lua; `local` is the reference; the cases in
-- tests/lua/backend_contract.lua check it against every backend)
--   backend.check(opts)            optional; raises a clear error when the backend cannot work
--                                  (tools missing, no credentials). Creates nothing.
--   backend.options                optional set of extra option names the backend accepts.
--   backend.create(opts) -> sb     makes the sandbox: workspace, volume at /home/daytona/memory,
--                                  repo_url/repo_ref staged at workspace/repo, context_paths under
--                                  workspace/context/. Raises on failure and leaves nothing behind.
--   backend.same_machine(host_opts, opts), backend.create_beside(host_sb, opts) -> sb
--                                  optional: a sandbox for opts inside host_sb (the `beside`
--                                  interpreter's), with a driver and a working folder of its own,
--                                  when same_machine says opts need no machine of their own.
--                                  Its destroy() ends only that driver and folder.
--   sb.id                          a printable identifier (registry, logs).
--   sb:start_driver()              starts lua/rlm/driver.py (require("rlm.core.host")
--                                  .resource("lua/rlm/driver.py"); its docstring is the wire
--                                  protocol); the driver's first line is its `ready` event,
--                                  read with sb:request(nil, timeout). Raises.
--   backend.start_width            optional: how many sandboxes this process starts at once (a
--                                  start queue; the others wait their turn).
--   backend.payload_min            optional: when sb:request carries raw payloads (the driver's
--                                  docstring), the byte length from which a string skips JSON
--                                  both ways; the backend starts the driver with it.
--   sb:request(req, timeout[, payloads])  writes one JSON request line (req: a table, or its
--                                  JSON text already encoded; nil: only read), then the payload
--                                  strings, and
--     -> event | nil, err, kind    returns the next event as a table. kind: "timeout" (nothing
--                                  in time; the driver may still run), "dead" (the driver is
--                                  gone), "protocol" (a line that is not JSON). Must wait through
--                                  rlm.async so other tasks keep running. With payloads, an
--                                  event's payloads entries get .data (their bytes).
--   sb:send(req)                   optional: writes one request line without reading an event
--                                  (a reply to one of several open calls); true | nil, err.
--                                  Without it the calls of a block are answered one at a time.
--   sb:kill_driver()               stops the driver at once; start_driver() may follow.
--   sb:upload(path, data) -> true | nil, err          paths are sandbox paths; relative ones are
--   sb:download(path) -> data, size | nil, err          under /home/daytona/workspace;
--   sb:download(path, offset, length)                   a range of the file (size: the whole)
--   sb:list(dir) -> {{path=, type=, size=}, ...} | nil, err   recursive, sorted
--   sb:shell(cmd, timeout) -> {exit=, output=} | nil, err
--   sb:driver_pid()                optional: the driver's pid where that means something.
--   sb:destroy()                   idempotent; must not yield (it runs from finalisers too).
--
-- ## The run table returned by execute()
--   stdout, stderr        text (huge output keeps head and tail around a "[N characters cut]"
--                         line; the driver cuts it, see max_output_chars)
--   error                 "ZeroDivisionError: division by zero", or nil
--   traceback             the Python traceback text when error is set
--   exit                  0 when the code finished without error, 1 otherwise
--   duration              seconds, host-measured
--   timed_out             true when execute_timeout stopped the code
--   state_lost            true when the driver had to be restarted: globals and buffers are gone
--   variables             {{name=, type=, size=, preview=}, ...}: the user's globals, the
--                         first 50 in definition order
--   variables_more        how many names come after those (SHOW_VARS() in the code lists all)
--   stdout_chars          the full length of stdout before truncation
--
-- ## What the host trusts
-- Nothing the driver sends: code inside can write to the driver's descriptors itself. Events are
-- checked for shape, lines are capped (rlm.limits.event_bytes), outputs are cut again to
-- max_output_chars, and a driver that breaks the protocol is killed and restarted
-- (run.state_lost). A forged event can do no more than the code could do by calling the helpers.
local async = require "rlm.async"
local json = require "rlm.json"
local limits = require "rlm.limits"
local registry = require "rlm.registry"
local sys = require "rlm.sys"

local clock, encode = sys.now, json.encode   -- upvalues on the path of every execute
local max, min, floor = math.max, math.min, math.floor

local M = {}

--- Backend name -> module. Every lua/rlm/backend/<name>.lua shipped in the binary is one (a new
-- backend is one new file); code outside the binary adds its own: backends.mine = "my.module".
M.backends = {}
for _, path in ipairs(require("rlm.core.host").resources("lua/rlm/backend/")) do
  local name = path:match("^lua/rlm/backend/([%w_]+)%.lua$")
  if name and name ~= "common" then M.backends[name] = "rlm.backend." .. name end
end

local EMPTY = {}   -- opts or variables when none are given; never written

M.defaults = {backend = "local", timeout = 900, max_output_chars = 10000, network = false}

local OPTIONS = {backend = true, timeout = true, execute_timeout = true, volume_name = true,
                 repo_url = true, repo_ref = true, context_paths = true, env = true,
                 network = true, on_call = true, max_output_chars = true, start_timeout = true,
                 limits = true, tools = true,
                 -- without on_call, these give the code llm_query / rlm_query through rlm.run's
                 -- handler, with its budget (see M.new)
                 model = true, sub_model = true, max_llm_calls = true, llm_call_timeout = true,
                 max_depth = true, max_tokens = true, max_cost = true, child_max_iterations = true,
                 batch_concurrency = true, max_parallel_children = true,
                 -- another interpreter, whose sandbox this one runs in when the backend can
                 -- and the machine would be the same (rlm_query's children)
                 beside = true,
                 -- fleet-rlm's: here no execute ever blocks other tasks, so it changes nothing
                 async_execute = true}
M.options = OPTIONS

--- The names fleet-rlm and DSPy use for the same options, accepted as they are.
M.aliases = {sub_lm = "sub_model", max_recursion_depth = "max_depth",
             delegate_max_iterations = "child_max_iterations"}

--- opts with the aliases renamed (a copy); an alias and its name both given is an error.
function M.unalias(opts, level)
  local out = {}
  for k, v in pairs(opts) do out[k] = v end
  for alias, name in pairs(M.aliases) do
    if out[alias] ~= nil then
      if out[name] ~= nil then
        error(("%s and %s are the same option: give one"):format(alias, name), level + 1)
      end
      out[name], out[alias] = out[alias], nil
    end
  end
  return out
end

-- Seconds the host waits past the driver's own timeout before it kills the driver: the driver
-- stops a runaway block itself; this only catches code that ignores signals.
local BACKSTOP = 1.0
local START_TIMEOUT = 30

local NO_HANDLER = "llm_query is not available: no model configured"

-- Sandboxes of one backend start at most backend.start_width at a time in this process:
-- starting is the machine's work (namespaces, mounts, Python's start), and more at once only
-- makes every start slower, past its start_timeout. The rest wait their turn.
local start_queues = {}

local function start_queue(backend)
  local width = backend.start_width
  if not width then return nil end
  start_queues[backend] = start_queues[backend] or async.semaphore(width)
  return start_queues[backend]
end
local CALL_KINDS = {llm_query = true, llm_query_batched = true, rlm_query = true,
                    rlm_query_batched = true, budget = true, tool = true, http = true,
                    llm_query_batched_start = true, llm_query_batched_next = true}

local Interp = {}
Interp.__index = Interp

local function load_backend(name)
  local module = M.backends[name]
  if not module then
    local names = {}
    for k in pairs(M.backends) do names[#names + 1] = k end
    table.sort(names)
    error(("unknown backend %q (known: %s)"):format(tostring(name), table.concat(names, ", ")), 3)
  end
  local ok, backend = pcall(require, module)
  if not ok then
    error(("the %s backend is not available: %s"):format(name, tostring(backend)), 3)
  end
  return backend
end

local function check_env(env)
  if env == nil then return end
  if type(env) ~= "table" then error("env must be a table of name = value strings", 3) end
  for k, v in pairs(env) do
    if type(k) ~= "string" or (type(v) ~= "string" and type(v) ~= "number") then
      error("env must map names to strings", 3)
    end
    if k:upper():match("API_KEY$") then
      error(("env: %s looks like an API key; keys stay on the host (sandboxed code reaches " ..
             "models through llm_query)"):format(k), 3)
    end
  end
end

--- Whether name is an interpreter option (for backend, or for any backend when nil).
function M.accepts(name, backend)
  if OPTIONS[name] then return true end
  for key, module in pairs(M.backends) do
    if backend == nil or key == backend then
      local ok, b = pcall(require, module)
      if ok and b.options and b.options[name] then return true end
    end
  end
  return false
end

-- Every option name backend takes, for "did you mean".
local function option_names(backend)
  local names = {}
  for k in pairs(OPTIONS) do names[#names + 1] = k end
  for k in pairs(backend.options or {}) do names[#names + 1] = k end
  for k in pairs(M.aliases) do names[#names + 1] = k end
  return names
end

local function validate(opts, backend)
  for k in pairs(opts) do
    if not OPTIONS[k] and not (backend.options and backend.options[k]) then
      error(require("rlm.args").unknown("interpreter option", k, option_names(backend)), 3)
    end
  end
  for _, k in ipairs{"timeout", "execute_timeout", "start_timeout"} do
    if opts[k] ~= nil and (type(opts[k]) ~= "number" or opts[k] <= 0) then
      error(("%s must be a positive number"):format(k), 3)
    end
  end
  local limit = opts.max_output_chars
  if math.type(limit) ~= "integer" or limit < 2 then
    error("max_output_chars must be an integer >= 2", 3)
  end
  if opts.on_call ~= nil and type(opts.on_call) ~= "function" then
    error("on_call must be a function(kind, args) -> results | nil, err", 3)
  end
  if opts.beside ~= nil and getmetatable(opts.beside) ~= Interp then
    error("beside must be an rlm.interpreter", 3)
  end
  check_env(opts.env)
end

--- Creates an interpreter (nothing is started until start() or the first execute()).
function M.new(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("rlm.interpreter takes a table of options", 2) end
  local merged = {}
  for k, v in pairs(M.defaults) do merged[k] = v end
  for k, v in pairs(M.unalias(opts, 2)) do merged[k] = v end
  local backend = load_backend(merged.backend)
  validate(merged, backend)
  merged.limits = limits.resolve(merged.limits, 2)
  -- An allow list (rlm.netproxy): the backend keeps the sandbox off the network, and the
  -- driver's proxy is the code's only way out.
  local netproxy = require("rlm.netproxy").new(merged.network)
  if netproxy then merged.network = false end
  if backend.check then backend.check(merged) end
  merged.execute_timeout = merged.execute_timeout or merged.timeout
  return setmetatable({opts = merged, backend = backend, on_call = merged.on_call,
                       netproxy = netproxy}, Interp)
end

local function closed_error()
  error("this interpreter has been shut down", 3)
end

--- The user's tools (rlm.tools), their MCP servers started or reached once: the list. Raises
-- when one cannot be had.
function Interp:load_tools()
  if self.opts.tools and not self.tools then self:set_tools(self.opts.tools) end
  return self.tools or {}
end

--- Gives the code these tools (a tools option) from its next block on; the ones it had go
-- (their MCP servers end). Raises when one cannot be had, keeping the ones it had.
function Interp:set_tools(tools)
  local lib = require "rlm.tools"
  local list, index = lib.load(tools)
  if self.tools then lib.close(self.tools) end
  self.opts.tools, self.tools, self.tool_index = tools, list, index
  self.tools_code = #list > 0 and lib.python(list) or nil
  self.tools_defined = false
end

--- Starts the sandbox and its driver; a no-op when it runs already. Raises on failure, leaving
-- nothing half-created.
function Interp:start()
  if self.closed then closed_error() end
  if self.sandbox then return self end
  -- The tools before any sandbox exists: a tool that cannot be had costs no sandbox.
  self:load_tools()
  local queue = start_queue(self.backend)
  local queued = clock()
  if queue then queue.acquire() end
  -- How long this start waited its turn (other sandboxes of this process were starting).
  self.start_wait = clock() - queued
  local made, sb = pcall(self.create_sandbox, self)
  local ok, err = made, sb
  if made then
    registry.add(sb)
    ok, err = pcall(self.launch, self, sb)
  end
  if queue then queue.release() end
  if not ok then
    if made then
      registry.remove(sb)
      -- The failure comes first; a cleanup that fails too is added to it, never put in its place.
      local deleted, why = pcall(sb.destroy, sb)
      if not deleted then err = ("%s; and %s"):format(tostring(err), tostring(why)) end
    end
    error(err, 0)   -- the cause as the backend said it, first: no position of ours before it
  end
  self.sandbox = sb
  self.started_at = sys.now()
  return self
end

-- A sandbox inside the `beside` interpreter's, when its backend is this one's, that one runs,
-- and the backend finds the machine the same; else a sandbox of its own.
function Interp:create_sandbox()
  local host, backend = self.opts.beside, self.backend
  if host and host.backend == backend and host.sandbox and backend.create_beside
     and backend.same_machine(host.opts, self.opts) then
    return backend.create_beside(host.sandbox, self.opts)
  end
  return backend.create(self.opts)
end

-- What a start that failed only because the machine is busy says (fork or clone: EAGAIN).
local BUSY = "Resource temporarily unavailable"
local BUSY_PAUSE = 0.25

-- Starts the driver in sb and waits for its ready event. A start the machine refuses for now
-- (EAGAIN: no process or namespace to be had) waits and tries again within start_timeout.
function Interp:launch(sb)
  self.tools_defined = false      -- a new driver: the tools are defined again before its first block
  local limit = self.opts.start_timeout or START_TIMEOUT
  local deadline = clock() + limit
  local pause = BUSY_PAUSE
  while true do
    local started, ev, err = pcall(sb.start_driver, sb)
    if started then
      ev, err = sb:request(nil, max(0.05, deadline - clock()))
    else
      ev, err = nil, tostring(ev)
    end
    if ev and ev.ev == "ready" then
      if not self.netproxy then return end
      ev, err = sb:request({op = "proxy"}, max(0.05, deadline - clock()))
      if ev and ev.ev == "proxy" then return end
      err = "its HTTP proxy did not start: " .. tostring(err or ev.message or json.encode(ev))
    end
    sb:kill_driver()
    local busy = err and err:find(BUSY, 1, true)
    if not busy or clock() + pause >= deadline then
      if busy then err = err .. ("; the machine stayed busy for %g s (start_timeout)"):format(limit) end
      error("the sandbox did not start: " .. (err or ("unexpected first event " .. json.encode(ev))), 0)
    end
    async.sleep(pause)
    pause = min(pause * 2, 2)
  end
end

-- Replaces a dead or stuck driver with a fresh one (same workspace and volume).
function Interp:restart_driver()
  local sb = self.sandbox
  sb:kill_driver()
  self:launch(sb)
end

-- variables without its long strings; those strings in announcement order (by name, so the
-- same variables give the same bytes in every process), and the announcement ({name, bytes}
-- each) for the request.
local function split_payloads(variables, payload_min)
  local rest, data, announced, names = {}, {}, {}, {}
  for k in pairs(variables) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local v = variables[k]
    if type(v) == "string" and #v >= payload_min then
      data[#data + 1] = v
      announced[#announced + 1] = {name = k, bytes = #v}
    else
      rest[k] = v
    end
  end
  if #data == 0 then return variables, nil, nil end
  return rest, data, announced
end

local NULL = json.null

-- The length of s in characters (in bytes when it is not UTF-8).
local function text_length(s)
  return utf8.len(s) or #s
end

-- s cut to `limit` characters the way the driver cuts (head, a marker line, tail): applied
-- again on the host, because the event may have been written by the code, not the driver.
local function cut(s, limit)
  if #s <= limit then return s end   -- never more characters than bytes
  local n = text_length(s)
  -- The driver's own cut is limit characters plus its marker line: leave that alone.
  if n <= limit + 64 then return s end
  local function at(i) return utf8.len(s) and utf8.offset(s, i) or i end
  local head, tail = limit // 2, limit - limit // 2
  return s:sub(1, at(head + 1) - 1) .. ("\n... [%d characters cut] ...\n"):format(n - limit)
         .. s:sub(at(n - tail + 1))
end

-- The fields of a done event that the run table takes, with the type each must have when it
-- is there and not null (the driver leaves out fields at their default).
local DONE_FIELDS = {stdout = "string", stderr = "string", error = "string", traceback = "string",
                     stdout_chars = "number", stderr_chars = "number", variables_more = "number",
                     variables = "table", submitted = "table"}
local KIND_WORDS = {string = "text", number = "a number", table = "an object or a list"}

-- The SUBMIT fields (or nil) and run table of a done event; nil, nil, why when the event cannot
-- be taken as it is. One pass over the event's own fields: the common one has three.
function Interp:finish(ev, started)
  local run = {stdout = "", stderr = "", exit = 0, duration = clock() - started,
               timed_out = ev.timed_out == true, state_lost = false, variables_more = 0,
               stdout_chars = 0, stderr_chars = 0}
  for k, v in next, ev do
    local kind = DONE_FIELDS[k]
    if kind and v ~= NULL then
      if type(v) ~= kind then return nil, nil, k .. " is not " .. KIND_WORDS[kind] end
      run[k] = v
    end
  end
  local submitted = run.submitted
  if ev.payloads ~= nil and type(submitted) ~= "table" then
    return nil, nil, "payloads without submitted fields"
  end
  local limit = self.opts.max_output_chars
  run.stdout, run.stderr = cut(run.stdout, limit), cut(run.stderr, limit)
  if run.error then run.exit = 1 end
  run.submitted = nil
  if ev.payloads then
    for _, p in ipairs(ev.payloads) do submitted[p.name] = p.data end
  end
  return submitted, run
end

-- Answers one call event through the handler; returns the reply request.
function Interp:answer(ev)
  local handler = self.on_call
  if not handler and ev.kind == "tool" and self.tool_index then
    handler = function(_, args) return self:call_tool(args) end
  end
  local args = type(ev.args) == "table" and ev.args or {}
  if ev.kind == "http" then handler, args = self:http_handler(handler, args) end
  local results, err
  if not handler then
    err = NO_HANDLER
  else
    local ok, r, e = pcall(handler, ev.kind, args)
    async.check_interrupt()      -- an interrupt ends the execute; it never becomes the reply
    if not ok then
      err = "the host failed to answer " .. tostring(ev.kind) .. ": " .. tostring(r)
    else
      results, err = r, e
    end
  end
  local number = math.type(ev.call) == "integer" and ev.call or nil
  if err ~= nil then return {op = "reply", id = ev.id, call = number, error = tostring(err)} end
  if type(results) ~= "table" then
    return {op = "reply", id = ev.id, call = number,
            error = tostring(ev.kind) .. " got no results from the host"}
  end
  return {op = "reply", id = ev.id, call = number, results = json.array(results)}
end

-- A run for code that never finished: the driver was killed and restarted.
function Interp:lost(started, why, timed_out)
  local run = {stdout = "", stderr = "", error = why, exit = 1, duration = sys.now() - started,
               timed_out = timed_out, state_lost = true, stdout_chars = 0}
  local ok, err = pcall(self.restart_driver, self)
  if not ok then
    self:shutdown()
    error(why .. "; restarting the sandbox failed: " .. tostring(err), 0)
  end
  return nil, run
end

--- Runs code; returns out (the SUBMIT fields, or nil) and the run table (see the top).
-- variables: name -> JSON value, set as Python globals first. opts: timeout (seconds),
-- deadline (a sys.now() time by which the block ends, calls included: past it the block is
-- stopped as by the timeout), output_names (the fields the caller expects from SUBMIT; passed
-- on to the driver).
function Interp:execute(code, variables, opts)
  if self.closed then closed_error() end
  if type(code) ~= "string" then error("execute: code must be a string", 2) end
  if variables ~= nil and type(variables) ~= "table" then
    error("execute: variables must be a table of name = JSON value", 2)
  end
  if self.busy then error("this interpreter is already running code (one execute at a time)", 2) end
  if not self.sandbox then self:start() end
  local lost = self.stale
  if lost then
    self.stale = false
    self:restart_driver()
  end
  if self.tools_code and not self.tools_defined then self:define_tools() end
  opts = opts or EMPTY
  local timeout = opts.timeout or self.opts.execute_timeout
  local left = self.opts.timeout - (clock() - self.started_at)
  if left <= 0 then
    error(("the sandbox's lifetime (timeout = %g s) is over; create a new interpreter"):format(
      self.opts.timeout), 2)
  end
  timeout = min(timeout, left)
  local deadline = opts.deadline
  if deadline then timeout = max(0.05, min(timeout, deadline - clock())) end
  local id = (self.request_id or 0) + 1
  self.request_id = id
  -- In whole milliseconds: a number of a few digits is quicker to write and to read.
  timeout = max(0.001, floor(timeout * 1000 + 0.5) / 1000)
  local line, payloads
  if variables == nil and opts.output_names == nil then
    -- The common request, code alone, put together from its parts: no table to build and walk.
    -- (Output and SUBMIT limits are the driver's settings, given when it started.)
    line = '{"op":"execute","id":' .. id .. ',"timeout":' .. encode(timeout) ..
           ',"code":' .. encode(code) .. "}"
  else
    line, payloads = self:full_request(id, code, timeout, variables, opts.output_names)
  end
  self.busy = true
  local ok, out, run = pcall(self.exchange, self, line, id, timeout, deadline, payloads)
  self.busy = false
  if not ok then
    -- Interrupted mid-dialogue (an interrupt, a protocol fault): the driver may still be
    -- running that code, so it is replaced before the next use.
    if self.sandbox then
      self.sandbox:kill_driver()
      self.stale = true
    end
    error(out, 0)
  end
  if lost then run.state_lost = true end
  return out, run
end

-- Defines the tools as builtins of the driver's namespace (a block of its own, before the
-- first block a driver runs): functions that call the host, not variables of the code.
function Interp:define_tools()
  self.tools_defined = true
  local id = (self.request_id or 0) + 1
  self.request_id = id
  local line = '{"op":"execute","id":' .. id .. ',"timeout":60,"code":' .. encode(self.tools_code) .. "}"
  self.busy = true
  local ok, _, run = pcall(self.exchange, self, line, id, 60, nil, nil)
  self.busy = false
  if not ok or run.error then
    error("could not define the tools in the sandbox: " .. tostring(ok and run.error or run), 0)
  end
end

-- Who answers an "http" call (the code's proxy, rlm.netproxy): the on_call handler, which
-- finds the proxy as args._proxy (rlm.run's counts and records the call), or the proxy itself.
function Interp:http_handler(handler, args)
  if not self.netproxy then
    return function() return nil, "the code has no network: the run gives no network allow list" end, args
  end
  args._proxy = self.netproxy
  return handler or function(_, a) return self:call_http(a) end, args
end

-- Answers an "http" call when no handler does (a bare interpreter): each host's max_calls
-- holds, there is no budget.
function Interp:call_http(args)
  local e = self.netproxy:entry_of(args)
  if e and e.max_calls then
    self.http_counts = self.http_counts or {}
    local n = (self.http_counts[e.host] or 0) + 1
    if n > e.max_calls then
      return nil, ("max_calls: %s may be reached %d times"):format(e.host, e.max_calls)
    end
    self.http_counts[e.host] = n
  end
  return self.netproxy:answer(args)
end

--- Answers a tool call when no handler does (a bare interpreter): each tool's max_calls hold,
-- there is no budget.
function Interp:call_tool(args)
  local t = self.tool_index and self.tool_index[args.name]
  if not t then return nil, ("no tool named %s"):format(tostring(args.name)) end
  self.tool_counts = self.tool_counts or {}
  local n = (self.tool_counts[t.name] or 0) + 1
  if t.max_calls and n > t.max_calls then
    return nil, ("max_calls: %s may be called %d times"):format(t.name, t.max_calls)
  end
  self.tool_counts[t.name] = n
  local res, err = require("rlm.tools").invoke(t, type(args.args) == "table" and args.args or {})
  if res == nil then return nil, err end
  return {res}
end

-- An execute request with variables or output names: its line and the payloads after it.
function Interp:full_request(id, code, timeout, variables, output_names)
  local req = {op = "execute", id = id, code = code, timeout = timeout}
  for k in pairs(variables or EMPTY) do
    if type(k) ~= "string" or not k:match("^[%a_][%w_]*$") then
      error(("execute: variables must be name = value with Python names as keys (got %s %s)")
        :format(type(k), tostring(k)), 3)
    end
  end
  local payloads
  local payload_min = self.backend.payload_min
  if payload_min and variables then
    variables, payloads, req.payloads = split_payloads(variables, payload_min)
  end
  if variables and next(variables) ~= nil then req.variables = json.object(variables) end
  if output_names then req.output_names = json.array(output_names) end
  -- Encoded once, here: a big variable is not copied again on its way to the sandbox.
  local encoded, line = pcall(json.encode, req)
  if not encoded then error("execute: variables must be JSON values: " .. tostring(line), 3) end
  return line, payloads
end

-- Each read waits at most this long while calls are open, so that the block's own time is
-- counted again as soon as the last of them is answered.
local CALL_SLICE = 1.0

-- The request/event dialogue of one execute: calls are answered until the code is done. With a
-- backend that can send without reading (sb:send), each call is answered in a task of its own,
-- so calls the code makes from several threads are carried side by side.
function Interp:exchange(req, id, timeout, deadline, payloads)
  local sb = self.sandbox
  local started = clock()
  local calls = {open = 0, paused = 0, since = nil, tasks = {}}
  -- Seconds until the backstop: the driver's timer stands still while calls are open; a
  -- deadline counts them too.
  local function left()
    local now = clock()
    local rest = math.huge
    if calls.open == 0 then
      rest = timeout - (now - started - calls.paused) + BACKSTOP
    end
    if deadline then rest = min(rest, deadline - now + BACKSTOP) end
    return rest
  end
  local ok, submitted, run = pcall(function()
    while true do
      local wait = left()
      if calls.open > 0 then wait = min(wait, CALL_SLICE) end
      local ev, err, kind = sb:request(req, max(wait, 0.05), payloads)
      req, payloads = nil, nil
      self:check_calls(calls)
      if ev or kind ~= "timeout" or left() <= 0 then
        local done, out, result = self:take_event(ev, err, kind, id, started, deadline, timeout, calls)
        if done then return out, result end
        req = out
      end
    end
  end)
  -- A call still open when the block ends another way (a restart, a fault) is answered no more.
  calls.closed = true
  if not ok then error(submitted, 0) end
  return submitted, run
end

-- Raises the error of a call's task (an interrupt) in the dialogue.
function Interp:check_calls(calls)
  for i = #calls.tasks, 1, -1 do
    local task = calls.tasks[i]
    if task.done then
      table.remove(calls.tasks, i)
      task:join()
    end
  end
end

-- Answers a call in a task of its own; its reply is sent when it is ready.
function Interp:answer_aside(ev, calls)
  local sb = self.sandbox
  if calls.open == 0 then calls.since = clock() end
  calls.open = calls.open + 1
  calls.tasks[#calls.tasks + 1] = async.spawn(function()
    local ok, reply = pcall(self.answer, self, ev)
    calls.open = calls.open - 1
    if calls.open == 0 then calls.paused = calls.paused + (clock() - calls.since) end
    if not ok then error(reply, 0) end
    if not calls.closed and self.sandbox == sb then sb:send(reply) end
  end)
end

-- What one event means for the dialogue: true, out, run when the block is done (or lost);
-- false, the next request (or nil: only read) otherwise.
function Interp:take_event(ev, err, kind, id, started, deadline, timeout, calls)
  if not ev then
    if kind == "timeout" and deadline and clock() >= deadline then
      return true, self:lost(started, "TimeoutError: the run's time ran out (max_time) and the " ..
        "code was stopped; the sandbox was restarted", true)
    elseif kind == "timeout" then
      return true, self:lost(started, ("TimeoutError: the code ran past execute_timeout (%g s) " ..
        "and the sandbox was restarted"):format(timeout), true)
    elseif kind == "limit" then
      return true, self:lost(started, "LimitError: " .. err .. "; the code was stopped and the " ..
        "sandbox restarted (its files stay)", false)
    end
    return true, self:lost(started, "SandboxError: " .. err ..
      " (state was lost; the sandbox was restarted)", false)
  end
  local bad
  if ev.ev == "done" and ev.id == id then
    local submitted, run
    submitted, run, bad = self:finish(ev, started)
    if run then return true, submitted, run end
  elseif ev.ev == "call" and not CALL_KINDS[ev.kind] then
    bad = "unknown call " .. tostring(ev.kind)
  end
  if bad then
    return true, self:lost(started, "SandboxError: the driver sent a malformed " .. ev.ev ..
      " event (" .. bad .. "); state was lost and the sandbox was restarted", false)
  end
  if ev.ev == "call" and ev.id == id then
    if self.sandbox.send then
      self:answer_aside(ev, calls)
      return false, nil
    end
    local t0 = clock()
    local reply = self:answer(ev)
    calls.paused = calls.paused + (clock() - t0)
    return false, reply
  elseif ev.ev == "error" then
    -- The driver refused the request itself (a bug on our side, not the user's code).
    error("the sandbox's driver rejected the request: " .. tostring(ev.message), 0)
  end
  return true, self:lost(started, "SandboxError: unexpected event " .. json.encode(ev), false)
end

--- Clears the Python state (globals, imports, buffers); files stay.
function Interp:reset()
  if self.closed then closed_error() end
  if not self.sandbox then return self:start() end
  if self.busy then error("this interpreter is running code; reset after it finishes", 2) end
  local ev = not self.stale and self.sandbox:request({op = "reset"}, 10)
  if not ev or ev.ev ~= "reset" then
    -- A fresh driver is the most thorough reset there is.
    self.stale = false
    self:restart_driver()
  end
  return self
end

local function sandbox_of(self)
  if self.closed then closed_error() end
  if not self.sandbox then self:start() end
  return self.sandbox
end

--- Writes data to a sandbox path (relative paths are under the workspace): true, or nil, err
-- like download, files and shell (a path outside the sandbox, a link, a full disk).
function Interp:upload(path, data)
  if type(data) ~= "string" then error("upload: data must be a string", 2) end
  local ok, err = sandbox_of(self):upload(path, data)
  if not ok then return nil, "upload " .. tostring(path) .. ": " .. tostring(err) end
  return true
end

--- A file's bytes from offset (default 0), at most length (default all), and the file's size;
-- or nil, err.
function Interp:download(path, offset, length)
  return sandbox_of(self):download(path, offset, length)
end

--- Entries under dir (default the workspace), recursively: {{path=, type=, size=}, ...} | nil, err.
function Interp:files(dir)
  return sandbox_of(self):list(dir)
end

--- Runs a shell command in the sandbox: {exit=, output=} | nil, err.
function Interp:shell(cmd, timeout)
  return sandbox_of(self):shell(cmd, timeout)
end

--- The driver's pid on this host (local backend), for diagnostics.
function Interp:pid()
  local sb = self.sandbox
  return sb and sb.driver_pid and sb:driver_pid()
end

--- Ends the sandbox; idempotent. Also runs on <close>, on error paths and when collected.
function Interp:shutdown()
  self.closed = true
  if self.tools then require("rlm.tools").close(self.tools) end
  local sb = self.sandbox
  self.sandbox = nil
  if sb then
    registry.remove(sb)
    sb:destroy()
  end
end

Interp.__close = Interp.shutdown
Interp.__gc = Interp.shutdown
Interp.__name = "rlm.interpreter"

function Interp:__tostring()
  return ("rlm.interpreter(%s, %s)"):format(self.opts.backend,
    self.sandbox and self.sandbox.id or (self.closed and "closed" or "not started"))
end

return M
