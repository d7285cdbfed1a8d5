local T = require "support"
local sys = require "rlm.sys"

local tests = {}

tests["-e runs code and cjson is built in"] = function()
  local r = T.run_rlm{"-e", 'print(require("cjson").encode({a=1}))'}
  T.eq(r.code, 0)
  T.eq(r.stdout, '{"a":1}\n')
end

tests["the HTTP libraries load on first use, not at start"] = function()
  local probe = [[
local function loaded(lib) return io.open("/proc/self/maps"):read("a"):find(lib, 1, true) ~= nil end
local before = {loaded("libcurl"), loaded("libmicrohttpd")}
require "rlm.interpreter"
local sandbox_only = loaded("libcurl")
require "rlm.http"
local after_http = {loaded("libcurl"), loaded("libmicrohttpd")}
require "rlm.core.httpd"
print(before[1], before[2], sandbox_only, after_http[1], after_http[2], loaded("libmicrohttpd"))]]
  local r = T.run_rlm{"-e", probe}
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "false\tfalse\tfalse\ttrue\tfalse\ttrue\n")
  r = T.run_rlm{"exec", "SUBMIT(n=1)"}   -- a sandbox-only command works without them
  T.eq(r.code, 0, r.stderr)
end

tests["the embedded library is bytecode whose tracebacks still name lua/ files and lines"] = function()
  local r = T.run_rlm{"-e", [[
local src = require("rlm.core.host").resource("lua/rlm/prompts.lua")
print(src:sub(1, 4) == "\27Lua")
require("rlm.prompts").render("{{missing}}", {})]]}
  T.eq(r.code, 1)
  T.eq(r.stdout, "true\n")
  local line, n = nil, 0
  for text in assert(sys.read_file("lua/rlm/prompts.lua")):gmatch("[^\n]*\n") do
    n = n + 1
    if text:find('error("prompt template uses', 1, true) then line = line or n end
  end
  T.contains(r.stderr, "lua/rlm/prompts.lua:" .. line .. ":")
  T.contains(r.stderr, "in function 'rlm.prompts.render'")
end

tests["a script error prints one message with a traceback and exits 1"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/bad.lua", "local function f()\n  error('broken here')\nend\nf()\n"))
  local r = T.run_rlm{"run", dir .. "/bad.lua"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "rlm: " .. dir .. "/bad.lua:2: broken here")
  T.contains(r.stderr, "stack traceback:")
  T.contains(r.stderr, "bad.lua:4: in main chunk")
  T.eq(r.stdout, "")
end

tests["run passes arg and ... like lua, and an integer result is the exit status"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/args.lua",
    "local a, b = ...\nprint(arg[0]:match('args.lua$'), arg[1], arg[2], a, b, #arg)\nreturn 5\n"))
  local r = T.run_rlm{"run", dir .. "/args.lua", "x", "y"}
  T.eq(r.stdout, "args.lua\tx\ty\tx\ty\t2\n")
  T.eq(r.code, 5)
end

tests["unknown commands and missing arguments say what is valid"] = function()
  local r = T.run_rlm{"frobnicate"}
  T.eq(r.code, 2)
  T.contains(r.stderr, "unknown command 'frobnicate'")
  T.contains(r.stderr, "commands:")
  r = T.run_rlm{"run"}
  T.eq(r.code, 2)
  T.contains(r.stderr, "missing FILE.lua")
  r = T.run_rlm{"run", "/no/such/file.lua"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "cannot open /no/such/file.lua")
end

tests["help, --help and version"] = function()
  local r = T.run_rlm{"help"}
  T.eq(r.code, 0)
  T.contains(r.stdout, "usage: rlm COMMAND")
  r = T.run_rlm{"run", "--help"}
  T.contains(r.stdout, "usage: rlm run FILE.lua")
  r = T.run_rlm{"version"}
  T.contains(r.stdout, "rlm ")
end

tests["installed binary works from any directory; RLM_LUA_PATH overrides a module"] = function()
  local dir = T.tmpdir()
  local r = assert(sys.run({"make", "-s", "install", "PREFIX=" .. dir}))
  T.eq(r.code, 0, "make install: " .. r.stderr)
  local bin = dir .. "/bin/rlm"
  r = assert(sys.run({bin, "-e", "print(require('rlm.async') ~= nil, package.path)"},
                     {cwd = "/", env = {PATH = sys.getenv("PATH")}}))
  T.truthy(r.stdout:match("^true\t/usr/local/share/lua/5%.4/%?%.lua;.*\n$"), r.stdout)
  assert(sys.mkdir_p(dir .. "/mods/rlm"))
  assert(sys.write_file(dir .. "/mods/rlm/greeting.lua", "return 'overridden'"))
  r = assert(sys.run({bin, "-e", "print((require('rlm.greeting')))"},
                     {cwd = "/", env = {RLM_LUA_PATH = dir .. "/mods", PATH = sys.getenv("PATH")}}))
  T.eq(r.stdout, "overridden\n")
end

tests["SIGINT interrupts a running script with exit status 130"] = function()
  local proc = assert(sys.spawn{argv = {T.rlm, "-e", "print('started') io.stdout:flush() require('rlm.sys').sleep(30)"},
                                stdin = "null"})
  T.eq(sys.read_line(proc, 60), "started")
  proc:kill("INT")
  local how, code = sys.wait(proc, 5)
  T.eq(how, "exit")
  T.eq(code, 130)
  T.contains(proc:read("stderr"), "interrupted (SIGINT)")
  proc:close()
end

return tests
