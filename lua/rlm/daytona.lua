--- Daytona sandboxes from Lua: the friendly face of rlm.core.daytona (host/ldaytona.c), which
-- owns the wire format, credentials, retries and timeouts. Every call waits through rlm.async,
-- so it works from the main program and side by side in tasks.
--
--   local daytona = require "rlm.daytona"
--   local client = daytona.client{api_key = ?, api_url = ?, target = ?}   -- else DAYTONA_* env
--   local sb = assert(client:create_sandbox{snapshot = "python", labels = {job = "x"}})
--   local tb = assert(client:toolbox(sb))
--   local r = assert(tb:execute{command = "echo hi"})        -- {exitCode = 0, result = "hi\n"}
--   client:delete_sandbox(sb.id)
--
-- Results are Daytona's JSON as decoded (camelCase fields, as its API documents them); calls
-- with an empty answer return true. Failures return nil, err where err is the host's one
-- error shape {kind, status, message, retry_after} with Daytona's code, retryable and attempts
-- (see docs/architecture-network.md); tostring(err) is the message; the API key never
-- appears in it.
local core = require "rlm.core.daytona"
local async = require "rlm.async"
local sys = require "rlm.sys"

local M = {}

M.DEFAULT_API_URL = "https://app.daytona.io/api"
M.is_error = core.is_error
M.SDK_VERSION = core.sdk_version   -- the wire format rlm speaks, sent with every request

local Client = {}
Client.__index = Client
local Toolbox = {}
Toolbox.__index = Toolbox

local function nonempty(s)
  if s ~= nil and s ~= "" then return s end
  return nil
end

--- Options: api_key, jwt_token, organization_id, api_url, target, timeout (seconds per HTTP
-- attempt, default 60), deadline (seconds for a call with its retries, default 120), retries
-- (default 8), poll_interval (longest pause between state polls, default 1), env (a getenv
-- function, for tests). Explicit options win over DAYTONA_API_KEY, DAYTONA_JWT_TOKEN,
-- DAYTONA_ORGANIZATION_ID, DAYTONA_API_URL (or the older DAYTONA_SERVER_URL) and
-- DAYTONA_TARGET. Raises when there are no credentials.
function M.client(opts)
  opts = opts or {}
  local getenv = opts.env or sys.getenv
  local function env(name) return nonempty(getenv(name)) end
  local creds = {source = opts.source}
  if nonempty(opts.api_key) then
    creds.api_key = opts.api_key
  elseif nonempty(opts.jwt_token) then
    creds.jwt_token = opts.jwt_token
    creds.organization_id = nonempty(opts.organization_id) or env "DAYTONA_ORGANIZATION_ID"
  elseif env "DAYTONA_API_KEY" then
    creds.api_key = env "DAYTONA_API_KEY"
  else
    creds.jwt_token = env "DAYTONA_JWT_TOKEN"
    creds.organization_id = nonempty(opts.organization_id) or env "DAYTONA_ORGANIZATION_ID"
  end
  -- Where credentials come from, and what to tell the user, is policy: it lives here, not in C.
  if not creds.api_key and not creds.jwt_token then
    error("no Daytona credentials: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN with "
          .. "DAYTONA_ORGANIZATION_ID), or pass api_key", 0)
  elseif not creds.api_key and not creds.organization_id then
    error("DAYTONA_JWT_TOKEN needs DAYTONA_ORGANIZATION_ID (or pass organization_id)", 0)
  end
  creds.hint = creds.api_key and "check DAYTONA_API_KEY"
               or "check DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID"
  local ok, handle = pcall(core.client, creds)
  -- Missing or malformed credentials are the user's to fix: a plain message (the CLI prints it
  -- as is), not a position inside whichever recipe or command asked for the client.
  if not ok then error(handle, 0) end
  local api_url = nonempty(opts.api_url) or env "DAYTONA_API_URL" or env "DAYTONA_SERVER_URL"
                  or M.DEFAULT_API_URL
  return setmetatable({
    core = handle,
    api_url = (api_url:gsub("/+$", "")),
    target = nonempty(opts.target) or env "DAYTONA_TARGET",
    timeout = opts.timeout or 60,
    deadline = opts.deadline or 120,
    retries = opts.retries or 8,
    poll_interval = opts.poll_interval or 1,
  }, Client)
end

--- One request through the C binding, awaited. req as for core client:request; base defaults
-- to the API URL.
function Client:request(req)
  req.base = req.base or self.api_url
  -- A call given a longer timeout of its own (a long command) keeps it, retries or not.
  req.deadline = req.deadline or math.max(self.deadline, req.timeout or 0)
  req.timeout = req.timeout or self.timeout
  req.retries = req.retries or self.retries
  local op <close> = self.core:request(req)
  async.await(op:id())
  return op:result()
