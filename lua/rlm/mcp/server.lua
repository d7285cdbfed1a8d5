--- The MCP protocol over JSON-RPC 2.0, independent of the transport.
--
--   local server = require("rlm.mcp.server").new{name =, version =, tools = {...},
--                                                 fixtures = provider | nil}
--   local session = server:session()
--   local reply = session:handle(msg, channel)   -- in a task; reply is nil for notifications,
--                                                -- responses and cancelled calls
-- A channel is {send = function(msg) end}: where messages tied to this request go (progress,
-- log messages, the server's own requests to the client). Each tools/call runs in its own task,
-- so calls proceed side by side and notifications/cancelled can stop one: its cancel hooks run
-- (sandboxes shut down), its task is closed (pending <close> variables run) and no reply is
-- sent.
local async = require "rlm.async"
local json = require "rlm.json"
local loop = require "rlm.core.loop"
local schema = require "rlm.mcp.schema"
local tasks = require "rlm.mcp.tasks"
local sys = require "rlm.sys"

local M = {}

-- The session revisions: an initialize handshake opens a session that later requests name.
M.VERSIONS = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}
local SUPPORTED = {}
for _, v in ipairs(M.VERSIONS) do SUPPORTED[v] = true end
-- The stateless revisions: no handshake and no session; every request names its version and the
-- client's capabilities in params._meta (Server:handle_stateless).
M.STATELESS_VERSIONS = {"2026-07-28"}
local STATELESS = {}
for _, v in ipairs(M.STATELESS_VERSIONS) do STATELESS[v] = true end

M.PARSE_ERROR, M.INVALID_REQUEST, M.METHOD_NOT_FOUND = -32700, -32600, -32601
M.INVALID_PARAMS, M.INTERNAL_ERROR = -32602, -32603
M.HEADER_MISMATCH, M.MISSING_CAPABILITY, M.UNSUPPORTED_VERSION = -32020, -32021, -32022

-- The _meta keys of the stateless revision.
M.META_VERSION = "io.modelcontextprotocol/protocolVersion"
M.META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
M.META_CLIENT = "io.modelcontextprotocol/clientInfo"
M.META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
M.META_SERVER = "io.modelcontextprotocol/serverInfo"

local LEVELS = {debug = 1, info = 2, notice = 3, warning = 4, error = 5, critical = 6,
                alert = 7, emergency = 8}
local CLIENT_REQUEST_TIMEOUT = 600

function M.supported_version(v)
  return SUPPORTED[v] == true
end

function M.stateless_version(v)
  return STATELESS[v] == true
end

--- True when msg is a request of the stateless revision: server/discover, or a request whose
-- params._meta names a protocol version.
function M.is_stateless(msg)
  if type(msg) ~= "table" then return false end
  if msg.method == "server/discover" then return true end
  local params = msg.params
  local meta = type(params) == "table" and params._meta
  return type(meta) == "table" and meta[M.META_VERSION] ~= nil
end

--- A JSON-RPC error response.
function M.error_response(id, code, message, data)
  local err = {code = code, message = message}
  if data ~= nil then err.data = data end
  return {jsonrpc = "2.0", id = id == nil and json.null or id, error = err}
end

--- Decodes one message; returns msg, or nil and the error response to send. With session on
-- protocol 2025-03-26 (the one version that has them), a JSON-RPC batch comes back as the
-- list of its messages and a second result `true`.
function M.decode(text, session)
  local msg, err = json.decode(text)
  if msg == nil then
    return nil, M.error_response(nil, M.PARSE_ERROR, "Parse error: " .. tostring(err))
  end
  if session and session.protocol == "2025-03-26" and type(msg) == "table"
      and json.is_array(msg) and #msg > 0 then
    return msg, true
  end
  if type(msg) ~= "table" or json.is_array(msg) then
    local why = json.is_array(msg) and "batches are not supported" or "a message must be an object"
    return nil, M.error_response(nil, M.INVALID_REQUEST, "Invalid Request: " .. why)
  end
  return msg
