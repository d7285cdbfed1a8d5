--- rlm.daytona against the Daytona stand-in (tests/standins/daytona) and, for the exact wire
-- headers, the echo stand-in.
local T = require "support"
local daytona = require "rlm.daytona"
local async = require "rlm.async"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local KEY = "sk-test-5ecret-do-not-print"

local function standin(...)
  local s = T.daytona_standin(KEY, ...)
  s.client = daytona.client{api_key = KEY, api_url = s.url .. "/api", env = function() end}
  return s
end

local function control(s, method, path, body)
  local res = assert(http.request{url = s.url .. "/_control/" .. path, method = method,
                                  body = body and json.encode(body)})
  return json.decode(res.body)
end

local function count(s, key)
  return control(s, "GET", "stats").requests[key] or 0
end

local function all_bytes()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end

tests["sandboxes: create with env, labels and a volume; get; stop, start; delete"] = function()
  local s = standin()
  local c = s.client
  local vol = assert(c:volume("data", {create = true, wait = true}))
  T.eq(vol.state, "ready")
  local sb = assert(c:create_sandbox{env = {FOO = "bar"}, labels = {team = "c"},
                                     auto_stop_interval = 30, auto_delete_interval = 60,
                                     volumes = {{volume = vol, mount_path = "/home/daytona/vol"}},
                                     cpu = 2, memory = 4})
  T.eq(sb.state, "started")
  T.eq(sb.env.FOO, "bar")
  -- rlm-create: the label by which a create whose answer was lost finds what it made
  T.truthy(sb.labels["rlm-create"]:match("^%x+$"), "the create label")
  sb.labels["rlm-create"] = nil
  T.eq(sb.labels, {team = "c", ["code-toolbox-language"] = "python"})
  T.eq(sb.autoStopInterval, 30)
  T.eq(sb.autoDeleteInterval, 60)
  T.eq(sb.cpu, 2)
  T.eq(sb.volumes[1].volumeId, vol.id)
  T.eq(sb.volumes[1].mountPath, "/home/daytona/vol")
  T.eq(assert(c:get_sandbox(sb.id)).id, sb.id)

  T.eq(assert(c:stop_sandbox(sb.id)).state, "stopped")
  T.eq(count(s, "POST /api/sandbox/{id}/stop"), 1)
  T.eq(assert(c:start_sandbox(sb)).state, "started")
  T.eq(assert(c:delete_sandbox(sb.id, {wait = true})).state, "destroyed")
  local gone, err = c:get_sandbox(sb.id)
  T.eq(gone, nil)
  T.eq(err.status, 404)
  T.eq(err.code, "NOT_FOUND")
  T.contains(tostring(err), "GET " .. s.url .. "/api/sandbox/" .. sb.id)
  T.truthy(daytona.is_error(err), "errors carry the error metatable")
end