end

local function timeout_error(message)
  return core.error{kind = "timeout", code = "TIMEOUT", message = message, retryable = false}
end

local function state_error(message, state)
  return core.error{kind = "state", code = "SANDBOX_" .. string.upper(state or "error"),
                    message = message, retryable = false}
end

local function sandbox_id(sandbox)
  if type(sandbox) == "table" then return sandbox.id end
  return sandbox
end

-- Pauses between polls grow from 0.1 s to poll_interval, so quick transitions are seen quickly.
local function poller(self)
  local pause = 0.1
  return function()
    async.sleep(pause)
    pause = math.min(pause * 1.5, self.poll_interval)
  end
end

-- ---------- sandboxes ----------

local function copy_fields(dst, src, names)
  for lua_name, wire_name in pairs(names) do
    if src[lua_name] ~= nil then dst[wire_name] = src[lua_name] end
  end
end

local CREATE_FIELDS = {
  name = "name", snapshot = "snapshot", user = "user", public = "public", cpu = "cpu",
  gpu = "gpu", memory = "memory", disk = "disk", auto_stop_interval = "autoStopInterval",
  auto_archive_interval = "autoArchiveInterval", auto_delete_interval = "autoDeleteInterval",
  network_block_all = "networkBlockAll", network_allow_list = "networkAllowList",
  -- A wall-clock lifetime, for APIs newer than v0.190.0 (the 0.218 clients send it); v0.190.0
  -- has no such field and, validating without a whitelist (apps/api/src/main.ts), ignores it.
  ttl_minutes = "ttlMinutes",
}

-- The label of one create call, by which a sandbox made despite a failed answer is found.
local CREATE_LABEL = "rlm-create"

local function create_body(self, p)
  local body = {env = p.env or {}, target = p.target or self.target}
  copy_fields(body, p, CREATE_FIELDS)
  local labels = {}
  for k, v in pairs(p.labels or {}) do labels[k] = v end
  labels["code-toolbox-language"] = labels["code-toolbox-language"] or p.language or "python"
  body.labels = labels
  if p.ephemeral then body.autoDeleteInterval = 0 end
  if p.image then body.buildInfo = {dockerfileContent = "FROM " .. p.image .. "\n"} end
  if p.volumes and #p.volumes > 0 then
    body.volumes = {}
    for i, v in ipairs(p.volumes) do
      body.volumes[i] = {volumeId = v.volume_id or (v.volume and v.volume.id),
                         mountPath = v.mount_path, subpath = v.subpath}
    end
  end
  for k, v in pairs(p.extra or {}) do body[k] = v end
  return body
end

--- Creates a sandbox and (unless wait == false) waits until it has started. params: name,
-- snapshot | image, env, labels, language, target, cpu, gpu, memory, disk (GiB),
-- auto_stop_interval, auto_archive_interval, auto_delete_interval (minutes), ephemeral,
-- volumes = {{volume_id | volume, mount_path, subpath}}, network_block_all,
-- network_allow_list, public, user, ttl_minutes, extra (raw fields), timeout (seconds to start,
-- default 60), quota_wait (seconds to wait while the organisation is at its quota; default 0:
-- the 400 "Total CPU limit exceeded" is returned at once).
-- Whether a failed create may have made a sandbox all the same: a gateway error or a lost
-- answer, as opposed to a refusal.
local function create_outcome_unknown(err)
  -- A connection that was never made (refused, no such host) carried nothing: nothing was made,
  -- and the transport has already spent its retries on it.
  if err.kind == "connect" or err.kind == "dns" then return false end
  return err.status == nil or err.status == 502 or err.status == 503 or err.status == 504
end

-- An organisation at its quota: apps/api/src/sandbox/services/sandbox.service.ts,
-- validateOrganizationQuotas, answers 400 "Total CPU limit exceeded" (memory, disk, GPU
-- alike). Final for the request, but it passes as other sandboxes go.
local function over_quota(err)
  return err.status == 400 and tostring(err.message):find("Total %a+ limit exceeded") ~= nil
end

