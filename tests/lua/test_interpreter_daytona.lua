-- The interpreter on the daytona backend, against the Daytona stand-in (tests/standins/daytona):
-- the backend contract (backend_contract.lua), then Daytona's own cases. Every case also checks
-- that it left no sandbox behind.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local http = require "rlm.http"
local registry = require "rlm.registry"
local daytona = require "rlm.daytona"
local backend = require "rlm.backend.daytona"
local rlm = require "rlm"
local contract = require "backend_contract"

local tests = {}

local KEY = "sk-daytona-5ecret-never-in-the-sandbox"

local function control(s, method, path, body)
  local res = assert(http.request{url = s.url .. "/_control/" .. path, method = method,
                                  body = body and json.encode(body)})
  return json.decode(res.body)
end

local function stats(s) return control(s, "GET", "stats") end

local function requests(s, key) return stats(s).requests[key] or 0 end

-- Starts the stand-in and points DAYTONA_* at it for this test.
local function standin()
  local s = T.daytona_standin(KEY)
  s.env = {DAYTONA_API_KEY = KEY, DAYTONA_API_URL = s.url .. "/api"}
  for k, v in pairs(s.env) do
    local old = sys.getenv(k)
    sys.setenv(k, v)
    T.defer(function() sys.setenv(k, old) end)
  end
  s.client = daytona.client{api_key = KEY, api_url = s.url .. "/api"}
  return s
end

