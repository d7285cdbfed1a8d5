--- `rlm mcp deploy`: an always-on rlm MCP server in a Daytona sandbox, reached through the
-- sandbox's preview URL.
--
-- The sandbox is found by its label (rlm-mcp-deploy = NAME) or made; rlm goes in as this very
-- binary (with any shared library the sandbox lacks, found with ldd there, and libcurl and
-- libmicrohttpd, which rlm opens itself); `rlm mcp --http`
-- runs as a session command with a generated token; deploy waits for its /health through the
-- preview URL, then prints the URL, the tokens and a client configuration. The keys the server
-- needs, and its token, are a file only the sandbox's user may read (SECRETS), which the
-- server's shell reads before it starts: never the sandbox's `env` (which the API shows to
-- anyone in the organisation), a command line, an output or a log.
local args = require "rlm.args"
local daytona = require "rlm.daytona"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local M = {}

M.help = [[
usage: rlm mcp deploy [--name N] [--model PROVIDER/NAME] [--backend auto|local|daytona] [--port P]
                      [--auto-stop MINUTES] [--snapshot S] [--wait S] [--json]
       rlm mcp deploy --status | --logs | --stop | --delete [--name N]

Runs rlm's MCP server (Streamable HTTP) in a Daytona sandbox, for agents anywhere to reach
through the sandbox's preview URL. Needs DAYTONA_API_KEY (and DAYTONA_API_URL for a
self-hosted Daytona).

  --name N          the deployment (default rlm-mcp): its sandbox carries the label
                    rlm-mcp-deploy=N; deploying again reuses it, starting it when it stopped
  --model M         the model for rlm_execute and the other RLM tools (default: RLM_MODEL)
  --backend B       where the tools' code runs: local (bubblewrap inside the deployed sandbox,
                    checked before the server starts), daytona (Daytona sandboxes of their
                    own; the deployed server then holds DAYTONA_API_KEY), or auto (the
                    default): local where bubblewrap works in the sandbox, else daytona
  --port P          the port the server listens on in the sandbox (default 8080)
  --auto-stop M     minutes without a request before Daytona stops the sandbox (default 60;
                    0 never stops). `rlm mcp deploy` again brings a stopped server back.
  --snapshot S      the sandbox's snapshot (default: Daytona's default)
  --wait S          seconds to wait for the server to answer /health (default 120)
  --json            print the result as one JSON object

  --status          the sandbox's state and the server's health (exit 1 when not healthy)
  --logs            the server's output so far
  --stop            stop the sandbox (the server with it); deploy again to restart
  --delete          delete the sandbox

The model keys set here (OPENAI_API_KEY, ANTHROPIC_API_KEY, ... and their *_BASE_URL), with
DAYTONA_* for --backend daytona, go into a file in the sandbox only its user may read, not into
the sandbox's environment (which Daytona's API shows to anyone in the organisation). Clients send two headers:
"X-Rlm-Token: TOKEN" (the server's) and "X-Daytona-Preview-Token: P" (Daytona's); not
Authorization, which Daytona's proxy tries as a Daytona login. Daytona gives the sandbox a new
preview token at every start (after --stop, or after --auto-stop minutes idle): deploying again
prints the new client configuration and says it changed. --auto-stop 0 keeps the server up.]]

local SPEC = {name = "string", model = "string", backend = "string", port = "number",
              auto_stop = "number", snapshot = "string", wait = "number", json = "flag",
              status = "flag", logs = "flag", stop = "flag", delete = "flag"}

M.LABEL = "rlm-mcp-deploy"
local SECRETS = "server.env"   -- in the deployment's folder (~/.rlm), mode 600
local PREVIEW_LABEL = "rlm-mcp-preview"
M.SESSION = "rlm-mcp"
local DEFAULTS = {name = "rlm-mcp", port = 8080, auto_stop = 60, wait = 120, backend = "auto"}
local BACKENDS = {auto = true, ["local"] = true, daytona = true}
-- What the deployed server reads besides the model keys (never printed or logged).
local DAYTONA_VARS = {"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "DAYTONA_ORGANIZATION_ID",
                      "DAYTONA_API_URL", "DAYTONA_TARGET"}
