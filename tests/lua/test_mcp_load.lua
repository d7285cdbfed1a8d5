--- `rlm mcp --http` when many agents use it: sessions nobody ends, connections past the limit,
-- sandboxes left idle.
local T = require "support"
local F = require "rlm_fixtures"
local async = require "rlm.async"
local common = require "rlm.backend.common"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local INIT = {jsonrpc = "2.0", id = 0, method = "initialize",
              params = {protocolVersion = "2025-06-18", capabilities = json.object(),
                        clientInfo = {name = "load", version = "0"}}}

local function http_server(extra)
  local argv = {T.rlm, "mcp", "--http", "127.0.0.1:0"}
  for _, a in ipairs(extra or {}) do argv[#argv + 1] = a end
  local proc = assert(sys.spawn{argv = argv, stdin = "null", stderr = "pipe"})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 5); proc:close() end)
  local line = sys.read_line(proc, 30)
  local url = line and line:match("^READY (http://127%.0%.0%.1:%d+)$")
  if not url then error("no READY line: " .. tostring(line) .. " " .. proc:read("stderr")) end
  return url .. "/mcp"
end

local function headers(sid)
  return {["Content-Type"] = "application/json", Accept = "application/json, text/event-stream",
          ["Mcp-Session-Id"] = sid, ["MCP-Protocol-Version"] = sid and "2025-06-18" or nil}
end

local function post(url, msg, sid)
  return assert(http.request{url = url, method = "POST", headers = headers(sid), retries = 0,
                             body = json.encode(msg), timeout = 120})
end

local function open_session(url)
  local res = post(url, INIT)
  T.eq(res.status, 200, res.body)
  local sid = res.headers["mcp-session-id"]
  T.eq(post(url, {jsonrpc = "2.0", method = "notifications/initialized"}, sid).status, 202)
  return sid
end

-- A tool call's result (the JSON body, or the last SSE message's).
local function call(url, sid, name, args)
  local res = post(url, {jsonrpc = "2.0", id = 1, method = "tools/call",
                         params = {name = name, arguments = args or json.object()}}, sid)
  T.eq(res.status, 200, res.body)
  local last
  for data in res.body:gmatch("data: ([^\n]*)\n") do last = data end
  return assert(json.decode(last or res.body)).result
end

-- How many sandboxes the server has now (asked on a session of its own).
local function call_status(url)
  return call(url, open_session(url), "rlm_status").structuredContent.sandboxes
end

