-- The interpreter on the local backend: values, state, files, isolation, timeouts, failures.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local async = require "rlm.async"
local registry = require "rlm.registry"
local rlm = require "rlm"

local tests = {}

-- An interpreter shut down after the test, pass or fail.
local function interp(opts)
  local i = rlm.interpreter(opts)
  T.defer(function() i:shutdown() end)
  return i
end

local function host_env(extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH")}
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

tests["factorial of 15"] = function()
  local i = interp{}
  i:start()
  local out, run = i:execute("import math\nSUBMIT(answer=math.factorial(15))")
  T.eq(out, {answer = 1307674368000})
  T.eq(run.error, nil)
  T.eq(run.exit, 0)
  T.truthy(run.duration >= 0 and run.duration < 5, "duration " .. run.duration)
end

tests["values cross exactly both ways"] = function()
  local i = interp{}
  local bytes = "a\0b\xff\xfe\r\n\"\\ é"
  local out, run = i:execute([[
import math
SUBMIT(n=42, f20=math.factorial(20), empty=[], obj={}, s=s, slen=len(s), back=xs, neg=-7,
       fl=1.5, whole=2.0, big=2**70, none=None, t=True)
]], {s = bytes, xs = json.array{1, 2, 3}})
  T.eq(run.error, nil)
  T.eq(out.n, 42)
  T.eq(math.type(out.n), "integer")
  T.eq(out.f20, 2432902008176640000)
  T.eq(out.neg, -7)
  T.eq(out.s, bytes)
  T.eq(out.slen, #bytes - 1, "each invalid byte is one surrogate, é two bytes one char")
  T.eq(json.encode(out.empty), "[]")
  T.eq(json.encode(out.obj), "{}")
  T.eq(out.back, {1, 2, 3})
  T.eq(out.fl, 1.5)
  T.eq(math.type(out.whole), "float")
  T.eq(math.type(out.big), "float", "beyond 64 bits becomes a float")
  T.eq(out.none, json.null)
  T.eq(out.t, true)
end

tests["no SUBMIT gives nil out and the printed text"] = function()
  local i = interp{}
  local out, run = i:execute("print('hello')\nimport sys\nprint('warn', file=sys.stderr)")
  T.eq(out, nil)
  T.eq(run.stdout, "hello\n")
  T.eq(run.stderr, "warn\n")
end

tests["state persists; variables are injected; reset clears"] = function()
  local i = interp{}
  i:execute("import math\nx = 20")
  local out = i:execute("SUBMIT(v=x + y, r=math.isqrt(x * x))", {y = 22})
  T.eq(out, {v = 42, r = 20})
  i:reset()
  local _, run = i:execute("print(x)")
  T.contains(run.error, "NameError")
  _, run = i:execute("math.pi")
  T.contains(run.error, "NameError", "imports are gone too")
end

tests["buffers persist across execute calls and reset clears them"] = function()
  local i = interp{}
  i:execute("add_buffer('notes', 'first')")
  i:execute("add_buffer('notes', 'second')")
  local out = i:execute("SUBMIT(notes=get_buffer('notes'))")
  T.eq(out.notes, {"first", "second"})
  i:execute("clear_buffer('notes')")
  out = i:execute("SUBMIT(notes=get_buffer('notes'))")
  T.eq(json.encode(out.notes), "[]")
  i:execute("add_buffer('notes', 'x')")
  i:reset()
  out = i:execute("SUBMIT(notes=get_buffer('notes'))")
  T.eq(json.encode(out.notes), "[]")
end

tests["user exception is data and the interpreter stays usable"] = function()
  local i = interp{}
  local out, run = i:execute("x = 1\n1/0")
  T.eq(out, nil)
  T.eq(run.error, "ZeroDivisionError: division by zero")
  T.eq(run.exit, 1)
  T.contains(run.traceback, "ZeroDivisionError")
  out = i:execute("SUBMIT(x=x)")
  T.eq(out, {x = 1})
end

tests["SUBMIT of a non-serialisable value raises in Python"] = function()
  local i = interp{}
  local out, run = i:execute("SUBMIT(x=object())")
  T.eq(out, nil)
  T.truthy(run.error, "an error")
  T.contains(run.error:lower(), "json")
  out = i:execute("try:\n    SUBMIT(x={1, 2})\nexcept Exception as e:\n    SUBMIT(caught=type(e).__name__)")
  T.truthy(out and out.caught, "the code can catch it")
  out = i:execute("SUBMIT(ok=1)")
  T.eq(out, {ok = 1})
end

tests["a killed driver is a clear error and the interpreter recovers"] = function()
  local i = interp{}
  i:execute("x = 1")
  local pid = T.truthy(i:pid(), "driver pid")
  T.truthy(pid ~= i.sandbox.proc:pid(), "the pid is the driver inside bwrap, not bwrap")
  assert(sys.kill(pid, "KILL"))
  local out, run = i:execute("SUBMIT(y=2)")
  T.eq(out, nil)
  T.truthy(run.state_lost, "state_lost")
  T.contains(run.error, "SandboxError")
  out, run = i:execute("SUBMIT(y=2, had_x='x' in globals())")
  T.eq(out, {y = 2, had_x = false})
  T.eq(run.state_lost, false)
end

tests["execute_timeout stops a busy loop and a long sleep"] = function()
  local i = interp{execute_timeout = 1}
  i:execute("kept = 5")
  for _, code in ipairs{"while True:\n    pass", "import time\ntime.sleep(1000)"} do
    local t0 = sys.now()
    local out, run = i:execute(code)
    local took = sys.now() - t0
    T.eq(out, nil)
    T.truthy(run.timed_out, "timed_out for " .. code)
    T.contains(run.error, "Timeout")
    T.truthy(took < 2.2, ("stopped within about a second of the limit (%.2f s)"):format(took))
  end
  local out, run = i:execute("SUBMIT(kept=kept)")
  T.eq(out, {kept = 5}, "the driver's own timeout keeps the state")
  T.eq(run.state_lost, false)
end

tests["code that ignores the timeout signal is killed by the host backstop"] = function()
  local i = interp{execute_timeout = 0.5}
  local t0 = sys.now()
  local out, run = i:execute([[
import signal, time
for s in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
    signal.signal(s, signal.SIG_IGN)
try:
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF])
except Exception:
    pass
while True:
    try:
        time.sleep(100)
    except BaseException:
        pass
]])
  T.eq(out, nil)
  T.truthy(run.timed_out and run.state_lost, "timed out with state lost")
  T.truthy(sys.now() - t0 < 3, "the backstop acts")
  out = i:execute("SUBMIT(ok=True)")
  T.eq(out, {ok = true})
