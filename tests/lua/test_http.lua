local T = require "support"
local http = require "rlm.http"
local sys = require "rlm.sys"
local cjson = require "cjson"

local tests = {}

local function echo_server() return T.server{"tests/standins/echo"} end

tests["GET, POST with headers and body, status codes are responses"] = function()
  local s = echo_server()
  local res = assert(http.request{url = s.url .. "/echo?x=1"})
  T.eq(res.status, 200)
  T.eq(res.headers["content-type"], "application/json")
  local e = cjson.decode(res.body)
  T.eq(e.method, "GET")
  T.eq(e.query.x, "1")

  res = assert(http.request{url = s.url .. "/echo", method = "POST", body = "a\0b",
                            headers = {["X-Test"] = "yes", "X-Other: 2"}})
  e = cjson.decode(res.body)
  T.eq(e.method, "POST")
  T.eq(e.body, "a\0b")
  T.eq(e.headers["x-test"], "yes")
  T.eq(e.headers["x-other"], "2")

  res = assert(http.request{url = s.url .. "/echo", method = "DELETE"})
  T.eq(cjson.decode(res.body).method, "DELETE")

  res = assert(http.request{url = s.url .. "/status/503"})
  T.eq(res.status, 503)
  T.eq(res.headers["retry-after"], "1")
end

tests["transport failures return nil, err with the kind and message"] = function()
  -- A port nobody listens on: bind a server, stop it, reuse its port.
  local s = echo_server()
  s.proc:kill("KILL")
  sys.wait(s.proc, 2)
  local res, err = http.request{url = s.url .. "/echo", timeout = 5}
  T.eq(res, nil)
  T.eq(err.kind, "connect")
  T.contains(err.message, "127.0.0.1")
  T.contains(tostring(err), "127.0.0.1")
  T.contains("unreachable: " .. err, "127.0.0.1")

  local s2 = echo_server()
  res, err = http.request{url = s2.url .. "/delay?ms=2000", timeout = 0.3}
  T.eq(res, nil)
  T.eq(err.kind, "timeout")
end

tests["header values with line breaks are refused"] = function()
  T.raises(function()
    http.request{url = "http://127.0.0.1:1/", headers = {["X-A"] = "1\r\nX-B: 2"}}
  end, "line break")
end

tests["connections are kept alive between requests"] = function()
  local s = echo_server()
  local first = assert(http.request{url = s.url .. "/echo"})
  T.eq(first.new_connections, 1)
  for _ = 1, 5 do
    local again = assert(http.request{url = s.url .. "/echo"})
    T.eq(again.new_connections, 0, "new connections on a reused request")
  end
  local st = cjson.decode(assert(http.request{url = s.url .. "/_stats"}).body)
  T.eq(math.tointeger(st.connections), 1, "TCP connections seen by the server")
end

tests["many requests are in flight at once, and come back in input order"] = function()
  local s = echo_server()
  local reqs = {}
  -- each waits at the server until all 16 are there: sent one after the other, they could not be
  for i = 1, 16 do reqs[i] = {url = s.url .. "/delay?ms=300&together=16&i=" .. i} end
  local results = http.request_all(reqs)
  T.eq(#results, 16)
  for i, r in ipairs(results) do
    T.eq(r.status, 200)
    T.contains(r.url, "i=" .. i .. "", "slot " .. i)
  end
  local st = cjson.decode(assert(http.request{url = s.url .. "/_stats"}).body)
  T.eq(math.tointeger(st.max_in_flight), 16, "requests in flight at once")
end

tests["concurrency cap is honoured"] = function()
  local s = echo_server()
  local reqs = {}
  for i = 1, 6 do reqs[i] = {url = s.url .. "/delay?ms=200&together=2"} end
  local t0 = sys.now()
  local results = http.request_all(reqs, {concurrency = 2})
  local elapsed = sys.now() - t0
  for _, r in ipairs(results) do T.eq(r.status, 200) end
  T.truthy(elapsed >= 0.55, "6 x 200 ms two at a time took only " .. elapsed .. " s")
  local st = cjson.decode(assert(http.request{url = s.url .. "/_stats"}).body)
  T.eq(math.tointeger(st.max_in_flight), 2, "requests in flight at once")
end

tests["a failed slot does not lose the others"] = function()
  local s = echo_server()
  local results = http.request_all{
    {url = s.url .. "/echo"},
    {url = "http://127.0.0.1:1/nothing", timeout = 2},
    {url = s.url .. "/status/404"},
  }
  T.eq(results[1].status, 200)
  T.eq(results[2].kind, "connect")
  T.eq(results[3].status, 404)
end

tests["streaming delivers chunks as they arrive"] = function()
  local s = echo_server()
  local chunks, times = {}, {}
  local t0 = sys.now()
  -- the server pauses 1 s after each chunk: the first one reaches on_chunk at least 3 s before
  -- the end, unless the client held it back; how the rest is grouped is the machine's business
  local res = assert(http.request{url = s.url .. "/stream?chunks=4&ms=1000",
    on_chunk = function(data) chunks[#chunks + 1] = data; times[#times + 1] = sys.now() - t0 end})
  T.eq(res.status, 200)
  T.eq(res.body, "")
  T.eq(table.concat(chunks), "chunk-0\nchunk-1\nchunk-2\nchunk-3\n")
  T.truthy(chunks[1]:match("^chunk%-0\n"), "the first delivery starts with the first chunk")
  T.truthy(times[#times] - times[1] >= 1.5,
           ("the first chunk came %.2f s before the last"):format(times[#times] - times[1]))
end

return tests