-- glibc's own libraries come with the sandbox's C library; copying the host's would mix two.
local GLIBC = {"^ld%-linux", "^libc%.so", "^libm%.so", "^libpthread%.so", "^libdl%.so",
               "^librt%.so", "^libresolv%.so", "^libutil%.so", "^libanl%.so", "^libnss_"}

-- Progress, on stderr (stdout holds only the result, plain or --json).
local function say(_, ...)
  io.stderr:write("rlm mcp deploy: ", table.concat({...}), "\n")
  io.stderr:flush()
end

local function check(value, err, doing)
  if value == nil then error(("%s: %s"):format(doing, tostring(err)), 0) end
  return value
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

--- The environment the deployed server gets: every set model key and base URL, Daytona's
-- variables for the daytona backend, and the server's own token.
function M.server_env(backend, getenv)
  getenv = getenv or sys.getenv
  local env = {}
  local function take(name)
    local v = name and getenv(name)
    if v and v ~= "" then env[name] = v end
  end
  for _, p in pairs(require("rlm.llm").providers) do
    take(p.key_env)
    take(p.base_url_env)
  end
  if backend == "daytona" then
    for _, name in ipairs(DAYTONA_VARS) do take(name) end
  end
  return env
end

-- Whether table have holds every entry of want.
local function holds(have, want)
  for k, v in pairs(want) do
    if have[k] ~= v then return false end
  end
  return true
end

-- Whether the sandbox's environment holds exactly the wanted values (the token aside).
local function same_env(have, want)
  for k in pairs(have) do
    if k ~= "RLM_MCP_TOKEN" and want[k] == nil then return false end
  end
  return holds(have, want)
end

