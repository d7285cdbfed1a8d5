--- The user's tools from sandbox code: a Lua function and the tools of MCP servers (stdio and
-- Streamable HTTP, tests/standins/mcp_tools) appear as Python functions with their names,
-- signatures and docstrings; every call runs on the host, is counted against the budget,
-- appears in the trajectory, and a refusal or a tool's failure raises in the code.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

local STANDIN = "tests/standins/mcp_tools"
local TOKEN = "mcp-token-0123456789abcdef"

local function tools(http_url, looked)
  return {
    lookup = {description = "Looks a word up.", price = 0.01,
              params = {{name = "word", type = "string", description = "the word"}},
              call = function(args)
                looked[#looked + 1] = args.word
                if args.word == "boom" then error("no such word: boom") end
                return {word = args.word, length = #args.word}
              end},
    {command = {"/usr/bin/python3", STANDIN}, env = {TOOL_SECRET = "expected-secret"}},
    {url = http_url .. "/mcp", headers = {Authorization = "Bearer " .. TOKEN}, prefix = "web_",
     only = {add = true, fail = true}},
  }
end

local CODE = [[
import inspect, os, threading
print(inspect.signature(greet), '|', greet.__doc__.splitlines()[0], '|', inspect.signature(lookup))
print(add(2, 3), web_add(a=4, b=5), greet('Ada', polite=True), secret_check())
print('TOOL_SECRET' in os.environ)
results = []
def worker(i):
    results.append(lookup('w%d' % i)['length'])
threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(results))
errors = []
for call in (lambda: lookup('boom'), lambda: web_fail('bad input'), lambda: [lookup('x') for _ in range(5)]):
    try:
        call()
    except RuntimeError as e:
        errors.append(str(e))
print(errors)
SUBMIT(answer='done')
]]

tests["Lua and MCP tools from code: signatures, answers, threads, budget and trajectory"] = function()
  local http_server = T.server{STANDIN, "--token", TOKEN}
  local model = F.model{rules = {{match = "Task: tools", reply = F.code(CODE)}}}
  local looked, path = {}, T.tmpdir() .. "/t.jsonl"
  local prices = {input = 0, output = 0}
  local res = rlm.run{task = "tools", context = "x", tools = tools(http_server.url, looked),
                      trace = path, max_iterations = 1, max_cost = 0.105,
                      prices = {["openai/root-model"] = prices}}
  T.eq(res.reason, "submitted", tostring(res.detail))
  local step
  for _, r in ipairs(assert(trace.read(path))) do if r.type == "step" then step = r end end
  local out = step.output
  T.contains(out, "(name, polite=None) | Greets someone. | (word)", "signatures and docstrings")
  T.contains(out, "{'sum': 5} {'sum': 9} Good day, Ada. yes\n", "answers from both servers")
  T.contains(out, "False\n", "the server's key is not in the sandbox")
  T.contains(out, "[2, 2, 2, 2, 2, 2, 2, 2]", "8 calls from 8 threads")
  T.contains(out, "no such word: boom", "a Lua tool's error")
  T.contains(out, "it failed: bad input", "an MCP tool's isError result")
  -- $0.105 pays 10 calls at $0.01: 8 from threads, then 2 of the last loop's 5 (boom failed:
  -- not charged).
  T.contains(out, "max_cost: tool:lookup costs $0.0100 a call", "a budget refusal raises")
  T.eq(#looked, 11, "calls that ran: " .. table.concat(looked, ","))
  local sub = res.usage.by_model["tool:lookup"]
  T.eq(sub.calls, 11)
  T.truthy(math.abs(sub.cost - 0.10) < 1e-9, "priced per successful call: " .. sub.cost)
  T.truthy(res.usage.cost <= 0.105, "never past the limit")
  local system = F.stats(model).last_body.messages[1].content
  T.contains(system, "- greet(name, polite=None): Greets someone.\n")
  T.contains(system, "- lookup(word): Looks a word up.\n")
  T.contains(system, "- web_add(a, b): Adds two integers.\n")
  T.truthy(not system:find("web_greet", 1, true), "only the tools asked for")
  local text = assert(sys.read_file(path))
  T.truthy(not text:find("expected-secret", 1, true), "the key is in no record")
  local kinds = 0
  for _, r in ipairs(assert(trace.read(path))) do
    if r.type == "subcall" and r.kind == "tool" then kinds = kinds + 1 end
  end
  -- greet, add, web_add, secret_check, 8 from threads, boom, web_fail, 2 of the last loop
  T.eq(kinds, 4 + 8 + 1 + 1 + 2, "every call that ran is recorded")
  local stats = json.decode(assert(require("rlm.http").request{url = http_server.url .. "/_stats"}).body)
  T.eq(stats.calls.add, 1)
  T.eq(stats.calls.fail, 1)
end

tests["a bare interpreter's tools, with max_calls, and misuse named"] = function()
  local interp <close> = rlm.interpreter{tools = {
    double = {params = {{name = "n", type = "integer"}}, max_calls = 2,
              call = function(args) return args.n * 2 end},
  }}
  T.eq(interp:execute("SUBMIT(answer=str(double(21) + double(n=1)))").answer, "44")
  local _, r = interp:execute("double(3)")
  T.contains(r.error, "max_calls: double may be called 2 times")
  interp:execute("x = 1")
  local vars = select(2, interp:execute("print(sorted(k for k in globals() if not k.startswith('_')))"))
  T.contains(vars.stdout, "['x']", "tools are builtins, not variables")
  T.raises(function() rlm.interpreter{tools = {["bad name"] = function() end}}:start() end,
           "is not a Python name")
  T.raises(function() rlm.interpreter{tools = {{command = {"/bin/false"}}}}:start() end,
           "did not initialize")
  -- a refused tool list leaves no MCP server it had started running
  T.raises(function() rlm.interpreter{tools = {add = function() end,
    {command = {"/usr/bin/python3", STANDIN}}}}:start() end, "two tools are named add")
  for _, p in ipairs(T.descendants(sys.getpid())) do
    T.truthy(not p.cmdline:find("mcp_tools", 1, true), "an MCP server outlived the refusal")
  end
end

tests["rlm ask --tools FILE.lua, and each call an execute_tool span"] = function()
  local model = F.model{rules = {{match = "Task: ask tools", reply = F.code("SUBMIT(answer=str(triple(5)))")}}}
  local file = T.tmpdir() .. "/tools.lua"
  assert(sys.write_file(file, "return {triple = {params = {{name = 'n', type = 'integer'}}, "
    .. "call = function(a) return a.n * 3 end}}\n"))
  local collector = T.server{"tests/standins/otlp"}
  local r = T.run_rlm({"ask", "ask tools", "--quiet", "--tools", file, "--otel", collector.url},
                      {env = F.env(model)})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "15\n")
  local spans = json.decode(assert(require("rlm.http").request{url = collector.url .. "/_spans"}).body).spans
  local found
  for _, s in ipairs(spans) do if s.name == "execute_tool triple" then found = s end end
  T.truthy(found, "an execute_tool span")
  local names = {}
  for _, a in ipairs(found.attributes) do names[a.key] = a.value.stringValue end
  T.eq(names["gen_ai.operation.name"], "execute_tool")
  T.eq(names["gen_ai.tool.name"], "triple")
  r = T.run_rlm({"ask", "x", "--tools", "/nonexistent.lua"}, {env = F.env(model)})
  T.eq(r.code, 1)
  T.contains(r.stderr, "--tools: cannot open /nonexistent.lua")
end

return tests