-- Creates with a label no other create carries, so that after an unclear failure the sandbox
-- it may have made is found instead of made twice (the request itself is never repeated by
-- the transport: see host/request.h); then tries again, within the deadline. At the quota it
-- waits, for at most quota_wait seconds, for other sandboxes to go.
function Client:create_once(body, quota_wait)
  local token = ("%08x%08x"):format(math.random(0, 0xffffffff), math.random(0, 0xffffffff))
  body.labels = body.labels or {}
  body.labels[CREATE_LABEL] = token
  local now = sys.now()
  local deadline, quota_deadline = now + self.deadline, now + (quota_wait or 0)
  local wait, quota_pause = 0.25, 0.5
  while true do
    local sb, err = self:request{method = "POST", path = "/sandbox", json = body}
    if sb then return sb end
    if over_quota(err) then
      if sys.now() + quota_pause > quota_deadline then return nil, err end
      async.sleep(quota_pause * (0.5 + math.random() / 2))
      quota_pause = math.min(quota_pause * 1.5, 5)
      deadline = math.max(deadline, sys.now() + self.deadline)
    elseif not create_outcome_unknown(err) then
      return nil, err
    else
      local found = self:list_sandboxes{labels = {[CREATE_LABEL] = token}}
      if found and found[1] then return found[1] end
      if sys.now() + wait > deadline then return nil, err end
      async.sleep(wait * (0.5 + math.random() / 2))
      wait = math.min(wait * 2, 8)
    end
  end
end

function Client:create_sandbox(params)
  params = params or {}
  local sb, err = self:create_once(create_body(self, params), params.quota_wait)
  if not sb then return nil, err end
  if params.wait == false or sb.state == "started" then return sb end
  return self:wait_sandbox(sb.id, {"started"}, params.timeout or 60)
end

function Client:get_sandbox(id)
  return self:request{path = {"sandbox", sandbox_id(id)}}
end