end

local function valid_id(id)
  return type(id) == "string" or math.type(id) == "integer" or math.type(id) == "float"
end

--- What a message is: "request", "notification", "response" or nil (invalid).
function M.kind(msg)
  if msg.jsonrpc ~= "2.0" then return nil end
  if type(msg.method) == "string" then
    if msg.id == nil then return "notification" end
    return valid_id(msg.id) and "request" or nil
  end
  if valid_id(msg.id) and (msg.result ~= nil or msg.error ~= nil) then return "response" end
  return nil
end

local function id_key(id)
  return type(id) .. ":" .. tostring(id)
end

-- Raised (as an error object) to end a request with this result or JSON-RPC error instead of
-- what its handler would have returned: Session:input does, when the client must answer first.
local Interrupt = {}

local function interrupt(t)
  return setmetatable(t, Interrupt)
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

--- A text result; structured (a table) also becomes structuredContent.
function M.text_result(text, structured, is_error)
  local res = {content = json.array{{type = "text", text = text}}}
  if structured ~= nil then res.structuredContent = structured end
  if is_error then res.isError = true end
  return res
end

--- A failed tool call as the model should see it.
function M.error_result(message)
  return M.text_result(message, nil, true)
end

-- ---------------------------------------------------------------- the server

local Server = {}
Server.__index = Server

local handlers = {}        -- method -> function(session, params, msg, channel), below

--- opts: name, version, title, instructions, tools (list of tool definitions: name, title,
-- description, inputSchema, outputSchema, annotations, run(args, ctx) -> result), fixtures
-- (test-only provider of resources, prompts and completions), log(text) for diagnostics,
-- on_close(session) when a session ends, on_idle(session, seconds) when it has been idle that
-- long (its resources may go; the session goes on), max_result (bytes: a tool result whose JSON is bigger
-- is replaced by an error saying how to ask for less; nil: no cap).
function M.new(opts)
  local self = setmetatable({opts = opts, tools = {}, order = {}, sessions = 0, live = {}}, Server)
  for _, tool in ipairs(opts.tools or {}) do self:add_tool(tool) end
  return self
end

