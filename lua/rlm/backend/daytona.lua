--- The Daytona sandbox: the same driver as the local backend, reached over plain HTTP.
--
-- Inside, the code sees the same paths as on the local backend:
--   /home/daytona/workspace   the code's cwd; repo/ (toolbox git clone) and context/ (uploads)
--   /home/daytona/memory      the Daytona volume `volume_name` (created when missing and waited
--                             for until ready), else a plain folder that goes with the sandbox
-- The driver lives in /home/daytona/.rlm/ with its unix socket. An interpreter beside this one
-- (an rlm_query child on the same machine: same_machine) runs a driver of its own in the same
-- sandbox, in /home/daytona/children/cN, its working directory, with its socket under .rlm/.
--
-- Transport (no WebSocket in Debian's libcurl, and the sandbox cannot reach the host): the
-- driver runs once as a long-lived async session command (`driver.py --serve SOCKET`); every
-- request, reply or poll is one `process/execute` of the driver's one-shot client, which
-- forwards the line to the socket and prints the events it is given; several go at once, each
-- in a task of its own, so the calls of the code's threads are answered side by side (see "the
-- dialogue" below). Small requests ride in the command line as base64; larger ones are
-- uploaded to a file first. The first event (ready) is waited for inside the sandbox by one more
-- `process/execute` (`driver.py --wait-ready`), which watches the files the session command
-- writes the driver's output and exit status to.
--
-- Credentials come from the `daytona` option (rlm.daytona.client options) or DAYTONA_* in the
-- host's environment; they stay in the host (the C binding holds them). The sandbox gets only
-- the user's `env`. Sandboxes carry the labels rlm=1 and rlm-owner=user@host:pid, so
-- `rlm sandboxes --prune` can find the ones a dead process left behind.
--
-- Deleting is never left to chance, and never yields from a finaliser: destroy() starts the
-- DELETE at once (starting a transfer does not yield) and waits for it only where waiting is
-- safe — the main program, or a task that may yield. From a finaliser (or any place that
-- cannot yield) the transfer is kept in a list and finishes with the next turn of the event
-- loop; `settle()` waits for whatever is left, and the CLI calls it before rlm exits.
-- The interface this implements is written down at the top of lua/rlm/interpreter.lua.
local async = require "rlm.async"
local loop = require "rlm.core.loop"
local daytona = require "rlm.daytona"
local json = require "rlm.json"
local common = require "rlm.backend.common"
local sys = require "rlm.sys"

-- idle_timeout: seconds without a toolbox call after which Daytona stops the sandbox, which,
-- being ephemeral, deletes it (default: the interpreter's lifetime plus 5 minutes).
-- child_sandbox: "beside" (the default: an interpreter given `beside` runs in that one's
-- sandbox when it needs no other machine; see same_machine) or "own" (always a sandbox of its own).
local M = {name = "daytona", options = {daytona = true, snapshot = true, labels = true,
                                        idle_timeout = true, child_sandbox = true}}

-- Seconds destroy() waits in place for its DELETE; what is left is settle()'s to finish.
M.DELETE_WAIT = 30

local HOME, WORKSPACE, MEMORY = common.HOME, common.WORKSPACE, common.MEMORY
local basename = common.basename
local RLM_DIR = HOME .. "/.rlm"
local DRIVER = RLM_DIR .. "/driver.py"
-- Drivers beside the sandbox's own, each in a folder of its own: CHILDREN/c1, c2, ...
local CHILDREN = HOME .. "/children"
local PYTHON = "python3"
-- The driver's short-lived helpers (--client, --wait-ready) import nothing from site folders:
-- without site each starts a few milliseconds sooner, and one runs per request.
local HELPER_PYTHON = PYTHON .. " -S"

-- Requests up to this size travel base64-encoded in the command line (one round trip); bigger
-- ones are uploaded first. Well under Linux's 128 KiB limit for one argument.
local INLINE_REQUEST = 24 * 1024
-- Extra seconds an HTTP call waits past the wanted time, for the answer to travel back.
local GRACE = 0.5
-- Extra seconds a client's process/execute may take past its wait: the driver answers idle
-- when the wait is over, but only after the sandbox has started the client.
local MARGIN = 10
-- Seconds a reply's or a poll's client waits at most for an event before it hears idle.
local POLL_WAIT = 30
local DELETE_TIMEOUT = 30
-- A sandbox still being created or started refuses deletion (409) for as long as that lasts,
-- which can be minutes (apps/api/src/sandbox/services/sandbox.service.ts, destroy): its DELETE
-- keeps trying that long, in the background once destroy() stops waiting in place.
local DELETE_DEADLINE = 600

M.LABEL = "rlm"
M.OWNER_LABEL = "rlm-owner"

local Sandbox = {}
Sandbox.__index = Sandbox

-- ---------- small helpers ----------

local function sh_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- `sh -c '...'`: the daemon feeds a command to its shell's stdin (apps/daemon/pkg/toolbox/process/
-- execute.go); daemons before 2026-03 split it into argv with no shell. Quoting the script as
-- one `sh -c` argument means the same on both.
local function shell_command(script)
  return "sh -c " .. sh_quote(script)
end

-- Whether a toolbox call failed by running out of time (ours, or the daemon's).
local function timed_out(err)
  return err.code == "TIMEOUT" or err.status == 408 or err.code == "PROCESS_EXECUTION_TIMEOUT"
end

--- "user@host:pid": who made a sandbox, so leftovers of a dead process can be told apart.
function M.owner()
  local user = sys.getenv("USER") or sys.getenv("LOGNAME") or "unknown"
  return ("%s@%s:%d"):format(user, M.hostname(), sys.getpid())
end

function M.hostname()
  local h = sys.read_file("/proc/sys/kernel/hostname") or sys.read_file("/etc/hostname") or "localhost"
  return (h:gsub("%s+$", ""))
end

local function client_for(opts)
  local copts = {}
  for k, v in pairs(opts.daytona or {}) do copts[k] = v end
  copts.source = copts.source or "rlm"
  return daytona.client(copts)
end

local function check_volume_name(name)
  if type(name) ~= "string" or not name:match("^[%w][%w._-]*$") or #name > 128 then
    error(("invalid volume_name %q: use letters, digits, '.', '_' and '-'"):format(tostring(name)), 0)
  end
end

--- Checks what create() needs (credentials, option shapes) without creating anything.
function M.check(opts)
  if opts.daytona ~= nil and type(opts.daytona) ~= "table" then
    error("the daytona option must be a table of rlm.daytona.client options", 0)
  end
  if opts.labels ~= nil and type(opts.labels) ~= "table" then
    error("labels must be a table of name = string", 0)
  end
  if opts.volume_name ~= nil then check_volume_name(opts.volume_name) end
  if opts.child_sandbox ~= nil and opts.child_sandbox ~= "beside" and opts.child_sandbox ~= "own" then
    error('child_sandbox must be "beside" or "own"', 0)
  end
  client_for(opts)
end

-- ---------- staging ----------

-- Reads context_paths from the host: {{path = sandbox path, data = bytes}, ...}. Runs before
-- any sandbox exists, so a missing path costs nothing.
local function read_context(paths)
  if type(paths) == "string" then paths = {paths} end
  local files = {}
  local function add(host, inside)
    local st = sys.stat(host)
    if not st then error(("context_paths: %s does not exist"):format(host), 0) end
    if st.type == "dir" then
      local names = assert(sys.list_dir(host))
      table.sort(names)
      for _, name in ipairs(names) do add(host .. "/" .. name, inside .. "/" .. name) end
    elseif st.type == "file" then
      local data, err = sys.read_file(host)
      if not data then error(("context_paths: cannot read %s: %s"):format(host, err), 0) end
      files[#files + 1] = {path = inside, data = data}
    end
  end
  for _, p in ipairs(paths or {}) do add(p, WORKSPACE .. "/context/" .. basename(p)) end
  return files
end

local function is_remote(url)
  return url:find("://", 1, true) ~= nil and not url:match("^file://") or url:match("^[%w._-]+@")
end

-- A ref that looks like a commit id is checked out as one; anything else is a branch or tag.
local function clone_request(url, ref)
  local req = {url = url, path = WORKSPACE .. "/repo"}
  if ref and ref:match("^%x+$") and #ref >= 7 and #ref <= 40 then
    req.commit_id = ref
  else
    req.branch = ref
  end
  return req
end

local function fail(what, err)
  error(what .. ": " .. tostring(err), 0)
end

-- Runs argv on this machine; its stdout, or raises with what went wrong.
local function host_run(argv, what)
  local r, err = sys.run(argv, {timeout = 600})
  if not r then error(what .. ": " .. err, 0) end
  if r.status ~= "exit" or r.code ~= 0 then
    error(("%s: %s"):format(what, (r.stderr ~= "" and r.stderr or r.stdout):gsub("%s+$", "")), 0)
  end
  return r.stdout
end

-- A repository on this machine (a path or a file:// URL), packed for a sandbox that cannot see
-- this machine's disk: a git repository as a bundle of all its refs, a plain folder as a tar
-- archive. Returns the bytes and the kind ("bundle" or "tar").
local function pack_local_repo(url, ref)
  local path = url:gsub("^file://", "")
  local st = sys.stat(path)
  if not st or st.type ~= "dir" then
    error(("git clone %s failed: no such folder on this machine"):format(url), 0)
  end
  local dir = assert(sys.mkdtemp("rlm-repo"))
  local packed <close> = setmetatable({}, {__close = function() sys.remove(dir, true) end})
  if not sys.stat(path .. "/.git") and not sys.stat(path .. "/HEAD") then
    if ref then error(("repo_ref needs a git repository, and %s is a plain folder"):format(path), 0) end
    host_run({"tar", "-C", path, "-czf", dir .. "/repo.tar.gz", "."}, "cannot pack " .. path)
    return assert(sys.read_file(dir .. "/repo.tar.gz")), "tar"
  end
  host_run({"git", "-C", path, "bundle", "create", "--quiet", dir .. "/repo.bundle", "--all"},
           "cannot bundle the repository " .. path)
  return assert(sys.read_file(dir .. "/repo.bundle")), "bundle"
end

-- The shell script, run inside, that unpacks a local repository at workspace/repo.
local function unpack_script(kind, file, ref)
  local dest = WORKSPACE .. "/repo"
  if kind == "tar" then
    return ("mkdir -p %s && tar -C %s -xzf %s && rm -f %s"):format(
      sh_quote(dest), sh_quote(dest), sh_quote(file), sh_quote(file))
  end
  local script = ("git clone --quiet %s %s"):format(sh_quote(file), sh_quote(dest))
  if ref then
    script = script .. (" && git -C %s -c advice.detachedHead=false checkout --quiet %s --")
                       :format(sh_quote(dest), sh_quote(ref))
  end
  return script .. " && rm -f " .. sh_quote(file)
end

-- Stages a local repository: packed here, uploaded, unpacked inside (repo_ref checked out).
local function stage_local_repo(tb, url, ref)
  local data, kind = pack_local_repo(url, ref)
  local file = RLM_DIR .. "/repo." .. kind
  local up, why = tb:upload({{path = file, data = data}})
  if not up then fail("cannot upload the repository " .. url, why) end
  local res, err = tb:execute{command = shell_command(unpack_script(kind, file, ref)), timeout = 600}
  if not res then fail("cannot unpack the repository " .. url, err) end
  if res.exitCode ~= 0 then
    error(("cannot stage the repository %s in the sandbox: %s"):format(
      url, (res.result or ""):gsub("%s+$", "")), 0)
  end
end

-- Deletes sb after a failure and returns the message to raise: the failure's own first, then
-- what became of the sandbox when its deletion failed or goes on in the background.
local function after_cleanup(sb, err)
  local deleted, why = pcall(sb.destroy, sb)
  if not deleted then
    return ("%s; and %s"):format(tostring(err), tostring(why))
  elseif why == false then
    return ("%s; the Daytona sandbox %s is still being deleted (that goes on in the background; " ..
            "`rlm sandboxes` lists it until it is gone)"):format(tostring(err), sb.id)
  end
  return tostring(err)
end

-- Times each step of create() for `rlm daytona-smoke`.
local function timed(steps, name, fn)
  local t0 = sys.now()
  local a, b = fn()
  steps[#steps + 1] = {name = name, seconds = sys.now() - t0}
  return a, b
end

--- Creates a sandbox with the workspace staged (the driver is started by start_driver).
-- Raises on failure, deleting whatever it made.
function M.create(opts)
  local client = client_for(opts)
  local steps = {}
  local context = opts.context_paths and read_context(opts.context_paths) or {}
  local source = require("rlm.core.host").resource("lua/rlm/driver.py")
  if not source then error("the driver (lua/rlm/driver.py) is missing from this build", 0) end

  local volumes
  if opts.volume_name then
    local vol = timed(steps, "volume", function()
      local v, err = client:volume(opts.volume_name, {create = true, wait = true})
      if not v then fail("Daytona volume " .. opts.volume_name, err) end
      return v
    end)
    volumes = {{volume = vol, mount_path = MEMORY}}
  end

  local labels = {}
  for k, v in pairs(opts.labels or {}) do labels[k] = tostring(v) end
  labels[M.LABEL] = "1"
  labels[M.OWNER_LABEL] = M.owner()
  local env = {}
  for k, v in pairs(opts.env or {}) do env[k] = tostring(v) end
  local minutes = math.ceil((opts.timeout or 900) / 60)
  -- Daytona's proxy counts a toolbox request as activity for as long as it runs (it renews it
  -- every 50 s: apps/proxy/pkg/proxy/get_sandbox_target.go), so a long execute is not idle.
  local idle_minutes = opts.idle_timeout and math.max(1, math.ceil(opts.idle_timeout / 60))
                       or math.max(15, minutes + 5)
  local block = not opts.network and not (opts.repo_url and is_remote(opts.repo_url))
  local created = timed(steps, "create", function()
    -- wait = false: the id is ours before anything else can fail, so it can be deleted.
    local sb, err = client:create_sandbox{
      snapshot = opts.snapshot, env = env, labels = labels, volumes = volumes,
      network_block_all = block or nil,
      -- A sandbox this process loses stops after being idle past its lifetime, and a stopped
      -- one is deleted at once; newer APIs also end it past its wall-clock lifetime.
      auto_stop_interval = idle_minutes, auto_delete_interval = 0,
      ttl_minutes = minutes + 10,
      -- At the organisation's quota, wait as long as a start may take for others to go.
      quota_wait = opts.start_timeout or 120,
      wait = false}
    if not sb then fail("cannot create a Daytona sandbox", err) end
    return sb
  end)

  local self = setmetatable({id = created.id, client = client, opts = opts, steps = steps,
                             starts = 0, requests = 0, workspace = WORKSPACE, rlm_dir = RLM_DIR,
                             children = 0}, Sandbox)
  local ok, err = pcall(function()
    local sb = timed(steps, "start", function()
      if created.state == "started" then return created end
      local s, e = client:wait_sandbox(created.id, {"started"}, opts.start_timeout or 120)
      if not s then fail("the Daytona sandbox did not start", e) end
      return s
    end)
    local tb, e = client:toolbox(sb)
    if not tb then fail("cannot reach the sandbox's toolbox", e) end
    self.toolbox = tb
    timed(steps, "upload", function()
      local files = {{path = DRIVER, data = source}}
      table.move(context, 1, #context, 2, files)
      local up, why = tb:upload(files)
      if not up then fail("cannot upload the driver and context_paths", why) end
    end)
    if opts.repo_url then
      timed(steps, "clone", function()
        -- The daemon clones a remote URL itself; it cannot see a path on this machine.
        if not is_remote(opts.repo_url) then
          return stage_local_repo(tb, opts.repo_url, opts.repo_ref)
        end
        local cloned, why = tb:git_clone(clone_request(opts.repo_url, opts.repo_ref))
        if not cloned then fail("git clone " .. opts.repo_url .. " failed", why) end
      end)
    end
  end)
  if not ok then error(after_cleanup(self, err), 0) end
  return self
end

-- ---------- the driver ----------

-- Our sandboxes are ephemeral (autoDeleteInterval 0): stopping one, by request or by
-- auto-stop, deletes it (apps/api/src/sandbox/services/sandbox.service.ts, stop). One that
-- is gone cannot come back; one merely stopped (made by other means) is started again.
function Sandbox:ensure_started()
  local sb, err = self.client:get_sandbox(self.id)
  local gone = not sb and err.status == 404 or sb and (sb.state == "destroying" or
    sb.state == "destroyed" or sb.desiredState == "destroyed")
  if gone then
    self.destroyed = true   -- nothing left to delete
    error(("the Daytona sandbox %s is gone: rlm's sandboxes are ephemeral, and stopping one " ..
           "(from outside, or idle past its auto-stop) deletes it; create a new interpreter")
          :format(self.id), 0)
  end
  if not sb then fail("cannot read the Daytona sandbox's state", err) end
  if sb.state == "started" then return end
  local started, why = self.client:start_sandbox(self.id, self.opts.start_timeout or 120)
  if not started then
    fail(("the Daytona sandbox %s was %s and could not be started again"):format(
      self.id, tostring(sb.state)), why)
  end
end

function Sandbox:start_driver()
  if self.session then return true end
  if self.starts > 0 then self:ensure_started() end
  self.starts = self.starts + 1
  local session = ("rlm-%sdriver-%d"):format(self.child and self.child .. "-" or "", self.starts)
  local socket = ("%s/driver-%d.sock"):format(self.rlm_dir, self.starts)
  local tb = self.toolbox
  -- The name is new, so it may go again: 409 "session already exists" (apps/daemon/pkg/session/
  -- create.go) means an earlier attempt made it.
  local ok, err = tb:request{method = "POST", path = {"process", "session"}, idempotent = true,
                             json = {sessionId = session}}
  if not ok and err.status ~= 409 then fail("cannot start the sandbox's driver (session)", err) end
  -- No `exec`: on Daytona a session is one long-lived shell, which must outlive the driver.
  -- Its output goes to files read_ready() watches from inside; its exit status too.
  local outputs = ("%s/driver-%d"):format(self.rlm_dir, self.starts)
  local command = ("mkdir -p %s %s %s && cd %s && %s%s -u %s --serve %s %s > %s.out 2> %s.err; " ..
                   "echo $? > %s.exit"):format(self.workspace, self.rlm_dir, MEMORY, self.workspace,
    self.child and self:links_script() or "", PYTHON, DRIVER, socket,
    table.concat(common.driver_settings(self.opts), " "), outputs, outputs, outputs)
  local res, why = tb:session_exec{session = session, command = command, async = true}
  if not res and (why.status == nil or why.status == 502 or why.status == 503 or
                  why.status == 504) then
    -- The answer was lost, not necessarily the command: it is never sent twice (the daemon
    -- takes no command id of ours), but the session is new, so a command in it is this one.
    local found = tb:request{path = {"process", "session", session}}
    local first = found and type(found.commands) == "table" and found.commands[1]
    if first and first.id then res = {cmdId = first.id} end
  end
  if not res then
    tb:delete_session(session)
    fail("cannot start the sandbox's driver", why)
  end
  self.session, self.command_id, self.socket, self.outputs = session, res.cmdId, socket, outputs
  self.awaiting_ready = true
  return true
end

-- The driver's first line. One process/execute waits for it inside the sandbox (the driver's
-- --wait-ready mode polls its output files there): polling the session's logs from here took
-- ten requests a start.
function Sandbox:read_ready(timeout)
  local wait = math.ceil(timeout)
  -- Only reads files: it may go again after a broken connection or a gateway's 502.
  local res, err = self.toolbox:request{
    method = "POST", path = {"process", "execute"}, idempotent = true,
    timeout = wait + 1 + 10,
    json = {command = ("%s %s --wait-ready %s --timeout %d"):format(HELPER_PYTHON, DRIVER,
                                                                    self.outputs, wait),
            timeout = wait + 1}}
  if not res then
    if timed_out(err) then
      return nil, "no answer from the sandbox in time", "timeout"
    end
    return nil, "cannot read the driver's output: " .. tostring(err), "dead"
  end
  local out = type(res.result) == "string" and res.result or ""
  if res.exitCode == 4 then return nil, "no answer from the sandbox in time", "timeout" end
  if res.exitCode ~= 0 then
    return nil, ("the sandbox's driver exited (%s)"):format(out:gsub("%s+$", ""):sub(-700)), "dead"
  end
  self.awaiting_ready = false
  return common.decode_event(out:match("^([^\n]*)"))
end

-- ---------- the dialogue ----------
-- Each request line, each reply and each poll is one process/execute of the driver's client,
-- under an id of its own: a flight, in a task of its own. The driver hands its events (one
-- stream, as on stdio) to whichever client waits, and answers the others idle (see its
-- SocketServer); the events every flight brings back are queued here in the order they
-- arrive, for request() to take. So a reply goes out while another client waits for the next
-- call, and the calls of the code's threads are open side by side. When nothing is in flight
-- and nothing is queued, request() sends a poll, which only waits.

-- The dialogue of the driver started last: its queued events and the flights still out.
function Sandbox:dialogue()
  local d = self.talk
  if not d or d.starts ~= self.starts then
    d = {starts = self.starts, events = {}, flying = 0, due = {}, outbox = {}}
    self.talk = d
  end
  return d
end

-- Wakes request() when it waits for a flight.
local function wake(d)
  local id = d.wake
  if id then
    d.wake = nil
    loop.ready(id)
  end
end

-- Queues an event, or a failure ({err =, kind =}).
local function arrive(d, item)
  d.events[#d.events + 1] = item
end

-- The client command for one request line (nil: a poll), under an id the driver answers once,
-- waiting at most `wait` seconds for an event.
function Sandbox:client_command(line, request_id, wait)
  local client = ("%s %s --client %s --request-id %s --wait %.3f"):format(
    HELPER_PYTHON, DRIVER, self.socket, request_id, wait)
  if not line then return client .. " --poll" end
  if #line <= INLINE_REQUEST then
    return ("%s --request-b64 %s"):format(client, common.base64_encode(line))
  end
  -- One file per id: replies of several calls may be uploaded at once. The client removes it.
  local file = ("%s/request-%s.json"):format(self.rlm_dir, request_id)
  local ok, err = self.toolbox:upload({{path = file, data = line}})
  if not ok then return nil, "cannot upload the request: " .. tostring(err) end
  return ("%s --request-file %s"):format(client, file)
end

-- One process/execute of the client. The request carries its id, so the transport may send it
-- again after a broken connection (idempotent): the driver gives a repeat the first answer.
function Sandbox:run_client(command, wait)
  return self.toolbox:request{
    method = "POST", path = {"process", "execute"}, idempotent = true,
    timeout = wait + MARGIN, deadline = wait + MARGIN,
    -- The daemon ends the client soon after the host stops waiting; the driver goes on.
    json = {command = command, timeout = math.ceil(wait) + MARGIN}}
end

-- Carries one line (nil: a poll) under a new id: what the client printed, or nil, err, kind.
function Sandbox:carry(line, request_id, wait)
  local command, err = self:client_command(line, request_id, wait)
  if not command then return nil, err, "dead" end
  local res
  res, err = self:run_client(command, wait)
  if not res and timed_out(err) then
    -- The driver answers within `wait`, so a stalled network or a sandbox too busy to start
    -- the client did this: ask again under the same id, which runs nothing twice.
    res, err = self:run_client(command, wait)
  end
  if not res then
    if timed_out(err) then return nil, "no answer from the sandbox in time", "timeout" end
    return nil, tostring(err), "dead"
  end
  local out = type(res.result) == "string" and res.result or ""
  if res.exitCode ~= 0 then
    local msg = out:gsub("%s+$", ""):sub(-600)
    return nil, ("the sandbox's driver did not answer (client exit %s)%s"):format(
      tostring(res.exitCode), msg ~= "" and ": " .. msg or ""), "dead"
  end
  return out
end

-- Sends a line (nil: a poll) in a flight of its own; what it brings back is queued.
function Sandbox:fly(line, wait)
  local d = self:dialogue()
  self.requests = self.requests + 1
  local request_id = ("%d.%d"):format(self.starts, self.requests)
  d.flying = d.flying + 1
  d.due[request_id] = sys.now() + wait
  async.spawn(function()
    local ok, out, err, kind = pcall(self.carry, self, line, request_id, wait)
    d.flying = d.flying - 1
    d.due[request_id] = nil
    if self.talk ~= d then return end   -- that driver was replaced: its events are void
    if not ok then
      arrive(d, {err = tostring(out), kind = "dead"})
    elseif not out then
      -- Nothing in time is no event: request() waits on, and polls again.
      if kind ~= "timeout" then arrive(d, {err = err, kind = kind}) end
    else
      for line_out in out:gmatch("[^\n]+") do
        local ev, why, what = common.decode_event(line_out)
        if not ev then
          arrive(d, {err = why, kind = what})
        elseif ev.ev ~= "idle" then
          arrive(d, {ev = ev})
        end
      end
    end
    wake(d)
  end)
end

-- How long request() waits with a deadline: past it while a flight that was due by then is
-- still out (its answer is late on the way: the network, or a sandbox slow to start the
-- client), for MARGIN seconds more. A poll due later is not waited for.
local function hold(d, deadline)
  local last = deadline
  for _, due in pairs(d.due) do
    if due <= deadline then last = math.max(last, due + MARGIN) end
  end
  return last
end

--- Sends one request (nil: none) and returns the next event; nil, err, kind ("timeout"|"dead"|
-- "protocol").
function Sandbox:request(req, timeout)
  if not self.session then return nil, "the sandbox's driver is not running", "dead" end
  if not req and self.awaiting_ready then return self:read_ready(timeout) end
  local d = self:dialogue()
  if req then self:fly(type(req) == "string" and req or json.encode(req), timeout) end
  local deadline = sys.now() + timeout
  local yielded = false
  while true do
    local item = table.remove(d.events, 1)
    if item then
      if item.ev then return item.ev end
      return nil, item.err, item.kind
    end
    if d.flying == 0 then
      if not yielded then
        -- A call answered at once sends its reply from its own task: let it go first, so
        -- that the reply's client, not a poll, brings the next event.
        yielded = true
        async.sleep(0)
      else
        self:fly(nil, POLL_WAIT)
      end
    end
    local left = hold(d, deadline) - sys.now()
    if left <= 0 then return nil, "no answer from the sandbox in time", "timeout" end
    if d.flying > 0 and #d.events == 0 then
      local id = loop.new_id()
      d.wake = id
      async.await(id, left)
      async.forget(id)
      if d.wake == id then d.wake = nil end
    end
  end
end

--- Sends a reply without waiting: its client brings back an event, which is queued. Replies
-- sent in the same turn of the event loop (answers that arrived together) go in one flight,
-- as one "replies" request: one process/execute, not one each.
function Sandbox:send(req)
  if not self.session then return nil, "the sandbox's driver is not running" end
  local d = self:dialogue()
  local outbox = d.outbox
  outbox[#outbox + 1] = type(req) == "string" and req or json.encode(req)
  if #outbox > 1 then return true end
  d.flying = d.flying + 1   -- on its way: request() sends no poll meanwhile
  async.spawn(function()   -- runs after the tasks already runnable, whose replies join it
    d.flying = d.flying - 1
    d.outbox = {}
    if self.talk ~= d then return end   -- that driver was replaced
    self:fly(#outbox == 1 and outbox[1] or
             ('{"op":"replies","replies":[%s]}'):format(table.concat(outbox, ",")), POLL_WAIT)
  end)
  return true
end

--- Ends the driver (its session, with every process in it); start_driver() may follow.
function Sandbox:kill_driver()
  local session = self.session
  if not session then return end
  self.session, self.command_id, self.awaiting_ready = nil, nil, false
  if self.toolbox then
    self.toolbox:request{method = "DELETE", path = {"process", "session", session},
                         timeout = 10, deadline = 15}
  end
end

-- ---------- files and commands ----------

-- A sandbox path under the driver's folder (the workspace) or the volume (relative: under the
-- folder), refusing anything else, as the local backend does.
local function sandbox_path(path, workspace)
  local root, rel = common.place(path, workspace)
  if not root then return nil, rel end
  for part in rel:gmatch("[^/]+") do
    if part == ".." then return nil, path .. ": '..' is not allowed" end
  end
  return rel == "." and root or root .. "/" .. rel
end

local function file_error(path, err)
  if type(err) == "table" and (err.code == "FILE_NOT_FOUND" or err.status == 404) then
    return path .. ": No such file or directory"
  end
  return path .. ": " .. tostring(err)
end

function Sandbox:upload(path, data)
  local p, err = sandbox_path(path, self.workspace)
  if not p then return nil, err end
  local ok, why = self.toolbox:upload({{path = p, data = data}})
  if not ok then return nil, file_error(p, why) end
  return true
end

-- The toolbox sends whole files: a range is cut here.
function Sandbox:download(path, offset, length)
  local p, err = sandbox_path(path, self.workspace)
  if not p then return nil, err end
  local got, why = self.toolbox:download({p}, {timeout = 120})
  if not got then return nil, file_error(p, why) end
  local data = got[p]
  if type(data) ~= "string" then return nil, file_error(p, data) end
  if not offset and not length then return data, #data end
  local first = math.min(offset or 0, #data)
  return data:sub(first + 1, length and first + length or #data), #data
end

local TYPES = {f = "file", d = "dir", l = "link"}

--- Entries under dir, recursively: {path=, type="file"|"dir"|"link"|"other", size=}, sorted.
-- One command (find), not one request per folder.
function Sandbox:list(dir)
  dir = (dir or self.workspace):gsub("/+$", "")
  local p, err = sandbox_path(dir, self.workspace)
  if not p then return nil, err end
  -- Double quotes inside: the script itself travels in single quotes.
  local script = ('[ -d %s ] || { echo "not a directory" >&2; exit 3; }; ' ..
                  'find %s -mindepth 1 -printf "%%y %%s %%p\\0"'):format(sh_quote(p), sh_quote(p))
  local res, why = self.toolbox:execute{command = shell_command(script), timeout = 60}
  if not res then return nil, tostring(why) end
  if res.exitCode == 3 then return nil, dir .. ": not a directory" end
  if res.exitCode ~= 0 then return nil, ("listing %s failed: %s"):format(dir, res.result) end
  local out = {}
  for kind, size, path in (res.result or ""):gmatch("(%a) (%d+) ([^%z]+)%z") do
    out[#out + 1] = {path = path, type = TYPES[kind] or "other", size = tonumber(size)}
  end
  table.sort(out, function(a, b) return a.path < b.path end)
  return out
end

--- Runs a shell command in the workspace: {exit=, output=} | nil, err.
function Sandbox:shell(cmd, timeout)
  timeout = timeout or 60
  local res, err = self.toolbox:request{
    method = "POST", path = {"process", "execute"},
    timeout = timeout + GRACE, deadline = timeout + GRACE,
    json = {command = shell_command(cmd), cwd = self.workspace, timeout = math.ceil(timeout) + 1}}
  if not res then
    if err.status == 408 or err.code == "TIMEOUT" then
      return nil, ("the command ran past %g s"):format(timeout)
    end
    return nil, tostring(err)
  end
  return {exit = res.exitCode, output = res.result or ""}
end

-- ---------- deletion ----------

-- DELETE transfers started where waiting was not allowed: op -> sandbox id.
local deleting = {}
-- Requests that tidy a child's driver and folder away (Beside:destroy), started likewise: op -> true.
local tidying = {}

local function in_finaliser()
  for level = 3, 60 do
    local info = debug.getinfo(level, "n")
    if not info then return false end
    if info.namewhat == "metamethod" and info.name == "__gc" then return true end
  end
  return false
end

-- Whether this code may wait for a transfer: the main program drives the loop itself, a task
-- yields; a finaliser may do neither.
local function may_wait()
  if in_finaliser() then return false end
  if async.current() then return coroutine.isyieldable() end
  return true
end

local function finish(op)
  deleting[op] = nil
  async.forget(op:id())
  local ok, err = op:result()
  if not ok and err and err.status ~= 404 then return nil, err end
  return true
end

--- Deletes the sandbox; idempotent, and never yields from a finaliser (see the top). Returns
-- true once it is deleted, false while its deletion goes on (settle() finishes it).
function Sandbox:destroy()
  local client, id = self.client, self.id
  if not client or self.destroyed then return true end
  self.destroyed = true
  self.session, self.toolbox = nil, nil
  -- retry_conflict: a sandbox still being created or started answers 409 until it can go.
  local op = client.core:request{method = "DELETE", base = client.api_url, path = {"sandbox", id},
                                 timeout = DELETE_TIMEOUT, deadline = DELETE_DEADLINE,
                                 retry_conflict = true, retries = 1000}
  deleting[op] = id
  if not may_wait() then return false end
  async.await(op:id(), M.DELETE_WAIT)
  if not op:done() then return false end     -- left to settle()
  local ok, err = finish(op)
  if not ok then
    error(("cannot delete Daytona sandbox %s: %s (it stops by itself when idle; `rlm sandboxes " ..
           "--prune` deletes it)"):format(id, tostring(err)), 0)
  end
  return true
end

--- Waits (at most timeout seconds) for deletions started from finalisers; returns how many
-- are still unfinished and the ids that failed.
function M.settle(timeout)
  local deadline = sys.now() + (timeout or DELETE_TIMEOUT)
  for op in pairs(tidying) do
    if not op:done() then async.await(op:id(), math.max(deadline - sys.now(), 0.01)) end
    tidying[op] = nil
    async.forget(op:id())
  end
  local failed, ops = {}, {}
  for op in pairs(deleting) do ops[#ops + 1] = op end
  for _, op in ipairs(ops) do
    local id = deleting[op]
    if not op:done() then async.await(op:id(), math.max(deadline - sys.now(), 0.01)) end
    if op:done() then
      if not finish(op) then failed[#failed + 1] = id end
    end
  end
  local left = 0
  for _ in pairs(deleting) do left = left + 1 end
  return left, failed
end

-- ---------- drivers beside the sandbox's own ----------

-- The options that make the machine. A child whose options differ from its parent's in any of
-- them (another account, region or key; image; network; volume; environment; labels; idle
-- limit; staged repository or context) needs a sandbox of its own.
local MACHINE = {"daytona", "snapshot", "network", "volume_name", "env", "labels", "idle_timeout",
                 "repo_url", "repo_ref", "context_paths"}

local function same_value(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do
    if not same_value(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

--- Whether an interpreter with opts can run beside one made with host_opts (in its sandbox):
-- the machine is the same, and opts do not ask for a sandbox of their own (child_sandbox).
function M.same_machine(host_opts, opts)
  if opts.child_sandbox == "own" then return false end
  for _, name in ipairs(MACHINE) do
    if not same_value(host_opts[name], opts[name]) then return false end
  end
  return true
end

-- A driver beside the sandbox's own: the same machine and toolbox, its own folder (its
-- working directory, where its socket and files are too) and its own sessions. Deleting it
-- ends its session and removes its folder; deleting the sandbox takes everything.
local Beside = setmetatable({}, {__index = Sandbox})
Beside.__index = Beside

--- A sandbox for opts inside host's (a sandbox this backend made, or one beside it): nothing
-- is created here; start_driver() makes the folder.
function M.create_beside(host, opts)
  local root = host.host or host
  root.children = root.children + 1
  local name = ("c%d"):format(root.children)
  local folder = CHILDREN .. "/" .. name
  return setmetatable({id = root.id, client = root.client, toolbox = root.toolbox, opts = opts,
                       steps = {}, starts = 0, requests = 0, host = root, child = name,
                       workspace = folder, rlm_dir = folder .. "/.rlm"}, Beside)
end

-- Shell words that show the sandbox's staged repo/ and context/ in a child's folder too (the
-- same machine has the same files), ending in "&& ".
function Beside:links_script()
  local parts = {}
  for _, name in ipairs{"repo", "context"} do
    local staged = WORKSPACE .. "/" .. name
    parts[#parts + 1] = ("{ [ ! -e %s ] || ln -sfn %s %s; }"):format(staged, staged, name)
  end
  return table.concat(parts, " && ") .. " && "
end

--- Ends the child's driver and removes its folder; the sandbox stays. Never raises: what is
-- left goes with the sandbox. Never yields from a finaliser (both requests then go at once).
function Beside:destroy()
  if self.destroyed then return true end
  self.destroyed = true
  local tb, session = self.toolbox, self.session
  self.session, self.toolbox = nil, nil
  if not tb or self.host.destroyed then return true end
  local remove = {method = "POST", path = {"process", "execute"}, idempotent = true,
                  timeout = DELETE_TIMEOUT, deadline = DELETE_TIMEOUT,
                  json = {command = shell_command("rm -rf " .. sh_quote(self.workspace)),
                          timeout = DELETE_TIMEOUT}}
  local ends = session and {method = "DELETE", path = {"process", "session", session},
                            timeout = 10, deadline = 15}
  if may_wait() then
    -- The driver first: a block still running could write into the folder meanwhile.
    if ends then tb:request(ends) end
    tb:request(remove)
    return true
  end
  local reqs = ends and {ends, remove} or {remove}
  for _, req in ipairs(reqs) do
    req.base, req.retries = tb.base, 3
    table.insert(req.path, 1, tb.id)
    tidying[tb.client.core:request(req)] = true
  end
  return false
end

-- The CLI settles every backend's deletions before it exits, through the registry; what is
-- still going on then is named, for `rlm sandboxes`.
require("rlm.registry").on_settle(function()
  local left = M.settle()
  local ids = {}
  for _, id in pairs(deleting) do ids[#ids + 1] = id end
  table.sort(ids)
  for _, id in ipairs(ids) do
    io.stderr:write(("rlm: Daytona sandbox %s is still being deleted; `rlm sandboxes` lists it " ..
                     "and `rlm sandboxes --prune` deletes it if it is left\n"):format(id))
  end
  return left
end)

return M
