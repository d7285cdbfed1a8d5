--- MCP over stdio: one JSON message per line on stdin and stdout; logs go to stderr only.
-- Tool calls run as tasks, so a long one never holds up a ping or a cancellation. At the
-- end of stdin the calls still running are finished and answered, then the session closes.
local async = require "rlm.async"
local json = require "rlm.json"
local mcp = require "rlm.mcp.server"
local stdio = require "rlm.core.stdio"
local sys = require "rlm.sys"

local M = {}

local function write(msg)
  local ok, text = pcall(json.encode, msg)
  if not ok then
    text = json.encode(mcp.error_response(msg.id, mcp.INTERNAL_ERROR,
                                          "the reply could not be encoded: " .. tostring(text)))
  end
  io.stdout:write(text, "\n")
  io.stdout:flush()
end

local channel = {send = write}

local running = 0     -- requests not answered yet
local ANSWER_GRACE = 5  -- seconds the calls ended by an interrupt get to send their errors

local function dispatch(session, line)
  local msg, batch = mcp.decode(line, session)
  if not msg then return write(batch) end
  if batch then
    -- A 2025-03-26 batch: its replies go back together, once every message is handled.
    running = running + 1
    async.spawn(function()
      local ok, replies = pcall(session.handle_batch, session, msg, channel)
      running = running - 1
      if ok and #replies > 0 then write(replies) end
    end)
    return
  end
  if mcp.is_stateless(msg) then
    -- The stateless revision: the request is its own session, with its own channel.
    running = running + 1
    async.spawn(function()
      local ok, reply = pcall(session.server.handle_stateless, session.server, msg, {send = write})
      running = running - 1
      if not ok then
        reply = mcp.error_response(msg.id, mcp.INTERNAL_ERROR, "Internal error: " .. tostring(reply))
      end
      if reply then write(reply) end
    end)
    return
  end
  -- Only tools/call may wait; everything else is answered at once, in arrival order.
  if mcp.kind(msg) ~= "request" or msg.method ~= "tools/call" then
    local reply = session:handle(msg, channel)
    if reply then write(reply) end
    return
  end
  running = running + 1
  async.spawn(function()
    local ok, reply = pcall(session.handle, session, msg, channel)
    running = running - 1
    if not ok then
      reply = mcp.error_response(msg.id, mcp.INTERNAL_ERROR, "Internal error: " .. tostring(reply))
    end
    if reply then write(reply) end
  end)
end

--- Serves server on stdin/stdout until stdin ends; returns 0.
function M.serve(server)
  local session = server:session()
  local reader <close> = stdio.reader(0)
  local ok, err = pcall(function()
    local any = false
    while true do
      local line = reader:line()
      if line then
        any = any or line:match("%S") ~= nil
        if line:match("%S") then dispatch(session, line) end
      elseif reader:eof() then
        if not any then
          io.stderr:write("rlm mcp: stdin ended before any message (an MCP client starts ",
                          "`rlm mcp` and speaks JSON-RPC, one message a line, on its stdin)\n")
        end
        break
      else
        async.await(reader:id())
      end
    end
    while running > 0 do async.sleep(0.01) end
  end)
  if not ok then
    -- Interrupted: the calls still running are answered with an error saying so, and their
    -- sandboxes end with the sessions.
    local why = "the server is shutting down: call again once it is back"
    session:close(why)
    server:close_all(why)
    local deadline = sys.now() + ANSWER_GRACE
    while running > 0 and sys.now() < deadline do async.sleep(0.01) end
    error(err, 0)
  end
  session:close()
  return 0
end

return M
