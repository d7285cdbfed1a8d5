--- The tasks extension (io.modelcontextprotocol/tasks) of protocol 2026-07-28.
--
-- A tools/call of a tool that supports tasks (tool.task = "optional" or "required": the rlm_*
-- runs, which take minutes), from a client that declares the extension in that request's
-- capabilities, is answered at once with a task handle (resultType "task"); the tool runs on
-- in a session of its own, and tasks/get tells its status and, once it has ended, its result.
-- The client may poll from another connection, or after it reconnected, for TTL_MS.
--
--   tasks.wanted(session, tool) -> true | nil, err   whether this call becomes a task
--   tasks.start(session, params) -> CreateTaskResult
--   tasks.handlers                tasks/get, tasks/update, tasks/cancel
local async = require "rlm.async"
local json = require "rlm.json"
local sys = require "rlm.sys"

local M = {}

M.EXTENSION = "io.modelcontextprotocol/tasks"
local INVALID_PARAMS, MISSING_CAPABILITY = -32602, -32021
-- A task stays readable this long after it last changed; a client polls about this often.
local TTL_MS, POLL_MS = 3600 * 1000, 2000
local MAX_TASKS = 1000

local function iso(t)
  local whole = math.floor(t)
  return os.date("!%Y-%m-%dT%H:%M:%S", whole) .. (".%03dZ"):format(math.floor((t - whole) * 1000))
end

local function declared(session)
  local ext = type(session.client_capabilities) == "table" and session.client_capabilities.extensions
  return type(ext) == "table" and ext[M.EXTENSION] ~= nil
end

local function missing_extension()
  return {code = MISSING_CAPABILITY, message = "Missing required client capability: the " ..
    M.EXTENSION .. " extension (declare it in _meta's clientCapabilities.extensions)",
    data = {requiredCapabilities = {extensions = {[M.EXTENSION] = json.object()}}}}
end

--- Whether this tools/call becomes a task: true; nil (it runs as usual); or nil and the error
-- for a tool that runs only as a task, called by a client that cannot take one.
function M.wanted(session, tool)
  if not tool.task or not session.stateless or session.task then return nil end
  if declared(session) then return true end
  if tool.task == "required" then return nil, missing_extension() end
  return nil
end

local function registry(server)
  server.tasks = server.tasks or {}
  return server.tasks
end

-- Forgets the tasks that ended more than TTL_MS ago, and past MAX_TASKS the oldest ended one.
local function sweep(server, now)
  local tasks, ended, oldest, at = registry(server), 0, nil, math.huge
  for id, t in pairs(tasks) do
    if t.ended and (now - t.updated) * 1000 > TTL_MS then
      tasks[id] = nil
    elseif t.ended then
      ended = ended + 1
      if t.updated < at then oldest, at = id, t.updated end
    end
  end
  if ended >= MAX_TASKS and oldest then tasks[oldest] = nil end
end

-- The Task as the wire carries it; detailed: with the result, error or questions.
local function wire(t, detailed)
  local out = {taskId = t.id, status = t.status, statusMessage = t.message,
               createdAt = iso(t.created), lastUpdatedAt = iso(t.updated), ttlMs = TTL_MS,
               pollIntervalMs = POLL_MS}
  if detailed then out.result, out.error = t.result, t.error end
  return out
end

local function settle(t, status, fields)
  t.status, t.updated, t.ended = status, sys.now(), true
  for k, v in pairs(fields or {}) do t[k] = v end
end

--- Starts the call in params as a task in a session of its own; returns the CreateTaskResult.
function M.start(session, params)
  local server, now = session.server, sys.now()
  sweep(server, now)
  local t = {id = "task-" .. sys.random_hex(16), status = "working", created = now, updated = now}
  local owner = server:session()
  owner.stateless, owner.protocol, owner.task = true, session.protocol, t
  owner.client_capabilities, owner.client = session.client_capabilities, session.client
  t.owner = owner
  registry(server)[t.id] = t
  -- Progress becomes the task's status message (the client reads it with tasks/get).
  local inner = {}
  for k, v in pairs(params) do inner[k] = v end
  local meta = {}
  for k, v in pairs(type(params._meta) == "table" and params._meta or {}) do meta[k] = v end
  meta.progressToken = t.id
  inner._meta = meta
  local channel = {send = function(m)
    if m.method == "notifications/progress" and type(m.params.message) == "string" then
      t.message, t.updated = m.params.message, sys.now()
    end
  end}
  local msg = {jsonrpc = "2.0", id = t.id, method = "tools/call", params = inner}
  async.spawn(function()
    local ok, reply = pcall(owner.handle, owner, msg, channel)
    if t.ended then return end                       -- cancelled meanwhile
    if not ok then
      settle(t, "failed", {error = {code = -32603, message = "Internal error: " .. tostring(reply)}})
    elseif reply == nil then
      settle(t, "cancelled")
    elseif reply.error then
      settle(t, "failed", {error = reply.error})
    else
      local result = reply.result
      result.resultType = result.resultType or "complete"
      settle(t, "completed", {result = result})
    end
    owner:close()
  end)
  local created = wire(t)
  created.resultType = "task"
  return created
end

local function find(session, params)
  if not declared(session) then return nil, missing_extension() end
  local t = type(params.taskId) == "string" and registry(session.server)[params.taskId]
  if not t then
    return nil, {code = INVALID_PARAMS, message = "Unknown task: " .. tostring(params.taskId) ..
      " (tasks are kept " .. TTL_MS // 1000 .. " s after they end, and not across restarts)"}
  end
  return t
end

M.handlers = {}

M.handlers["tasks/get"] = function(session, params)
  local t, err = find(session, params)
  if not t then return nil, err end
  return wire(t, true)
end

-- rlm's tasks ask the client nothing while they run, so an answer has nothing to resume.
M.handlers["tasks/update"] = function(session, params)
  local t, err = find(session, params)
  if not t then return nil, err end
  return json.object()
end

M.handlers["tasks/cancel"] = function(session, params)
  local t, err = find(session, params)
  if not t then return nil, err end
  if not t.ended then
    settle(t, "cancelled", {message = "cancelled by the client"})
    t.owner:cancel(t.id, "tasks/cancel")
    t.owner:close()
  end
  return json.object()
end

return M