local function text_of(result)
  local parts = {}
  for _, c in ipairs(result.content) do parts[#parts + 1] = c.text or "" end
  return table.concat(parts, "\n")
end

tests["1,000 sessions opened and abandoned, then a new client is served"] = function()
  local url = http_server()
  local reqs = {}
  for i = 1, 1000 do
    reqs[i] = {url = url, method = "POST", headers = headers(), body = json.encode(INIT),
               retries = 0, timeout = 120}
  end
  local opened = 0
  for _, res in ipairs(http.request_all(reqs, {concurrency = 16})) do
    if res.status == 200 and res.headers["mcp-session-id"] then opened = opened + 1 end
  end
  T.eq(opened, 1000, "sessions opened")
  local sid = open_session(url)
  local result = call(url, sid, "sandbox_exec", {code = "print(6 * 7)"})
  T.eq(result.structuredContent.stdout, "42\n")
end

tests["past --max-sessions the least recently used idle session makes room"] = function()
  local url = http_server{"--max-sessions", "5"}
  local sids = {}
  for i = 1, 5 do sids[i] = open_session(url) end
  T.eq(post(url, {jsonrpc = "2.0", id = 2, method = "ping"}, sids[1]).status, 200, "session 1 used")
  sids[6] = open_session(url)
  T.eq(post(url, {jsonrpc = "2.0", id = 3, method = "ping"}, sids[2]).status, 404,
       "the least recently used session was ended")
  for _, i in ipairs{1, 3, 4, 5, 6} do
    T.eq(post(url, {jsonrpc = "2.0", id = 4, method = "ping"}, sids[i]).status, 200, "session " .. i)
  end
end

tests["an idle session's sandbox is freed; the session goes on and is told its state was lost"] =
function()
  local url = http_server{"--sandbox-idle", "1"}
  local sid = open_session(url)
  local r = call(url, sid, "sandbox_exec_stateful", {code = "x = 41"})
  T.eq(r.isError or false, false, text_of(r))
  local deadline = sys.now() + 60
  repeat
    sys.sleep(0.5)
    local live = call(url, open_session(url), "rlm_status").structuredContent.sandboxes
  until live == 0 or sys.now() > deadline
  -- the call that meets the new sandbox is told, whichever tool it is, and only it
  r = call(url, sid, "sandbox_upload", {path = "a.txt", content = "kept"})
  T.contains(text_of(r), "was idle for more than 1 s and was freed")
  r = call(url, sid, "sandbox_exec_stateful", {code = "print(open('a.txt').read())\nprint(x + 1)"})
  local text = text_of(r)
  T.truthy(not text:find("was freed", 1, true), "told once")
  T.contains(text, "kept")
  T.contains(text, "NameError")
  r = call(url, sid, "sandbox_exec_stateful", {code = "x = 1\nprint(x + 1)"})
  T.eq(r.structuredContent.stdout, "2\n")
end

-- Starts a sandbox_exec that runs for a minute on session sid, and returns once its sandbox is up
-- (rlm_status from another session counts it), with the task that waits for its HTTP answer.
local function long_call(url, sid)
  local call = async.spawn(post, url, {jsonrpc = "2.0", id = 7, method = "tools/call", params = {
    name = "sandbox_exec", arguments = {code = "import time\ntime.sleep(60)\nprint('finished')"}}}, sid)
  local deadline = sys.now() + 60
  repeat
    async.sleep(0.1)
    local live = call_status(url)
  until live == 1 or sys.now() > deadline
  return call
end

-- The JSON-RPC answer to request 7 in an HTTP response (a JSON body or an SSE stream).
local function answer_to_7(res)
  for data in res.body:gmatch("data: ([^\n]*)\n") do
    local m = json.decode(data)
    if m and m.id == 7 then return m end
  end
  local m = json.decode(res.body)
  return m and m.id == 7 and m or nil
end

tests["a call in flight when its session ends is answered with an error"] = function()
  local url = http_server()
  local sid = open_session(url)
  local started = sys.now()
  local call = long_call(url, sid)
  local res = assert(http.request{url = url, method = "DELETE", headers = headers(sid), retries = 0, timeout = 60})
  T.eq(res.status, 200)
  local answer = answer_to_7(call:join(60))
  T.truthy(answer and answer.error, "an error reply, not silence")
  T.contains(answer.error.message, "session ended")
  T.truthy(sys.now() - started < 55, "answered before the code would have finished")
end

tests["a call in flight when the server stops is answered with an error"] = function()
  local argv = {T.rlm, "mcp", "--http", "127.0.0.1:0"}
  local proc = assert(sys.spawn{argv = argv, stdin = "null", stderr = "pipe"})
  T.defer(function() proc:kill("KILL"); sys.wait(proc, 5); proc:close() end)
  local url = assert(sys.read_line(proc, 30):match("^READY (http://127%.0%.0%.1:%d+)$")) .. "/mcp"
  local call = long_call(url, open_session(url))
  proc:kill("TERM")
  local answer = answer_to_7(call:join(60))
  T.truthy(answer and answer.error, "an error reply, not silence")
  T.contains(answer.error.message, "shutting down")
  T.truthy(sys.wait(proc, 30) ~= nil, "the server exits")
end

tests["a call in flight over stdio when the server stops is answered with an error"] = function()
  local proc = assert(sys.spawn{argv = {T.rlm, "mcp"}, stdin = "pipe", stderr = "pipe"})
  T.defer(function() proc:kill("KILL"); sys.wait(proc, 5); proc:close() end)
  local function send(msg) assert(proc:write(json.encode(msg) .. "\n")) end
  local function reply(id)
    while true do
      local line = assert(sys.read_line(proc, 60), "the server said nothing more")
      local m = json.decode(line)
      if m and m.id == id then return m end
    end
  end
  send(INIT)
  reply(0)
  send{jsonrpc = "2.0", method = "notifications/initialized"}
  send{jsonrpc = "2.0", id = 7, method = "tools/call", params = {name = "sandbox_exec",
       arguments = {code = "import time\ntime.sleep(60)"}}}
  local deadline = sys.now() + 60
  local live
  repeat
    send{jsonrpc = "2.0", id = 8, method = "tools/call", params = {name = "rlm_status", arguments = json.object()}}
    live = reply(8).result.structuredContent.sandboxes
  until live == 1 or sys.now() > deadline
  T.eq(live, 1, "the call's sandbox runs")
  proc:kill("TERM")
  local answer = reply(7)
  T.truthy(answer.error, "an error reply, not silence")
  T.contains(answer.error.message, "shutting down")
end

tests["a 20 MB file uploaded in parts over HTTP arrives whole"] = function()
  local url = http_server()
  local sid = open_session(url)
  local random <close> = assert(io.open("/dev/urandom", "rb"))
  local data = random:read(20 * 1024 * 1024)
  T.eq(#data, 20 * 1024 * 1024)
  local host_copy = T.tmpdir() .. "/big.bin"
  assert(sys.write_file(host_copy, data))
  local want = assert(sys.run({"sha256sum", host_copy})).stdout:match("^(%x+)")
  local part, parts = 7 * 1024 * 1024, 0
  for first = 1, #data, part do
    local r = call(url, sid, "sandbox_upload", {path = "in/big.bin", encoding = "base64",
      content = common.base64_encode(data:sub(first, first + part - 1)), append = first > 1})
    T.eq(r.isError or false, false, text_of(r))
    parts = parts + 1
    T.eq(r.structuredContent.size, math.min(#data, first + part - 1), "the file so far")
  end
  T.eq(parts, 3)
  local r = call(url, sid, "sandbox_shell", {command = "sha256sum in/big.bin; ls in"})
  T.eq(r.structuredContent.output, want .. "  in/big.bin\nbig.bin\n", "whole, and no part left over")
end

-- A tools/call of protocol 2026-07-28 (no session): its result.
local function stateless_call(url, name, args)
  local meta = {["io.modelcontextprotocol/protocolVersion"] = "2026-07-28",
                ["io.modelcontextprotocol/clientCapabilities"] = json.object()}
  local res = assert(http.request{url = url, method = "POST", retries = 0, timeout = 300,
    headers = {["Content-Type"] = "application/json", Accept = "application/json, text/event-stream",
               ["MCP-Protocol-Version"] = "2026-07-28", ["Mcp-Method"] = "tools/call", ["Mcp-Name"] = name},
    body = json.encode{jsonrpc = "2.0", id = 7, method = "tools/call",
                       params = {name = name, arguments = args, _meta = meta}}})
  T.eq(res.status, 200, res.body:sub(1, 300))
  return answer_to_7(res).result
end

tests["a 20 MB rlm_execute answer over HTTP is kept as a file and read in parts"] = function()
  F.model({rules = {{match = "Task:", reply = F.code("SUBMIT(answer='z' * (20 * 1024 * 1024))")}},
           default = "I am not sure."})
  local url = http_server()
  local r = stateless_call(url, "rlm_execute", {task = "Say z many times."})
  T.eq(r.isError, nil, r.content[1].text:sub(1, 300))
  local st = r.structuredContent
  T.eq(st.saved_bytes, 20 * 1024 * 1024)
  T.truthy(st.workspace, "a stateless call's file stays in a workspace")
  local parts, offset = {}, 0
  repeat
    local d = stateless_call(url, "sandbox_download", {path = st.saved_to, offset = offset,
                                                       encoding = "utf-8", workspace = st.workspace})
    T.eq(d.isError, nil, d.content[1].text:sub(1, 200))
    parts[#parts + 1] = d.content[1].text
    offset = d.structuredContent.next_offset
  until not offset
  local all = table.concat(parts)
  T.eq(#all, 20 * 1024 * 1024)
  T.truthy(all == string.rep("z", 20 * 1024 * 1024), "the answer, whole")
  T.truthy(#parts >= 2, #parts .. " parts")
end

tests["rlm-mcp's MCP_TRANSPORT, MCP_PORT and RLM_MAX_OUTPUT_CHARS are read"] = function()
  -- a free port, found by binding 0 and letting go
  local probe = assert(require("rlm.core.httpd").listen{host = "127.0.0.1", port = 0})
  local port = probe:port()
  probe:close()
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), MCP_TRANSPORT = "http",
               MCP_PORT = tostring(port), RLM_MAX_OUTPUT_CHARS = "200000"}
  local proc = assert(sys.spawn{argv = {T.rlm, "mcp"}, stdin = "null", stderr = "pipe", env = env})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 5); proc:close() end)
  T.eq(sys.read_line(proc, 30), ("READY http://127.0.0.1:%d"):format(port))
  local url = ("http://127.0.0.1:%d/mcp"):format(port)
  local r = call(url, open_session(url), "sandbox_exec", {code = "SUBMIT(answer='x' * 300000)"})
  T.contains(text_of(r), "--max-result 200000", "the cap came from RLM_MAX_OUTPUT_CHARS")
  local bad = assert(sys.run({T.rlm, "mcp"}, {env = {PATH = env.PATH, MCP_TRANSPORT = "carrier-pigeon"}}))
  T.contains(bad.stderr, "MCP_TRANSPORT=carrier-pigeon: use stdio or http")
end

tests["connections past the limit get 503 with Retry-After, not a reset"] = function()
  local held, release = 0, false
  local base = T.serve(function(req)
    held = held + 1
    while not release do async.sleep(0.02) end
    req:respond(200, {}, "served")
  end, {host = "127.0.0.1", port = 0, max_connections = 4})
  T.defer(function() release = true end)
  local url = base .. "/x"
  local results, tasks = {}, {}
  for i = 1, 8 do
    tasks[i] = async.spawn(function()
      results[i] = assert(http.request{url = url, retries = 0, timeout = 60})
    end)
  end
  local deadline = sys.now() + 60
  local refused = 0
  while sys.now() < deadline do
    refused = 0
    for i = 1, 8 do if results[i] and results[i].status == 503 then refused = refused + 1 end end
    if refused == 4 and held == 4 then break end
    async.sleep(0.05)
  end
  T.eq(held, 4, "requests the server took while holding them")
  T.eq(refused, 4, "requests refused")
  for i = 1, 8 do
    if results[i] then T.truthy(tonumber(results[i].headers["retry-after"]), "Retry-After") end
  end
  release = true
  for i = 1, 8 do tasks[i]:join(60) end
  local served = 0
  for i = 1, 8 do if results[i].status == 200 then served = served + 1 end end
  T.eq(served, 4)
end

-- Idle sockets someone holds open take the spare places, not the ones in use: a connection
-- already serving keeps being served, and only a new one is turned away.
tests["idle connections past the limit cannot turn away a connection in use"] = function()
  local base, server = T.serve(function(req) req:respond(200, {}, "served") end,
                               {host = "127.0.0.1", port = 0, max_connections = 2})
  local url = base .. "/x"
  local first = assert(http.request{url = url, retries = 0, timeout = 60})
  T.eq(first.status, 200)
  T.eq(first.new_connections, 1)
  local script = T.tmpdir() .. "/idle.py"
  assert(sys.write_file(script, ([[
import socket, sys, time
port = %d
held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
print("held", flush=True)
sys.stdin.readline()
late = socket.create_connection(("127.0.0.1", port))
late.sendall(b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
print(late.recv(4096).split(b"\r\n")[0].decode(), flush=True)
time.sleep(120)
]]):format(server:port())))
  local idle = assert(sys.spawn{argv = {"/usr/bin/python3", script}, stdin = "pipe",
                                stderr = "inherit"})
  T.defer(function() idle:kill("KILL"); sys.wait(idle, 5); idle:close() end)
  T.eq(sys.read_line(idle, 60), "held")
  local again = assert(http.request{url = url, retries = 0, timeout = 60})
  T.eq(again.status, 200, "the connection in use is still served")
  T.eq(again.new_connections, 0, "on the same connection")
  assert(idle:write("go\n"))
  T.eq(sys.read_line(idle, 60), "HTTP/1.1 503 Service Unavailable", "a new connection is turned away")
end

return tests