function Server:add_tool(tool)
  assert(type(tool.name) == "string" and type(tool.run) == "function", "a tool needs name and run")
  if not self.tools[tool.name] then self.order[#self.order + 1] = tool.name end
  self.tools[tool.name] = tool
end

--- result, or an error result when its JSON is over max_result: a client refuses (and a stdio
-- session dies of) a message over its own limit, 10 MiB for the official SDKs.
function Server:sized(result)
  local cap = self.opts.max_result
  if not cap then return result end
  local ok, text = pcall(json.encode, result)
  if ok and #text <= cap then return result end
  return M.error_result(("The result is %s bytes, over this server's limit of %d (rlm mcp "
    .. "--max-result). Ask for less: sandbox_download takes offset and length, and code can "
    .. "print less or write its output to a file."):format(ok and tostring(#text) or "too many", cap))
end

-- What a stateless request's requestState stands for: the answers so far, kept here for
-- INPUT_STATE_TTL seconds under a random token (so a client cannot forge or alter them).
local INPUT_STATE_TTL, MAX_INPUT_STATES = 600, 1000

function Server:keep_answers(answers)
  self.input_states = self.input_states or {}
  local now, n = sys.now(), 0
  for token, kept in pairs(self.input_states) do
    if now - kept.at > INPUT_STATE_TTL then self.input_states[token] = nil else n = n + 1 end
  end
  if n >= MAX_INPUT_STATES then
    local oldest, at = nil, math.huge
    for token, kept in pairs(self.input_states) do
      if kept.at < at then oldest, at = token, kept.at end
    end
    self.input_states[oldest] = nil
  end
  local token = sys.random_hex(16)
  self.input_states[token] = {answers = answers, at = now}
  return token
end

function Server:kept_answers(token)
  local kept = type(token) == "string" and self.input_states and self.input_states[token]
  if not kept or sys.now() - kept.at > INPUT_STATE_TTL then return nil end
  return kept.answers
end

--- What answers method: the core handlers, the tasks extension's (stateless revision only) and
-- the test fixtures'.
function Server:handler(method, stateless)
  return handlers[method] or (stateless and tasks.handlers[method]) or
         (self.opts.fixtures and self.opts.fixtures.handlers[method])
end

function Server:log(text)
  if self.opts.log then self.opts.log(text) end
end

--- What the server offers; stateless: as the stateless revision declares it (no resource
-- subscriptions: it removed them).
function Server:capabilities(stateless)
  local caps = {tools = {listChanged = false}, logging = json.object()}
  if self.opts.fixtures then
    caps.resources = {subscribe = not stateless, listChanged = false}
    caps.prompts = {listChanged = false}
    caps.completions = json.object()
  end
  if stateless then caps.extensions = {[tasks.EXTENSION] = json.object()} end
  return caps
end

function Server:tool_list()
  local list = json.array()
  for _, name in ipairs(self.order) do
    local t = self.tools[name]
    list[#list + 1] = {name = t.name, title = t.title, description = t.description,
                       inputSchema = t.inputSchema, outputSchema = t.outputSchema,
                       annotations = t.annotations}
  end
  return list
end

-- ---------------------------------------------------------------- sessions

local Session = {}
Session.__index = Session

function Server:session()
  self.sessions = self.sessions + 1
  local session = setmetatable({server = self, n = self.sessions, level = "info", calls = {},
                                waiting = {}, next_request = 0, state = {}, closed = false}, Session)
  self.live[session] = true
  return session
end

--- Closes every session (the server is stopping): each call still running is answered with an
-- error that says why.
function Server:close_all(why)
  local all = {}
  for session in pairs(self.live) do all[#all + 1] = session end
  table.sort(all, function(a, b) return a.n < b.n end)
  for _, session in ipairs(all) do session:close(why) end
end

--- Handles every message of a batch in order; returns the list of replies (empty when the
-- batch held only notifications and responses).
function Session:handle_batch(list, channel)
  local replies = json.array()
  for _, m in ipairs(list) do
    local reply
    if type(m) ~= "table" or json.is_array(m) then
      reply = M.error_response(nil, M.INVALID_REQUEST, "Invalid Request: a message must be an object")
    else
      reply = self:handle(m, channel)
    end
    if reply then replies[#replies + 1] = reply end
  end
  return replies
end

--- Handles one decoded message. Runs in a task (tools/call waits for its tool).
function Session:handle(msg, channel)
  local kind = M.kind(msg)
  if kind == nil then
    local id = valid_id(msg.id) and msg.id or nil
    return M.error_response(id, M.INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 message")
  end
  if kind == "response" then
    self:resolve(msg)
    return nil
  end
  if kind == "notification" then
    self:notify(msg)
    return nil
  end
  local fn = self.server:handler(msg.method, self.stateless)
  if not fn then
    return M.error_response(msg.id, M.METHOD_NOT_FOUND, "Method not found: " .. msg.method)
  end
  local params = msg.params
  if params == nil or params == json.null then params = {} end
  if type(params) ~= "table" or (json.is_array(params) and #params > 0) then
    return M.error_response(msg.id, M.INVALID_PARAMS, "Invalid params: params must be an object " ..
      "(by name), not " .. (type(params) == "table" and "an array" or "a " .. type(params)))
  end
  local ok, result, err = pcall(fn, self, params, msg, channel)
  if not ok and getmetatable(result) == Interrupt then
    ok, result, err = true, result.result, result.error
  end
  if not ok then
    self.server:log("internal error in " .. msg.method .. ": " .. tostring(result))
    return M.error_response(msg.id, M.INTERNAL_ERROR, "Internal error: " .. tostring(result))
  end
  if result == nil and err == nil then return nil end       -- cancelled: no reply at all
  if result == nil then
    return M.error_response(msg.id, err.code, err.message, err.data)
  end
  return {jsonrpc = "2.0", id = msg.id, result = result}
end

function Session:notify(msg)
  if msg.method == "notifications/initialized" then
    self.initialized = true
  elseif msg.method == "notifications/cancelled" then
    local p = msg.params
    if type(p) == "table" and valid_id(p.requestId) then self:cancel(p.requestId, p.reason) end
  end
end

--- Stops an in-flight call; unknown or finished ids are ignored.
function Session:cancel(request_id, reason)
  local call = self.calls[id_key(request_id)]
  if not call or call.finished or call.cancelled then return false end
  call.cancelled = true
  self.server:log(("cancelled request %s%s"):format(tostring(request_id),
    reason and reason ~= json.null and (": " .. tostring(reason)) or ""))
  for i = #call.on_cancel, 1, -1 do
    local ok, err = pcall(call.on_cancel[i])
    if not ok then self.server:log("cancel hook failed: " .. tostring(err)) end
  end
  -- Whatever the hooks did not stop ends here: pending <close> variables (sandboxes) run.
  if coroutine.status(call.task.co) == "suspended" then
    local ok, err = coroutine.close(call.task.co)
    if not ok then self.server:log("closing the cancelled call: " .. tostring(err)) end
  end
  loop.ready(call.wake)
  return true
end

--- Stops every call and runs the session's cleanup (the transport is going away). Each call
-- still running is answered with an error saying why (default: the session ended).
function Session:close(why)
  if self.closed then return end
  self.closed = true
  self.server.live[self] = nil
  why = why or "the session ended before this call finished: start a new session and call again"
  for _, call in pairs(self.calls) do
    if not call.finished then
      call.ended = why
      self:cancel(call.request_id, why)
    end
  end
  for _, w in pairs(self.waiting) do
    w.error = {code = M.INTERNAL_ERROR, message = "session closed"}
    loop.ready(w.op)
  end
  if self.server.opts.on_close then
    local ok, err = pcall(self.server.opts.on_close, self)
    if not ok then self.server:log("session cleanup failed: " .. tostring(err)) end
  end
end

--- The session has been idle for `seconds`: what it holds may be freed (on_idle).
function Session:idle(seconds)
  if self.closed or not self.server.opts.on_idle then return end
  local ok, err = pcall(self.server.opts.on_idle, self, seconds)
  if not ok then self.server:log("freeing an idle session failed: " .. tostring(err)) end
end

--- True while calls are running.
function Session:busy()
  for _, call in pairs(self.calls) do
    if not call.finished then return true end
  end
  return false
end

--- Sends a request to the client over channel and waits for its answer: result | nil, err.
function Session:request(channel, method, params)
  self.next_request = self.next_request + 1
  local id = "rlm-" .. self.next_request
  local w = {op = loop.new_id()}
  self.waiting[id_key(id)] = w
  channel.send{jsonrpc = "2.0", id = id, method = method, params = params}
  local ok = async.await(w.op, CLIENT_REQUEST_TIMEOUT)
  self.waiting[id_key(id)] = nil
  if not ok then return nil, {code = M.INTERNAL_ERROR, message = method .. ": the client did not answer"} end
  if w.error then return nil, w.error end
  return w.result
end

function Session:resolve(msg)
  local w = self.waiting[id_key(msg.id)]
  if not w then return end
  if msg.error ~= nil then
    w.error = type(msg.error) == "table" and msg.error or {code = M.INTERNAL_ERROR, message = tostring(msg.error)}
  else
    w.result = msg.result
  end
  loop.ready(w.op)
end

-- The capability a client declares when the server may ask it each kind of question.
local ASKS = {["elicitation/create"] = "elicitation", ["sampling/createMessage"] = "sampling",
              ["roots/list"] = "roots"}

--- Asks the client what requests name (key -> {method =, params =}) and returns the answers
-- (key -> result) and whether an earlier round's requestState came back. On a session the
-- questions go to the client as requests over channel. On the stateless revision the request
-- ends with an InputRequiredResult naming the questions not answered yet; the client's retry
-- carries the answers (params.inputResponses) and the requestState, which keeps the earlier
-- rounds' answers. A question the client has not declared the capability for ends the request
-- with -32021.
function Session:input(params, requests, channel)
  local caps, lacking = self.client_capabilities or {}, nil
  for _, key in ipairs(sorted_keys(requests)) do
    local need = ASKS[requests[key].method]
    if need and caps[need] == nil then
      lacking = lacking or {}
      lacking[need] = json.object()
    end
  end
  if lacking then
    error(interrupt{error = {code = M.MISSING_CAPABILITY, data = {requiredCapabilities = lacking},
      message = "Missing required client capability: " .. table.concat(sorted_keys(lacking), ", ")}})
  end
  if not self.stateless then
    local answers = {}
    for _, key in ipairs(sorted_keys(requests)) do
      local res, err = self:request(channel, requests[key].method, requests[key].params)
      if not res then error(interrupt{error = err}) end
      answers[key] = res
    end
    return answers, false
  end
  if not self.input_answers then self:gather_answers(params) end
  local ask
  for key, r in pairs(requests) do
    if self.input_answers[key] == nil then
      ask = ask or {}
      ask[key] = {method = r.method, params = r.params}
    end
  end
  if ask then
    error(interrupt{result = {resultType = "input_required", inputRequests = ask,
                              requestState = self.server:keep_answers(self.input_answers)}})
  end
  return self.input_answers, self.resumed
end

-- The answers a stateless retry brings: the earlier rounds' (its requestState) and this one's.
function Session:gather_answers(params)
  local answers = {}
  if params.requestState ~= nil then
    local kept = self.server:kept_answers(params.requestState)
    if not kept then
      error(interrupt{error = {code = M.INVALID_PARAMS, message = "requestState is not one this " ..
        "server issued, or it expired: send the request again without requestState and inputResponses"}})
    end
    for k, v in pairs(kept) do answers[k] = v end
    self.resumed = true
  end
  if type(params.inputResponses) == "table" then
    for k, v in pairs(params.inputResponses) do
      if type(k) == "string" and type(v) == "table" then answers[k] = v end
    end
  end
  self.input_answers = answers
end

--- Sends a log message to the client when level is at or above the client's threshold.
-- A stateless request that named no log level gets no log messages.
function Session:log_message(channel, level, data, logger)
  if not self.level or (LEVELS[level] or 0) < LEVELS[self.level] then return end
  channel.send{jsonrpc = "2.0", method = "notifications/message",
               params = {level = level, logger = logger, data = data}}
end

-- ---------------------------------------------------------------- methods

function handlers.initialize(session, params)
  local asked = params.protocolVersion
  session.protocol = SUPPORTED[asked] and asked or M.VERSIONS[1]
  session.client = type(params.clientInfo) == "table" and params.clientInfo or {}
  session.client_capabilities = type(params.capabilities) == "table" and params.capabilities or {}
  local opts = session.server.opts
  return {protocolVersion = session.protocol, capabilities = session.server:capabilities(),
          serverInfo = {name = opts.name, title = opts.title, version = opts.version},
          instructions = opts.instructions}
end

function handlers.ping()
  return json.object()
end

handlers["tools/list"] = function(session)
  return {tools = session.server:tool_list()}
end

handlers["logging/setLevel"] = function(session, params)
  if not LEVELS[params.level] then
    return nil, {code = M.INVALID_PARAMS, message = "unknown log level: " .. tostring(params.level)}
  end
  session.level = params.level
  return json.object()
end

-- The context a tool runs with.
local function tool_context(session, call, channel, token)
  local ctx = {session = session, state = session.state, cancelled = false}
  local last = nil
  function ctx.progress(progress, total, message)
    if token == nil or call.cancelled then return end
    if last and progress <= last then return end     -- progress must increase
    last = progress
    channel.send{jsonrpc = "2.0", method = "notifications/progress",
                 params = {progressToken = token, progress = progress, total = total,
                           message = message}}
  end
  function ctx.log(level, data, logger)
    if not call.cancelled then session:log_message(channel, level, data, logger) end
  end
  function ctx.request(method, params)
    return session:request(channel, method, params)
  end
  function ctx.fail(code, message)      -- ends the call with a JSON-RPC error, not a result
    error(interrupt{error = {code = code, message = message}})
  end
  function ctx.input(requests)
    return session:input(call.params, requests, channel)
  end
  ctx.client_capabilities = session.client_capabilities or {}
  function ctx.on_cancel(fn)
    call.on_cancel[#call.on_cancel + 1] = fn
  end
  function ctx.is_cancelled()
    return call.cancelled
  end
  return ctx
end

local function strip_nulls(args)
  local out = {}
  for k, v in pairs(args) do
    if v ~= json.null then out[k] = v end
  end
  return out
end

handlers["tools/call"] = function(session, params, msg, channel)
  local tool = type(params.name) == "string" and session.server.tools[params.name]
  if not tool then
    return nil, {code = M.INVALID_PARAMS, message = "Unknown tool: " .. tostring(params.name)}
  end
  local args = params.arguments
  if args == nil or args == json.null then args = {} end
  if type(args) ~= "table" or (json.is_array(args) and #args > 0) then
    return M.error_result("Invalid arguments for " .. tool.name .. ": arguments must be an object")
  end
  args = strip_nulls(args)
  -- Names other servers use for the same argument (a client written for them keeps working).
  for old, new in pairs(tool.aliases or {}) do
    if args[old] ~= nil and args[new] == nil then args[new], args[old] = args[old], nil end
  end
  local bad = schema.check(args, tool.inputSchema or {type = "object"})
  if bad then
    return M.error_result("Invalid arguments for " .. tool.name .. ": " .. bad)
  end
  local as_task, refused = tasks.wanted(session, tool)
  if refused then return nil, refused end
  if as_task then return tasks.start(session, params) end
  local meta = type(params._meta) == "table" and params._meta or {}
  local token = meta.progressToken
  if token == json.null then token = nil end
  local call = {request_id = msg.id, params = params, on_cancel = {}, wake = loop.new_id()}
  local key = id_key(msg.id)
  session.calls[key] = call
  local ctx = tool_context(session, call, channel, token)
  call.task = async.spawn(function()
    local ok, res = pcall(tool.run, args, ctx)
    call.finished = true
    if not ok and getmetatable(res) == Interrupt then
      call.result, call.error = res.result, res.error
    elseif ok and type(res) == "table" then
      call.result = session.server:sized(res)
    elseif ok then
      call.result = M.error_result(tool.name .. " returned no result")
    else
      session.server:log(tool.name .. " failed: " .. tostring(res))
      -- The model sees the message, not where in rlm's source it was raised.
      call.result = M.error_result((tostring(res):gsub("^[%w_/.-]+%.lua:%d+: ", "")))
    end
    loop.ready(call.wake)
  end)
  async.await(call.wake)
  async.forget(call.wake)
  session.calls[key] = nil
  call.finished = true
  if call.ended then return nil, {code = M.INTERNAL_ERROR, message = call.ended} end
  if call.cancelled then return nil end
  return call.result, call.error
end

-- ---------------------------------------------------------------- the stateless revision

-- Methods the stateless revision removed; a stateless request for one is an unknown method.
local REMOVED = {initialize = true, ping = true, ["logging/setLevel"] = true,
                 ["resources/subscribe"] = true, ["resources/unsubscribe"] = true}
-- Results a client may keep for a while (the tool set changes only with the server).
local CACHEABLE = {["server/discover"] = true, ["tools/list"] = true, ["prompts/list"] = true,
                   ["resources/list"] = true, ["resources/read"] = true,
                   ["resources/templates/list"] = true}
M.CACHE_TTL_MS = 300000

-- The HTTP status an error of the stateless revision calls for.
local function error_status(code)
  if code == M.METHOD_NOT_FOUND then return 404 end
  if code == M.INTERNAL_ERROR then return 500 end
  return 400
end

handlers["server/discover"] = function(session)
  local opts = session.server.opts
  local versions = json.array()
  for _, v in ipairs(M.STATELESS_VERSIONS) do versions[#versions + 1] = v end
  for _, v in ipairs(M.VERSIONS) do versions[#versions + 1] = v end
  return {supportedVersions = versions, capabilities = session.server:capabilities(true),
          instructions = opts.instructions}
end

-- The request's _meta, or nil and why it will not do.
local function request_meta(params)
  local meta = type(params) == "table" and not json.is_array(params) and params._meta
  if type(meta) ~= "table" or json.is_array(meta) then
    return nil, "params._meta is required: it names " .. M.META_VERSION .. " and " .. M.META_CAPABILITIES
  end
  if type(meta[M.META_VERSION]) ~= "string" then
    return nil, "params._meta lacks " .. M.META_VERSION
  end
  local caps = meta[M.META_CAPABILITIES]
  if type(caps) ~= "table" or (json.is_array(caps) and #caps > 0) then
    return nil, "params._meta lacks " .. M.META_CAPABILITIES .. " (an object; {} declares none)"
  end
  return meta
end

--- Handles one message of the stateless revision (no session: the request is its own, and what
-- it opened ends with it; channel.session is that session while it runs). check(msg, meta), when
-- given, compares what the transport carried beside the message (HTTP headers): nil, or why
-- they differ. Returns the reply (nil for a notification) and the HTTP status it calls for.
function Server:handle_stateless(msg, channel, check)
  local kind = M.kind(msg)
  if kind == nil then
    return M.error_response(valid_id(msg.id) and msg.id or nil, M.INVALID_REQUEST,
                            "Invalid Request: not a JSON-RPC 2.0 message"), 400
  end
  if kind ~= "request" then return nil, 202 end
  local method = msg.method
  if REMOVED[method] or not self:handler(method, true) then
    local why = REMOVED[method] and (" (protocol " .. M.STATELESS_VERSIONS[1] .. " removed it)") or ""
    return M.error_response(msg.id, M.METHOD_NOT_FOUND, "Method not found: " .. method .. why), 404
  end
  local meta, why = request_meta(msg.params)
  if not meta then return M.error_response(msg.id, M.INVALID_PARAMS, "Invalid params: " .. why), 400 end
  local mismatch = check and check(msg, meta)
  if mismatch then return M.error_response(msg.id, M.HEADER_MISMATCH, "Header mismatch: " .. mismatch), 400 end
  local version = meta[M.META_VERSION]
  if not STATELESS[version] then
    return M.error_response(msg.id, M.UNSUPPORTED_VERSION, "Unsupported protocol version: " .. version,
      {supported = json.array(M.STATELESS_VERSIONS), requested = version}), 400
  end
  local session = self:session()
  session.protocol, session.stateless = version, true
  session.client_capabilities = meta[M.META_CAPABILITIES]
  session.client = type(meta[M.META_CLIENT]) == "table" and meta[M.META_CLIENT] or {}
  session.level = LEVELS[meta[M.META_LOG_LEVEL]] and meta[M.META_LOG_LEVEL] or nil
  channel.session = session
  local ok, reply = pcall(session.handle, session, msg, channel)
  channel.session = nil
  session:close()
  if not ok then error(reply, 0) end
  if reply == nil then return nil, 200 end
  if reply.error then return reply, error_status(reply.error.code) end
  local result = reply.result
  if result.resultType == nil then result.resultType = "complete" end
  result._meta = type(result._meta) == "table" and result._meta or {}
  result._meta[M.META_SERVER] = {name = self.opts.name, title = self.opts.title, version = self.opts.version}
  if CACHEABLE[method] then
    result.ttlMs, result.cacheScope = M.CACHE_TTL_MS, "public"
  end
  return reply, 200
end

return M
