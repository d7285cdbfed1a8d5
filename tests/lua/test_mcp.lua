--- `rlm mcp`: raw stdio sessions and the Streamable HTTP transport, against the real binary.
local T = require "support"
local F = require "rlm_fixtures"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local INIT = {jsonrpc = "2.0", id = 0, method = "initialize",
              params = {protocolVersion = "2025-06-18", capabilities = json.object(),
                        clientInfo = {name = "test", version = "0"}}}

-- A running `rlm mcp` on pipes; stopped after the test.
local function stdio_server(extra_args, env)
  local argv = {T.rlm, "mcp"}
  for _, a in ipairs(extra_args or {}) do argv[#argv + 1] = a end
  local proc = assert(sys.spawn{argv = argv, stdin = "pipe", stderr = "pipe", env = env})
  T.defer(function() proc:kill("KILL"); sys.wait(proc, 2); proc:close() end)
  local s = {proc = proc}
  function s.send(msg)
    assert(proc:write((type(msg) == "string" and msg or json.encode(msg)) .. "\n"))
  end
  function s.recv(timeout)
    local line, err = sys.read_line(proc, timeout or 10)
    if not line then error("no message from the server: " .. tostring(err) .. "; stderr: " ..
                           proc:read("stderr"), 2) end
    return assert(json.decode(line))
  end
  -- The reply to request id, collecting the notifications that came before it.
  function s.reply(id, timeout)
    local notes = {}
    while true do
      local msg = s.recv(timeout)
      if msg.id == id and msg.method == nil then return msg, notes end
      notes[#notes + 1] = msg
    end
  end
  function s.call(id, method, params)
    s.send{jsonrpc = "2.0", id = id, method = method, params = params}
    return s.reply(id)
  end
  function s.tool(id, name, args, meta)
    return s.call(id, "tools/call", {name = name, arguments = args or json.object(), _meta = meta})
  end
  s.send(INIT)
  local init = s.reply(0)
  s.send{jsonrpc = "2.0", method = "notifications/initialized"}
  return s, init
end

-- Pids whose parent is pid (the server's sandboxes are its children).
local function children(pid)
  local out = {}
  for _, name in ipairs(assert(sys.list_dir("/proc"))) do
    if name:match("^%d+$") then
      local stat = sys.read_file("/proc/" .. name .. "/stat")
      local ppid = stat and stat:match("^%d+ %b() %S+ (%d+)")
      if ppid and tonumber(ppid) == pid then out[#out + 1] = tonumber(name) end
    end
  end
  return out
end

-- The processes below pid running exactly argv: a test's own, never another test run's.
local function running(pid, argv)
  local want, out = table.concat(argv, "\0") .. "\0", {}
  for _, p in ipairs(T.descendants(pid)) do
    if p.cmdline == want then out[#out + 1] = p.pid end
  end
  return out
end

-- Python code that runs `sleep tag` and waits for it: the test sees it start, so it knows the
-- code (not the sandbox's start-up) is running.
local function running_code(tag)
  return ("import subprocess\nsubprocess.run(['sleep', '%s'])"):format(tag)
end

local function wait_for(what, fn, timeout)
  local deadline = sys.now() + (timeout or 60)
  while sys.now() < deadline do
    if fn() then return end
    sys.sleep(0.02)
  end
  error("timed out waiting for " .. what, 2)
end

tests["stdio: initialize negotiates the version and lists the eleven tools"] = function()
  local s, init = stdio_server()
  T.eq(init.result.protocolVersion, "2025-06-18")
  T.eq(init.result.serverInfo.name, "rlm")
  T.truthy(init.result.capabilities.tools and init.result.capabilities.logging, "capabilities")
  T.eq(init.result.capabilities.resources, nil, "no fixtures in normal use")
  local list = s.call(1, "tools/list").result.tools
  local names = {}
  for _, t in ipairs(list) do
    names[#names + 1] = t.name
    T.eq(t.inputSchema.type, "object", t.name)
    T.truthy(#t.description > 20, t.name .. " has a description")
  end
  T.eq(names, {"rlm_execute", "rlm_analyze", "rlm_code", "rlm_decompose", "sandbox_exec",
               "sandbox_exec_stateful", "sandbox_upload", "sandbox_download", "sandbox_files",
               "sandbox_shell", "rlm_status"})
  -- An unknown version gets the newest one.
  local s2 = stdio_server()
  s2.send{jsonrpc = "2.0", id = 9, method = "initialize", params = {protocolVersion = "1999-01-01",
          capabilities = json.object(), clientInfo = {name = "t", version = "0"}}}
  T.eq(s2.reply(9).result.protocolVersion, "2025-11-25")
end

tests["stdio: bad input gets the right answer and the server keeps serving"] = function()
  local s = stdio_server()
  s.send("this is not json")
  local m = s.recv()
  T.eq(m.error.code, -32700)
  T.eq(m.id, json.null)
  s.send('{"jsonrpc":"2.0","id":1,"method":"no/such/method"}')
  T.eq(s.reply(1).error.code, -32601)
  local r = s.tool(2, "no_such_tool")
  T.eq(r.error.code, -32602)
  T.contains(r.error.message, "no_such_tool")
  r = s.tool(3, "sandbox_exec", {code = 42})
  T.eq(r.result.isError, true)
  T.contains(r.result.content[1].text, "arguments.code must be a string")
  r = s.tool(4, "sandbox_exec", {code = "print(1)", bogus = true})
  T.eq(r.result.isError, true)
  T.contains(r.result.content[1].text, "unknown property 'bogus'; the valid ones: code, timeout")
  r = s.call(40, "tools/call", {"sandbox_exec", {code = "print(1)"}})
  T.eq(r.error.code, -32602)
  T.contains(r.error.message, "params must be an object (by name), not an array")
  r = s.tool(41, "rlm_analyze", {data = "a b", qestion = "How many?"})
  T.eq(r.result.isError, true)
  T.contains(r.result.content[1].text, "unknown property 'qestion' (did you mean 'question'?)")
  r = s.tool(42, "sandbox_exec", {code = "print(1)", timeout = 1e308})
  T.eq(r.result.isError, true)
  T.contains(r.result.content[1].text, "arguments.timeout must be at most")
  s.send('{"jsonrpc":"2.0","id":5}')
  T.eq(s.reply(5).error.code, -32600)
  s.send('[{"jsonrpc":"2.0","id":6,"method":"ping"}]')
  T.eq(s.recv().error.code, -32600)
  T.eq(s.call(7, "logging/setLevel", {level = "loud"}).error.code, -32602)
  -- a number no double holds: a parse error, never a dead server
  s.send('{"jsonrpc":"2.0","id":1e999,"method":"ping"}')
  T.eq(s.recv().error.code, -32700)
  T.eq(s.call(8, "ping").result, json.object())
end

tests["stdio: sandbox_exec runs one block; the stateful session keeps state and files"] = function()
  local s = stdio_server()
  local r = s.tool(1, "sandbox_exec", {code = "x = 6 * 7\nprint(x)"})
  T.eq(r.result.structuredContent.stdout, "42\n")
  T.eq(r.result.isError, nil)
  r = s.tool(2, "sandbox_exec", {code = "print(x)"})
  T.contains(r.result.structuredContent.error, "NameError", "nothing kept between sandbox_exec calls")
  s.tool(3, "sandbox_exec_stateful", {code = "y = 5"})
  r = s.tool(4, "sandbox_exec_stateful", {code = "print(y * 2)"})
  T.eq(r.result.structuredContent.stdout, "10\n")
  r = s.tool(5, "sandbox_upload", {path = "data/b.bin", content = "AAEC/w==", encoding = "base64"})
  T.eq(r.result.structuredContent.bytes, 4)
  r = s.tool(6, "sandbox_exec_stateful", {code = "print(list(open('data/b.bin','rb').read()))"})
  T.eq(r.result.structuredContent.stdout, "[0, 1, 2, 255]\n")
  r = s.tool(7, "sandbox_download", {path = "data/b.bin"})
  T.eq(r.result.structuredContent.encoding, "base64")
  T.eq(r.result.content[1].text, "AAEC/w==", "the payload once, as text")
  T.eq(r.result.structuredContent.content, nil)
  s.tool(8, "sandbox_upload", {path = "notes.txt", content = "héllo"})
  T.eq(s.tool(9, "sandbox_download", {path = "notes.txt"}).result.content[1].text, "héllo")
  local files = s.tool(10, "sandbox_files", {}).result.structuredContent.files
  local paths = {}
  for _, f in ipairs(files) do paths[#paths + 1] = f.path:match("workspace/(.*)$") end
  table.sort(paths)
  T.eq(paths, {"data", "data/b.bin", "notes.txt"})
  r = s.tool(11, "sandbox_shell", {command = "cat notes.txt; exit 3"})
  T.eq(r.result.structuredContent, {exit = 3, output = "héllo"})
  r = s.tool(12, "sandbox_download", {path = "missing.txt"})
  T.eq(r.result.isError, true)
  r = s.tool(13, "rlm_status")
  T.eq(r.result.structuredContent.sandboxes, 1, "the session's sandbox is alive")
  T.eq(r.result.structuredContent.backend, "local")
end

tests["stdio: stateful calls sent together take turns on one sandbox"] = function()
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call",
         params = {name = "sandbox_exec_stateful", arguments = {code = "z = 1"}}}
  s.send{jsonrpc = "2.0", id = 2, method = "tools/call",
         params = {name = "sandbox_exec_stateful", arguments = {code = "print(z + 1)"}}}
  local got = {}
  for _ = 1, 2 do
    local m = s.recv()
    got[m.id] = m.result.structuredContent
  end
  T.eq(got[2].stdout, "2\n")
  T.eq(#children(s.proc:pid()), 1, "one sandbox for the session")
end

tests["stdio: a cancelled long call stops its sandbox, gets no reply, and others go on"] = function()
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call", params = {name = "sandbox_exec",
         arguments = {code = "print('start', flush=True)\n" .. running_code("6001")}}}
  s.send{jsonrpc = "2.0", id = 2, method = "tools/call", params = {name = "sandbox_exec_stateful",
         arguments = {code = running_code("6002")}}}
  local pid = s.proc:pid()
  wait_for("two sandboxes", function() return #children(pid) == 2 end)
  -- Past the interpreter's start-up: a sandbox still starting is not yet owned by its
  -- interpreter, so a cancel then cannot reach it (reported; see lua/rlm/interpreter.lua start).
  wait_for("both codes to run", function()
    return #running(pid, {"sleep", "6001"}) == 1 and #running(pid, {"sleep", "6002"}) == 1
  end)
  T.eq(s.call(3, "ping").result, json.object(), "pings are answered while calls run")
  local t0 = sys.now()
  s.send{jsonrpc = "2.0", method = "notifications/cancelled", params = {requestId = 1, reason = "test"}}
  s.send{jsonrpc = "2.0", method = "notifications/cancelled", params = {requestId = 2}}
  s.send{jsonrpc = "2.0", method = "notifications/cancelled", params = {requestId = 99}}
  wait_for("the sandboxes to end", function() return #children(pid) == 0 end)
  T.truthy(sys.now() - t0 < 20, "cancellation is prompt (the code sleeps 6,000 s)")
  local r = s.tool(4, "rlm_status")
  T.eq(r.result.structuredContent.sandboxes, 0)
  -- The session's sandbox comes back fresh on the next stateful call.
  r = s.tool(5, "sandbox_exec_stateful", {code = "print('again')"})
  T.eq(r.result.structuredContent.stdout, "again\n")
  -- No reply ever came for 1 or 2: every message so far was matched by s.reply.
  s.proc:close_stdin()
  local rest = s.proc:read("stdout")
  while not s.proc:eof("stdout") do sys.sleep(0.02); rest = rest .. s.proc:read("stdout") end
  T.eq(rest, "", "nothing after the last reply")
  T.eq({sys.wait(s.proc, 5)}, {"exit", 0}, "EOF ends the server")
end

tests["stdio: requests piped before EOF are all answered, then the server exits"] = function()
  local lines = {json.encode(INIT), '{"jsonrpc":"2.0","id":1,"method":"ping"}',
                 '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sandbox_exec",' ..
                 '"arguments":{"code":"print(2+3)"}}}'}
  local res = T.run_rlm({"mcp"}, {input = table.concat(lines, "\n") .. "\n", timeout = 20})
  T.eq(res.code, 0)
  local ids = {}
  for line in res.stdout:gmatch("[^\n]+") do
    local m = assert(json.decode(line))
    ids[#ids + 1] = m.id
    if m.id == 2 then T.eq(m.result.structuredContent.stdout, "5\n") end
  end
  table.sort(ids)
  T.eq(ids, {0, 1, 2})
  T.eq(res.stderr, "", "no log noise in normal use")
end

tests["stdio: progress and log notifications (fixture mode)"] = function()
  local s = stdio_server({"--fixtures", "tests/mcp/fixtures.lua"})
  local r, notes = s.tool(1, "test_tool_with_progress", nil, {progressToken = "tok"})
  T.eq(r.result.content[1].type, "text")
  T.eq(#notes, 3)
  for i, n in ipairs(notes) do
    T.eq(n.method, "notifications/progress")
    T.eq(n.params.progressToken, "tok")
    T.eq(n.params.progress, ({0, 50, 100})[i])
  end
  T.eq(s.call(2, "logging/setLevel", {level = "warning"}).result, json.object())
  r, notes = s.tool(3, "test_tool_with_logging")
  T.eq(#notes, 0, "info messages are below the warning threshold")
  s.call(4, "logging/setLevel", {level = "debug"})
  r, notes = s.tool(5, "test_tool_with_logging")
  T.eq(#notes, 3)
  T.eq(notes[1].params.level, "info")
end

-- ---------------------------------------------------------------- the RLM tools

-- Pids of processes running exactly argv (anywhere on the host: sandboxes nest them deep).
tests["stdio: a cancelled sandbox_shell stops its command promptly"] = function()
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call", params = {name = "sandbox_shell",
         arguments = {command = "sleep 1313", timeout = 2000}}}
  local pid = s.proc:pid()
  wait_for("the command to run", function() return #running(pid, {"sleep", "1313"}) == 1 end)
  local t0 = sys.now()
  s.send{jsonrpc = "2.0", method = "notifications/cancelled", params = {requestId = 1}}
  wait_for("the command to end", function() return #running(pid, {"sleep", "1313"}) == 0 end, 20)
  T.truthy(sys.now() - t0 < 5, "gone within 5 s (its timeout is 2,000 s)")
  local r = s.tool(2, "sandbox_shell", {command = "echo next"})
  T.eq(r.result.structuredContent.output, "next\n")
end

tests["stdio: a client written for rlm-mcp's argument names and paths is served"] = function()
  -- no model: the loop tools answer at once with an error, after their arguments passed
  local s = stdio_server(nil, {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"),
                               TMPDIR = sys.getenv("TMPDIR")})
  local r = s.tool(1, "sandbox_upload", {content = "a,b\n1,2\n", path = "/home/daytona/data.csv"})
  T.eq(r.result.isError, nil, r.result.content[1].text)
  r = s.tool(2, "sandbox_files", {path = "/home/daytona"})
  T.eq(r.result.isError, nil, r.result.content[1].text)
  T.contains(r.result.content[1].text, "data.csv")
  r = s.tool(3, "sandbox_download", {path = "/home/daytona/data.csv"})
  T.eq(r.result.content[1].text, "a,b\n1,2\n")
  r = s.tool(4, "sandbox_exec_stateful", {code = "print(open('data.csv').read().count(','))"})
  T.eq(r.result.structuredContent.stdout, "2\n")
  -- the loop tools take rlm-mcp's names too (checked without a model: the schema passes)
  for _, c in ipairs{{"rlm_code", {description = "add two numbers"}},
                     {"rlm_decompose", {complex_task = "plan", num_subtasks = 2}}} do
    r = s.tool(5, c[1], c[2])
    T.truthy(not tostring(r.result and r.result.content[1].text or ""):find("Invalid arguments", 1, true),
             c[1] .. ": " .. json.encode(r))
  end
  T.eq(s.tool(6, "rlm_execute", {task = "t", context = "c"}).result.isError, true, "no model here")
end

tests["stdio: a tool's error names no source file of rlm's"] = function()
  local s = stdio_server()
  local r = s.tool(1, "sandbox_upload", {content = "x", path = "/etc/passwd"})
  T.eq(r.result.isError, true)
  T.truthy(not r.result.content[1].text:find("%.lua:%d+"), r.result.content[1].text)
end

local function answer_script(code)
  return {rules = {{match = "Task:", reply = F.code(code)}}, default = "I am not sure."}
end

tests["stdio: rlm_execute runs the loop against the LLM stand-in, with progress"] = function()
  F.model(answer_script("SUBMIT(answer=str(len(context)))"))
  local s = stdio_server()
  local r, notes = s.tool(1, "rlm_execute", {task = "How long is the context?", context = "abcdef"},
                          {progressToken = 7})
  T.eq(r.result.isError, nil)
  T.eq(r.result.content[1].text, "6")
  T.eq(r.result.structuredContent.fields.answer, "6")
  T.eq(r.result.structuredContent.iterations, 1)
  local estimate = r.result.structuredContent.estimate
  T.truthy(estimate.first_call.prompt_tokens > 100, "what the run would cost, made before it")
  T.eq(estimate.models[1].model, "openai/root-model")
  T.eq(#notes, 2, "a progress notification and a log line per turn")
  T.eq(notes[1].params.progress, 1)
  T.eq(notes[2].method, "notifications/message")
  T.contains(notes[2].params.data, "turn 1 of at most")
  local status = s.tool(2, "rlm_status").result.structuredContent
  T.eq(status.model, "openai/root-model")
  T.eq(status.usage.runs, 1)
  T.eq(status.usage.calls, 1)
  T.eq(status.usage.llm_calls, 0, "no sub-calls")
  T.truthy(status.usage.total_tokens > 0, "tokens are counted")
  r = s.tool(3, "rlm_analyze", {data = "a,b\n1,2\n", question = "How many rows?"})
  T.eq(r.result.content[1].text, "8")
end

tests["stdio: rlm_status counts what was read from prompt caches"] = function()
  local server = F.model{rules = {
    {match = "Turn 3 of", reply = F.code("SUBMIT(answer='ok')")},
    {match = ".", reply = F.code("print('y' * 5000)")},
  }}
  local s = stdio_server({"--model", "openai/gpt-4.1-mini"})
  T.eq(s.tool(1, "rlm_execute", {task = "show"}).result.content[1].text, "ok")
  local read = F.stats(server).billed["gpt-4.1-mini"].cache_read
  T.truthy(read > 0, "the stand-in cached a prefix")
  local r = s.tool(2, "rlm_status").result
  T.eq(r.structuredContent.usage.cache_read_tokens, read)
  T.truthy(r.structuredContent.usage.prompt_cache_saved > 0)
  T.contains(r.content[1].text, ("cache %d read, 0 written, saved $"):format(read))
end

tests["stdio: rlm_code and rlm_decompose drive their runs"] = function()
  F.model({rules = {
    {match = "Write python code", reply = F.code(
      "SUBMIT(code='def f(): return 1', test_output='ok', explanation='returns one')")},
    {match = "Combine the answers", reply = F.code(
      "SUBMIT(answer='+'.join(s['answer'] for s in context['subtasks']))")},
    {match = "Split this task", reply = F.code("SUBMIT(subtasks=['Say A', 'Say B'])")},
    {match = "Task: Say A", reply = F.code("SUBMIT(answer='A')")},
    {match = "Task: Say B", reply = F.code("SUBMIT(answer='B')")},
  }, default = "I am not sure."})
  local s = stdio_server()
  local r = s.tool(1, "rlm_code", {task = "a function that returns one"})
  T.eq(r.result.structuredContent.fields, {code = "def f(): return 1", test_output = "ok",
                                           explanation = "returns one"})
  local notes
  r, notes = s.tool(2, "rlm_decompose", {task = "Say letters", max_subtasks = 3}, {progressToken = "d"})
  T.eq(r.result.content[1].text, "A+B")
  T.eq(r.result.structuredContent.subtasks, {{task = "Say A", answer = "A"}, {task = "Say B", answer = "B"}})
  T.truthy(#notes >= 3, "progress for the plan and each sub-task")
  T.eq(s.tool(3, "rlm_status").result.structuredContent.usage.runs, 5)
end

tests["stdio: the rlm_* tools pass reasoning_effort to the run"] = function()
  F.model{rules = {{match = "Task:", reply_expr =
    "'```repl\\nSUBMIT(answer=%r)\\n```\\n' % (body.get('reasoning_effort'),)"}}}
  local s = stdio_server({"--model", "openai/o3"})
  local r = s.tool(1, "rlm_execute", {task = "effort?", context = "x", reasoning_effort = "low"})
  T.eq(r.result.content[1].text, "low")
  r = s.tool(2, "rlm_analyze", {data = "x", question = "effort?", reasoning_effort = "high"})
  T.eq(r.result.content[1].text, "high")
  r = s.tool(3, "rlm_execute", {task = "effort?", context = "x"})
  T.eq(r.result.content[1].text, "null", "the model's own without the argument")
end

tests["stdio: a cancelled rlm_execute stops the run's sandbox"] = function()
  F.model(answer_script(running_code("6003") .. "\nSUBMIT(answer='late')"))
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call",
         params = {name = "rlm_execute", arguments = {task = "Take your time."}}}
  local pid = s.proc:pid()
  wait_for("the run's sandbox", function() return #children(pid) == 1 end)
  wait_for("the run to be in progress", function()
    return s.tool(2, "rlm_status").result.structuredContent.runs_in_progress == 1
  end)
  wait_for("the model's code to run", function() return #running(pid, {"sleep", "6003"}) == 1 end)
  s.send{jsonrpc = "2.0", method = "notifications/cancelled", params = {requestId = 1}}
  wait_for("the sandbox to end", function() return #children(pid) == 0 end)
  local _, before = s.call(3, "ping")
  T.eq(before, {}, "no reply for the cancelled call")
  T.eq(s.tool(4, "rlm_status").result.structuredContent.runs_in_progress, 0)
end

-- ---------------------------------------------------------------- Streamable HTTP

local function http_server(env, address)
  local proc = assert(sys.spawn{argv = {T.rlm, "mcp", "--fixtures", "tests/mcp/fixtures.lua", "--http", address or "127.0.0.1:0"},
                                stdin = "null", stderr = "pipe", env = env})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 2); proc:close() end)
  local line = sys.read_line(proc, 60)
  local url = line and line:match("^READY (http://127%.0%.0%.1:%d+)$")
  if not url then error("no READY line: " .. tostring(line) .. " " .. proc:read("stderr")) end
  return url .. "/mcp", proc
end

local function post(url, msg, headers)
  local h = {["Content-Type"] = "application/json", Accept = "application/json, text/event-stream"}
  for k, v in pairs(headers or {}) do h[k] = v end
  return assert(http.request{url = url, method = "POST", headers = h,
                             body = type(msg) == "string" and msg or json.encode(msg)})
end

local function sse_messages(body)
  local out = {}
  for data in body:gmatch("data: ([^\n]*)\n") do out[#out + 1] = assert(json.decode(data)) end
  return out
end

tests["http: sessions, SSE tool calls, 202s, 404s and version checks"] = function()
  local url = http_server()
  local res = post(url, INIT)
  T.eq(res.status, 200)
  local sid = res.headers["mcp-session-id"]
  T.truthy(sid and #sid == 32, "session id")
  T.eq(json.decode(res.body).result.protocolVersion, "2025-06-18")
  local h = {["Mcp-Session-Id"] = sid, ["MCP-Protocol-Version"] = "2025-06-18"}
  T.eq(post(url, {jsonrpc = "2.0", method = "notifications/initialized"}, h).status, 202)
  res = post(url, {jsonrpc = "2.0", id = 1, method = "tools/call", params = {
    name = "test_tool_with_progress", arguments = json.object(), _meta = {progressToken = "p"}}}, h)
  T.eq(res.status, 200)
  T.contains(res.headers["content-type"], "text/event-stream")
  local msgs = sse_messages(res.body)
  T.eq(#msgs, 4)
  T.eq(msgs[3].params.progress, 100)
  T.eq(msgs[4].id, 1)
  res = post(url, {jsonrpc = "2.0", id = 2, method = "tools/list"}, h)
  T.contains(res.headers["content-type"], "application/json")
  T.truthy(#json.decode(res.body).result.tools >= 11, "tools listed")
  T.eq(post(url, {jsonrpc = "2.0", id = 3, method = "ping"}, {["Mcp-Session-Id"] = "nope"}).status, 404)
  T.eq(post(url, {jsonrpc = "2.0", id = 3, method = "ping"}).status, 400, "no session id")
  T.eq(post(url, {jsonrpc = "2.0", id = 3, method = "ping"},
            {["Mcp-Session-Id"] = sid, ["MCP-Protocol-Version"] = "1999-01-01"}).status, 400)
  T.eq(post(url, "{oops", h).status, 400)
  res = post(url, '{"jsonrpc":"2.0","id":1e999,"method":"ping"}', h)
  T.eq(res.status, 400)
  T.eq(json.decode(res.body).error.code, -32700)
  T.eq(json.decode(post(url, {jsonrpc = "2.0", id = 9, method = "ping"}, h).body).id, 9)
  T.eq(post(url, {jsonrpc = "2.0", id = 4, method = "ping"},
            {["Content-Type"] = "text/plain", ["Mcp-Session-Id"] = sid}).status, 415)
  T.eq(assert(http.request{url = url, method = "GET", headers = h}).status, 405)
  T.eq(assert(http.request{url = url:gsub("/mcp$", "/other"), method = "POST", body = "{}"}).status, 404)
  T.eq(assert(http.request{url = url, method = "DELETE", headers = h}).status, 200)
  T.eq(post(url, {jsonrpc = "2.0", id = 5, method = "ping"}, h).status, 404, "the session has ended")
end

tests["http: foreign Host and Origin are refused; the token is checked on every request"] = function()
  local url = http_server()
  local port = url:match(":(%d+)/")
  T.eq(post(url, INIT, {Host = "evil.example.com:" .. port}).status, 403)
  T.eq(post(url, INIT, {Origin = "http://evil.example.com"}).status, 403)
  T.eq(post(url, INIT, {Host = "localhost:" .. port, Origin = "http://localhost:" .. port}).status, 200)

  local url2 = http_server({RLM_MCP_TOKEN = "s3cret-token", PATH = sys.getenv("PATH")})
  local refused = post(url2, INIT)
  T.eq(refused.status, 401)
  -- it says what to send, to a person and to a client (no OAuth to look for)
  T.contains(refused.body, "needs a bearer token: send the header 'Authorization: Bearer <token>'")
  T.contains(refused.headers["www-authenticate"], 'error="invalid_token"')
  T.contains(refused.headers["www-authenticate"], "error_description=")
  refused = post(url2, INIT, {Authorization = "Bearer wrong"})
  T.eq(refused.status, 401)
  T.contains(refused.body, "not this server's token")
  local res = post(url2, INIT, {Authorization = "Bearer s3cret-token"})
  T.eq(res.status, 200)
  local h = {["Mcp-Session-Id"] = res.headers["mcp-session-id"]}
  T.eq(post(url2, {jsonrpc = "2.0", id = 1, method = "ping"}, h).status, 401, "every request")
  h.Authorization = "Bearer s3cret-token"
  T.eq(post(url2, {jsonrpc = "2.0", id = 1, method = "ping"}, h).status, 200)
  h.Authorization = "BEARER s3cret-token"
  T.eq(post(url2, {jsonrpc = "2.0", id = 2, method = "ping"}, h).status, 200, "the scheme is any case")
end

-- Starts a tools/call over SSE with curl, so the test can drop the connection by killing it.
local function curl_call(url, h, name, args)
  local body = json.encode{jsonrpc = "2.0", id = 1, method = "tools/call",
                           params = {name = name, arguments = args}}
  local argv = {"curl", "-sN", "-X", "POST", url, "-H", "Content-Type: application/json",
                "-H", "Accept: application/json, text/event-stream", "--data-binary", body}
  for k, v in pairs(h) do argv[#argv + 1] = "-H"; argv[#argv + 1] = k .. ": " .. v end
  local curl = assert(sys.spawn{argv = argv, stdin = "null", stdout = "pipe", stderr = "pipe"})
  T.defer(function() curl:close() end)
  return curl
end

tests["http: a client that drops its connection mid-call cancels the call and its sandbox"] = function()
  F.model(answer_script(running_code("6005")))
  local url, proc = http_server()
  local res = post(url, INIT)
  local h = {["Mcp-Session-Id"] = res.headers["mcp-session-id"], ["MCP-Protocol-Version"] = "2025-06-18"}
  post(url, {jsonrpc = "2.0", method = "notifications/initialized"}, h)
  local pid = proc:pid()
  for _, call in ipairs{{"sandbox_exec_stateful", {code = running_code("6004")}, "6004"},
                        {"rlm_execute", {task = "wait", context = "x"}, "6005"}} do
    local curl = curl_call(url, h, call[1], call[2])
    wait_for(call[1] .. "'s sandbox", function() return #children(pid) == 1 end)
    wait_for(call[1] .. "'s code", function() return #running(pid, {"sleep", call[3]}) == 1 end)
    local t0 = sys.now()
    curl:kill("KILL")
    wait_for(call[1] .. ": the sandbox to end", function() return #children(pid) == 0 end, 20)
    T.truthy(sys.now() - t0 < 10, call[1] .. ": gone within 10 s (its code sleeps 6,000 s)")
  end
  -- the session goes on: its next call gets a fresh sandbox
  res = post(url, {jsonrpc = "2.0", id = 2, method = "tools/call", params = {
    name = "sandbox_exec_stateful", arguments = {code = "print('again')"}}}, h)
  T.eq(sse_messages(res.body)[1].result.structuredContent.stdout, "again\n")
  -- a known id is answered with its id, even when the session is unknown
  res = post(url, {jsonrpc = "2.0", id = 7, method = "ping"}, {["Mcp-Session-Id"] = "nope"})
  T.eq(json.decode(res.body).id, 7)
end

local function rss_kb(pid)
  return tonumber(assert(sys.read_file("/proc/" .. pid .. "/status")):match("VmRSS:%s*(%d+)"))
end

tests["http: six unauthenticated 60 MB POSTs cost the server less than 20 MB"] = function()
  local url, proc = http_server({RLM_MCP_TOKEN = "s3cret-token", PATH = sys.getenv("PATH")})
  local port = url:match(":(%d+)/")
  T.eq(post(url, INIT, {Authorization = "Bearer s3cret-token"}).status, 200)   -- warm up
  local before = rss_kb(proc:pid())
  -- 60 MB: over the body limit; 15 MB: under it, so the admission itself must refuse it
  for _, mb in ipairs{60, 15} do
    local body = string.rep("x", mb * 1024 * 1024)
    for i = 1, 6 do
      -- no token; then a foreign Host; then a foreign Origin: all refused before the body
      local headers = i <= 2 and {} or i <= 4 and {Host = "evil.example:" .. port}
                      or {Origin = "http://evil.example", Authorization = "Bearer s3cret-token"}
      local res = http.request{url = url, method = "POST", body = body, headers = headers}
      local want = mb == 60 and {[413] = true} or {[401] = true, [403] = true}
      T.truthy(not res or want[res.status], mb .. " MB refused: " .. tostring(res and res.status))
    end
  end
  local grown = rss_kb(proc:pid()) - before
  T.truthy(grown < 20 * 1024, ("the server grew by %d kB"):format(grown))
  -- a body over the limit is refused from its Content-Length alone
  local res = http.request{url = url, method = "POST", body = string.rep("x", 17 * 1024 * 1024),
                           headers = {Authorization = "Bearer s3cret-token"}}
  T.truthy(not res or res.status == 413, "too large: " .. tostring(res and res.status))
  T.eq(post(url, {jsonrpc = "2.0", id = 1, method = "ping"},
            {Authorization = "Bearer s3cret-token"}).status, 400, "still serving (no session id)")
end

tests["http: binding beyond loopback needs RLM_MCP_TOKEN"] = function()
  local res = T.run_rlm({"mcp", "--http", "0.0.0.0:0"}, {env = {PATH = sys.getenv("PATH")}})
  T.eq(res.code, 1)
  T.contains(res.stderr, "RLM_MCP_TOKEN")
  T.eq(res.stdout, "")
end

tests["http: a cancelled SSE call ends its stream without a reply"] = function()
  local url, proc = http_server()
  local sid = post(url, INIT).headers["mcp-session-id"]
  local h = {["Mcp-Session-Id"] = sid}
  local async = require "rlm.async"
  local call = async.spawn(post, url, {jsonrpc = "2.0", id = 1, method = "tools/call", params = {
    name = "sandbox_exec", arguments = {code = running_code("6006")}}}, h)
  wait_for("the sandbox", function() return #children(proc:pid()) == 1 end)
  -- past the interpreter's start-up (see the stdio cancel test)
  wait_for("the code", function() return #running(proc:pid(), {"sleep", "6006"}) == 1 end)
  T.eq(post(url, {jsonrpc = "2.0", method = "notifications/cancelled",
                  params = {requestId = 1}}, h).status, 202)
  local res = call:join(60)
  T.eq(res.status, 200)
  T.eq(sse_messages(res.body), {})
  wait_for("the sandbox to end", function() return #children(proc:pid()) == 0 end)
end

tests["2025-03-26 sessions take JSON-RPC batches, over stdio and HTTP"] = function()
  local old = {jsonrpc = "2.0", id = 0, method = "initialize", params = {protocolVersion = "2025-03-26",
               capabilities = json.object(), clientInfo = {name = "old", version = "1"}}}
  local proc = assert(sys.spawn{argv = {T.rlm, "mcp"}, stdin = "pipe", stderr = "pipe"})
  T.defer(function() proc:kill("KILL"); sys.wait(proc, 2); proc:close() end)
  proc:write(json.encode(old) .. "\n")
  T.eq(json.decode(assert(sys.read_line(proc, 60))).result.protocolVersion, "2025-03-26")
  proc:write('[{"jsonrpc":"2.0","method":"notifications/initialized"},' ..
             '{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]\n')
  local replies = json.decode(assert(sys.read_line(proc, 60)))
  T.eq(#replies, 2)
  T.eq(replies[1].id, 1)
  T.truthy(#replies[2].result.tools >= 11)

  local url = http_server()
  local res = post(url, old)
  local h = {["Mcp-Session-Id"] = res.headers["mcp-session-id"], ["MCP-Protocol-Version"] = "2025-03-26"}
  res = post(url, '[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]', h)
  T.eq(res.status, 200)
  T.eq(#json.decode(res.body), 2)
  T.eq(post(url, '[{"jsonrpc":"2.0","method":"notifications/initialized"}]', h).status, 202)
end

-- A sparse file of most of a GiB (the most the code may write): a download that read the whole
-- file to send a part of it would hold the whole file in the server's memory.
tests["stdio: sandbox_download reads only the part it sends"] = function()
  local s = stdio_server()
  local far = 1000 * 1000 * 1000
  local r = s.tool(1, "sandbox_shell", {command = ("truncate -s %d sparse.bin && printf 'héllo' | " ..
    "dd of=sparse.bin bs=1 seek=%d conv=notrunc 2>/dev/null && stat -c %%s sparse.bin"):format(far + 100, far)})
  T.eq(r.result.structuredContent.output, tostring(far + 100) .. "\n")
  s.send{jsonrpc = "2.0", id = 2, method = "tools/call", params = {name = "sandbox_download",
         arguments = {path = "sparse.bin", offset = far + 2, length = 6}}}
  r = s.reply(2, 60).result
  T.eq(r.isError, nil, r.content[1].text)
  -- asked from inside é (two bytes from far + 1): the part starts where the character does
  T.eq(r.content[1].text, "éllo\0\0")
  T.eq(r.structuredContent, {path = "sparse.bin", bytes = far + 100, encoding = "utf-8",
                             offset = far + 1, length = 7, next_offset = far + 8})
  local peak = tonumber(assert(sys.read_file("/proc/" .. s.proc:pid() .. "/status")):match("VmHWM:%s*(%d+)"))
  T.truthy(peak > 1000 and peak < 300 * 1024, ("the server's peak memory: %d KiB"):format(peak))
end

tests["stdio: every tool declares its output; runs say what they cost and take max_cost"] = function()
  F.model(answer_script("SUBMIT(answer='done')"))
  local s = stdio_server()
  local tools = s.call(1, "tools/list").result.tools
  T.eq(#tools, 11)
  for _, t in ipairs(tools) do
    T.eq(t.outputSchema and t.outputSchema.type, "object", t.name .. " declares its output")
    if t.name:match("^rlm_") and t.name ~= "rlm_status" then
      T.truthy(t.inputSchema.properties.max_cost, t.name .. " takes max_cost")
      for _, fact in ipairs{"billed to this server's key", "max_cost", "without network", "numpy"} do
        T.contains(t.description, fact)
      end
    end
  end
  local r = s.tool(2, "rlm_execute", {task = "Say done.", max_cost = 0.000001})
  T.eq(r.result.isError, true, "a cap the first call would pass stops the run")
  T.contains(r.result.content[1].text, "max_cost")
  r = s.tool(3, "rlm_execute", {task = "Say done."})
  T.eq(r.result.content[1].text, "done", "without the cap the same run answers")
end

tests["stdio: a 2.5 MB SUBMIT arrives, its payload sent once"] = function()
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call", params = {name = "sandbox_exec_stateful",
         arguments = {code = "SUBMIT(answer='x' * (2500 * 1000))"}}}
  local r = s.reply(1, 120)
  T.eq(r.result.isError, nil)
  T.truthy(r.result.content[1].text:find(string.rep("x", 2500 * 1000), 1, true), "the answer is in the text")
  T.eq(r.result.structuredContent.submitted, nil)
  T.eq(r.result.structuredContent.omitted, {"submitted"})
  local size = #json.encode(r)
  T.truthy(size > 2500 * 1000 and size < 2 * 2500 * 1000, "sent once: " .. size .. " bytes")
end

-- Reads path from the session's sandbox with sandbox_download, part after part.
local function download_all(s, path, first_id)
  local parts, offset, id = {}, 0, first_id
  repeat
    s.send{jsonrpc = "2.0", id = id, method = "tools/call", params = {name = "sandbox_download",
           arguments = {path = path, offset = offset, encoding = "utf-8"}}}
    local r = s.reply(id, 120).result
    T.eq(r.isError, nil, r.content[1].text:sub(1, 200))
    parts[#parts + 1] = r.content[1].text
    offset, id = r.structuredContent.next_offset, id + 1
  until not offset
  return table.concat(parts), id - first_id
end

tests["stdio: a 20 MB rlm_execute answer is kept as a file and read in parts"] = function()
  F.model(answer_script("SUBMIT(answer='y' * (20 * 1024 * 1024))"))
  local s = stdio_server()
  s.send{jsonrpc = "2.0", id = 1, method = "tools/call", params = {name = "rlm_execute",
         arguments = {task = "Say y many times."}}}
  local r = s.reply(1, 300).result
  T.eq(r.isError, nil, r.content[1].text:sub(1, 300))
  local st = r.structuredContent
  T.eq(st.saved_bytes, 20 * 1024 * 1024)
  T.eq(st.reason, "submitted")
  T.contains(r.content[1].text, st.saved_to)
  local all, parts = download_all(s, st.saved_to, 2)
  T.eq(#all, 20 * 1024 * 1024)
  T.truthy(all == string.rep("y", 20 * 1024 * 1024), "the answer, whole")
  T.truthy(parts >= 5, parts .. " parts")
end

return tests