end

tests["writes outside the workspace and the volume fail; the host is unchanged"] = function()
  local i = interp{}
  local home = assert(sys.getenv("HOME"))
  local marker = "rlm-escape-" .. sys.getpid()
  local targets = {"/etc/" .. marker, "/usr/" .. marker, "/" .. marker, home .. "/" .. marker,
                   "/home/daytona/" .. marker, "/work/" .. marker}
  local out, run = i:execute([[
import os
res = {}
for p in targets:
    try:
        with open(p, "w") as f:
            f.write("x")
        res[p] = "written"
    except OSError as e:
        res[p] = type(e).__name__
SUBMIT(res=res, uid=os.getuid(), env=dict(os.environ))
]], {targets = targets})
  T.eq(run.error, nil)
  for _, p in ipairs(targets) do
    T.truthy(out.res[p] ~= "written", p .. " must not be writable: " .. tostring(out.res[p]))
    T.eq(sys.stat(p), nil, "host path " .. p)
  end
  T.eq(out.uid, 1000)
  T.eq(out.env.HOME, "/home/daytona")
  T.eq(out.env.OPENAI_API_KEY, nil)
end

tests["no host environment reaches the sandbox, only env"] = function()
  sys.setenv("RLM_TEST_SECRET_API_KEY", "sk-must-not-leak")
  T.defer(function() sys.setenv("RLM_TEST_SECRET_API_KEY", nil) end)
  local i = interp{env = {GREETING = "hi"}}
  local out = i:execute("import os\nSUBMIT(env=dict(os.environ))")
  T.eq(out.env.GREETING, "hi")
  T.eq(out.env.RLM_TEST_SECRET_API_KEY, nil)
  for k, v in pairs(out.env) do
    T.truthy(not tostring(v):find("sk-must-not-leak", 1, true), k)
  end
  T.raises(function() rlm.interpreter{env = {OPENAI_API_KEY = "x"}} end, "looks like an API key")
