--- The user's tools in `rlm mcp`: the operator's (--tools FILE.lua) and those of the MCP
-- servers a client serves and passes (tool_servers, Streamable HTTP only). Sandbox code calls
-- them; a run counts each call against its budget and logs it to the client; a stdio command,
-- an unreachable URL and a server that lies about its tools are refused in one line.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local STANDIN = "tests/standins/mcp_tools"
local TOKEN = "mcp-token-0123456789abcdef"
local REFUSED = require("rlm.mcp.client_tools").REFUSED

-- An in-process `rlm mcp` session (opts as the command's options); call(name, args) -> the
-- tools/call result, and the log messages the session sent so far.
local function session_of(opts)
  local server = require("rlm.cmd.mcp").build(opts or {})
  local session = server:session()
  local sent = {}
  local channel = {send = function(m) sent[#sent + 1] = m end}
  local init = session:handle({jsonrpc = "2.0", id = 0, method = "initialize", params = {
    protocolVersion = "2025-06-18", capabilities = json.object(),
    clientInfo = {name = "test", version = "0"}}}, channel)
  assert(init.result, json.encode(init))
  session:handle({jsonrpc = "2.0", method = "notifications/initialized"}, channel)
  T.defer(function() session:close("test over") end)
  local n = 0
  local function call(name, args)
    n = n + 1
    local reply = session:handle({jsonrpc = "2.0", id = n, method = "tools/call",
                                  params = {name = name, arguments = args}}, channel)
    return assert(reply.result, json.encode(reply))
  end
  local function logs()
    local out = {}
    for _, m in ipairs(sent) do
      if m.method == "notifications/message" then out[#out + 1] = tostring(m.params.data) end
    end
    return table.concat(out, "\n")
  end
  return call, logs
end

-- The arguments of tool with tool_servers: a task for a run, code for a sandbox.
local function with_servers(tool, servers)
  if tool == "rlm_execute" then return {task = "x", tool_servers = servers} end
  return {code = "print(1)", tool_servers = servers}
end

local function text(result)
  return result.content[1].text
end

local function http_standin()
  local s = T.server{STANDIN, "--token", TOKEN}
  return s, {url = s.url .. "/mcp", headers = {Authorization = "Bearer " .. TOKEN}}
end

local function operator_file()
  local file = T.tmpdir() .. "/tools.lua"
  assert(sys.write_file(file, "return {triple = {params = {{name = 'n', type = 'integer'}}, "
    .. "call = function(a) return a.n * 3 end}}\n"))
  return file
end

tests["a client's tool servers and the operator's tools: a run's code calls both"] = function()
  local standin, served = http_standin()
  served.prefix = "web_"
  local model = F.model{rules = {{match = "Task: sum with tools",
    reply = F.code("SUBMIT(answer=str(web_add(2, 3)['sum'] + triple(1)))")}}}
  local call, logs = session_of{tools = operator_file()}
  local res = call("rlm_execute", {task = "sum with tools", tool_servers = {served}})
  T.eq(res.isError, nil, text(res))
  T.eq(text(res), "8")
  local usage = res.structuredContent.usage
  T.eq(usage.by_model["tool:web_add"].calls, 1, "counted in the run's budget")
  T.eq(usage.by_model["tool:triple"].calls, 1)
  T.contains(logs(), "tool web_add: answered 9 chars", "the call in the client's log")
  T.contains(logs(), "tool triple: answered 1 chars")
  T.eq(F.stats(model).requests, 1)
  local stats = json.decode(assert(require("rlm.http").request{url = standin.url .. "/_stats"}).body)
  T.eq(stats.calls.add, 1, "the call reached the client's server")
  -- the server's own tool list says so, the same bytes each time
  local schema = require("rlm.mcp.tools").definitions[1].inputSchema.properties.tool_servers
  T.eq(schema.items.properties.url.type, "string")
  T.eq(json.encode(schema), json.encode(require("rlm.mcp.client_tools").SCHEMA))
end

tests["a client's stdio command is refused in one line, and nothing starts"] = function()
  local model = F.model{rules = {{match = "Task:", reply = F.code("SUBMIT(answer='ran')")}}}
  local dir = T.tmpdir()
  local call = session_of()
  local evil = {command = {"/bin/sh", "-c", "touch " .. dir .. "/started"}}
  for _, tool in ipairs{"rlm_execute", "sandbox_exec", "sandbox_exec_stateful"} do
    local res = call(tool, with_servers(tool, {evil}))
    T.eq(res.isError, true, tool)
    T.eq(text(res), "tool_servers[0]: " .. REFUSED, tool)
  end
  -- with a URL beside it, or as a string, or an env: still a program of the client's choosing
  local res = call("sandbox_exec", {code = "print(1)",
    tool_servers = {{url = "http://127.0.0.1:1/mcp"}, {url = "http://127.0.0.1:1/mcp", command = "id"}}})
  T.eq(text(res), "tool_servers[1]: " .. REFUSED)
  res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = "file:///etc/passwd"}}})
  T.eq(text(res), "tool_servers[0].url must be an http:// or https:// URL")
  res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = "http://h/mcp", timeout = 1}}})
  T.contains(text(res), "unknown field 'timeout'; the valid ones: url, headers")
  res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = "http://h/mcp",
    headers = {["X-Key"] = "a\r\nX-Other: b"}}}})
  T.eq(text(res), "tool_servers[0].headers: each must be a header name with a line of text")
  res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = "http://h/mcp",
    headers = {["Mcp-Session-Id"] = "theirs"}}}})
  T.eq(text(res), "tool_servers[0].headers: Mcp-Session-Id is set by rlm itself")
  sys.sleep(0.2)
  T.eq(sys.stat(dir .. "/started"), nil, "the command never ran")
  T.eq(F.stats(model).requests, 0, "no model call was made")