tests["sandboxes: the labels filter and cursor paging"] = function()
  local c = standin().client
  local mine = {}
  for i = 1, 5 do
    local sb = assert(c:create_sandbox{labels = {team = "p", n = tostring(i)}, wait = false})
    mine[sb.id] = true
  end
  assert(c:create_sandbox{labels = {team = "other"}, wait = false})
  local listed = assert(c:list_sandboxes{labels = {team = "p"}, limit = 2})
  T.eq(#listed, 5)
  for _, item in ipairs(listed) do T.truthy(mine[item.id], "only the labelled sandboxes") end
  T.eq(#assert(c:list_sandboxes{}), 6)
  T.eq(#assert(c:list_sandboxes{labels = {team = "p", n = "3"}}), 1)
end

tests["sandboxes: waiting for a state ends at the deadline"] = function()
  local c = standin().client
  local sb = assert(c:create_sandbox{})
  local t0 = sys.now()
  local res, err = c:wait_sandbox(sb.id, {"archived"}, 0.5)
  T.eq(res, nil)
  T.eq(err.code, "TIMEOUT")
  T.contains(err.message, "did not reach archived within 0.5 s (last state: started)")
  local took = sys.now() - t0
  T.truthy(took >= 0.45 and took < 10, ("the wait stops at its deadline, not %.2f s"):format(took))
end

tests["volumes: get, create when missing, list, delete"] = function()
  local c = standin().client
  local none, err = c:volume("v1")
  T.eq(none, nil)
  T.eq(err.status, 404)
  local vol = assert(c:volume("v1", {create = true, wait = true}))
  T.eq(vol.name, "v1")
  T.eq(vol.state, "ready")
  T.eq(assert(c:volume("v1", {create = true})).id, vol.id)
  local list = assert(c:list_volumes())
  T.eq(#list, 1)
  T.eq(list[1].id, vol.id)
  assert(c:delete_volume(vol.id))
  T.eq(#assert(c:list_volumes()), 0)
end

tests["toolbox: execute and code-run"] = function()
  local c = standin().client
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  local r = assert(tb:execute{command = "echo $FOO; pwd; exit 3", cwd = "/tmp",
                              envs = {FOO = "baz"}, timeout = 10})
  T.eq(r, {exitCode = 3, result = "baz\n/tmp\n"})
  r = assert(tb:code_run{code = "import sys, os; print(sys.argv[1:], os.environ['X'])",
                         argv = {"a", "b"}, envs = {X = "1"}, timeout = 10})
  T.eq(r.exitCode, 0)
  T.eq(r.result, "['a', 'b'] 1\n")
end

tests["toolbox: a sandbox id alone finds the toolbox through the API"] = function()
  local s = standin()
  local sb = assert(s.client:create_sandbox{})
  local tb = assert(s.client:toolbox(sb.id))
  T.eq(tb.base, s.url .. "/toolbox")
  T.eq(assert(tb:execute{command = "echo ok"}).result, "ok\n")
end

tests["toolbox: sessions, async commands, input and logs"] = function()
  local c = standin().client
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  assert(tb:create_session("s1"))
  local r = assert(tb:session_exec{session = "s1", command = "cd /tmp; export A=7; echo sync"})
  T.eq(r.exitCode, 0)
  T.eq(r.stdout, "sync\n")
  r = assert(tb:session_exec{session = "s1", command = "echo $A $(pwd)"})
  T.eq(r.output, "7 /tmp\n", "the session keeps its shell state")

  local started = assert(tb:session_exec{session = "s1", async = true,
                                         command = "read line; echo got $line; echo oops >&2"})
  T.truthy(started.cmdId, "an async exec answers with the command id")
  T.eq(started.exitCode, nil)
  T.eq(assert(tb:command("s1", started.cmdId)).exitCode, nil)
  assert(tb:send_input("s1", started.cmdId, "hello\n"))
  local status
  for _ = 1, 100 do
    status = assert(tb:command("s1", started.cmdId))
    if status.exitCode then break end
    async.sleep(0.02)
  end
  T.eq(status.exitCode, 0)
  local logs = assert(tb:logs("s1", started.cmdId))
  T.eq(logs.stdout, "got hello\n")
  T.eq(logs.stderr, "oops\n")
  assert(tb:delete_session("s1"))
  local _, err = tb:session_exec{session = "s1", command = "true"}
  T.eq(err.status, 404)
end

-- What rlm's children beside their parent rely on: a driver is a session command that runs for
-- as long as the interpreter, so each driver needs a session of its own.
tests["toolbox: a session runs its commands in turn; sessions run side by side"] = function()
  local c = standin().client
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  local function exists(path)
    return assert(tb:execute{command = "test -e " .. path}).exitCode == 0
  end
  assert(tb:create_session("a"))
  assert(tb:create_session("b"))
  assert(tb:session_exec{session = "a", async = true, command = "touch /tmp/held; sleep 60"})
  local deadline = sys.now() + 30
  while not exists("/tmp/held") and sys.now() < deadline do async.sleep(0.05) end
  T.truthy(exists("/tmp/held"), "the first command never started")
  local queued = assert(tb:session_exec{session = "a", async = true, command = "touch /tmp/next"})
  local beside = assert(tb:session_exec{session = "b", command = "echo beside"})
  T.eq(beside.stdout, "beside\n", "another session runs while the first is busy")
  T.eq(assert(tb:command("a", queued.cmdId)).exitCode, nil)
  T.eq(exists("/tmp/next"), false, "a busy session's next command waits its turn")
  -- Deleting the session ends the running command; the queued one never runs.
  local t0 = sys.now()
  assert(tb:delete_session("a"))
  T.truthy(sys.now() - t0 < 30, "the delete waited past the grace period")
  async.sleep(0.3)
  T.eq(exists("/tmp/next"), false)
end

tests["toolbox: command logs are JSON for our SDK version and plain text without it"] = function()
  local s = standin()
  local c = s.client
  local id = assert(c:create_sandbox{}).id
  local tb = assert(c:toolbox(id))
  assert(tb:create_session("s1"))
  local started = assert(tb:session_exec{session = "s1", async = true, command = "echo out; echo err >&2"})
  for _ = 1, 100 do
    if assert(tb:command("s1", started.cmdId)).exitCode then break end
    async.sleep(0.02)
  end
  -- What the daemon answers a client that does not say its SDK version, or an old one.
  local url = ("%s/toolbox/%s/process/session/s1/command/%s/logs"):format(s.url, id, started.cmdId)
  for _, version in ipairs{false, "0.166.0", "0.218.0"} do
    local headers = {"Authorization: Bearer " .. KEY}
    if version then headers[#headers + 1] = "X-Daytona-SDK-Version: " .. version end
    local res = assert(http.request{url = url, headers = headers})
    local json_answer = version == "0.218.0"
    T.contains(res.headers["content-type"], json_answer and "application/json" or "text/plain",
               tostring(version))
  end
  -- rlm says its version, so it gets stdout and stderr apart...
  local logs = assert(tb:logs("s1", started.cmdId))
  T.eq({logs.stdout, logs.stderr}, {"out\n", "err\n"})
  -- ...and still reads a plain-text answer (a daemon that ignores the version) as text.
  control(s, "POST", "faults", {method = "GET", suffix = "/logs", text = "out\nerr\n"})
  T.eq(assert(tb:logs("s1", started.cmdId)), "out\nerr\n")
end

tests["toolbox: binary upload and download in multipart, a missing file, file operations"] = function()
  local c = standin().client
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  local bytes = all_bytes()
  assert(tb:upload{{path = "/home/daytona/bin/all.bin", data = bytes},
                   {path = "/tmp/quote\"d name.txt", data = "q"},
                   {path = "/home/daytona/empty", data = ""}})
  local got = assert(tb:download{"/home/daytona/bin/all.bin", "/tmp/quote\"d name.txt",
                                 "/home/daytona/empty", "/home/daytona/missing"})
  T.eq(got["/home/daytona/bin/all.bin"], bytes)
  T.eq(got["/tmp/quote\"d name.txt"], "q")
  T.eq(got["/home/daytona/empty"], "")
  local missing = got["/home/daytona/missing"]
  T.truthy(daytona.is_error(missing), "a missing file is an error object")
  T.eq(missing.code, "FILE_NOT_FOUND")
  T.eq(missing.status, 404)
  T.contains(tostring(missing), "/home/daytona/missing")
  -- the command sees what was uploaded, byte for byte
  T.eq(assert(tb:execute{command = "wc -c < bin/all.bin"}).result, "256\n")
  -- A file that cannot be written is named in the daemon's {"errors": [...]} answer.
  local _, uerr = tb:upload{{path = "/home/daytona/bin", data = "not a directory"},
                            {path = "/home/daytona/ok.txt", data = "fine"}}
  T.eq(uerr.status, 400)
  T.contains(uerr.message, "/home/daytona/bin: create")

  local info = assert(tb:file_info("/home/daytona/bin/all.bin"))
  T.eq(info.size, 256)
  T.eq(info.isDir, false)
  assert(tb:mkdir("/home/daytona/d/e", "700"))
  T.eq(assert(tb:file_info("/home/daytona/d/e")).permissions, "0700")
  local names = {}
  for _, f in ipairs(assert(tb:list_files("/home/daytona"))) do names[#names + 1] = f.name end
  table.sort(names)
  T.eq(names, {"bin", "d", "empty", "ok.txt"})
  local _, err = tb:delete_file("/home/daytona/d")
  T.eq(err.status, 400)
  assert(tb:delete_file("/home/daytona/d", {recursive = true}))
  _, err = tb:file_info("/home/daytona/d")
  T.eq(err.code, "FILE_NOT_FOUND")
end

tests["toolbox: git clone of a branch and a commit from a git host; never a path of this machine"] = function()
  local hosted = T.tmpdir()
  local c = standin("--git-root", hosted).client
  local repo = hosted .. "/repo"
  local url = "https://git.rlm.test/team/repo.git"
  local script = table.concat({
    "set -e", "git init -q -b main " .. repo, "cd " .. repo,
    "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m one",
    "git rev-parse HEAD > first",
    "echo two > f && git add f && git -c user.name=t -c user.email=t@t commit -q -m two",
    "cat first"}, "\n")
  local res = assert(sys.run({"/bin/sh", "-c", script}))
  T.eq(res.code, 0, "git setup: " .. res.stderr)
  local first = res.stdout:gsub("%s+$", "")
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  assert(tb:git_clone{url = url, path = "/home/daytona/r", branch = "main"})
  T.eq(assert(tb:execute{command = "cat r/f"}).result, "two\n")
  T.eq(assert(tb:execute{command = "git -C r remote get-url origin"}).result, url .. "\n")
  assert(tb:git_clone{url = url, path = "/home/daytona/old", commit_id = first})
  T.eq(assert(tb:execute{command = "git -C old rev-parse HEAD"}).result, first .. "\n")
  -- The daemon's git runs in the sandbox: this machine's paths are not there.
  for _, host in ipairs{repo, "file://" .. repo} do
    local _, err = tb:git_clone{url = host, path = "/home/daytona/x"}
    T.truthy(err and err.status >= 400, host .. " must not be reachable from the sandbox")
  end
end

tests["401 fails after one request and says to check DAYTONA_API_KEY, without the key"] = function()
  local s = standin()
  local wrong = "sk-wrong-key-1234567"
  local c = daytona.client{api_key = wrong, api_url = s.url .. "/api"}
  local t0 = sys.now()
  local res, err = c:list_volumes()
  T.eq(res, nil)
  T.eq(err.status, 401)
  T.eq(err.retryable, false)
  T.contains(err.message, "check DAYTONA_API_KEY")
  T.contains(err.message, "401 Unauthorized")
  T.truthy(not err.message:find(wrong, 1, true), "the key is not in the message")
  T.truthy(not tostring(c):find(wrong, 1, true) and not tostring(c.core):find(wrong, 1, true),
           "nor in the client's printed form")
  for k, v in pairs(c) do
    T.truthy(v ~= wrong, "the client table does not hold the key (field " .. k .. ")")
  end
  T.eq(count(s, "GET /api/volumes"), 1)
  T.truthy(sys.now() - t0 < 5, "no retry delay")
  control(s, "POST", "faults", {path = "/api/volumes", status = 403})
  _, err = daytona.client{api_key = KEY, api_url = s.url .. "/api"}:list_volumes()
  T.eq(err.status, 403)
  T.contains(err.message, "check DAYTONA_API_KEY (and its permissions)")
  -- the JWT variant names its own variables
  local j = daytona.client{jwt_token = wrong, organization_id = "org", api_url = s.url .. "/api"}
  _, err = j:list_volumes()
  T.contains(err.message, "check DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID")
end

tests["two 503s and then success succeeds"] = function()
  local s = standin()
  control(s, "POST", "faults", {path = "/api/volumes", status = 503, count = 2})
  local t0 = sys.now()
  local list = assert(s.client:list_volumes())
  T.eq(#list, 0)
  T.eq(count(s, "GET /api/volumes"), 3)
  T.truthy(sys.now() - t0 < 10, "backoff stays short")
end

tests["a create answered 503 after it was made leaves one sandbox, found by its label"] = function()
  local s = standin()
  -- The gateway's 503 may come after the API made the sandbox: the stand-in makes it, then
  -- answers 503 (after=true), twice.
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", status = 503, count = 2,
                                after = true})
  local sb = assert(s.client:create_sandbox{})
  T.eq(count(s, "POST /api/sandbox"), 1, "the POST was not repeated blindly")
  T.eq(control(s, "GET", "stats").sandboxes, {sb.id}, "one sandbox")
  -- A 503 before anything was made: the client looks, finds nothing, and creates again.
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", status = 503, count = 1})
  local second = assert(s.client:create_sandbox{})
  T.eq(#control(s, "GET", "stats").sandboxes, 2)
  T.truthy(second.id ~= sb.id)
end

tests["a POST that is not idempotent is not repeated on 502/503/504"] = function()
  local s = standin()
  local sb = assert(s.client:create_sandbox{})
  local tb = assert(s.client:toolbox(sb))
  control(s, "POST", "faults", {path = "/toolbox/" .. sb.id .. "/process/execute", status = 502})
  local r, err = tb:execute{command = "echo once"}
  T.eq(r, nil)
  T.eq(err.status, 502)
  T.eq(count(s, "POST /toolbox/{sid}/process/execute"), 1)
end

tests["volumes: two creates of one name at once both get the one volume (400 for the loser)"] = function()
  local c = standin().client
  local a = async.spawn(function() return c:volume("shared", {create = true}) end)
  local b = async.spawn(function() return c:volume("shared", {create = true}) end)
  local va, vb = assert(a:join()), assert(b:join())
  T.eq(va.id, vb.id)
  local _, err = c:request{method = "POST", path = "/volumes", json = {name = "shared"}}
  T.eq(err.status, 400, "a duplicate name is a bad request, as in volume.service.ts")
end

tests["the states filter goes out as the key repeated, as the API reads an array"] = function()
  local s = standin()
  local c = s.client
  local a = assert(c:create_sandbox{})
  local b = assert(c:create_sandbox{})
  assert(c:stop_sandbox(b))
  local function ids(list)
    local out = {}
    for _, x in ipairs(list) do out[#out + 1] = x.id end
    table.sort(out)
    return out
  end
  local both = {a.id, b.id}
  table.sort(both)
  T.eq(ids(assert(c:list_sandboxes{states = {"started", "stopped"}})), both)
  T.eq(ids(assert(c:list_sandboxes{states = {"stopped"}})), {b.id})
  local _, err = c:list_sandboxes{states = "started,stopped"}
  T.eq(err.status, 400, "a comma-joined list is one unknown state to the API")
end

tests["a 429 with Retry-After: 1 waits about a second, then succeeds"] = function()
  local s = standin()
  local sb = assert(s.client:create_sandbox{})
  local tb = assert(s.client:toolbox(sb))
  control(s, "POST", "faults", {path = "/toolbox/" .. sb.id .. "/process/execute", status = 429,
                                retry_after = 1})
  local t0 = sys.now()
  -- a POST: 429 means the server did not run it, so even this is retried
  local r = assert(tb:execute{command = "echo after"})
  local waited = sys.now() - t0
  T.eq(r.result, "after\n")
  T.truthy(waited >= 0.95 and waited < 5, "waited " .. waited .. " s")
  T.eq(count(s, "POST /toolbox/{sid}/process/execute"), 2)
end

tests["5xx on a non-idempotent POST is not retried, 429 beyond the deadline is not waited"] = function()
  local s = standin()
  control(s, "POST", "faults", {path = "/api/sandbox", method = "POST", status = 500})
  local _, err = s.client:create_sandbox{}
  T.eq(err.status, 500)
  T.eq(err.attempts, 1)
  T.eq(count(s, "POST /api/sandbox"), 1)

  control(s, "POST", "faults", {path = "/api/volumes", status = 429, retry_after = 30})
  local t0 = sys.now()
  _, err = s.client:request{path = "/volumes", deadline = 20}
  T.eq(err.status, 429)
  T.eq(err.code, "TOO_MANY_REQUESTS")
  T.contains(err.message, "asked to wait 30 s")
  T.truthy(sys.now() - t0 < 10, "gave up at once, not at the deadline")
end

tests["a broken JSON body is a clear error"] = function()
  local s = standin()
  control(s, "POST", "faults", {path = "/api/volumes", status = 200, body = "broken"})
  local res, err = s.client:list_volumes()
  T.eq(res, nil)
  T.eq(err.code, "BAD_RESPONSE")
  T.eq(err.status, 200)
  T.contains(err.message, "not valid JSON")
  T.contains(err.message, "GET " .. s.url .. "/api/volumes")
  T.eq(#assert(s.client:list_volumes()), 0, "the next call works")
end

tests["a dead server is retried within the deadline, then fails clearly"] = function()
  local s = standin()
  s.proc:kill("KILL")
  sys.wait(s.proc, 2)
  local c = daytona.client{api_key = KEY, api_url = s.url .. "/api", deadline = 1.5}
  local t0 = sys.now()
  local res, err = c:list_volumes()
  local took = sys.now() - t0
  T.eq(res, nil)
  T.eq(err.code, "CONNECTION_FAILED")
  T.eq(err.status, nil)
  T.truthy(err.attempts >= 3, "retried (" .. err.attempts .. " attempts)")
  T.contains(err.message, "connect")
  T.contains(err.message, "attempts")
  -- it stops at the deadline (1.5 s) or sooner, once its attempts are spent: a generous bound
  -- for a loaded machine (the attempts above are the lower bound)
  T.truthy(took < 6, "within the deadline, took " .. took .. " s")
end

tests["calls from tasks run side by side"] = function()
  local c = standin().client
  local tb = assert(c:toolbox(assert(c:create_sandbox{})))
  -- each command marks its start, then waits (at most 30 s) until all three have started:
  -- only commands that run at the same time all see "abc"
  local function together(name)
    return ("touch /tmp/started-%s; i=0; while [ $i -lt 300 ]; do "
            .. "[ -e /tmp/started-a ] && [ -e /tmp/started-b ] && [ -e /tmp/started-c ] && break; "
            .. "sleep 0.1; i=$((i+1)); done; echo %s $(ls /tmp | grep -c started-)"):format(name, name)
  end
  local out = async.all{
    function() return assert(tb:execute{command = together("a"), timeout = 60}).result end,
    function() return assert(tb:execute{command = together("b"), timeout = 60}).result end,
    function() return assert(tb:execute{command = together("c"), timeout = 60}).result end,
  }
  T.eq(out, {"a 3\n", "b 3\n", "c 3\n"})
end

tests["configuration: environment, explicit overrides, headers on the wire"] = function()
  local echo = T.server{"tests/standins/echo"}
  local env = {DAYTONA_API_KEY = "env-key", DAYTONA_API_URL = echo.url .. "/",
               DAYTONA_TARGET = "eu"}
  local c = daytona.client{env = function(n) return env[n] end}
  T.eq(c.api_url, echo.url)
  T.eq(c.target, "eu")
  local e = assert(c:request{method = "POST", path = "/echo",
                             query = {path = "/a b&c", labels = {team = "x"}, force = false},
                             json = {n = 1}})
  T.eq(e.headers.authorization, "Bearer env-key")
  T.eq(e.headers["x-daytona-source"], "rlm")
  T.eq(e.headers["x-daytona-organization-id"], nil)
  T.eq(e.headers["content-type"], "application/json")
  T.eq(e.query, {path = "/a b&c", labels = '{"team":"x"}', force = "false"})
  T.eq(e.body, '{"n":1}')
  e = assert(c:request{method = "POST", path = "/echo"})
  T.eq(e.headers["content-length"], "0", "a bodiless POST says so, for strict proxies")
  T.eq(e.headers["content-type"], nil)

  local j = daytona.client{jwt_token = "jwt-1", env = function(n) return env[n] end,
                           organization_id = "org-9", api_url = echo.url, target = "us"}
  T.eq(j.target, "us")
  e = assert(j:request{path = {"echo"}})
  T.eq(e.headers.authorization, "Bearer jwt-1")
  T.eq(e.headers["x-daytona-organization-id"], "org-9")

  T.raises(function() daytona.client{env = function() end} end, "DAYTONA_API_KEY")
  T.raises(function() daytona.client{env = function() end, jwt_token = "t"} end,
           "DAYTONA_ORGANIZATION_ID")
  local d = daytona.client{api_key = "k", env = function() end}
  T.eq(d.api_url, "https://app.daytona.io/api")
end

tests["path segments are escaped; the key is scrubbed from messages wherever it comes from"] = function()
  local echo = T.server{"tests/standins/echo"}
  local c = daytona.client{api_key = KEY, api_url = echo.url, env = function() end}
  local res, err = c:request{path = {"x/y", "a b"}}
  T.eq(res, nil)
  -- the echo stand-in only answers /echo, so the escaped path shows in the 404's message
  T.contains(tostring(err), echo.url .. "/x%2Fy/a%20b")
  _, err = c:request{path = {"leak", KEY}}
  T.contains(err.message, "/leak/[redacted]")
  T.truthy(not err.message:find(KEY, 1, true), "the key is scrubbed")
end

tests["sandboxes: a stopped sandbox refuses the toolbox; a deleted one is destroying, then gone"] =
function()
  local s = standin()
  local c = s.client
  local sb = assert(c:create_sandbox{name = "keep-me"})
  local tb = assert(c:toolbox(sb))
  assert(c:stop_sandbox(sb.id))
  -- The runner's proxy finds no container IP for a stopped sandbox.
  local res, err = tb:execute{command = "true"}
  T.eq(res, nil)
  T.eq(err.status, 400)
  T.contains(tostring(err), "Is the Sandbox started?")
  assert(c:start_sandbox(sb.id))
  T.eq(assert(tb:execute{command = "echo up"}).result, "up\n")

  control(s, "POST", "behaviour", {destroy_seconds = 0.8})
  local t0 = sys.now()
  T.eq(assert(c:delete_sandbox(sb.id)).desiredState, "destroyed")
  local seen = assert(c:get_sandbox(sb.id))
  T.eq(seen.state, "destroying")
  T.truthy(seen.name:match("^DESTROYED_keep%-me_%d+$"), "the name is freed: " .. seen.name)
  -- the name can be taken again at once
  local again = assert(c:create_sandbox{name = "keep-me"})
  _, err = tb:execute{command = "true"}
  T.eq(err.status, 404)
  -- a second delete meets 409 until the destruction settles, then 404: both are success
  assert(c:delete_sandbox(sb.id))
  T.truthy(sys.now() - t0 >= 0.7, "the second delete waited for the first")
  T.truthy(count(s, "DELETE /api/sandbox/{id}") >= 3, "409 answers were retried")
  T.eq(select(2, c:get_sandbox(sb.id)).status, 404)
  assert(c:delete_sandbox(again.id, {wait = true}))
end

return tests