end

tests["no network unless network = true"] = function()
  local server = T.server{"tests/standins/echo"}
  local code = [[
import urllib.request
try:
    with urllib.request.urlopen(url + "/delay?ms=0", timeout=3) as r:
        SUBMIT(status=r.status)
except OSError as e:
    SUBMIT(failed=type(e).__name__ + ": " + str(e))
]]
  local out = interp{}:execute(code, {url = server.url})
  T.truthy(out.failed, "connection should fail, got " .. json.encode(out))
  T.contains(out.failed, "refused")
  out = interp{network = true}:execute(code, {url = server.url})
  T.eq(out, {status = 200}, "with network = true the same request works")
end

tests["volume round trip across two rlm processes"] = function()
  local data = T.tmpdir()
  local env = host_env{XDG_DATA_HOME = data}
  local w = T.run_rlm({"exec", "--volume", "round-trip", [[
import json, os
os.makedirs("/home/daytona/memory/artifacts", exist_ok=True)
with open("/home/daytona/memory/artifacts/results.json", "w") as f:
    json.dump({"answer": 42, "items": []}, f)
SUBMIT(written=True)
]]}, {env = env})
  T.eq(w.code, 0, "writer: " .. w.stderr)
  T.eq(w.stdout, '{"written":true}\n')
  T.truthy(sys.stat(data .. "/rlm/volumes/round-trip/artifacts/results.json"), "on the host volume")
  local r = T.run_rlm({"exec", "--volume", "round-trip", [[
import json
with open("/home/daytona/memory/artifacts/results.json") as f:
    SUBMIT(**json.load(f))
]]}, {env = env})
  T.eq(r.code, 0, "reader: " .. r.stderr)
  T.eq(json.decode(r.stdout), {answer = 42, items = json.array{}})
  -- without --volume the memory folder is transient
  local t = T.run_rlm({"exec", "import os\nSUBMIT(n=len(os.listdir('/home/daytona/memory')))"},
                      {env = env})
  T.eq(t.stdout, '{"n":0}\n')
end

tests["two-step pipeline through the volume's buffers folder"] = function()
  local data = T.tmpdir()
  sys.setenv("XDG_DATA_HOME", data)
  T.defer(function() sys.setenv("XDG_DATA_HOME", nil) end)
  local first = interp{volume_name = "pipeline"}
  local _, run = first:execute([[
import json, os
os.makedirs("/home/daytona/memory/buffers", exist_ok=True)
words = "the quick brown fox jumps over the lazy dog".split()
with open("/home/daytona/memory/buffers/step1.json", "w") as f:
    json.dump(words, f)
]])
  T.eq(run.error, nil)
  first:shutdown()
  local second = interp{volume_name = "pipeline"}
  local out = second:execute([[
import json, collections
with open("/home/daytona/memory/buffers/step1.json") as f:
    words = json.load(f)
SUBMIT(top=collections.Counter(words).most_common(1)[0][0], n=len(words))
]])
  T.eq(out, {top = "the", n = 9})
end