end

tests["an unreachable tool server is a one-line error, before any model call"] = function()
  local model = F.model{rules = {{match = "Task:", reply = F.code("SUBMIT(answer='ran')")}}}
  local call = session_of()
  local gone = {{url = "http://127.0.0.1:1/mcp"}}
  for _, tool in ipairs{"rlm_execute", "sandbox_exec", "sandbox_exec_stateful"} do
    local res = call(tool, with_servers(tool, gone))
    T.eq(res.isError, true, tool)
    T.contains(text(res), "the MCP server http://127.0.0.1:1/mcp did not initialize", tool)
    T.eq(text(res):find("\n"), nil, "one line: " .. text(res))
  end
  T.eq(F.stats(model).requests, 0, "no model call was made")
  -- the session goes on without them
  T.eq(text(call("sandbox_exec_stateful", {code = "print(6 * 7)"})), "42\n")
end

-- Over HTTP a client could name any address the server can reach (an internal service, a
-- cloud's metadata address): only the hosts the operator lists are reached.
tests["over HTTP a client's tool server must be on a host the operator lists"] = function()
  local standin, entry = http_standin()
  local hits = 0
  local counter = T.serve(function(req) hits = hits + 1; req:respond(404, {}, "") end)
  -- `rlm mcp --http` reads RLM_MCP_TOOL_SERVERS when the server is built
  local function over_http(hosts)
    sys.setenv("RLM_MCP_TOOL_SERVERS", hosts)
    local ok, call = pcall(session_of, {http = "0"})
    sys.setenv("RLM_MCP_TOOL_SERVERS", nil)
    return assert(ok and call, call)
  end
  local call = over_http(nil)
  local res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = counter .. "/mcp"}}})
  T.eq(res.isError, true)
  T.contains(text(res), "RLM_MCP_TOOL_SERVERS")
  T.contains(text(res), counter:match("//(.*)$"))
  T.eq(hits, 0, "the refused server was never reached")
  -- listed by host, by host:port, or *: the same call goes through
  local port = standin.url:match(":(%d+)$")
  for _, hosts in ipairs{"127.0.0.1", "localhost, 127.0.0.1:" .. port, "*"} do
    call = over_http(hosts)
    res = call("sandbox_exec", {code = "print(add(a=2, b=3))", tool_servers = {entry}})
    T.eq(res.isError, nil, text(res))
    T.contains(text(res), "5")
  end
  -- another port of a listed host:port is not listed
  call = over_http("127.0.0.1:1")
  T.eq(call("sandbox_exec", {code = "print(1)", tool_servers = {entry}}).isError, true)
end

-- rlm mcp --network FILE.lua: every sandbox of the server reaches the file's hosts, the key
-- added on the host and never shown to the client.
tests["rlm mcp --network: the code reaches a listed host with the key added"] = function()
  local key, var = "sk-mcp-net-0123456789abcdef", "RLM_TEST_MCP_NET_KEY"
  local up = T.server{"tests/standins/keyed_api", "--key", key}
  sys.setenv(var, key)
  T.defer(function() sys.setenv(var, nil) end)
  local file = T.tmpdir() .. "/net.lua"
  assert(sys.write_file(file, ("return {allow = {['search.example'] = {upstream = %q, " ..
    "headers = {Authorization = 'Bearer ${%s}'}}}}"):format(up.url, var)))
  local call = session_of{network = file}
  local code = [[
import urllib.request, urllib.error
print(urllib.request.urlopen('http://search.example/search?q=mcp', timeout=30).status)
try:
    urllib.request.urlopen('http://other.example/', timeout=30)
except urllib.error.HTTPError as e:
    print('other', e.code)
]]
  for _, tool in ipairs{"sandbox_exec", "sandbox_exec_stateful"} do
    local res = call(tool, {code = code})
    T.eq(res.isError, nil, text(res))
    T.contains(text(res), "200\nother 403\n", tool)
    T.eq(json.encode(res):find(key, 1, true), nil, "the key is not in the result")
  end
  -- a file that will not do stops the server at start, naming the setting
  assert(sys.write_file(file, "return {allow = {['x.example'] = {headers = {A = '${RLM_UNSET_VAR_X}'}}}}"))
  local ok, err = pcall(session_of, {network = file})
  T.eq(ok, false)
  T.contains(err, "RLM_UNSET_VAR_X")
