--- Daytona's real lifecycle, as the stand-in (tests/standins/daytona) learned it from
-- daytonaio/daytona v0.190.0, and how rlm.daytona copes with it: ephemeral sandboxes that are
-- deleted when stopped, a preview token that changes at every start, a long `creating` state,
-- connections that break between request and answer, an organisation's CPU quota and the
-- throttler's Retry-After-{name} headers.
local T = require "support"
local daytona = require "rlm.daytona"
local async = require "rlm.async"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local KEY = "sk-test-5ecret-lifecycle"

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

local function api(s, method, path, body)
  return assert(http.request{url = s.url .. "/api" .. path, method = method,
                             headers = {authorization = "Bearer " .. KEY,
                                        ["content-type"] = "application/json"},
                             body = body and json.encode(body)})
end

tests["stand-in: stopping an ephemeral sandbox deletes it; it cannot start again"] = function()
  local s = standin()
  local c = s.client
  local sb = assert(c:create_sandbox{ephemeral = true})
  T.eq(sb.autoDeleteInterval, 0)
  local stopped = api(s, "POST", "/sandbox/" .. sb.id .. "/stop")
  T.eq(stopped.status, 200)
  T.eq(json.decode(stopped.body).desiredState, "destroyed", "the stop is a soft delete")
  local gone, err = c:get_sandbox(sb.id)
  T.eq(gone, nil)
  T.eq(err.status, 404)
  local again = api(s, "POST", "/sandbox/" .. sb.id .. "/start")
  T.eq(again.status, 404, "a deleted sandbox does not start")
  T.eq(control(s, "GET", "stats").sandboxes, {})
  -- one that is not ephemeral stops and starts
  local keep = assert(c:create_sandbox{})
  T.eq(assert(c:stop_sandbox(keep.id)).state, "stopped")
  T.eq(assert(c:start_sandbox(keep.id)).state, "started")
end

tests["stand-in: every start gives the sandbox a new preview token"] = function()
  local s = standin()
  local c = s.client
  local sb = assert(c:create_sandbox{})
  local function token()
    return assert(c:request{path = {"sandbox", sb.id, "ports", "8080", "preview-url"}}).token
  end
  local first = token()
  T.eq(token(), first, "the token holds while the sandbox runs")
  assert(c:stop_sandbox(sb.id))
  T.eq(token(), first, "stopping does not change it")
  assert(c:start_sandbox(sb.id))
  local second = token()
  T.truthy(second ~= first and #second >= 16, "a new token after the start")
end

tests["stand-in: a sandbox reads `creating` for --create-seconds; DELETE is 409 meanwhile"] =
function()
  local s = standin("--create-seconds", "2")
  local c = s.client
  local t0 = sys.now()
  local sb = assert(c:create_sandbox{wait = false})
  T.eq(sb.state, "creating")
  T.eq(assert(c:get_sandbox(sb.id)).state, "creating")
  T.eq(api(s, "DELETE", "/sandbox/" .. sb.id).status, 409)
  local _, err = assert(c:toolbox(sb)):execute{command = "true"}
  T.truthy(err, "no toolbox before the sandbox exists")
  T.eq(assert(c:wait_sandbox(sb.id, {"started"}, 30)).state, "started")
  T.truthy(sys.now() - t0 >= 1.9, "creating lasted the time asked")
  T.eq(api(s, "DELETE", "/sandbox/" .. sb.id).status, 200)
end

tests["stand-in: the CPU quota refuses a create past it with Daytona's 400"] = function()
  local s = standin("--cpu-quota", "3")
  local c = s.client
  local a = assert(c:create_sandbox{cpu = 2})
  local res = api(s, "POST", "/sandbox", {cpu = 2})
  T.eq(res.status, 400)
  T.contains(json.decode(res.body).message, "Total CPU limit exceeded. Maximum allowed: 3.")
  assert(c:create_sandbox{cpu = 1})
  assert(c:delete_sandbox(a.id))
  T.eq(api(s, "POST", "/sandbox", {cpu = 2}).status, 200, "a deleted sandbox frees its CPUs")
end

tests["stand-in: a throttled request carries Retry-After-{throttler}, no plain Retry-After"] =
function()
  local s = standin()
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", status = 429,
                                 throttler = "sandbox-create", retry_after = 7})
  local res = api(s, "POST", "/sandbox", {})
  T.eq(res.status, 429)
  T.eq(res.headers["retry-after-sandbox-create"], "7")
  T.eq(res.headers["x-ratelimit-remaining-sandbox-create"], "0")
  T.eq(res.headers["retry-after"], nil)
