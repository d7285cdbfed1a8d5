--- A small MCP client for the user's tool servers (rlm.tools): stdio (a command rlm starts,
-- with its own environment) or Streamable HTTP (a URL, with its own headers). It initializes,
-- lists the tools (every page) and calls them; requests over one connection may be in flight
-- together (answers are matched by id). Keys in env and headers stay in this process.
local async = require "rlm.async"
local http = require "rlm.http"
local json = require "rlm.json"
local loop = require "rlm.core.loop"
local sys = require "rlm.sys"

local M = {}

M.PROTOCOL_VERSION = "2025-06-18"
local START_TIMEOUT = 30
local CALL_TIMEOUT = 300

local Client = {}
Client.__index = Client

-- ---------- stdio: one JSON message a line each way ----------

local function stdio_open(self, server)
  local argv = server.command
  if type(argv) == "string" then argv = {"/bin/sh", "-c", argv} end
  local env = sys.environ()
  for k, v in pairs(server.env or {}) do env[k] = v end
  local proc, err = sys.spawn{argv = argv, env = env, stdin = "pipe", stderr = "inherit",
                              max_line = 64 * 1024 * 1024}
  if not proc then error(("tools: cannot start the MCP server %s: %s"):format(argv[1], tostring(err)), 0) end
  self.proc, self.waiting, self.replies = proc, {}, {}
  -- One reader for every request: each answer is handed to the task that waits for its id.
  self.reader = async.spawn(function()
    while not self.closed do
      local ok, line = pcall(sys.read_line, proc)     -- a closed process ends the reading
      if not ok or not line then break end
      local msg = json.decode(line)
      if type(msg) == "table" and msg.id ~= nil and (msg.result ~= nil or msg.error ~= nil) then
        self.replies[msg.id] = msg
        local waiter = self.waiting[msg.id]
        if waiter then loop.ready(waiter) end
      end
    end
    self.ended = true
    for _, waiter in pairs(self.waiting) do loop.ready(waiter) end
  end)
end

local function stdio_request(self, msg, timeout)
  self.proc:write(json.encode(msg) .. "\n")
  if msg.id == nil then return true end
  if not self.replies[msg.id] and not self.ended then
    local waiter = loop.new_id()
    self.waiting[msg.id] = waiter
    async.await(waiter, timeout)
    async.forget(waiter)
    self.waiting[msg.id] = nil
  end
  local reply = self.replies[msg.id]
  self.replies[msg.id] = nil
  if reply then return reply end
  return nil, self.ended and "the MCP server ended" or ("no answer in %g s"):format(timeout)
end

-- ---------- Streamable HTTP: a POST each, answered with JSON or an SSE stream ----------

-- The answer to request id in an SSE body: the data of the event that carries it.
local function from_sse(body, id)
  for event in (body .. "\n\n"):gmatch("(.-)\r?\n\r?\n") do
    local data = {}
    for line in (event .. "\n"):gmatch("(.-)\r?\n") do
      local d = line:match("^data: ?(.*)$")
      if d then data[#data + 1] = d end
    end
    local msg = #data > 0 and json.decode(table.concat(data, "\n"))
    if type(msg) == "table" and msg.id == id then return msg end
  end
end

local function http_request(self, msg, timeout)
  local headers = {["content-type"] = "application/json",
                   accept = "application/json, text/event-stream"}
  for k, v in pairs(self.server.headers or {}) do headers[k:lower()] = v end
  if self.session then headers["mcp-session-id"] = self.session end
  if self.version then headers["mcp-protocol-version"] = self.version end
  local res, err = http.request{url = self.server.url, method = "POST", headers = headers,
                                body = json.encode(msg), timeout = timeout}
  if not res then return nil, tostring(err) end
  self.session = self.session or res.headers["mcp-session-id"]
  if msg.id == nil then return true end
  if res.status ~= 200 then
    return nil, ("the MCP server answered HTTP %d: %s"):format(res.status, res.body:sub(1, 200))
  end
  local ctype = (res.headers["content-type"] or ""):lower()
  local reply = ctype:find("text/event-stream", 1, true) and from_sse(res.body, msg.id)
    or json.decode(res.body)
  if type(reply) ~= "table" then return nil, "the MCP server's answer is not a JSON-RPC message" end
  return reply
end

-- ---------- both ----------

function Client:request(method, params, timeout)
  self.next_id = self.next_id + 1
  local msg = {jsonrpc = "2.0", id = self.next_id, method = method, params = params}
  local reply, err = self.send(self, msg, timeout or CALL_TIMEOUT)
  if not reply then return nil, err end
  if reply.error ~= nil then
    local e = type(reply.error) == "table" and reply.error or {}
    return nil, ("%s (MCP error %s)"):format(tostring(e.message or reply.error), tostring(e.code))
  end
  return reply.result
end

function Client:notify(method, params)
  return self.send(self, {jsonrpc = "2.0", method = method, params = params}, START_TIMEOUT)
end

--- Calls the server's tool `name`; returns its structured content, or its text (JSON decoded
-- when it is JSON), or nil, err when the tool failed.
function Client:call(name, args)
  local result, err = self:request("tools/call", {name = name, arguments = json.object(args)})
  if not result then return nil, err end
  local texts = {}
  for _, c in ipairs(result.content or {}) do
    if c.type == "text" then texts[#texts + 1] = c.text end
  end
  local text = table.concat(texts, "\n")
  if result.isError then return nil, text ~= "" and text or ("the MCP tool %s failed"):format(name) end
  if result.structuredContent ~= nil then return result.structuredContent end
  local decoded = json.decode(text)
  if decoded ~= nil and text:match("^%s*[%[{]") then return decoded end
  return text
end

function Client:close()
  if self.closed then return end
  self.closed = true
  if self.proc then
    pcall(function() self.proc:close_stdin() end)
    self.proc:kill("TERM")
    sys.wait(self.proc, 5)
    self.proc:close()
  elseif self.session then
    local headers = {["mcp-session-id"] = self.session}
    for k, v in pairs(self.server.headers or {}) do headers[k:lower()] = v end
    http.request{url = self.server.url, method = "DELETE", headers = headers, timeout = 5}
  end
end

Client.__close = Client.close

--- Connects to server ({command, env} or {url, headers}), initializes, and lists its tools.
function M.connect(server)
  local self = setmetatable({server = server, next_id = 0}, Client)
  local where = server.url or (type(server.command) == "table" and server.command[1] or server.command)
  if server.url then self.send = http_request else
    stdio_open(self, server)
    self.send = stdio_request
  end
  local init, err = self:request("initialize", {protocolVersion = M.PROTOCOL_VERSION,
    capabilities = json.object(), clientInfo = {name = "rlm", version = require("rlm.core.host").version}},
    START_TIMEOUT)
  if not init then
    self:close()
    error(("tools: the MCP server %s did not initialize: %s"):format(where, err), 0)
  end
  self.version = init.protocolVersion
  self:notify("notifications/initialized")
  local tools, cursor = {}, nil
  repeat
    local page, lerr = self:request("tools/list", cursor and {cursor = cursor} or json.object(), START_TIMEOUT)
    if not page then
      self:close()
      error(("tools: the MCP server %s did not list its tools: %s"):format(where, lerr), 0)
    end
    for _, t in ipairs(page.tools or {}) do tools[#tools + 1] = t end
    cursor = page.nextCursor
  until cursor == nil or cursor == json.null
  self.tools = tools
  return self
end

return M