end

-- A server that answers MCP, with tools/list and tools/call as given.
local function fake_server(tools, call_body)
  return T.serve(function(req)
    local msg = json.decode(req:body())
    local result
    if msg.method == "initialize" then
      result = {protocolVersion = "2025-06-18", capabilities = {tools = json.object()},
                serverInfo = {name = "liar", version = "1"}}
    elseif msg.method == "tools/list" then
      result = {tools = tools}
    elseif msg.method == "tools/call" then
      return req:respond(200, {["Content-Type"] = "application/json"}, call_body)
    else
      return req:respond(202, {}, "")
    end
    req:respond(200, {["Content-Type"] = "application/json"},
                json.encode{jsonrpc = "2.0", id = msg.id, result = result})
  end) .. "/mcp"
end

tests["a tool server that lies about its tools is refused, naming the tool"] = function()
  local call = session_of()
  local lies = {
    {{name = "add", inputSchema = {type = "object", properties = {a = "integer"}, required = "a"}},
     "tools: add: its schema's properties must be an object and required a list"},
    {{name = "add", inputSchema = {type = "array"}}, "tools: add: parameters must be a JSON schema of type object"},
    {{name = "rm -rf", inputSchema = {type = "object"}}, "MCP tool name rm -rf is not a Python name"},
    {{name = "add", inputSchema = {type = "object", properties = {["a b"] = {type = "string"}}}},
     "add parameter a b is not a Python name"},
    -- tools that would hide Python's or rlm's own functions
    {{name = "print", inputSchema = {type = "object"}}, "a tool may not take the name of a " ..
     "Python or rlm function: print (give its MCP server a prefix)"},
    {{name = "llm_query", inputSchema = {type = "object"}}, "function: llm_query (give"},
  }
  for _, lie in ipairs(lies) do
    local url = fake_server({lie[1]}, "{}")
    local res = call("sandbox_exec", {code = "print(1)", tool_servers = {{url = url}}})
    T.eq(res.isError, true, lie[2])
    T.contains(text(res), lie[2])
  end
  -- odd but valid: a repeated required name, a type list, a description that is not text;
  -- and a call answered with what is not JSON-RPC raises in the code, the sandbox goes on
  local url = fake_server({{name = "find", description = {"not", "text"}, inputSchema = {type = "object",
    properties = {q = {type = {"string", "null"}, description = 7}}, required = {"q", "q"}}}}, "<html>")
  local res = call("sandbox_exec", {code = "import inspect\nprint(inspect.signature(find))\n" ..
    "try:\n    find('x')\nexcept RuntimeError as e:\n    print('raised:', e)\nprint('after')",
    tool_servers = {{url = url}}})
  T.eq(res.isError, nil, text(res))
  T.contains(text(res), "(q)\nraised: the MCP server's answer is not a JSON-RPC message\nafter\n")
end

tests["the session's sandbox keeps a client's tools, and takes others with its state"] = function()
  local _, served = http_standin()
  local call = session_of()
  T.eq(text(call("sandbox_exec_stateful", {code = "x = add(1, 2)['sum']\nprint(x)",
                                           tool_servers = {served}})), "3\n")
  T.eq(text(call("sandbox_exec_stateful", {code = "print(add(x, 1))"})), "{'sum': 4}\n",
       "a later call without tool_servers keeps them")
  served.prefix = "p_"
  T.eq(text(call("sandbox_exec_stateful", {code = "print(p_add(x, 10)['sum'])",
                                           tool_servers = {served}})), "13\n",
       "new servers, the variables kept")
  served.prefix, served.only = nil, {"add"}
  T.eq(text(call("sandbox_exec_stateful", {code = "print(add(x, 20)['sum'])",
                                           tool_servers = {served}})), "23\n",
       "a tool defined again under its name")
end

tests["rlm mcp --tools: a file that will not do stops the server in one line"] = function()
  local file = T.tmpdir() .. "/bad.lua"
  assert(sys.write_file(file, "return {['not a name'] = function() end}\n"))
  local r = T.run_rlm({"mcp", "--tools", file}, {input = ""})
  T.eq(r.code, 1)
  T.contains(r.stderr, "tools: name not a name is not a Python name")
  r = T.run_rlm({"mcp", "--tools", file .. ".missing"}, {input = ""})
  T.eq(r.code, 1)
  T.contains(r.stderr, "--tools: cannot open")
  local call = session_of{tools = operator_file()}
  T.eq(text(call("sandbox_exec", {code = "print(triple(14))"})), "42\n", "the operator's tool")
end

return tests
