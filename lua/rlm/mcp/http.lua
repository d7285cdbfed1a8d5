--- MCP over Streamable HTTP at /mcp (libmicrohttpd on the host's event loop, rlm.core.httpd).
--
-- POST carries one JSON-RPC message. initialize opens a session (Mcp-Session-Id); later
-- requests name it (unknown: 404). A tools/call from a client that accepts text/event-stream
-- is answered as an SSE stream, so progress, log messages and the server's own requests
-- (sampling, elicitation) reach the client while the tool runs; other requests get a JSON
-- body, and notifications and responses get 202. GET has no stream to offer (405); DELETE ends
-- the session. Every request must come with a local Host and Origin (or one allowed by the
-- options), and, when a token is set, with `Authorization: Bearer TOKEN`.
local async = require "rlm.async"
local common = require "rlm.backend.common"
local httpd = require "rlm.core.httpd"
local json = require "rlm.json"
local mcp = require "rlm.mcp.server"
local sys = require "rlm.sys"

local M = {}

M.PATH = "/mcp"
-- GET answers whether the server is up, without a token (it tells nothing secret): what a
-- deployment waits for and what load balancers and `rlm mcp deploy --status` ask.
M.HEALTH = "/health"
local SESSION_IDLE = 3600        -- seconds before an idle session is closed
local MAX_BODY = 16 * 1024 * 1024 -- one JSON-RPC message; uploads bigger than this go in parts
-- A session without a sandbox is a small table, so many may stay open; a sandbox is a process
-- tree (or a paid remote machine), freed after minutes idle while its session goes on. Clients
-- that never end their sessions (health checks, crashed agents) so cost nothing for long.
M.defaults = {max_sessions = 10000, sandbox_idle = 600, max_connections = 1024}

local LOCAL_NAMES = {["localhost"] = true, ["127.0.0.1"] = true, ["[::1]"] = true, ["::1"] = true}

--- True when host names a loopback address.
function M.is_loopback(host)
  return LOCAL_NAMES[host] == true or host:match("^127%.%d+%.%d+%.%d+$") ~= nil
end

-- "name:port" or "[v6]:port" -> name (lower case)
local function host_name(value)
  value = value:lower()
  if value:sub(1, 1) == "[" then return value:match("^(%[[^%]]*%])") end
  return value:match("^([^:]*)")
end

local function sse(msg)
  return "event: message\ndata: " .. json.encode(msg) .. "\n\n"
end

local function reply_json(req, status, msg, headers)
  headers = headers or {}
  headers["Content-Type"] = "application/json"
  req:respond(status, headers, json.encode(msg))
end

local function reply_text(req, status, text, headers)
  headers = headers or {}
  headers["Content-Type"] = "text/plain; charset=utf-8"
  req:respond(status, headers, text .. "\n")
end

local Transport = {}
Transport.__index = Transport

--- opts: host (bound address), token, allowed_hosts (list of extra Host names),
-- allowed_origins (list of extra origins, "scheme://host[:port]").
function M.new(server, opts)
  local self = setmetatable({server = server, opts = opts, sessions = {}, open = 0, requests = 0,
                             started = {at = sys.now(), version = require("rlm.core.host").version}},
                            Transport)
  self.hosts = {}
  for name in pairs(LOCAL_NAMES) do self.hosts[name] = true end
  for _, h in ipairs(opts.allowed_hosts or {}) do self.hosts[host_name(h)] = true end
  self.origins = {}
  for _, o in ipairs(opts.allowed_origins or {}) do self.origins[o:lower()] = true end
  local bound = opts.host or "127.0.0.1"
  self.any_host = (bound == "0.0.0.0" or bound == "::") and not opts.allowed_hosts
  if not self.any_host then self.hosts[host_name(bound:find(":") and ("[" .. bound .. "]") or bound)] = true end
  return self
end

-- Who may send a request at all, for rlm.core.httpd, which checks it from the headers before
-- reading any body: the Host names, the origins, the token.
function Transport:admission()
  local hosts = {}
  for name in pairs(self.hosts) do hosts[#hosts + 1] = name end
  local origins = {}
  for o in pairs(self.origins) do origins[#origins + 1] = o end
  return {hosts = hosts, origins = origins, any_host = self.any_host, token = self.opts.token,
          open_paths = {M.HEALTH}}
end

-- The session a request names; or nil, the status and the error reply (for request id).
function Transport:session_of(req, id)
  local sid = req:header("Mcp-Session-Id")
  if not sid then
    return nil, 400, mcp.error_response(id, mcp.INVALID_REQUEST,
                                        "Bad Request: the Mcp-Session-Id header is required (protocol 2025-11-25 " ..
                                        "and older; 2026-07-28 needs none, but params._meta)")
  end
  local session = self.sessions[sid]
  if not session then
    return nil, 404, mcp.error_response(id, mcp.INVALID_REQUEST, "Session not found")
  end
  local version = req:header("MCP-Protocol-Version")
  if version and not mcp.supported_version(version) then
    return nil, 400, mcp.error_response(id, mcp.INVALID_REQUEST,
                                        "Bad Request: unsupported MCP-Protocol-Version " .. version)
  end
  session.last_used = sys.now()
  return session
end

local DROP = {send = function() end}

function Transport:count()
  return self.open
end

function Transport:end_session(sid)
  local session = self.sessions[sid]
  if not session then return end
  self.sessions[sid] = nil
  self.open = self.open - 1
  session:close()
end

-- Ends the least recently used session that runs nothing; false when every one is busy.
function Transport:evict_one()
  local oldest, when = nil, math.huge
  for sid, session in pairs(self.sessions) do
    if session.last_used < when and not session:busy() then oldest, when = sid, session.last_used end
  end
  if not oldest then return false end
  self.server:log(("session %s ended to make room: idle %.0f s, the least recently used")
    :format(oldest:sub(1, 8), sys.now() - when))
  self:end_session(oldest)
  return true
end

function Transport:initialize(req, msg)
  local max = self.opts.max_sessions or M.defaults.max_sessions
  if self.open >= max then self:sweep() end
  if self.open >= max and not self:evict_one() then
    return reply_json(req, 503, mcp.error_response(msg.id, mcp.INTERNAL_ERROR,
      ("all %d sessions are running tools: retry shortly"):format(max)), {["Retry-After"] = "5"})
  end
  local session = self.server:session()
  local sid = sys.random_hex(16)
  session.http_id = sid
  session.last_used = sys.now()
  local reply = session:handle(msg, DROP)
  if reply and reply.result then
    self.sessions[sid] = session
    self.open = self.open + 1
    reply_json(req, 200, reply, {["Mcp-Session-Id"] = sid})
  else
    reply_json(req, 400, reply)
  end
end

-- The name a request's Mcp-Name header carries: the tool or prompt, the resource, the task.
local function name_of(msg)
  local p = type(msg.params) == "table" and msg.params or {}
  if msg.method == "tools/call" or msg.method == "prompts/get" then return p.name end
  if msg.method == "resources/read" then return p.uri end
  if msg.method:match("^tasks/") then return p.taskId end
end

-- A header's value as the client meant it: plain, or base64 inside "=?base64?...?=".
local function header_value(value)
  value = value and value:match("^[ \t]*(.-)[ \t]*$")
  local encoded = value and value:match("^=%?base64%?(.*)%?=$")
  if encoded then return common.base64_decode(encoded) end
  return value
end

-- For the stateless revision: the standard headers must say what the body says (a proxy may
-- route on one and the server act on the other). Returns nil, or what differs.
local function header_check(req)
  return function(msg, meta)
    local version = req:header("MCP-Protocol-Version")
    if version ~= meta[mcp.META_VERSION] then
      return ("MCP-Protocol-Version header %s, but params._meta says %s"):format(
        version or "missing", tostring(meta[mcp.META_VERSION]))
    end
    local method = req:header("Mcp-Method")
    if method ~= msg.method then
      return ("Mcp-Method header %s, but the body's method is %s"):format(method or "missing", msg.method)
    end
    local name = name_of(msg)
    if type(name) == "string" and header_value(req:header("Mcp-Name")) ~= name then
      return ("Mcp-Name header %s, but the body names %s"):format(req:header("Mcp-Name") or "missing", name)
    end
  end
end

-- Answers a request through handle(channel) -> reply, status. What the call sends before its
-- reply (progress, log messages, the server's requests) goes on an SSE stream, opened at once
-- when eager, else when the first such message comes (a call that sends none is answered as one
-- JSON body with its status). While the call runs, a comment every KEEPALIVE seconds keeps
-- proxies from cutting a quiet stream, and cancel(channel) runs when the client goes away (the
-- result has nowhere to go; the sandbox must not run on).
local KEEPALIVE = 15

local function answer_streaming(req, eager, cancel, handle)
  local open = false
  local function start()
    if open then return end
    open = true
    req:stream(200, {["Content-Type"] = "text/event-stream", ["Cache-Control"] = "no-cache",
                     ["Connection"] = "keep-alive"})
  end
  local channel = {send = function(m) start(); req:send(sse(m)) end}
  if eager then start() end
  local watch = {done = false}
  async.spawn(function()
    while not watch.done do
      local ended = async.await(req:id(), KEEPALIVE)
      if watch.done then break end
      if ended or req:gone() then
        cancel(channel)
        break
      end
      start()
      req:send(": keep-alive\n\n")
    end
    async.forget(req:id())
  end)
  local ok, reply, status = pcall(handle, channel)
  watch.done = true
  if not ok then error(reply, 0) end
  if open then
    if reply then req:send(sse(reply)) end
    return req:finish()
  end
  if reply then return reply_json(req, status or 200, reply) end
  req:respond(202, {}, "")
end

-- A request of the stateless revision: no session; the headers must match the body.
function Transport:stateless(req, msg, wants_sse)
  local check = header_check(req)
  if wants_sse and mcp.kind(msg) == "request" and msg.method == "tools/call" then
    return answer_streaming(req, false, function(channel)
      if channel.session then channel.session:cancel(msg.id, "the HTTP client disconnected") end
    end, function(channel) return self.server:handle_stateless(msg, channel, check) end)
  end
  local reply, status = self.server:handle_stateless(msg, {send = function() end}, check)
  if reply then return reply_json(req, status, reply) end
  req:respond(status == 200 and 202 or status, {}, "")
end

function Transport:post(req)
  local ctype = (req:header("Content-Type") or ""):lower()
  if not ctype:find("application/json", 1, true) then
    return reply_text(req, 415, "Content-Type must be application/json")
  end
  local accept = (req:header("Accept") or "*/*"):lower()
  local wants_sse = accept:find("text/event-stream", 1, true) ~= nil
  if not (wants_sse or accept:find("application/json", 1, true) or accept:find("*/*", 1, true)) then
    return reply_text(req, 406, "Accept must include application/json or text/event-stream")
  end
  local body = req:body()
  local msg, err_reply = mcp.decode(body)
  if not msg and body:match("^%s*%[") then
    -- A batch: allowed on sessions that speak 2025-03-26.
    local session, status, err = self:session_of(req)
    if not session then return reply_json(req, status, err) end
    local list, batch = mcp.decode(body, session)
    if not batch then return reply_json(req, 400, err_reply) end
    local replies = session:handle_batch(list, DROP)
    if #replies == 0 then return req:respond(202, {}, "") end
    return reply_json(req, 200, replies)
  end
  if not msg then return reply_json(req, 400, err_reply) end
  if not req:header("Mcp-Session-Id") and (mcp.stateless_version(req:header("MCP-Protocol-Version"))
                                           or mcp.is_stateless(msg)) then
    return self:stateless(req, msg, wants_sse)
  end
  local kind = mcp.kind(msg)
  if kind == "request" and msg.method == "initialize" then return self:initialize(req, msg) end
  local session, status, err = self:session_of(req, msg.id)
  if not session then return reply_json(req, status, err) end
  if kind ~= "request" then
    local reply = session:handle(msg, DROP)
    if reply then return reply_json(req, 400, reply) end
    return req:respond(202, {}, "")
  end
  if wants_sse and msg.method == "tools/call" then
    return answer_streaming(req, true, function() session:cancel(msg.id, "the HTTP client disconnected") end,
                            function(channel) return session:handle(msg, channel) end)
  end
  local reply = session:handle(msg, DROP)
  if reply then return reply_json(req, 200, reply) end
  req:respond(202, {}, "")
end

function Transport:delete(req)
  local session, status, err = self:session_of(req)
  if not session then return reply_json(req, status, err) end
  self:end_session(session.http_id)
  req:respond(200, {}, "")
end

function Transport:health(req)
  if req:method() ~= "GET" then
    return reply_text(req, 405, "use GET", {Allow = "GET"})
  end
  reply_json(req, 200, {status = "ok", server = "rlm", version = self.started.version,
                        uptime_s = math.floor(sys.now() - self.started.at), sessions = self:count()},
             {["Cache-Control"] = "no-store"})
end

function Transport:handle(req)
  if req:path() == M.HEALTH then return self:health(req) end
  if req:path() ~= M.PATH then return reply_text(req, 404, "not found (the endpoint is /mcp)") end
  local method = req:method()
  if method == "POST" then return self:post(req) end
  if method == "DELETE" then return self:delete(req) end
  reply_text(req, 405, "use POST (GET streams are not offered)", {Allow = "POST, DELETE"})
end

-- Closes sessions nobody has used for an hour, and frees the sandboxes of sessions idle for
-- sandbox_idle seconds (the session goes on, and its next call is told its state was lost).
function Transport:sweep()
  local now = sys.now()
  local sandbox_idle = self.opts.sandbox_idle or M.defaults.sandbox_idle
  local ended = {}
  for sid, session in pairs(self.sessions) do
    local idle = now - session.last_used
    if not session:busy() then
      if idle > SESSION_IDLE then
        ended[#ended + 1] = sid
      elseif idle > sandbox_idle then
        session:idle(sandbox_idle)
      end
    end
  end
  for _, sid in ipairs(ended) do self:end_session(sid) end
end

M.SHUTTING_DOWN = "the server is shutting down: call again once it is back"
local ANSWER_GRACE = 5     -- seconds the calls ended by a shutdown get to send their errors

-- Ends every session; each call still running is answered with an error that says so, and the
-- answers get a moment to leave before the listener closes.
function Transport:close()
  local all = {}
  for sid in pairs(self.sessions) do all[#all + 1] = sid end
  table.sort(all)
  for _, sid in ipairs(all) do
    local session = self.sessions[sid]
    self.sessions[sid] = nil
    self.open = self.open - 1
    session:close(M.SHUTTING_DOWN)
  end
  self.server:close_all(M.SHUTTING_DOWN)
  local deadline = sys.now() + ANSWER_GRACE
  while self.requests > 0 and sys.now() < deadline do async.sleep(0.02) end
end

--- Listens and serves until interrupted. on_ready(port) is called once requests are accepted.
function M.serve(server, opts, on_ready)
  local self = M.new(server, opts)
  local listener <close> = assert(httpd.listen{host = opts.host or "127.0.0.1", port = opts.port or 0,
    max_body = MAX_BODY, admit = self:admission(),
    max_connections = opts.max_connections or M.defaults.max_connections})
  on_ready(listener:port())
  local sweep_every = math.max(0.25, math.min(60, (opts.sandbox_idle or M.defaults.sandbox_idle) / 4))
  local next_sweep = sys.now() + sweep_every
  local ok, err = pcall(function()
    while true do
      async.await(listener:id(), sweep_every)
      while true do
        local req = listener:next()
        if not req then break end
        async.spawn(function()
          self.requests = self.requests + 1
          local fine, why = pcall(self.handle, self, req)
          self.requests = self.requests - 1
          if not fine then
            server:log("HTTP request failed: " .. tostring(why))
            pcall(reply_text, req, 500, "internal error")
          end
        end)
      end
      if sys.now() >= next_sweep then
        self:sweep()
        next_sweep = sys.now() + sweep_every
      end
    end
  end)
  self:close()
  if not ok then error(err, 0) end
end

return M