local function host_env(s, extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH")}
  for k, v in pairs(s and s.env or {}) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

-- An interpreter on the daytona backend unless told otherwise, shut down after the test.
local made = {}
local function interp(opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.backend = o.backend or "daytona"
  local i = rlm.interpreter(o)
  made[#made + 1] = i
  T.defer(function() i:shutdown() end)
  return i
end

-- Runs a case on a fresh stand-in, then shuts its interpreters down and checks that no sandbox
-- is left.
local function on_standin(fn)
  return function()
    local s = standin()
    made = {}
    fn(s)
    for _, i in ipairs(made) do i:shutdown() end
    T.eq(backend.settle(5), 0, "deletions still running")
    T.eq(stats(s).sandboxes, {}, "sandboxes left in the stand-in")
  end
end

for name, case in pairs(contract.run{backend = "daytona", around = function(case, b)
  on_standin(function(s)
    b.env = s.env
    case(b)
    b.close()
  end)()
end}) do tests["daytona: " .. name] = case end

tests["daytona: the transport costs one process/execute per execute and per batch of calls"] =
  on_standin(function(s)
    local i = interp{on_call = function(_, args) return {"r:" .. (args.prompt or "batch")} end}
    i:start()
    T.eq(requests(s, "POST /toolbox/{sid}/process/session/{session_id}/exec"), 1,
         "the driver starts once, as a session command")
    T.eq(requests(s, "POST /toolbox/{sid}/process/execute"), 1, "one wait for its ready line")
    T.eq(requests(s, "GET /toolbox/{sid}/process/session/{session_id}/command/{cmd_id}/logs"), 0,
         "no polling of the logs")
    local before = requests(s, "POST /toolbox/{sid}/process/execute")
    i:execute("x = 1")
    T.eq(requests(s, "POST /toolbox/{sid}/process/execute") - before, 1)
    local out = i:execute("SUBMIT(a=llm_query('p'), b=x)")
    T.eq(out, {a = "r:p", b = 1})
    T.eq(requests(s, "POST /toolbox/{sid}/process/execute") - before, 3, "execute + one reply")
    -- a request too big for the command line goes as an uploaded file
    local big = string.rep("\0\xffz", 20000)
    local uploads = requests(s, "POST /toolbox/{sid}/files/bulk-upload")
    out = i:execute("SUBMIT(n=len(big), same=big)", {big = big})
    T.eq(out.n, #big, "each invalid byte is one character")
    T.eq(out.same, big)
    T.eq(requests(s, "POST /toolbox/{sid}/files/bulk-upload") - uploads, 1)
  end)

tests["daytona: sandboxes carry our labels and only the user's env; no key inside"] =
  on_standin(function(s)
    local i = interp{env = {GREETING = "hi"}, labels = {job = "t"}}
    local out = i:execute([[
import os
hits = []
for root in ("/home/daytona", "/tmp"):
    for d, _, files in os.walk(root):
        for f in files:
            try:
                if key.encode() in open(os.path.join(d, f), "rb").read():
                    hits.append(os.path.join(d, f))
            except OSError:
                pass
SUBMIT(env=dict(os.environ), hits=hits)
]], {key = "5ecret"})
    T.eq(out.env.GREETING, "hi")
    for k, v in pairs(out.env) do
      T.truthy(not k:find("DAYTONA") and not v:find("5ecret", 1, true), "env " .. k)
    end
    T.eq(out.hits, json.array{}, "no file in the sandbox holds the key")
    local sb = assert(s.client:get_sandbox(i.sandbox.id))
    T.eq(sb.labels.rlm, "1")
    T.eq(sb.labels.job, "t")
    T.eq(sb.labels["rlm-owner"], backend.owner())
    T.contains(sb.labels["rlm-owner"], ":" .. sys.getpid())
    T.eq(sb.env, {GREETING = "hi"})
    T.eq(sb.autoDeleteInterval, 0, "a lost sandbox is deleted once it stops")
    T.truthy(sb.autoStopInterval >= 15, "auto-stop is past the interpreter's lifetime")
  end)

tests["daytona: a killed driver is a clear error and the interpreter recovers"] =
  on_standin(function(s)
    local i = interp{}
    i:execute("x = 1")
    local out, run = i:execute("import os\nos.kill(os.getpid(), 9)")
    T.eq(out, nil)
    T.truthy(run.state_lost, "state_lost")
    T.contains(run.error, "SandboxError")
    out, run = i:execute("SUBMIT(y=2, had_x='x' in globals())")
    T.eq(out, {y = 2, had_x = false})
    T.eq(run.state_lost, false)
    -- the driver's session ended from outside
    i:execute("x = 1")
    assert(s.client:toolbox(i.sandbox.id)):delete_session(i.sandbox.session)
    out, run = i:execute("SUBMIT(z=3)")
    T.eq(out, nil)
    T.contains(run.error, "SandboxError")
    T.eq(i:execute("SUBMIT(z=3)"), {z = 3})
  end)

tests["daytona: writes outside the workspace and the volume leave the host unchanged"] =
  on_standin(function()
    local home = assert(sys.getenv("HOME"))
    local marker = "rlm-escape-" .. sys.getpid()
    local targets = {"/etc/" .. marker, "/usr/" .. marker, home .. "/" .. marker, "/work/" .. marker}
    local out, run = interp{}:execute([[
import os
res = {}
for p in targets:
    try:
        with open(p, "w") as f:
            f.write("x")
        res[p] = "written"
    except OSError as e:
        res[p] = type(e).__name__
SUBMIT(res=res, home=os.environ["HOME"])
]], {targets = targets})
    T.eq(run.error, nil)
    for _, p in ipairs(targets) do T.eq(sys.stat(p), nil, "host path " .. p) end
    T.truthy(out.res["/etc/" .. marker] ~= "written", "/etc is read-only")
    T.eq(out.home, "/home/daytona")
  end)

tests["daytona: volume round trip across two rlm processes"] = on_standin(function(s)
  local env = host_env(s)
  local w = T.run_rlm({"exec", "--backend", "daytona", "--volume", "round-trip", [[
import json, os
os.makedirs("/home/daytona/memory/artifacts", exist_ok=True)
with open("/home/daytona/memory/artifacts/results.json", "w") as f:
    json.dump({"answer": 42, "items": []}, f)
SUBMIT(written=True)
]]}, {env = env})
  T.eq(w.code, 0, "writer: " .. w.stderr)
  T.eq(w.stdout, '{"written":true}\n')
  local vols = stats(s).volumes
  T.eq(#vols, 1)
  T.eq(vols[1].name, "round-trip")
  local r = T.run_rlm({"exec", "--backend", "daytona", "--volume", "round-trip", [[
import json
with open("/home/daytona/memory/artifacts/results.json") as f:
    SUBMIT(**json.load(f))
]]}, {env = env})
  T.eq(r.code, 0, "reader: " .. r.stderr)
  T.eq(json.decode(r.stdout), {answer = 42, items = json.array{}})
  local t = T.run_rlm({"exec", "--backend", "daytona",
                       "import os\nSUBMIT(n=len(os.listdir('/home/daytona/memory')))"}, {env = env})
  T.eq(t.stdout, '{"n":0}\n', "without --volume the memory folder is the sandbox's own")
  T.eq(#stats(s).sandboxes, 0, "each rlm exec deleted its sandbox")
end)

tests["daytona: upload, download and files"] = on_standin(function()
  local i = interp{}
  local blob = "bin\0\xff\n" .. string.rep("z", 100000)
  assert(i:upload("/home/daytona/workspace/in/data.bin", blob))
  assert(i:upload("rel.txt", "relative"))
  assert(i:upload("/home/daytona/memory/m.txt", "mem"))
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
  local mem = assert(i:files("/home/daytona/memory"))
  T.eq(mem[1].path, "/home/daytona/memory/m.txt")
  T.eq(mem[1].size, 3)
  none, err = i:files("/home/daytona/workspace/rel.txt")
  T.contains(err, "not a directory")
  T.contains(select(2, i:upload("/etc/passwd", "x")), "outside")
  T.contains(select(2, i:upload("../escape.txt", "x")), "'..'")
  local sh = assert(i:shell("echo $PWD; ls"))
  T.eq(sh.exit, 0)
  T.contains(sh.output, "/home/daytona/workspace\n")
  T.contains(sh.output, "made.txt")
end)

tests["daytona: missing credentials are a clear error before anything is created"] =
  on_standin(function(s)
    sys.setenv("DAYTONA_API_KEY", nil)
    local live = #registry.list()
    T.raises(function() rlm.interpreter{backend = "daytona"} end, "no Daytona credentials")
    T.eq(#registry.list(), live, "nothing registered")
    T.eq(stats(s).total, 0, "not one request")
    local r = T.run_rlm({"exec", "--backend", "daytona", "SUBMIT(x=1)"},
                        {env = host_env(s, {DAYTONA_API_KEY = ""})})
    T.eq(r.code, 1)
    T.contains(r.stderr, "DAYTONA_API_KEY")
    r = T.run_rlm({"exec", "--backend", "daytona", "SUBMIT(x=1)"},
                  {env = host_env(s, {DAYTONA_API_KEY = "wrong-key"})})
    T.eq(r.code, 1)
    T.contains(r.stderr, "rejected the credentials")
    T.truthy(not r.stderr:find(KEY, 1, true), "the key is never printed")
  end)

tests["daytona: a failed start leaves nothing behind"] = on_standin(function(s)
  local live = #registry.list()
  local dir = T.tmpdir()
  local i = interp{context_paths = {dir .. "/missing"}}
  T.raises(function() i:start() end, "does not exist")
  T.eq(requests(s, "POST /api/sandbox"), 0, "a missing context path is found before creating")
  i = interp{repo_url = dir .. "/nothing"}
  T.raises(function() i:start() end, "git clone")
  T.eq(requests(s, "POST /api/sandbox"), 1)
  T.eq(requests(s, "DELETE /api/sandbox/{id}"), 1, "the half-made sandbox was deleted")
  T.eq(i.sandbox, nil)
  T.eq(#registry.list(), live)
end)

tests["daytona: shutdown, <close> and GC delete the sandbox and unregister it"] =
  on_standin(function(s)
    local live = #registry.list()
    do
      local i <close> = rlm.interpreter{backend = "daytona"}
      i:execute("pass")
      T.eq(#stats(s).sandboxes, 1)
      T.eq(#registry.list(), live + 1)
    end
    T.eq(#registry.list(), live)
    T.eq(stats(s).sandboxes, {}, "<close> deleted it")
    local function make() local i = rlm.interpreter{backend = "daytona"}; i:start(); return i.sandbox.id end
    local id = make()
    T.eq(stats(s).sandboxes, {id})
    collectgarbage(); collectgarbage()
    -- the finaliser started the DELETE without waiting; the next turns of the loop finish it
    T.eq(backend.settle(5), 0)
    T.eq(stats(s).sandboxes, {}, "collected interpreters clean up")
    T.eq(#registry.list(), live)
    -- from a task, shutdown waits for the deletion too
    local i = rlm.interpreter{backend = "daytona"}
    require("rlm.async").spawn(function() i:start(); i:shutdown() end):join(10)
    T.eq(stats(s).sandboxes, {})
    i:shutdown()
    T.raises(function() i:execute("pass") end, "shut down")
  end)

for signal, status in pairs{INT = 130, TERM = 143} do
tests["daytona: SIG" .. signal .. " in the middle of an execute leaves no sandbox behind"] =
  on_standin(function(s)
    local dir = T.tmpdir()
    local script = dir .. "/sleepy.lua"
    assert(sys.write_file(script, [[
local i = require("rlm").interpreter{backend = "daytona"}
i:start()
print(i.sandbox.id)
io.stdout:flush()
i:execute("import time\ntime.sleep(30)")
]]))
    local proc = assert(sys.spawn{argv = {T.rlm, "run", script}, env = host_env(s),
                                  stdin = "null", stderr = "pipe"})
    T.defer(function() proc:kill("KILL"); proc:close() end)
    local id = assert(sys.read_line(proc, 60))
    T.eq(stats(s).sandboxes, {id}, "the sandbox exists while the code runs")
    local deadline = sys.now() + 5
    while requests(s, "POST /toolbox/{sid}/process/execute") == 0 and sys.now() < deadline do
      sys.sleep(0.02)
    end
    sys.sleep(0.3)
    proc:kill(signal)
    T.eq({sys.wait(proc, 10)}, {"exit", status})
    T.contains(proc:read("stderr"), "interrupted (SIG" .. signal .. ")")
    T.eq(stats(s).sandboxes, {}, "no sandbox left")
    T.eq(requests(s, "DELETE /api/sandbox/{id}"), 1)
  end)
end

tests["daytona: a script that never shuts its interpreter down leaves nothing"] =
  on_standin(function(s)
    local r = T.run_rlm({"-e", [[
local i = require("rlm").interpreter{backend = "daytona"}
assert(i:execute("SUBMIT(x=1)").x == 1)
]]}, {env = host_env(s)})
    T.eq(r.code, 0, r.stderr)
    T.eq(stats(s).sandboxes, {})
  end)

-- ---------- rlm sandboxes ----------

tests["rlm sandboxes lists ours; --prune deletes leftovers of dead owners; --all every one of ours"] =
  on_standin(function(s)
    local c = s.client
    local host = backend.hostname()
    local dead = assert(sys.spawn{argv = {"true"}})
    local dead_pid = dead:pid()
    sys.wait(dead)
    dead:close()
    local function make(labels) return assert(c:create_sandbox(labels and {labels = labels} or {})).id end
    local leftover = make{rlm = "1", ["rlm-owner"] = ("u@%s:%d"):format(host, dead_pid)}
    local alive = make{rlm = "1", ["rlm-owner"] = ("u@%s:%d"):format(host, sys.getpid())}
    local remote = make{rlm = "1", ["rlm-owner"] = "u@elsewhere.example:1"}
    local foreign = make{team = "not-rlm"}
    local env = host_env(s)
    local r = T.run_rlm({"sandboxes"}, {env = env})
    T.eq(r.code, 0, r.stderr)
    for _, id in ipairs{leftover, alive, remote} do T.contains(r.stdout, id) end
    T.truthy(not r.stdout:find(foreign, 1, true), "only sandboxes labelled rlm=1")
    T.contains(r.stdout, "3 sandboxes labelled rlm=1")
    T.contains(r.stdout, "gone")
    T.contains(r.stdout, "alive")
    T.contains(r.stdout, "elsewhere")
    r = T.run_rlm({"sandboxes", "--prune"}, {env = env})
    T.eq(r.code, 0, r.stderr)
    T.contains(r.stdout, "deleted " .. leftover)
    local live = stats(s).sandboxes
    table.sort(live)
    local want = {alive, remote, foreign}
    table.sort(want)
    T.eq(live, want, "only the dead owner's sandbox went")
    -- one already being destroyed is shown as such and not deleted again
    control(s, "POST", "behaviour", {destroy_seconds = 5})
    assert(c:delete_sandbox(remote))
    local deletes = requests(s, "DELETE /api/sandbox/{id}")
    r = T.run_rlm({"sandboxes", "--prune", "--all"}, {env = env})
    T.eq(r.code, 0, r.stderr)
    T.contains(r.stdout, "being deleted")
    T.eq(requests(s, "DELETE /api/sandbox/{id}") - deletes, 1, "only the live one is deleted")
    T.eq(stats(s).sandboxes, {foreign}, "every one of ours, never another's")
    assert(c:delete_sandbox(foreign))
    T.eq(T.run_rlm({"sandboxes", "--all"}, {env = env}).code, 2)
  end)

-- ---------- rlm daytona-smoke ----------

tests["rlm daytona-smoke passes against the stand-in, with a repository"] = on_standin(function(s)
  local repo = T.tmpdir() .. "/repo"
  local genv = host_env(s, {GIT_AUTHOR_NAME = "t", GIT_AUTHOR_EMAIL = "t@example.com",
                            GIT_COMMITTER_NAME = "t", GIT_COMMITTER_EMAIL = "t@example.com"})
  assert(sys.mkdir_p(repo))
  assert(sys.write_file(repo .. "/README.md", "hello"))
  for _, argv in ipairs{{"init", "--quiet"}, {"add", "README.md"}, {"commit", "--quiet", "-m", "one"}} do
    local g = assert(sys.run({"git", "-C", repo, table.unpack(argv)}, {env = genv}))
    assert(g.code == 0, g.stderr)
  end
  -- Daytona as it behaves: a sandbox that is `creating` a while, a throttled create, a
  -- connection reset between a toolbox request and its answer.
  control(s, "POST", "behaviour", {create_seconds = 3})
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", status = 429,
                                 throttler = "sandbox-create", retry_after = 1})
  control(s, "POST", "faults", {path = "/toolbox/", suffix = "/process/execute", reset = true,
                                 after = true, count = 2, body_contains = "--request-id"})
  local r = T.run_rlm({"daytona-smoke", "--repo", repo}, {env = host_env(s)})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  for _, step in ipairs{"credentials", "api version", "volume", "sandbox", "daemon", "repo",
                        "execute", "volume write", "volume read", "stop deletes", "delete"} do
    T.truthy(r.stdout:find("\n  " .. step .. " +%d+ ms"), "step " .. step .. " in\n" .. r.stdout)
  end
  T.contains(r.stdout, "README.md")
  T.contains(r.stdout, "daytona-smoke: PASS (11 steps")
  T.truthy(not r.stdout:find(KEY, 1, true) and not r.stderr:find(KEY, 1, true), "no key printed")
  T.eq(stats(s).sandboxes, {})
  local bad = T.run_rlm({"daytona-smoke"}, {env = host_env(s, {DAYTONA_API_KEY = "wrong"})})
  T.eq(bad.code, 1)
  T.contains(bad.stdout, "daytona-smoke: FAIL at credentials: ")
  T.contains(bad.stdout, "rejected the credentials")
  -- a failure after the sandbox exists still deletes it
  control(s, "POST", "reset")
  control(s, "POST", "behaviour", {create_seconds = 0})
  local fault = assert(http.request{url = s.url .. "/_control/faults", method = "POST",
    body = json.encode{method = "POST", path = "/toolbox/", status = 400, count = 1000}})
  T.eq(fault.status // 100, 2)
  local broken = T.run_rlm({"daytona-smoke"}, {env = host_env(s)})
  T.eq(broken.code, 1)
  T.contains(broken.stdout, "FAIL at sandbox")
  T.eq(stats(s).sandboxes, {})
end)

tests["daytona: the driver starts when the daemon answers its logs in plain text"] = function()
  local s = standin()
  control(s, "POST", "behaviour", {plain_logs = true})
  local i <close> = require("rlm").interpreter{backend = "daytona", start_timeout = 10}
  local out, run = i:execute("SUBMIT(answer=6*7)")
  T.eq(out, {answer = 42}, tostring(run.error))
end

tests["daytona: a sandbox interrupted while it starts is deleted once the API lets it go"] = function()
  local s = standin()
  -- The API answers DELETE with 409 while the sandbox's state change is pending.
  control(s, "POST", "behaviour", {settle_seconds = 1.5})
  local i = rlm.interpreter{backend = "daytona", start_timeout = 0.3}
  local t0 = sys.now()
  T.raises(function() i:start() end, "")
  T.eq(stats(s).sandboxes, {}, "no sandbox left after the failed start")
  T.truthy(requests(s, "DELETE /api/sandbox/{id}") >= 2, "the delete was refused, then retried")
  T.truthy(sys.now() - t0 >= 1.2, "it waited for the state change to end")
  -- The client's own delete waits the same way.
  local sb = assert(s.client:create_sandbox{wait = false})
  assert(s.client:delete_sandbox(sb.id))
  T.eq(stats(s).sandboxes, {})
end

tests["daytona: os.exit and SIGHUP leave no sandbox behind"] = function()
  local s = standin()
  for _, way in ipairs{"os.exit(3)", "SIGHUP", "SIGQUIT"} do
    local tail = way == "os.exit(3)" and way or 'i:execute("import time\\ntime.sleep(100)")'
    local created = requests(s, "POST /api/sandbox")
    local proc = assert(sys.spawn{argv = {T.rlm, "-e", [[
local i = require("rlm").interpreter{backend = "daytona"}
i:start()
print("started")
io.stdout:flush()
]] .. tail}, env = host_env(s), stdin = "null", stderr = "pipe"})
    T.defer(function() proc:close() end)
    T.eq(sys.read_line(proc, 30), "started", way)
    if way ~= "os.exit(3)" then   -- (os.exit may already have run)
      T.eq(#stats(s).sandboxes, 1, way .. ": the sandbox exists")
      sys.sleep(0.3)
      proc:kill(way == "SIGHUP" and 1 or 3)
    end
    local how, code = sys.wait(proc, 30)
    T.eq(how, "exit", way)
    T.eq(code, way == "os.exit(3)" and 3 or way == "SIGHUP" and 129 or 131, way)
    T.eq(requests(s, "POST /api/sandbox"), created + 1, way .. ": one sandbox was made")
    T.eq(stats(s).sandboxes, {}, way .. ": nothing left on Daytona")
  end
end

tests["daytona: a sandbox stopped from outside is deleted, and the next execute says so"] =
  on_standin(function(s)
    local i = interp{}
    i:execute("x = 1")
    local id = i.sandbox.id
    -- ephemeral: the stop is a delete (sandbox.service.ts, stop)
    assert(s.client:stop_sandbox(id))
    T.eq(stats(s).sandboxes, {}, "stopping deleted it")
    local err = T.raises(function() i:execute("SUBMIT(answer=1)") end, "is gone")
    T.contains(err, "ephemeral")
    T.contains(err, id)
    T.eq(requests(s, "POST /api/sandbox/{id}/start"), 0, "no start of a deleted sandbox")
  end)

return tests