end

tests["stand-in: a reset after the request ran loses only the answer"] = function()
  local s = standin()
  local c = s.client
  local sb = assert(c:create_sandbox{})
  local tb = assert(c:toolbox(sb))
  control(s, "POST", "faults", {path = "/toolbox/" .. sb.id .. "/process/execute", reset = true,
                                 after = true})
  local res = http.request{url = s.url .. "/toolbox/" .. sb.id .. "/process/execute",
                           method = "POST", retries = 0, headers = {authorization = "Bearer " .. KEY,
                                                       ["content-type"] = "application/json"},
                           body = json.encode{command = "echo ran >> /tmp/count"}}
  T.eq(res, nil, "no answer came")
  T.eq(assert(tb:execute{command = "cat /tmp/count"}).result, "ran\n", "the command ran once")
end

-- ---------- the client ----------

tests["client: a POST whose connection broke after the request went out is not sent again"] =
function()
  local s = standin()
  local c = s.client
  local sb = assert(c:create_sandbox{})
  local tb = assert(c:toolbox(sb))
  control(s, "POST", "faults", {path = "/toolbox/" .. sb.id .. "/process/execute", reset = true,
                                 after = true})
  local res, err = tb:execute{command = "echo ran >> /tmp/count"}
  T.eq(res, nil, "the answer was lost")
  T.truthy(err and err.status == nil, "a transport error: " .. tostring(err))
  T.eq(assert(tb:execute{command = "cat /tmp/count"}).result, "ran\n", "the command ran once")
  -- a create: found by its label instead of made twice
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", reset = true, after = true})
  local before = #control(s, "GET", "stats").sandboxes
  local made = assert(c:create_sandbox{})
  T.eq(#control(s, "GET", "stats").sandboxes, before + 1, "one sandbox for one create")
  T.eq(count(s, "POST /api/sandbox"), 2, "the create was sent once more (the fault's) only")
  T.truthy(made.id, "the sandbox made despite the lost answer")
end

tests["client: Retry-After-{throttler} is waited for"] = function()
  local s = standin()
  local c = s.client
  control(s, "POST", "faults", {method = "POST", path = "/api/sandbox", status = 429,
                                 throttler = "sandbox-create", retry_after = 2})
  local t0 = sys.now()
  assert(c:create_sandbox{})
  local took = sys.now() - t0
  T.truthy(took >= 1.9 and took < 30, ("waited %.2f s for a Retry-After of 2 s"):format(took))
  T.eq(count(s, "POST /api/sandbox"), 2)
end

tests["client: a create at the organisation's CPU quota waits until the quota frees"] =
function()
  local s = standin("--cpu-quota", "1")
  local c = s.client
  local first = assert(c:create_sandbox{})
  local t0 = sys.now()
  local later = async.spawn(function() return c:create_sandbox{quota_wait = 60} end)
  async.sleep(1.5)
  assert(c:delete_sandbox(first.id))
  local sb, err = later:join()
  T.truthy(sb, "the second create got through: " .. tostring(err))
  T.truthy(sys.now() - t0 >= 1.4, "it waited for the quota")
  T.truthy(count(s, "POST /api/sandbox") >= 3, "it asked again")
  -- without a wait the refusal is final, and says so
  local _, final = c:create_sandbox{}
  T.eq(final.status, 400)
  T.contains(tostring(final), "Total CPU limit exceeded")
end

tests["client: a create to a dead API fails once its own retries are spent, saying how long"] =
function()
  local s = standin()
  s.proc:kill("KILL")
  sys.wait(s.proc, 2)
  local c = daytona.client{api_key = KEY, api_url = s.url .. "/api", deadline = 2,
                           env = function() end}
  local t0 = sys.now()
  local sb, err = c:create_sandbox{}
  local took = sys.now() - t0
  T.eq(sb, nil)
  T.eq(err.code, "CONNECTION_FAILED")
  local said = tonumber(tostring(err):match("attempts in ([%d.]+) s"))
  T.truthy(said, "the message says how long: " .. tostring(err))
  -- nothing was sent, so nothing was made: no search by label, no second round of retries
  T.truthy(took < said + 1, ("took %.1f s, the message says %.1f s"):format(took, said))
end

-- ---------- the interpreter on the daytona backend ----------

local rlm = require "rlm"
local backend = require "rlm.backend.daytona"

-- Points DAYTONA_* at s for this test; interpreters made with interp() are shut down and the
-- test fails if a sandbox is left.
local function on_standin(args, fn)
  return function()
    local s = standin(table.unpack(args))
    for k, v in pairs{DAYTONA_API_KEY = KEY, DAYTONA_API_URL = s.url .. "/api"} do
      local old = sys.getenv(k)
      sys.setenv(k, v)
      T.defer(function() sys.setenv(k, old) end)
    end
    local made = {}
    s.interp = function(opts)
      local o = {backend = "daytona"}
      for k, v in pairs(opts or {}) do o[k] = v end
      local i = rlm.interpreter(o)
      made[#made + 1] = i
      T.defer(function() i:shutdown() end)
      return i
    end
    fn(s)
    for _, i in ipairs(made) do i:shutdown() end
    T.eq(backend.settle(30), 0, "deletions still running")
    T.eq(control(s, "GET", "stats").sandboxes, {}, "sandboxes left in the stand-in")
  end
end

tests["backend: a connection reset after an execute went out never runs the block twice"] =
  on_standin({}, function(s)
    local i = s.interp{}
    i:execute("n = 0")
    local sid = i.sandbox.id
    for round = 1, 3 do
      control(s, "POST", "faults", {path = "/toolbox/" .. sid .. "/process/execute", reset = true,
                                     after = true})
      local out, run = i:execute("n += 1\nSUBMIT(n=n)")
      T.eq(out, {n = round}, "round " .. round .. ": " .. tostring(run.error))
      T.truthy(not run.state_lost, "the driver was kept")
    end
    T.eq(i:execute("SUBMIT(n=n)"), {n = 3})
  end)

tests["backend: a stalled answer past execute_timeout is not the code's timeout"] =
  on_standin({}, function(s)
    local i = s.interp{execute_timeout = 2}
    i:execute("n = 0")
    -- the block ends at once; its answer is held past the host's wait, then lost
    control(s, "POST", "faults", {path = "/toolbox/" .. i.sandbox.id .. "/process/execute",
                                   reset = true, after = true, delay_ms = 4500})
    local out, run = i:execute("n += 1\nSUBMIT(n=n)")
    T.eq(out, {n = 1}, tostring(run.error))
    T.truthy(not run.state_lost, "the session was kept")
    T.eq(i:execute("SUBMIT(n=n)"), {n = 1})
    -- a block that really runs past the limit is still the code's timeout
    local _, late = i:execute("import time\ntime.sleep(30)")
    T.contains(tostring(late.error), "TimeoutError")
  end)

tests["backend: a reset or a 502 on the driver's session start does not fail the start"] =
  on_standin({}, function(s)
    for _, f in ipairs{{suffix = "/process/session", reset = true, after = true},
                       {suffix = "/process/session", status = 502},
                       {suffix = "/exec", reset = true, after = true},
                       {suffix = "/exec", status = 502, after = true},
                       {suffix = "/process/execute", status = 502}} do
      local what = json.encode(f)
      f.method, f.path = "POST", "/toolbox/"
      control(s, "POST", "reset")
      control(s, "POST", "faults", f)
      local i = s.interp{}
      local out, run = i:execute("SUBMIT(answer=6*7)")
      T.eq(out, {answer = 42}, what .. ": " .. tostring(run.error))
      T.eq(count(s, "POST /toolbox/{sid}/process/session/{session_id}/exec"), 1,
           what .. ": one driver")
      i:shutdown()
    end
  end)

tests["backend: 20 interpreters at once under a 10-CPU quota all finish"] =
  on_standin({"--cpu-quota", "10"}, function(s)
    local tasks = {}
    for n = 1, 20 do
      tasks[n] = async.spawn(function()
        local i = s.interp{start_timeout = 300}
        local out, run = i:execute("SUBMIT(n=n)", {n = n})
        i:shutdown()
        return out and out.n or tostring(run.error)
      end)
    end
    for n, task in ipairs(tasks) do
      local ok, got = pcall(task.join, task, 600)
      T.eq(ok and got, n, "interpreter " .. n .. ": " .. tostring(got))
    end
    T.truthy(count(s, "POST /api/sandbox") > 20, "some creates met the quota and waited")
  end)

tests["backend: a start that fails while the sandbox is creating reports why, and deletes it"] =
  on_standin({"--create-seconds", "4"}, function(s)
    -- Daytona refuses to delete a sandbox still being created (409), for as long as that takes
    -- (minutes on a busy region): more than destroy() waits in place, here 1 s.
    local wait = backend.DELETE_WAIT
    backend.DELETE_WAIT = 1
    T.defer(function() backend.DELETE_WAIT = wait end)
    local i = s.interp{start_timeout = 1}
    local err = T.raises(function() i:start() end, "did not start")
    T.truthy(tostring(err):find("did not start", 1, true) < 60, "the cause comes first: " .. err)
    T.truthy(not tostring(err):find("cannot delete", 1, true), "not replaced by the cleanup")
    T.contains(err, "still being deleted")
    T.eq(#control(s, "GET", "stats").sandboxes, 1, "the delete goes on")
    T.eq(backend.settle(30), 0, "a later settle finishes it")
    T.eq(control(s, "GET", "stats").sandboxes, {})
  end)

tests["an interrupt while the sandbox is creating leaves no sandbox"] =
  on_standin({"--create-seconds", "3"}, function(s)
    for _, signal in ipairs{"INT", "TERM"} do
      local before = count(s, "POST /api/sandbox")
      local proc = assert(sys.spawn{argv = {T.rlm, "-e", [[
require("rlm").interpreter{backend = "daytona", start_timeout = 60}:start()]]},
        env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"),
               TMPDIR = sys.getenv("TMPDIR"), RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH"),
               DAYTONA_API_KEY = KEY, DAYTONA_API_URL = s.url .. "/api"},
        stdin = "null", stderr = "pipe"})
      T.defer(function() proc:close() end)
      local t0 = sys.now()
      while count(s, "POST /api/sandbox") == before and sys.now() - t0 < 30 do sys.sleep(0.05) end
      T.eq(#control(s, "GET", "stats").sandboxes, 1, signal .. ": the sandbox is being created")
      proc:kill(signal == "INT" and 2 or 15)
      local how = sys.wait(proc, 60)
      T.eq(how, "exit", signal)
      T.eq(control(s, "GET", "stats").sandboxes, {}, signal .. ": nothing left on Daytona")
      T.truthy(count(s, "DELETE /api/sandbox/{id}") >= 2, signal .. ": the delete waited out the 409s")
    end
  end)

tests["mcp: a session's sandbox stops (and so goes) after minutes idle, not a day"] =
  on_standin({}, function(s)
    local proc = assert(sys.spawn{argv = {T.rlm, "mcp", "--backend", "daytona"},
      env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
             RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH"), DAYTONA_API_KEY = KEY,
             DAYTONA_API_URL = s.url .. "/api"},
      stdin = "pipe", stderr = "pipe"})
    T.defer(function() proc:kill("KILL"); sys.wait(proc, 2); proc:close() end)
    assert(proc:write(json.encode{jsonrpc = "2.0", id = 1, method = "tools/call", params = {
      name = "sandbox_exec_stateful", arguments = {code = "print(6*7)"}}} .. "\n"))
    local reply = json.decode(assert(sys.read_line(proc, 60)))
    T.eq(reply.result.structuredContent.stdout, "42\n", json.encode(reply))
    local boxes = assert(s.client:list_sandboxes{labels = {rlm = "1"}})
    T.eq(#boxes, 1)
    local stop = boxes[1].autoStopInterval
    T.truthy(stop >= 10 and stop <= 30, "auto-stop after " .. stop .. " minutes idle")
    T.eq(boxes[1].autoDeleteInterval, 0, "and a stopped one is deleted")
    proc:kill("TERM")
    T.eq(sys.wait(proc, 60), "exit")
  end)

return tests