tests["repo_url with a local git repository and repo_ref"] = function()
  local dir = T.tmpdir()
  local repo = dir .. "/src"
  local function git(...)
    local r = assert(sys.run({"git", "-C", repo, ...}, {env = host_env{
      GIT_AUTHOR_NAME = "t", GIT_AUTHOR_EMAIL = "t@example.com",
      GIT_COMMITTER_NAME = "t", GIT_COMMITTER_EMAIL = "t@example.com"}}))
    assert(r.code == 0, r.stderr)
    return (r.stdout:gsub("%s+$", ""))
  end
  assert(sys.mkdir_p(repo))
  git("init", "--quiet")
  assert(sys.write_file(repo .. "/version.txt", "v1"))
  git("add", "version.txt")
  git("commit", "--quiet", "-m", "one")
  local first = git("rev-parse", "HEAD")
  assert(sys.write_file(repo .. "/version.txt", "v2"))
  git("commit", "--quiet", "-am", "two")
  local code = "SUBMIT(v=open('/home/daytona/workspace/repo/version.txt').read(), cwd=__import__('os').getcwd())"
  local out = interp{repo_url = repo}:execute(code)
  T.eq(out, {v = "v2", cwd = "/home/daytona/workspace"})
  out = interp{repo_url = repo, repo_ref = first}:execute(code)
  T.eq(out.v, "v1")
  T.raises(function() interp{repo_url = dir .. "/nothing"}:start() end, "git clone")
end

