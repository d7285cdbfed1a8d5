--- The backend contract suite: what every sandbox backend must do, checked through the public
-- interpreter API only. A backend's test file runs it with a fixture:
--
--   local contract = require "backend_contract"
--   local tests = contract.run{backend = "mine", around = function(case, b) ... case(b) ... end}
--
-- Each case receives b: b.interp(opts) makes an interpreter on the backend (shut down after the
-- case; b.close() ends them all at once), b.host_env(extra) is the environment for an rlm subprocess. `around` (optional) wraps
-- every case: start a stand-in service, set b.env, check afterwards that nothing is left.
-- The contract itself is written down in lua/rlm/interpreter.lua; docs/architecture.md shows how a
-- new backend is added and run against this suite.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local async = require "rlm.async"
local rlm = require "rlm"

local M = {cases = {}}

M.cases["factorial of 15"] = function(b)
  local i = b.interp{}
  i:start()
  local out, run = i:execute("import math\nSUBMIT(answer=math.factorial(15))")
  T.eq(out, {answer = 1307674368000})
  T.eq(run.error, nil)
  T.eq(run.exit, 0)
  T.truthy(run.duration >= 0 and run.duration < 30, "duration " .. run.duration)
end

-- The driver leaves out a done event's fields that are at their default; the run table still
-- has every one of them.
M.cases["a quiet block's run has every field"] = function(b)
  local i = b.interp{}
  local out, run = i:execute("x = 1")
  T.eq(out, nil)
  T.eq({run.stdout, run.stderr, run.stdout_chars, run.stderr_chars, run.exit, run.timed_out,
        run.state_lost, run.variables_more}, {"", "", 0, 0, 0, false, false, 0})
  T.eq({run.error, run.traceback}, {})
  T.eq(run.variables, {{name = "x", type = "int", size = json.null, preview = "1"}})
  out, run = i:execute("import sys\nprint('o')\nprint('e', file=sys.stderr)\n1/0")
  T.eq({run.stdout, run.stderr, run.stdout_chars, run.stderr_chars, run.exit, run.timed_out},
       {"o\n", "e\n", 2, 2, 1, false})
  T.eq(run.error, "ZeroDivisionError: division by zero")
end

M.cases["values cross exactly both ways"] = function(b)
  local i = b.interp{}
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

