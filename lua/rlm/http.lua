--- HTTP for Lua scripts, on the host's event loop (libcurl underneath).
--
--   local http = require "rlm.http"
--   local res, err = http.request{url = "http://127.0.0.1:8080/x", method = "POST",
--                                 headers = {["content-type"] = "application/json"},
--                                 body = "{}", timeout = 30, retries = 0,
--                                 max_bytes = 64 << 20}  -- the default cap on the answer
--   -- res = {status, headers (lower-case names), body, url, seconds, new_connections}
--   -- a transport failure (refused, DNS, TLS, timeout) gives nil, err with err =
--   -- {kind, message} (the host's one error shape; tostring(err) is the message)
--   local all = http.request_all({req1, req2, ...}, {concurrency = 16})  -- in input order
--
-- With `on_chunk = function(data) ... end` the body is delivered in pieces as it arrives
-- (res.body is then empty). Connections are kept alive and reused between requests.
local core = require "rlm.core.http"
local async = require "rlm.async"

local M = {}

function M.request(req)
  local on_chunk = req.on_chunk
  if on_chunk ~= nil and type(on_chunk) ~= "function" then
    error("request field 'on_chunk' must be a function", 2)
  end
  local t <close> = core.start(on_chunk and setmetatable({stream = true}, {__index = req}) or req)
  while true do
    async.await(t:id())
    if on_chunk then
      local data = t:take()
      if #data > 0 then on_chunk(data) end
    end
    if t:done() then
      async.forget(t:id())
      return t:result()
    end
  end
end

--- Runs many requests at once (at most opts.concurrency in flight, default all). Each slot of
-- the result is the response table, or a failed item (async.failure) for a transport failure.
function M.request_all(reqs, opts)
  local slots = async.map(reqs, function(req)
    local res, err = M.request(req)
    return res or async.failure(err)
  end, opts and opts.concurrency)
  local out = {}
  for i, s in ipairs(slots) do
    if s.ok then out[i] = s[1] else s.ok = nil; out[i] = s end
  end
  return out
end

return M