tests["context_paths are copied under workspace/context"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/notes.txt", "hello"))
  assert(sys.mkdir_p(dir .. "/docs/sub"))
  assert(sys.write_file(dir .. "/docs/sub/a.md", "# A"))
  local i = interp{context_paths = {dir .. "/notes.txt", dir .. "/docs"}}
  local out = i:execute([[
import os
base = "/home/daytona/workspace/context"
SUBMIT(top=sorted(os.listdir(base)), a=open(base + "/docs/sub/a.md").read())
]])
  T.eq(out, {top = {"docs", "notes.txt"}, a = "# A"})
  T.raises(function() interp{context_paths = {dir .. "/missing"}}:start() end, "does not exist")
end

tests["upload, download and files"] = function()
  local i = interp{}
  local blob = "bin\0\xff\n" .. string.rep("z", 100000)
  i:upload("/home/daytona/workspace/in/data.bin", blob)
  i:upload("rel.txt", "relative")
  i:upload("/home/daytona/memory/m.txt", "mem")
  local out = i:execute("SUBMIT(n=len(open('in/data.bin','rb').read()), r=open('rel.txt').read())")
  T.eq(out, {n = #blob, r = "relative"})
  i:execute("open('made.txt', 'w').write('from python')")
  T.eq(i:download("/home/daytona/workspace/made.txt"), "from python")
  T.eq(i:download("in/data.bin"), blob)
  local none, err = i:download("missing.txt")
  T.eq(none, nil)
  T.contains(err, "No such file")
  local paths = {}
  for _, e in ipairs(assert(i:files())) do paths[#paths + 1] = e.path .. ":" .. e.type end
  T.eq(paths, {"/home/daytona/workspace/in:dir", "/home/daytona/workspace/in/data.bin:file",
               "/home/daytona/workspace/made.txt:file", "/home/daytona/workspace/rel.txt:file"})
  T.eq(assert(i:files("/home/daytona/memory"))[1].path, "/home/daytona/memory/m.txt")
  T.raises(function() i:upload("/etc/passwd", "x") end, "outside")
  T.raises(function() i:upload("../escape.txt", "x") end, "'..'")
  -- a link made inside must not lead the host out of the sandbox
  i:execute("import os\nos.symlink('/etc', 'etc-link')")
  none, err = i:download("etc-link/hostname")
  T.eq(none, nil)
  T.contains(err, "symbolic link")
  T.raises(function() i:upload("etc-link/evil", "x") end, "symbolic link")
end

tests["huge output keeps head and tail"] = function()
  local i = interp{max_output_chars = 1000}
  local _, run = i:execute("print('H' + 'x' * 100000 + 'T')")
  T.truthy(#run.stdout < 1200, "truncated to about max_output_chars, got " .. #run.stdout)
  T.eq(run.stdout:sub(1, 1), "H")
  T.contains(run.stdout, "T\n")
  T.contains(run.stdout, "characters cut")
  T.eq(run.stdout_chars, 100003)
end

tests["missing bubblewrap is a clear error before anything is created"] = function()
  local tmp = T.tmpdir()
  local old = sys.getenv("TMPDIR")
  sys.setenv("TMPDIR", tmp)
  T.defer(function() sys.setenv("TMPDIR", old) end)
  local live = #registry.list()
  local err = T.raises(function() rlm.interpreter{bwrap = "/nonexistent/bwrap"} end,
                       "sudo apt-get install bubblewrap python3")
  T.contains(err, "/nonexistent/bwrap")
  sys.setenv("RLM_BWRAP", "/nonexistent/bwrap")
  T.defer(function() sys.setenv("RLM_BWRAP", nil) end)
  T.raises(function() rlm.interpreter{} end, "bubblewrap")
  sys.setenv("RLM_BWRAP", nil)
  sys.setenv("RLM_PYTHON", "/nonexistent/python3")
  T.defer(function() sys.setenv("RLM_PYTHON", nil) end)
  T.raises(function() rlm.interpreter{} end, "python3 (/nonexistent/python3)")
  sys.setenv("RLM_PYTHON", nil)
  T.eq(#registry.list(), live, "nothing registered")
  T.eq(sys.list_dir(tmp), {}, "nothing created")
  local r = T.run_rlm({"exec", "SUBMIT(x=1)"}, {env = host_env{RLM_BWRAP = "/nonexistent/bwrap"}})
  T.eq(r.code, 1)
  T.contains(r.stderr, "sudo apt-get install bubblewrap python3")
end

tests["a failed start leaves nothing behind"] = function()
  local tmp = T.tmpdir()
  local old = sys.getenv("TMPDIR")
  sys.setenv("TMPDIR", tmp)
  T.defer(function() sys.setenv("TMPDIR", old) end)
  local live = #registry.list()
  local i = rlm.interpreter{context_paths = {tmp .. "/missing"}}
  T.raises(function() i:start() end, "context_paths")
  T.eq(i.sandbox, nil)
  T.eq(#registry.list(), live)
  T.eq(sys.list_dir(tmp), {}, "the staging folder was removed")
end

tests["calls: no handler is a clear Python error; a handler answers"] = function()
  local i = interp{}
  local _, run = i:execute("llm_query('hello')")
  T.contains(run.error, "llm_query is not available: no model configured")
  local seen = {}
  local j = interp{on_call = function(kind, args)
    seen[#seen + 1] = kind
    if kind == "llm_query_batched" then
      local res = {}
      for k, p in ipairs(args.prompts) do res[k] = p:upper() end
      return res
    end
    return {"echo: " .. args.prompt}
  end}
  local out, r = j:execute("SUBMIT(one=llm_query('ping'), many=llm_query_batched(['a', 'b']))")
  T.eq(r.error, nil)
  T.eq(out, {one = "echo: ping", many = {"A", "B"}})
  T.eq(seen, {"llm_query", "llm_query_batched"})
end

tests["several sandboxes run concurrently from async tasks"] = function()
  local interps = {}
  for k = 1, 4 do interps[k] = interp{} end
  local starts = {}
  for k = 1, 4 do starts[k] = function() interps[k]:start() end end
  async.all(starts)
  local t0 = sys.now()
  local fns = {}
  for k = 1, 4 do
    fns[k] = function()
      local out = interps[k]:execute("import time\ntime.sleep(0.5)\nSUBMIT(k=k)", {k = k})
      return out.k
    end
  end
  T.eq(async.all(fns), {1, 2, 3, 4})
  local took = sys.now() - t0
  T.truthy(took < 1.2, ("4 x 0.5 s ran side by side (%.2f s)"):format(took))
end

tests["shutdown, <close> and GC end the sandbox and unregister it"] = function()
  local live = #registry.list()
  local root, pid
  do
    local i <close> = rlm.interpreter{}
    i:execute("pass")
    root, pid = i.sandbox.root, i:pid()
    T.eq(#registry.list(), live + 1)
  end
  T.eq(#registry.list(), live)
  T.eq(sys.stat(root), nil, "the transient folder is gone")
  local deadline = sys.now() + 2
  while sys.stat("/proc/" .. pid) and sys.now() < deadline do sys.sleep(0.01) end
  T.eq(sys.stat("/proc/" .. pid), nil, "the driver is gone")
  local function make() local i = rlm.interpreter{}; i:start(); return i.sandbox.root end
  root = make()
  collectgarbage(); collectgarbage()
  T.eq(sys.stat(root), nil, "collected interpreters clean up")
  T.eq(#registry.list(), live)
  local i = rlm.interpreter{}
  i:shutdown()
  i:shutdown()
  T.raises(function() i:execute("pass") end, "shut down")
end

-- Starts an rlm whose script opens a sandbox, reports it, then does `after`; returns the process,
-- the sandbox's folder and its driver's pid.
local function rlm_with_sandbox(after)
  local proc = assert(sys.spawn{argv = {T.rlm, "-e", [[
local i = require("rlm").interpreter{}
i:start()
print(i.sandbox.root .. " " .. i:pid())
io.stdout:flush()
]] .. after}, stdin = "null", stderr = "pipe"})
  T.defer(function() proc:close() end)
  local line = assert(sys.read_line(proc, 10))
  local root, pid = line:match("^(%S+) (%d+)$")
  T.truthy(sys.stat(root), "the sandbox exists while it runs")
  return proc, root, pid
end

local function gone(root, pid, how)
  T.eq(sys.stat(root), nil, how .. ": the transient folder is gone")
  local deadline = sys.now() + 2
  while sys.stat("/proc/" .. pid) and sys.now() < deadline do sys.sleep(0.01) end
  T.eq(sys.stat("/proc/" .. pid), nil, how .. ": the driver is gone")
end

tests["an interrupted rlm ends its sandboxes, whatever the signal"] = function()
  for _, sig in ipairs{{"INT", 2}, {"TERM", 15}, {"HUP", 1}, {"QUIT", 3}} do
    local proc, root, pid = rlm_with_sandbox('i:execute("import time\\ntime.sleep(100)")')
    sys.sleep(0.2)
    proc:kill(sig[2])
    T.eq({sys.wait(proc, 5)}, {"exit", 128 + sig[2]}, sig[1])
    T.contains(proc:read("stderr"), "interrupted (SIG" .. sig[1] .. ")")
    gone(root, pid, sig[1])
  end
end

tests["os.exit ends the sandboxes a script left open"] = function()
  for _, call in ipairs{"os.exit(3)", "os.exit(3, true)"} do
    local proc, root, pid = rlm_with_sandbox(call)
    T.eq({sys.wait(proc, 5)}, {"exit", 3}, call)
    gone(root, pid, call)
  end
end

tests["rlm exec prints fields, stdout, --json and reads stdin"] = function()
  local r = T.run_rlm({"exec", "print('hi')"})
  T.eq(r.code, 0)
  T.eq(r.stdout, "hi\n")
  r = T.run_rlm({"exec", "-"}, {input = "import math\nSUBMIT(answer=math.factorial(15))\n"})
  T.eq(r.stdout, '{"answer":1307674368000}\n')
  r = T.run_rlm({"exec", "--json", "1/0"})
  T.eq(r.code, 1)
  local res = json.decode(r.stdout)
  T.eq(res.error, "ZeroDivisionError: division by zero")
  T.eq(res.exit, 1)
  r = T.run_rlm({"exec", "--timeout", "1", "while True: pass"})
  T.eq(r.code, 1)
  T.contains(r.stderr, "Timeout")
end

return tests