-- Long strings may take another way than JSON (the local backend sends them raw): the bytes
-- must come out the same whichever way, at the size where the way changes and far past it.
M.cases["long strings with odd bytes cross exactly both ways"] = function(b)
  local i = b.interp{limits = {submit = "32M"}}
  local piece = "line\n\0nul \xff\xfe bad \xe2\x82 cut é 😀 \"q\" \\ \r\n"
  for _, size in ipairs{64 * 1024 - 1, 64 * 1024, 3 * 1024 * 1024 + 7} do
    local s = piece:rep(size // #piece + 1):sub(1, size)
    local out, run = i:execute([[
tail = s[-4:]
SUBMIT(s=s, again=s + "!", n=len(s.encode('utf-8', 'surrogateescape')), small=tail)]], {s = s})
    T.eq(run.error, nil, "size " .. size)
    T.eq(out.n, size, "the bytes Python got, size " .. size)
    T.truthy(out.s == s, "s came back changed, size " .. size)
    T.truthy(out.again == s .. "!", "again came back changed, size " .. size)
  end
end

M.cases["no SUBMIT gives nil out and the printed text"] = function(b)
  local i = b.interp{}
  local out, run = i:execute("print('hello')\nimport sys\nprint('warn', file=sys.stderr)")
  T.eq(out, nil)
  T.eq(run.stdout, "hello\n")
  T.eq(run.stderr, "warn\n")
end

M.cases["state persists; variables are injected; reset clears"] = function(b)
  local i = b.interp{}
  i:execute("import math\nx = 20")
  local out = i:execute("SUBMIT(v=x + y, r=math.isqrt(x * x))", {y = 22})
  T.eq(out, {v = 42, r = 20})
  i:reset()
  local _, run = i:execute("print(x)")
  T.contains(run.error, "NameError")
  _, run = i:execute("math.pi")
  T.contains(run.error, "NameError", "imports are gone too")
end

M.cases["buffers persist across execute calls and reset clears them"] = function(b)
  local i = b.interp{}
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

M.cases["user exception is data and the interpreter stays usable"] = function(b)
  local i = b.interp{}
  local out, run = i:execute("x = 1\n1/0")
  T.eq(out, nil)
  T.eq(run.error, "ZeroDivisionError: division by zero")
  T.eq(run.exit, 1)
  T.contains(run.traceback, "ZeroDivisionError")
  out = i:execute("SUBMIT(x=x)")
  T.eq(out, {x = 1})
end

M.cases["SUBMIT of a non-serialisable value raises in Python"] = function(b)
  local i = b.interp{}
  local out, run = i:execute("SUBMIT(x=object())")
  T.eq(out, nil)
  T.truthy(run.error, "an error")
  T.contains(run.error:lower(), "json")
  out = i:execute("try:\n    SUBMIT(x={1, 2})\nexcept Exception as e:\n    SUBMIT(caught=type(e).__name__)")
  T.truthy(out and out.caught, "the code can catch it")
  out = i:execute("SUBMIT(ok=1)")
  T.eq(out, {ok = 1})
end

M.cases["execute_timeout stops a busy loop and a long sleep"] = function(b)
  local i = b.interp{execute_timeout = 1}
  i:execute("kept = 5")
  for _, code in ipairs{"while True:\n    pass", "import time\ntime.sleep(1000)"} do
    local t0 = sys.now()
    local out, run = i:execute(code)
    local took = sys.now() - t0
    T.eq(out, nil)
    T.truthy(run.timed_out, "timed_out for " .. code)
    T.contains(run.error, "Timeout")
    -- the code alone would run for ever (or 1000 s): any bound a loaded machine keeps will do
    T.truthy(took >= 0.9 and took < 20, ("stopped after %.2f s under a limit of 1 s"):format(took))
  end
  local out, run = i:execute("SUBMIT(kept=kept)")
  T.eq(out, {kept = 5}, "the driver's own timeout keeps the state")
  T.eq(run.state_lost, false)
end

M.cases["code that ignores the timeout signal is killed by the host backstop"] = function(b)
  local i = b.interp{execute_timeout = 0.5}
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
  T.truthy(sys.now() - t0 < 30, "the backstop acts (the code never ends)")
  out = i:execute("SUBMIT(ok=True)")
  T.eq(out, {ok = true})
end

M.cases["no host environment reaches the sandbox, only env"] = function(b)
  sys.setenv("RLM_TEST_SECRET_API_KEY", "sk-must-not-leak")
  T.defer(function() sys.setenv("RLM_TEST_SECRET_API_KEY", nil) end)
  local i = b.interp{env = {GREETING = "hi"}}
  local out = i:execute("import os\nSUBMIT(env=dict(os.environ))")
  T.eq(out.env.GREETING, "hi")
  T.eq(out.env.RLM_TEST_SECRET_API_KEY, nil)
  for k, v in pairs(out.env) do
    T.truthy(not tostring(v):find("sk-must-not-leak", 1, true), k)
  end
  T.raises(function() rlm.interpreter{env = {OPENAI_API_KEY = "x"}} end, "looks like an API key")
end

M.cases["two-step pipeline through the volume's buffers folder"] = function(b)
  local data = T.tmpdir()
  sys.setenv("XDG_DATA_HOME", data)
  T.defer(function() sys.setenv("XDG_DATA_HOME", nil) end)
  local first = b.interp{volume_name = "pipeline"}
  local _, run = first:execute([[
import json, os
os.makedirs("/home/daytona/memory/buffers", exist_ok=True)
words = "the quick brown fox jumps over the lazy dog".split()
with open("/home/daytona/memory/buffers/step1.json", "w") as f:
    json.dump(words, f)
]])
  T.eq(run.error, nil)
  first:shutdown()
  local second = b.interp{volume_name = "pipeline"}
  local out = second:execute([[
import json, collections
with open("/home/daytona/memory/buffers/step1.json") as f:
    words = json.load(f)
SUBMIT(top=collections.Counter(words).most_common(1)[0][0], n=len(words))
]])
  T.eq(out, {top = "the", n = 9})
end

M.cases["repo_url with a local git repository and repo_ref"] = function(b)
  local dir = T.tmpdir()
  local repo = dir .. "/src"
  local function git(...)
    local r = assert(sys.run({"git", "-C", repo, ...}, {env = b.host_env{
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
  local out = b.interp{repo_url = repo}:execute(code)
  T.eq(out, {v = "v2", cwd = "/home/daytona/workspace"})
  out = b.interp{repo_url = repo, repo_ref = first}:execute(code)
  T.eq(out.v, "v1")
  T.raises(function() b.interp{repo_url = dir .. "/nothing"}:start() end, "git clone")
end

M.cases["context_paths are copied under workspace/context"] = function(b)
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/notes.txt", "hello"))
  assert(sys.mkdir_p(dir .. "/docs/sub"))
  assert(sys.write_file(dir .. "/docs/sub/a.md", "# A"))
  local i = b.interp{context_paths = {dir .. "/notes.txt", dir .. "/docs"}}
  local out = i:execute([[
import os
base = "/home/daytona/workspace/context"
SUBMIT(top=sorted(os.listdir(base)), a=open(base + "/docs/sub/a.md").read())
]])
  T.eq(out, {top = {"docs", "notes.txt"}, a = "# A"})
  T.raises(function() b.interp{context_paths = {dir .. "/missing"}}:start() end, "does not exist")
end

M.cases["huge output keeps head and tail"] = function(b)
  local i = b.interp{max_output_chars = 1000}
  local _, run = i:execute("print('H' + 'x' * 100000 + 'T')")
  T.truthy(#run.stdout < 1200, "truncated to about max_output_chars, got " .. #run.stdout)
  T.eq(run.stdout:sub(1, 1), "H")
  T.contains(run.stdout, "T\n")
  T.contains(run.stdout, "characters cut")
  T.eq(run.stdout_chars, 100003)
end

M.cases["calls: no handler is a clear Python error; a handler answers"] = function(b)
  local i = b.interp{}
  local _, run = i:execute("llm_query('hello')")
  T.contains(run.error, "llm_query is not available: no model configured")
  local seen = {}
  local j = b.interp{on_call = function(kind, args)
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

M.cases["several sandboxes run concurrently from async tasks"] = function(b)
  local interps = {}
  for k = 1, 4 do interps[k] = b.interp{} end
  local starts = {}
  for k = 1, 4 do starts[k] = function() interps[k]:start() end end
  async.all(starts)
  -- each code notes when it began and ended its 3 s sleep (the host's clock): side by side,
  -- every one began before any ended; one after the other, none would have
  local fns = {}
  for k = 1, 4 do
    fns[k] = function()
      return interps[k]:execute("import time\nbegan = time.time()\ntime.sleep(3)\n"
                                .. "SUBMIT(k=k, began=began, ended=time.time())", {k = k})
    end
  end
  local outs = async.all(fns)
  local last_began, first_end = 0, math.huge
  for k, out in ipairs(outs) do
    T.eq(out.k, k)
    last_began, first_end = math.max(last_began, out.began), math.min(first_end, out.ended)
  end
  T.truthy(last_began < first_end, ("the last began %.2f s after the first ended"):format(last_began - first_end))
end

-- The environment an rlm subprocess gets: the few host variables it needs, the fixture's (a
-- stand-in's address), then extra.
local function host_env(b, extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH")}
  for k, v in pairs(b.env or {}) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

M.cases["many globals: the first 50 are listed and the rest counted"] = function(b)
  local i = b.interp{}
  local _, run = i:execute("for k in range(10000):\n    globals()['v%d' % k] = k")
  T.eq(#run.variables, 50)
  T.eq(run.variables[2], {name = "v0", type = "int", size = json.null, preview = "0"})
  T.eq(run.variables_more, 9951)             -- k, v0..v48 listed; v49..v9999 counted
  _, run = i:execute("del v9999, v0")
  T.eq(run.variables[2].name, "v1")
  T.eq(run.variables_more, 9949)
  local out = i:execute("SUBMIT(n=SHOW_VARS.__doc__ is not None, g=len([n for n in globals() if n.startswith('v')]))")
  T.eq(out, {n = true, g = 9998})
end

--- The cases as tests named "contract: <case>" for fixture.backend.
function M.run(fixture)
  local tests = {}
  for name, case in pairs(M.cases) do
    tests["contract: " .. name] = function()
      local b = {backend = fixture.backend, made = {}}
      b.interp = function(opts)
        local o = {}
        for k, v in pairs(opts or {}) do o[k] = v end
        o.backend = o.backend or fixture.backend
        local i = rlm.interpreter(o)
        b.made[#b.made + 1] = i
        T.defer(function() i:shutdown() end)
        return i
      end
      -- shuts down every interpreter the case made (for an `around` that checks what is left)
      b.close = function() for _, i in ipairs(b.made) do i:shutdown() end end
      b.host_env = function(extra) return host_env(b, extra) end
      if fixture.around then fixture.around(case, b) else case(b) end
    end
  end
  return tests
end

return M