--- All sandboxes matching the filters, following the cursor pages. opts: labels (table),
-- limit (page size), states, name, plus any other query field in query.
function Client:list_sandboxes(opts)
  opts = opts or {}
  local query = {labels = opts.labels and next(opts.labels) and opts.labels or nil,
                 limit = opts.limit, name = opts.name, states = opts.states}
  for k, v in pairs(opts.query or {}) do query[k] = v end
  local all = {}
  repeat
    local page, err = self:request{path = "/sandbox", query = query}
    if not page then return nil, err end
    for _, item in ipairs(page.items or {}) do all[#all + 1] = item end
    local cursor = page.nextCursor
    query.cursor = type(cursor) == "string" and cursor ~= "" and cursor or nil
  until query.cursor == nil
  return all
end

--- Polls until the sandbox is in one of states (a list, or one state), for at most timeout
-- seconds (0 or nil: 60). A sandbox that is gone counts as "destroyed"; error and build_failed
-- end the wait with their reason.
function Client:wait_sandbox(id, states, timeout)
  id = sandbox_id(id)
  if type(states) == "string" then states = {states} end
  local want = {}
  for _, s in ipairs(states) do want[s] = true end
  timeout = (timeout and timeout > 0) and timeout or 60
  local deadline = sys.now() + timeout
  local pause = poller(self)
  local last
  while true do
    local left = deadline - sys.now()
    local sb, err = self:request{path = {"sandbox", id}, deadline = math.max(left, 1),
                                 timeout = math.max(math.min(left, self.timeout), 1)}
    if not sb then
      if err.status == 404 and want.destroyed then return {id = id, state = "destroyed"} end
      return nil, err
    end
    last = sb.state
    if want[last] then return sb end
    if last == "error" or last == "build_failed" then
      local reason = sb.errorReason
      return nil, state_error(string.format("sandbox %s failed with state %s%s", id, last,
        type(reason) == "string" and ": " .. reason or ""), last)
    end
    if sys.now() >= deadline then
      return nil, timeout_error(string.format(
        "sandbox %s did not reach %s within %g s (last state: %s)", id,
        table.concat(states, " or "), timeout, tostring(last)))
    end
    pause()
  end
end

--- Starts a sandbox and waits until it has started (timeout seconds, default 60).
function Client:start_sandbox(id, timeout)
  local ok, err = self:request{method = "POST", path = {"sandbox", sandbox_id(id), "start"},
                               idempotent = true}
  if not ok then return nil, err end
  return self:wait_sandbox(id, {"started"}, timeout)
end

--- Stops a sandbox and waits until it has stopped. opts: force (SIGKILL), timeout, wait.
function Client:stop_sandbox(id, opts)
  opts = opts or {}
  local ok, err = self:request{method = "POST", path = {"sandbox", sandbox_id(id), "stop"},
                               query = {force = opts.force and true or false},
                               idempotent = true}
  if not ok then return nil, err end
  if opts.wait == false then return ok end
  return self:wait_sandbox(id, {"stopped", "destroyed"}, opts.timeout)
end

--- Deletes a sandbox; with opts.wait, waits until it is gone. A sandbox already gone is fine.
function Client:delete_sandbox(id, opts)
  opts = opts or {}
  -- A sandbox still being created or started answers 409 until it can go: wait for that.
  local ok, err = self:request{method = "DELETE", path = {"sandbox", sandbox_id(id)},
                               retry_conflict = true, retries = 60,
                               deadline = math.max(self.deadline, 60)}
  if not ok and err.status ~= 404 then return nil, err end
  if opts.wait then return self:wait_sandbox(id, {"destroyed"}, opts.timeout) end
  return ok or {id = sandbox_id(id), state = "destroyed"}
end

-- ---------- volumes ----------

--- The volume called name. opts: create (make it when missing), wait (poll until it is
-- ready; a volume must be ready before a sandbox mounts it), timeout (seconds, default 60).
function Client:volume(name, opts)
  opts = opts or {}
  local path = {"volumes", "by-name", name}
  local vol, err = self:request{path = path}
  if not vol and err.status == 404 and opts.create then
    vol, err = self:request{method = "POST", path = "/volumes", json = {name = name}}
    -- Someone else created it meanwhile: the API says 400 "already exists"
    -- (apps/api/src/sandbox/services/volume.service.ts, create); 409 from older ones.
    if not vol and (err.status == 409 or err.status == 400 and
                    tostring(err.message):find("already exists", 1, true)) then
      vol, err = self:request{path = path}
    end
  end
  if not vol or not opts.wait then return vol, err end
  local timeout = opts.timeout or 60
  local deadline = sys.now() + timeout
  local pause = poller(self)
  while vol.state ~= "ready" do
    if vol.state == "error" then
      return nil, state_error(string.format("volume %s failed: %s", name,
        tostring(vol.errorReason)), "error")
    end
    if sys.now() >= deadline then
      return nil, timeout_error(string.format("volume %s was not ready within %g s (state: %s)",
        name, timeout, tostring(vol.state)))
    end
    pause()
    vol, err = self:request{path = path}
    if not vol then return nil, err end
  end
  return vol
end

function Client:list_volumes()
  return self:request{path = "/volumes"}
end

function Client:delete_volume(id)
  return self:request{method = "DELETE", path = {"volumes", type(id) == "table" and id.id or id}}
end

--- The API's public configuration: {version, defaultSnapshot, ...}.
function Client:config()
  return self:request{path = {"config"}}
end

-- ---------- toolbox ----------

--- The toolbox (process, files, git) of a sandbox, given its table or id. Its calls go to the
-- sandbox's toolboxProxyUrl; for an id, or a table without it, the URL is asked for first.
function Client:toolbox(sandbox)
  local id = sandbox_id(sandbox)
  local base = type(sandbox) == "table" and sandbox.toolboxProxyUrl or nil
  if not base then
    local res, err = self:request{path = {"sandbox", id, "toolbox-proxy-url"}}
    if not res then return nil, err end
    base = res.url
  end
  return setmetatable({client = self, id = id, base = base}, Toolbox)
end

-- req.path is a list of segments below the toolbox base.
function Toolbox:request(req)
  req.base = self.base
  table.insert(req.path, 1, self.id)
  return self.client:request(req)
end

-- A command with its own timeout gets that long, plus a margin for the answer to arrive.
local function command_timeout(self, seconds)
  if seconds and seconds > 0 then return seconds + 10 end
  return self.client.timeout
end

-- The daemon reads a command's timeout as a whole number of seconds: 60.0 would be refused.
local function whole_seconds(seconds)
  return seconds and math.ceil(seconds)
end

--- Runs a command: {command, cwd, envs (or env), timeout (seconds)} -> {exitCode, result}.
function Toolbox:execute(p)
  return self:request{method = "POST", path = {"process", "execute"},
                      timeout = command_timeout(self, p.timeout),
                      json = {command = p.command or p[1], cwd = p.cwd, envs = p.envs or p.env,
                              timeout = whole_seconds(p.timeout)}}
end

--- Runs code: {code, language (default python), argv, envs, timeout} -> {exitCode, result, ...}.
function Toolbox:code_run(p)
  return self:request{method = "POST", path = {"process", "code-run"},
                      timeout = command_timeout(self, p.timeout),
                      json = {code = p.code or p[1], language = p.language or "python",
                              argv = p.argv and #p.argv > 0 and p.argv or nil,
                              envs = p.envs or p.env, timeout = whole_seconds(p.timeout)}}
end

--- {version} of the sandbox's daemon.
function Toolbox:version()
  return self:request{path = {"version"}}
end

function Toolbox:create_session(session_id)
  return self:request{method = "POST", path = {"process", "session"},
                      json = {sessionId = session_id}}
end

--- Runs a command in a session: {session, command, async, suppress_input_echo, timeout}.
-- Synchronous: {cmdId, exitCode, output, stdout, stderr}; async: {cmdId} at once.
function Toolbox:session_exec(p)
  return self:request{method = "POST", path = {"process", "session", p.session, "exec"},
                      timeout = command_timeout(self, p.timeout),
                      json = {command = p.command, runAsync = p.async and true or nil,
                              suppressInputEcho = p.suppress_input_echo}}
end

--- {id, command, exitCode} — exitCode is absent while the command runs.
function Toolbox:command(session_id, command_id)
  return self:request{path = {"process", "session", session_id, "command", command_id}}
end

--- {output, stdout, stderr} of a session command so far.
function Toolbox:logs(session_id, command_id)
  return self:request{path = {"process", "session", session_id, "command", command_id, "logs"}}
end

function Toolbox:send_input(session_id, command_id, data)
  return self:request{method = "POST", json = {data = data},
                      path = {"process", "session", session_id, "command", command_id, "input"}}
end

function Toolbox:delete_session(session_id)
  return self:request{method = "DELETE", path = {"process", "session", session_id}}
end

--- Uploads files in one request: {{path = destination, data = bytes}, ...}.
function Toolbox:upload(files, opts)
  local parts, bytes = {}, 0
  for i, f in ipairs(files) do
    bytes = bytes + #f.data
    local field = "files[" .. (i - 1) .. "]"
    parts[#parts + 1] = {name = field .. ".path", data = f.path}
    parts[#parts + 1] = {name = field .. ".file", data = f.data,
                         filename = f.path:match("([^/]*)$"),
                         content_type = "application/octet-stream"}
  end
  if #parts == 0 then return true end
  -- Two minutes, and a second more per MiB: a big context on a slow link still gets there
  -- (the official SDK allows 30 minutes, which is also the most this allows).
  local timeout = opts and opts.timeout or math.min(1800, 120 + bytes // (1 << 20))
  return self:request{method = "POST", path = {"files", "bulk-upload"}, parts = parts,
                      accept = "*/*", idempotent = true, timeout = timeout}
end

--- Downloads files in one request: {path, ...} -> {[path] = data | err}; a file that could not
-- be read maps to an error object (code FILE_NOT_FOUND and the like).
function Toolbox:download(paths, opts)
  local out = {}
  if #paths == 0 then return out end
  local parts, err = self:request{method = "POST", path = {"files", "bulk-download"},
                                  json = {paths = paths}, accept = "multipart/form-data",
                                  idempotent = true, timeout = opts and opts.timeout}
  if not parts then return nil, err end
  if type(parts) ~= "table" then
    return nil, core.error{kind = "malformed", code = "BAD_RESPONSE", retryable = false,
                           message = "Daytona bulk download did not answer in multipart"}
  end
  for _, part in ipairs(parts) do
    if part.filename then
      if part.name == "error" then
        out[part.filename] = part.error or core.error{kind = "http", code = "DOWNLOAD_FAILED",
          retryable = false, message = part.filename .. ": " .. part.data}
      else
        out[part.filename] = part.data
      end
    end
  end
  for _, p in ipairs(paths) do
    if out[p] == nil then
      out[p] = core.error{kind = "malformed", code = "MISSING_PART", retryable = false,
                          message = p .. ": not in the bulk download response"}
    end
  end
  return out
end

--- FileInfo {name, isDir, size, mode, permissions, owner, group, modTime, ...}.
function Toolbox:file_info(path)
  return self:request{path = {"files", "info"}, query = {path = path}}
end

--- [FileInfo] of a directory.
function Toolbox:list_files(path)
  return self:request{path = {"files"}, query = {path = path}}
end

function Toolbox:mkdir(path, mode)
  return self:request{method = "POST", path = {"files", "folder"}, idempotent = true,
                      query = {path = path, mode = mode or "755"}}
end

function Toolbox:delete_file(path, opts)
  return self:request{method = "DELETE", path = {"files"},
                      query = {path = path, recursive = opts and opts.recursive or nil}}
end

--- Clones a repository: {url, path, branch, commit_id, username, password, timeout}.
function Toolbox:git_clone(p)
  return self:request{method = "POST", path = {"git", "clone"}, timeout = p.timeout or 300,
                      json = {url = p.url, path = p.path, branch = p.branch,
                              commit_id = p.commit_id, username = p.username,
                              password = p.password}}
end

return M