-- The secrets file: one `export NAME='value'` line per variable, in name order.
local function secrets_file(env)
  local names = {}
  for k in pairs(env) do names[#names + 1] = k end
  table.sort(names)
  local lines = {}
  for i, k in ipairs(names) do lines[i] = ("export %s=%s\n"):format(k, shell_quote(env[k])) end
  return table.concat(lines)
end

local function parse_secrets(text)
  local env = {}
  for name, quoted in text:gmatch("export ([%w_]+)=('[^\n]*')\n") do
    env[name] = quoted:sub(2, -2):gsub("'\\''", "'")
  end
  return env
end

local function find(client, name)
  local list = check(client:list_sandboxes{labels = {[M.LABEL] = name}}, nil, "listing sandboxes")
  for _, sb in ipairs(list) do
    if sb.state ~= "destroyed" and sb.state ~= "destroying" then
      return check(client:get_sandbox(sb.id))
    end
  end
  return nil
end

local function require_found(client, name)
  local sb = find(client, name)
  if not sb then error(("no deployment named %s (deploy it with `rlm mcp deploy --name %s`)"):format(name, name), 0) end
  return sb
end

-- ---------- putting rlm into the sandbox ----------

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("a")
  f:close()
  return data
end

-- The libraries rlm opens on first use (host/netlib.c): soname -> this host's file.
local OPENED = {["libcurl.so.4"] = "rlm.core.http", ["libmicrohttpd.so.12"] = "rlm.core.httpd"}

local function opened_libraries()
  local out = {}
  for name, binding in pairs(OPENED) do
    require(binding)
    local maps = assert(sys.read_file("/proc/self/maps"))
    local stem = name:match("^(.-%.so)"):gsub("%p", "%%%0")
    out[name] = maps:match("(/%S+/" .. stem .. "[%.%d]*)\n")
  end
  return out
end

-- The host's file for each shared library name rlm, and the libraries it opens, link (ldd's
-- "name => path" lines).
local function host_libraries()
  local argv = {"ldd", "/proc/self/exe"}
  for _, path in pairs(opened_libraries()) do argv[#argv + 1] = path end
  local res = sys.run(argv, {timeout = 30})
  local out = {}
  for name, path in (res and res.stdout or ""):gmatch("([^%s]+) => (/[^%s]+)") do out[name] = path end
  return out
end

--- What ldd's output says of a C library older than the one a program was built with, as a
-- message that names the version wanted; nil when it says nothing of the kind.
function M.glibc_mismatch(ldd_output)
  local need = ldd_output:match("version [`']?(GLIBC_[%d.]+)'? not found")
  if not need then return nil end
  return ("the sandbox's C library is older than the one this rlm was built with (%s not found); " ..
          "deploy from a machine with an older glibc (rlm is built on Debian bookworm), or use a " ..
          "snapshot with a newer one (--snapshot)"):format(need)
end

local function is_glibc(name)
  for _, pattern in ipairs(GLIBC) do
    if name:match(pattern) then return true end
  end
  return false
end

-- Raised when bubblewrap cannot run inside the deployed sandbox (auto then turns to daytona).
local LocalUnusable = {__tostring = function(e) return e.message end}

local Remote = {}
Remote.__index = Remote

function Remote:run(command, timeout)
  local r = check(self.tb:execute{command = "sh -c " .. shell_quote(command), timeout = timeout or 120},
                  nil, "running a command in the sandbox")
  return r.exitCode or 0, r.result or ""
end

function Remote:upload(path, data)
  check(self.tb:upload{{path = path, data = data}}, nil, "uploading " .. path)
end

--- The server's variables as the secrets file holds them, or nil when there is none.
function Remote:secrets()
  local got = self.tb:download({self.dir .. "/" .. SECRETS})
  local text = got and got[self.dir .. "/" .. SECRETS]
  return type(text) == "string" and parse_secrets(text) or nil
end

-- Writes the secrets file, readable by the sandbox's user alone.
function Remote:put_secrets(env)
  local path = self.dir .. "/" .. SECRETS
  local code = self:run(("mkdir -p %s && umask 077 && : > %s && chmod 600 %s"):format(
    shell_quote(self.dir), shell_quote(path), shell_quote(path)))
  if code ~= 0 then error("could not make the server's secrets file in the sandbox", 0) end
  self:upload(path, secrets_file(env))
end

-- rlm itself, unless the same binary is there already (its hash sits beside it).
function Remote:put_binary()
  local data = check(read_file("/proc/self/exe"), "cannot read", "reading rlm's own binary")
  local id = ("%s-%d"):format(sys.hash(data), #data)
  local code, have = self:run("cat " .. self.dir .. "/bin/rlm.id 2>/dev/null")
  if code == 0 and have:match("^%s*(.-)%s*$") == id then return false end
  self:upload(self.dir .. "/bin/rlm", data)
  self:upload(self.dir .. "/bin/rlm.id", id .. "\n")
  code = self:run("chmod 755 " .. self.dir .. "/bin/rlm")
  if code ~= 0 then error("could not make rlm executable in the sandbox", 0) end
  return true
end

-- The shared libraries program needs and the sandbox lacks, copied from this host into
-- DIR/lib; repeated, since a copied library may need more. rlm opens libcurl and
-- libmicrohttpd itself on first use (host/netlib.c), so ldd does not list them: they are
-- checked by name, copied when the sandbox lacks them, and their own needs follow.
function Remote:put_libraries(program)
  local programs = {program}
  for name, path in pairs(opened_libraries()) do
    local code = self:run(("ldconfig -p | grep -q '%s ' || test -e %s/lib/%s"):format(
      name:gsub("%.", "\\."), self.dir, name))
    if code ~= 0 then
      self:upload(self.dir .. "/lib/" .. name, check(read_file(path), "cannot read", "reading " .. path))
      programs[#programs + 1] = self.dir .. "/lib/" .. name
    end
  end
  local host = nil
  for _ = 1, 4 do
    local _, out = self:run(("LD_LIBRARY_PATH=%s/lib ldd %s 2>&1"):format(self.dir,
                             table.concat(programs, " ")))
    local old = M.glibc_mismatch(out)
    if old then error(old, 0) end
    local missing, seen = {}, {}
    for name in out:gmatch("([^%s]+) => not found") do
      if not seen[name] then seen[name] = true; missing[#missing + 1] = name end
    end
    if #missing == 0 then return end
    host = host or host_libraries()
    for _, name in ipairs(missing) do
      local path = host[name]
      if not path or is_glibc(name) then
        error(("the sandbox lacks %s, which rlm needs and this host cannot provide; use a " ..
               "Debian-based snapshot (--snapshot)"):format(name), 0)
      end
      self:upload(self.dir .. "/lib/" .. name, check(read_file(path), "cannot read", "reading " .. path))
    end
  end
end

-- bubblewrap for the local backend: the sandbox's own, or this host's copy.
function Remote:put_bwrap()
  local code = self:run("command -v bwrap")
  if code == 0 then return nil end
  local data = read_file("/usr/bin/bwrap")
  if not data then
    error("the sandbox has no bubblewrap and this host has none to copy: deploy with --backend daytona", 0)
  end
  self:upload(self.dir .. "/bin/bwrap", data)
  self:run("chmod 755 " .. self.dir .. "/bin/bwrap")
  self:put_libraries(self.dir .. "/bin/bwrap")
  return self.dir .. "/bin/bwrap"
end

function Remote:prefix()
  local p = ("LD_LIBRARY_PATH=%s/lib"):format(self.dir)
  if self.bwrap then p = p .. " RLM_BWRAP=" .. self.bwrap end
  return p
end

-- The local backend must really work in there: tools' code never runs beside the keys.
function Remote:check_local_sandbox()
  local code, out = self:run(("%s %s/bin/rlm exec 'print(6 * 7)' 2>&1"):format(self:prefix(), self.dir), 120)
  if code ~= 0 or not out:find("42", 1, true) then
    local reason = ("bubblewrap does not work inside this Daytona sandbox (%s)"):format(
      trace.redact(out:match("([^\n]+)") or ("exit " .. code)))
    error(setmetatable({reason = reason, message = reason .. ": deploy with --backend daytona, " ..
                        "which runs the tools' code in Daytona sandboxes of their own"}, LocalUnusable), 0)
  end
end

-- The deployment's folder in the started sandbox sb, reached through its toolbox.
local function remote_for(client, sb)
  local tb = check(client:toolbox(sb))
  local home = check(tb:request{path = {"user-home-dir"}}, nil, "asking for the sandbox's home").dir
  return setmetatable({tb = tb, dir = home .. "/.rlm"}, Remote)
end

-- ---------- the server ----------

local function preview(client, sb, port)
  return check(client:request{path = {"sandbox", sb.id, "ports", tostring(port), "preview-url"}},
               nil, "asking for the preview URL")
end

local function health(pv, timeout)
  local res, err = http.request{url = pv.url .. "/health", timeout = timeout or 10,
                                headers = {["X-Daytona-Preview-Token"] = pv.token}}
  if not res then return nil, err end
  if res.status ~= 200 then return nil, ("HTTP %d"):format(res.status) end
  local ok, body = pcall(json.decode, res.body)
  if not ok or type(body) ~= "table" or body.status ~= "ok" then
    return nil, "not an rlm health answer (is something else on that port?)"
  end
  return body
end

-- The session command running the server, or nil.
local function server_command(tb)
  local session = tb:request{path = {"process", "session", M.SESSION}}
  if not session or type(session.commands) ~= "table" then return nil end
  return session.commands[#session.commands]
end

local function launch(remote, cfg, pv)
  local tb = remote.tb
  tb:delete_session(M.SESSION)      -- an earlier server, if any: its process ends with it
  check(tb:create_session(M.SESSION), nil, "creating the server's session")
  local allowed = pv.url:match("^%a+://([^/]+)")
  local argv = {remote.dir .. "/bin/rlm", "mcp", "--http", "0.0.0.0:" .. cfg.port, "--backend", cfg.backend}
  if cfg.model then argv[#argv + 1] = "--model"; argv[#argv + 1] = cfg.model end
  for i, a in ipairs(argv) do argv[i] = shell_quote(a) end
  -- Keys and the token come from the secrets file, read by the shell itself: no command line
  -- names them.
  local command = ("cd %s && . ./%s && exec env %s RLM_MCP_ALLOWED_HOSTS=%s %s"):format(
    remote.dir, SECRETS, remote:prefix(), shell_quote(allowed), table.concat(argv, " "))
  check(tb:session_exec{session = M.SESSION, command = command, async = true}, nil, "starting the server")
end

local function wait_healthy(client, remote, pv, seconds)
  local deadline = sys.now() + seconds
  local last
  while sys.now() < deadline do
    local body, err = health(pv, 5)
    if body then return body end
    last = err
    local cmd = server_command(remote.tb)
    if cmd and cmd.exitCode ~= nil then
      local logs = remote.tb:logs(M.SESSION, cmd.id)
      local text = type(logs) == "table" and (logs.output or logs.stderr) or tostring(logs or "")
      error(("the server exited (%s) before answering: %s"):format(tostring(cmd.exitCode),
            trace.redact(text:match("([^\n]+)%s*$") or "no output")), 0)
    end
    sys.sleep(0.5)
  end
  error(("the server did not answer %s/health within %g s (%s); see `rlm mcp deploy --logs`")
        :format(pv.url, seconds, tostring(last)), 0)
end

-- The server's token goes in X-Rlm-Token: Daytona's proxy tries any Authorization bearer token
-- as a Daytona credential first, and a failed one counts against the client's address
-- (apps/proxy/pkg/proxy/auth.go; apps/api/src/common/middleware/failed-auth-rate-limit.middleware.ts).
local function client_config(url, token, preview_token)
  return {mcpServers = {rlm = {type = "http", url = url,
    headers = {["X-Rlm-Token"] = token, ["X-Daytona-Preview-Token"] = preview_token}}}}
end

local function report(opts, result)
  if opts.json then
    io.stdout:write(json.encode(result), "\n")
    return
  end
  local out = {
    ("rlm MCP server %q is up in sandbox %s (backend %s%s)"):format(result.name, result.sandbox_id,
      result.backend, result.model and (", model " .. result.model) or ""),
    "  url:            " .. result.url,
    "  token:          " .. result.token,
    "  preview token:  " .. result.preview_token,
    "",
  }
  if result.preview_token_changed then
    out[#out + 1] = "The preview token changed since the last deploy (Daytona gives a new one at " ..
                    "every start): clients need the configuration below."
    out[#out + 1] = ""
  end
  for _, text in ipairs{
    "Client configuration (.mcp.json, Claude Desktop and others):",
    json.encode(result.config),
    "",
    "Claude Code:",
    ("  claude mcp add --transport http rlm %s --header %s --header %s"):format(result.url,
      shell_quote("X-Rlm-Token: " .. result.token),
      shell_quote("X-Daytona-Preview-Token: " .. result.preview_token)),
  } do out[#out + 1] = text end
  io.stdout:write(table.concat(out, "\n"), "\n")
end

local function create(client, opts, cfg)
  local env = M.server_env(cfg.backend)
  env.RLM_MCP_TOKEN = sys.random_hex(24)
  say(opts, "creating sandbox ", cfg.name)
  local sb = check(client:create_sandbox{name = cfg.name, snapshot = opts.snapshot,
                                         labels = {[M.LABEL] = cfg.name, ["rlm-mcp-backend"] = cfg.backend},
                                         auto_stop_interval = opts.auto_stop, timeout = 120},
                   nil, "creating the sandbox")
  -- A deployment that fails takes the sandbox it made with it: nothing is left behind.
  local ok, result = pcall(M.serve, client, opts, cfg, sb, env)
  if ok then return result end
  say(opts, "deleting sandbox ", sb.id, " again")
  client:delete_sandbox(sb.id, {wait = true, timeout = 60})
  error(result, 0)
end

local function reuse(client, opts, cfg, sb)
  if sb.state ~= "started" then
    say(opts, "starting sandbox ", sb.id, " (", tostring(sb.state), ")")
    sb = check(client:start_sandbox(sb.id, 120), nil, "starting the sandbox")
  end
  -- A deployment made before the secrets file held its keys in the sandbox's env.
  local have = remote_for(client, sb):secrets() or sb.env or {}
  if not same_env(have, M.server_env(cfg.backend)) or not have.RLM_MCP_TOKEN then
    error(("the deployment %s was made with other keys or another backend; delete it first " ..
           "(`rlm mcp deploy --delete --name %s`), then deploy again"):format(cfg.name, cfg.name), 0)
  end
  if (sb.autoStopInterval or -1) ~= opts.auto_stop then
    check(client:request{method = "POST", idempotent = true,
                         path = {"sandbox", sb.id, "autostop", tostring(opts.auto_stop)}},
          nil, "setting auto-stop")
  end
  return M.serve(client, opts, cfg, sb, have)
end

function M.deploy(client, opts)
  local cfg = {name = opts.name, port = opts.port, backend = opts.backend,
               model = opts.model or sys.getenv("RLM_MODEL")}
  if cfg.model == "" then cfg.model = nil end
  local sb = find(client, cfg.name)
  if sb then
    if cfg.backend == "auto" then cfg.backend = (sb.labels or {})["rlm-mcp-backend"] or "local" end
    return reuse(client, opts, cfg, sb)
  end
  if cfg.backend ~= "auto" then return create(client, opts, cfg) end
  cfg.backend = "local"
  local ok, err = pcall(create, client, opts, cfg)
  if ok then return err end
  if getmetatable(err) ~= LocalUnusable then error(err, 0) end
  say(opts, err.reason, ": the tools' code will run in Daytona sandboxes of their own")
  cfg.backend = "daytona"
  return create(client, opts, cfg)
end

--- Puts rlm into the started sandbox sb with the server's variables env (keys and token),
-- (re)starts the server when needed and reports.
function M.serve(client, opts, cfg, sb, env)
  local token = env.RLM_MCP_TOKEN
  local remote = remote_for(client, sb)
  local uploaded = remote:put_binary()
  remote:put_secrets(env)
  if uploaded then say(opts, "uploaded rlm") end
  remote:put_libraries(remote.dir .. "/bin/rlm")
  if cfg.backend == "local" then
    remote.bwrap = remote:put_bwrap()
    remote:check_local_sandbox()
  end
  local pv = preview(client, sb, cfg.port)
  local labels = {[M.LABEL] = cfg.name, ["rlm-mcp-port"] = tostring(cfg.port),
                  ["rlm-mcp-backend"] = cfg.backend, ["rlm-mcp-model"] = cfg.model or ""}
  -- The same server already answering is left alone: the agents using it keep their sessions.
  if uploaded or not holds(sb.labels or {}, labels) or not health(pv, 5) then
    say(opts, "starting the server on port ", tostring(cfg.port))
    launch(remote, cfg, pv)
    wait_healthy(client, remote, pv, opts.wait)
  end
  -- Which preview token the last printed configuration held (a hash: labels are shown to
  -- anyone in the organisation), so a changed one can be said to be new.
  local seen = (sb.labels or {})[PREVIEW_LABEL]
  labels[PREVIEW_LABEL] = sys.hash(pv.token)
  if not holds(sb.labels or {}, labels) then
    check(client:request{method = "PUT", path = {"sandbox", sb.id, "labels"}, idempotent = true,
                         json = {labels = labels}}, nil, "labelling the sandbox")
  end
  local url = pv.url .. "/mcp"
  report(opts, {name = cfg.name, sandbox_id = sb.id, backend = cfg.backend, model = cfg.model,
                url = url, token = token, preview_token = pv.token, auto_stop = opts.auto_stop,
                preview_token_changed = seen ~= nil and seen ~= labels[PREVIEW_LABEL],
                config = client_config(url, token, pv.token)})
  return 0
end

function M.status(client, opts)
  local sb = require_found(client, opts.name)
  local port = tonumber((sb.labels or {})["rlm-mcp-port"]) or opts.port
  local info = {name = opts.name, sandbox_id = sb.id, state = sb.state, port = port,
                backend = (sb.labels or {})["rlm-mcp-backend"], auto_stop = sb.autoStopInterval,
                last_activity = sb.lastActivityAt}
  if sb.state == "started" then
    local pv = preview(client, sb, port)
    info.url = pv.url .. "/mcp"
    local body, err = health(pv, 10)
    info.healthy = body ~= nil
    info.health = body or {error = tostring(err)}
  else
    info.healthy = false
  end
  if opts.json then
    io.stdout:write(json.encode(info), "\n")
  else
    local lines = {("%s: sandbox %s, %s"):format(opts.name, sb.id, sb.state)}
    if info.url then lines[#lines + 1] = "  url:       " .. info.url end
    lines[#lines + 1] = "  health:    " .. (info.healthy and
      ("ok (rlm %s, up %d s, %d sessions)"):format(tostring(info.health.version),
        info.health.uptime_s or 0, info.health.sessions or 0)
      or (info.health and info.health.error or "not running"))
    lines[#lines + 1] = ("  auto-stop: %s"):format(info.auto_stop == 0 and "never" or
      (tostring(info.auto_stop) .. " min idle"))
    io.stdout:write(table.concat(lines, "\n"), "\n")
  end
  return info.healthy and 0 or 1
end

function M.logs(client, opts)
  local sb = require_found(client, opts.name)
  if sb.state ~= "started" then error(("%s is %s: no server runs"):format(opts.name, sb.state), 0) end
  local remote = remote_for(client, sb)
  local tb = remote.tb
  local cmd = server_command(tb)
  if not cmd then error(("%s runs no server (deploy it again)"):format(opts.name), 0) end
  local logs = check(tb:logs(M.SESSION, cmd.id), nil, "reading the logs")
  local text = type(logs) == "table" and (logs.output or ((logs.stdout or "") .. (logs.stderr or ""))) or logs
  -- The server never prints a key, but its variables are scrubbed from the text regardless.
  local secrets = {}
  for _, v in pairs(remote:secrets() or sb.env or {}) do
    if #v >= 8 then secrets[#secrets + 1] = v end
  end
  io.stdout:write(trace.redact(trace.redact(tostring(text), secrets)))
  return 0
end

function M.stop(client, opts)
  local sb = require_found(client, opts.name)
  check(client:stop_sandbox(sb.id, {timeout = 120}), nil, "stopping the sandbox")
  say(opts, "stopped ", opts.name, " (sandbox ", sb.id, "); `rlm mcp deploy --name ", opts.name, "` restarts it")
  return 0
end

function M.delete(client, opts)
  local sb = require_found(client, opts.name)
  check(client:delete_sandbox(sb.id, {wait = true, timeout = 120}), nil, "deleting the sandbox")
  say(opts, "deleted ", opts.name, " (sandbox ", sb.id, ")")
  return 0
end

function M.main(argv)
  if argv[1] == "--help" or argv[1] == "-h" then
    print(M.help)
    return 0
  end
  local opts, rest = args.parse(argv, SPEC)
  if #rest > 0 then
    return args.usage("mcp deploy", ("unexpected argument '%s'"):format(rest[1]), M.help)
  end
  for k, v in pairs(DEFAULTS) do
    if opts[k] == nil then opts[k] = v end
  end
  if not BACKENDS[opts.backend] then args.fail("--backend must be auto, local or daytona") end
  if opts.port < 1 or opts.port > 65535 or opts.port % 1 ~= 0 then args.fail("--port must be 1-65535") end
  if opts.auto_stop < 0 or opts.auto_stop % 1 ~= 0 then args.fail("--auto-stop must be whole minutes, 0 or more") end
  if not opts.name:match("^[%w][%w._-]*$") then args.fail("--name may hold letters, digits, '.', '_' and '-'") end
  local actions = {}
  for _, a in ipairs{"status", "logs", "stop", "delete"} do
    if opts[a] then actions[#actions + 1] = a end
  end
  if #actions > 1 then args.fail("give one of --status, --logs, --stop, --delete") end
  local client = daytona.client{}
  return M[actions[1] or "deploy"](client, opts)
end

return M
