--- rlm.core.httpd: the server and its clients share this process's one event loop.
local T = require "support"
local async = require "rlm.async"
local httpd = require "rlm.core.httpd"
local http = require "rlm.http"
local sys = require "rlm.sys"

local tests = {}

local serve = T.serve

tests["a whole response, with the request's method, path, headers and body"] = function()
  local url = serve(function(req)
    req:respond(201, {["X-Echo"] = req:header("x-name") or "?", ["Content-Type"] = "text/plain"},
                req:method() .. " " .. req:path() .. " " .. req:body())
  end)
  local res = assert(http.request{url = url .. "/p/q", method = "POST", body = "hello",
                                  headers = {["X-Name"] = "n1"}})
  T.eq(res.status, 201)
  T.eq(res.headers["x-echo"], "n1")
  T.eq(res.body, "POST /p/q hello")
end

tests["a stream's pieces reach the client as they are sent"] = function()
  -- in lockstep: the server sends a piece only once the client has every one before it, so a
  -- server or client that held pieces back would stall the stream into its timeout
  local received, stalled = "", false
  local url = serve(function(req)
    req:stream(200, {["Content-Type"] = "text/event-stream"})
    local sent = ""
    for i = 1, 3 do
      local piece = ("data: %d\n\n"):format(i)
      req:send(piece)
      sent = sent .. piece
      local deadline = sys.now() + 20
      while received ~= sent and sys.now() < deadline do async.sleep(0.01) end
      stalled = stalled or received ~= sent
    end
    req:finish()
  end)
  local pieces = {}
  local res = assert(http.request{url = url .. "/s", timeout = 60, on_chunk = function(d)
    pieces[#pieces + 1] = d
    received = received .. d
  end})
  T.eq(res.status, 200)
  T.eq(table.concat(pieces), "data: 1\n\ndata: 2\n\ndata: 3\n\n")
  T.eq(stalled, false, "a piece sent did not reach the client before the next was sent")
end

tests["many clients at once are served side by side on one thread"] = function()
  -- each handler answers only once all 20 requests are being handled (or after 20 s)
  local in_flight, peak = 0, 0
  local url = serve(function(req)
    in_flight = in_flight + 1
    peak = math.max(peak, in_flight)
    local deadline = sys.now() + 20
    while peak < 20 and sys.now() < deadline do async.sleep(0.01) end
    in_flight = in_flight - 1
    req:respond(200, {}, req:path())
  end)
  local reqs = {}
  for i = 1, 20 do reqs[i] = {url = url .. "/" .. i, timeout = 60} end
  local all = http.request_all(reqs)
  for i, res in ipairs(all) do T.eq(res.body, "/" .. i) end
  T.eq(peak, 20, "requests handled at once")
end

tests["a body over the limit gets 413 without reaching Lua"] = function()
  local seen = 0
  local url = serve(function(req) seen = seen + 1; req:respond(200, {}, "ok") end,
                    {host = "127.0.0.1", port = 0, max_body = 1000})
  local res = assert(http.request{url = url, method = "POST", body = string.rep("x", 5000)})
  T.eq(res.status, 413)
  T.eq(seen, 0)
  T.eq(assert(http.request{url = url, method = "POST", body = "small"}).status, 200)
end

tests["open paths skip the token for GET only; every other request still needs it"] = function()
  local seen = {}
  local url = serve(function(req) seen[#seen + 1] = req:method() .. " " .. req:path(); req:respond(200, {}, "ok") end,
                    {host = "127.0.0.1", port = 0,
                     admit = {hosts = {"127.0.0.1"}, token = "t0ken-s3cret", open_paths = {"/health"}}})
  local function status(method, path, headers)
    return assert(http.request{url = url .. path, method = method, headers = headers, body = method == "POST" and "x" or nil}).status
  end
  T.eq(status("GET", "/health"), 200)
  T.eq(status("POST", "/health"), 401)
  T.eq(status("GET", "/health/x"), 401)
  T.eq(status("GET", "/healthz"), 401)
  T.eq(status("GET", "/mcp"), 401)
  T.eq(status("GET", "/mcp", {Authorization = "Bearer t0ken-s3cret"}), 200)
  T.eq(status("GET", "/health", {Host = "evil.example"}), 403)
  T.eq(seen, {"GET /health", "GET /mcp"})
  -- X-Rlm-Token carries the same token where Authorization belongs to a proxy in front (a
  -- Daytona preview tries any bearer token as a Daytona credential first)
  T.eq(status("GET", "/mcp", {["X-Rlm-Token"] = "t0ken-s3cret"}), 200)
  T.eq(status("GET", "/mcp", {["X-Rlm-Token"] = "wrong"}), 401)
  T.eq(status("GET", "/mcp", {["X-Rlm-Token"] = "wrong", Authorization = "Bearer t0ken-s3cret"}), 401,
       "a wrong token in either header is refused")
end

tests["a released request is answered 500; sending to a finished stream is refused"] = function()
  local url = serve(function(req)
    if req:path() == "/drop" then
      local dropped <close> = req      -- released unanswered (as when collected)
      return
    end
    req:stream(200, {})
    req:finish()
    T.raises(function() req:send("late") end, "open stream")
  end)
  T.eq(assert(http.request{url = url .. "/drop", timeout = 5}).status, 500)
  T.eq(assert(http.request{url = url .. "/s"}).status, 200)
end

tests["closing the server with a request waiting ends it cleanly"] = function()
  local server = assert(httpd.listen{host = "127.0.0.1", port = 0})
  local url = ("http://127.0.0.1:%d/"):format(server:port())
  local res, err
  local task = async.spawn(function() res, err = http.request{url = url, timeout = 5} end)
  async.await(server:id(), 5)
  local req = assert(server:next())
  server:close()
  task:join(5)
  T.eq(res, nil)
  T.truthy(err, "the client saw the connection end")
  T.eq(req:gone(), true)
  T.eq(req:respond(200, {}, "too late"), false)
  T.eq(select(2, httpd.listen{host = "no such host", port = 0}) ~= nil, true)
end

return tests
