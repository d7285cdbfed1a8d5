-- `rlm mcp deploy` against the Daytona stand-in: the server reached through the sandbox's preview
-- URL with both tokens (and refused without either), its tools running code in sandboxes of
-- their own, stop and restart, delete leaving nothing, and no key in any output or log.
local T = require "support"
local D = require "daytona_fixtures"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local OPENAI_KEY = "sk-openai-deploy-5ecret-0123456789"
local ANTHROPIC_KEY = "sk-ant-deploy-5ecret-0123456789"

-- Every output of every command a case ran, searched for keys at its end.
local outputs = {}

-- A deployed server is reached through its sandbox's preview URL, which the stand-in serves by
-- entering the sandbox's network namespace: setns needs CAP_SYS_ADMIN, which only root has.
local function need_root()
  if sys.getuid() ~= 0 then
    T.skip("needs root: as an ordinary user the Daytona stand-in cannot enter a sandbox's network "
           .. "namespace (setns needs CAP_SYS_ADMIN), so a deployed server's preview URL never answers")
  end
end

local function deploy(env, ...)
  local r = T.run_rlm({"mcp", "deploy", ...}, {env = env, timeout = 180})
  outputs[#outputs + 1] = r.stdout .. r.stderr
  return r
end

local function no_key_anywhere()
  local all = table.concat(outputs, "\n")
  outputs = {}
  for _, key in ipairs{OPENAI_KEY, ANTHROPIC_KEY, D.KEY} do
    T.eq(all:find(key, 1, true), nil, "a key in the output")
  end
end

local function get(url, headers)
  return assert(http.request{url = url, headers = headers, timeout = 30})
end

-- A request as a deployed client sends it: the headers of its printed configuration.
local function rpc(info, session, msg, headers)
  local h = {["Content-Type"] = "application/json", Accept = "application/json",
             ["Mcp-Session-Id"] = session}
  for k, v in pairs(info.config.mcpServers.rlm.headers) do h[k] = v end
  for k, v in pairs(headers or {}) do h[k] = v or nil end
  return assert(http.request{url = info.url, method = "POST", headers = h, body = json.encode(msg),
                             timeout = 120})
end

local INIT = {jsonrpc = "2.0", id = 1, method = "initialize",
              params = {protocolVersion = "2025-06-18", capabilities = {},
                        clientInfo = {name = "test", version = "1"}}}

-- The processes of this test's stand-in (its sandboxes run below it) whose command line holds
-- text: the deployed server runs as .rlm/bin/rlm. Another test run's deployment is not ours.
local function processes_with(s, text)
  local found = {}
  for _, p in ipairs(T.descendants(s.proc:pid())) do
    if p.cmdline:find(text, 1, true) then found[#found + 1] = p.pid end
  end
  return found
end

tests["deploy: served through the preview URL with both tokens; stop, restart, delete; no key shown"] = function()
  need_root()
  local s = D.standin()
  local env = D.env(s, {OPENAI_API_KEY = OPENAI_KEY, ANTHROPIC_API_KEY = ANTHROPIC_KEY})
  local r = deploy(env, "--name", "team", "--json")
  T.eq(r.code, 0, r.stdout .. r.stderr)
  local info = json.decode(r.stdout)
  -- bubblewrap cannot mount a /proc inside the stand-in's sandbox (as inside a container), so
  -- auto chose Daytona sandboxes for the tools' code
  T.eq(info.backend, "daytona")
  T.contains(r.stderr, "bubblewrap does not work inside this Daytona sandbox")
  T.eq(#s:live(), 1, "one sandbox: the failed local try was deleted")
  T.truthy(info.url:find("/mcp$"), info.url)
  T.eq(#info.token, 48)
  -- not Authorization: Daytona's proxy would try it as a Daytona credential, and count each
  -- failure against the client (apps/proxy/pkg/proxy/auth.go)
  T.eq(info.config.mcpServers.rlm.headers, {["X-Rlm-Token"] = info.token,
                                            ["X-Daytona-Preview-Token"] = info.preview_token})
  T.eq(info.preview_token_changed, false, "a new deployment")

  -- the keys are a file only the sandbox's user reads: not the sandbox's env, which the API
  -- shows anyone in the organisation, nor its command line
  local sb = json.decode(get(s.url .. "/api/sandbox/" .. info.sandbox_id,
                             {Authorization = "Bearer " .. D.KEY}).body)
  T.eq(sb.env, {}, "no key in the sandbox's env")
  local mode = assert(http.request{url = s.url .. "/toolbox/" .. info.sandbox_id .. "/process/execute",
    method = "POST", headers = {Authorization = "Bearer " .. D.KEY, ["Content-Type"] = "application/json"},
    body = json.encode{command = "sh -c 'stat -c %a ~/.rlm/server.env; grep -c _API_KEY= ~/.rlm/server.env'"}})
  T.eq(json.decode(mode.body).result, "600\n3\n", "the secrets file: its mode, and the three keys")
  local session = json.decode(get(s.url .. "/toolbox/" .. info.sandbox_id .. "/process/session/rlm-mcp",
                                  {Authorization = "Bearer " .. D.KEY}).body)
  for _, cmd in ipairs(session.commands) do
    T.eq(cmd.command:find(OPENAI_KEY, 1, true), nil, "a key on the command line")
    T.eq(cmd.command:find(info.token, 1, true), nil, "the token on the command line")
  end

  -- health: through the preview with its token; without it, or with a wrong one, Daytona's
  -- proxy sends the client to sign in
  local base = info.url:gsub("/mcp$", "")
  local h = get(base .. "/health", {["X-Daytona-Preview-Token"] = info.preview_token})
  T.eq(h.status, 200)
  T.eq(json.decode(h.body).status, "ok")
  T.eq(get(base .. "/health").status, 307)
  T.eq(get(base .. "/health", {["X-Daytona-Preview-Token"] = "wrong"}).status, 307)

  -- MCP: both tokens needed
  T.eq(rpc(info, nil, INIT, {["X-Rlm-Token"] = false}).status, 401)
  T.eq(rpc(info, nil, INIT, {["X-Rlm-Token"] = "wrong"}).status, 401)
  T.eq(rpc(info, nil, INIT, {["X-Daytona-Preview-Token"] = false}).status, 307)
  local init = rpc(info, nil, INIT)
  T.eq(init.status, 200, init.body)
  local sid = assert(init.headers["mcp-session-id"])
  rpc(info, sid, {jsonrpc = "2.0", method = "notifications/initialized"})
  local code = "import os\nprint(6 * 7, sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k))"
  local call = rpc(info, sid, {jsonrpc = "2.0", id = 2, method = "tools/call",
                               params = {name = "sandbox_exec", arguments = {code = code}}})
  T.eq(call.status, 200, call.body)
  local result = json.decode(call.body).result
  -- the code ran in a sandbox of its own, which holds no key
  T.eq(result.structuredContent.stdout, "42 []\n")
  T.eq(s:stats().failed_auth, 0, "no client request was a failed Daytona login")
  T.truthy(#processes_with(s, ".rlm/bin/rlm") >= 1, "the deployed server runs below the stand-in")

  r = deploy(env, "--name", "team", "--status")
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "health:    ok")
  r = deploy(env, "--name", "team", "--logs")
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "serving MCP at http://0.0.0.0:8080/mcp")

  r = deploy(env, "--name", "team", "--stop")
  T.eq(r.code, 0, r.stderr)
  T.eq(#processes_with(s, ".rlm/bin/rlm"), 0, "the server stopped with its sandbox")
  r = deploy(env, "--name", "team", "--status")
  T.eq(r.code, 1, "a stopped server is not healthy")
  T.contains(r.stdout, "stopped")

  -- deploying again brings it back with the same server token, but Daytona gave the sandbox a
  -- new preview token at its start (sandbox.service.ts, start): the new configuration is
  -- printed, and said to be new
  r = deploy(env, "--name", "team", "--json")
  T.eq(r.code, 0, r.stdout .. r.stderr)
  local again = json.decode(r.stdout)
  T.eq(again.sandbox_id, info.sandbox_id)
  T.eq(again.token, info.token)
  T.truthy(again.preview_token ~= info.preview_token, "a new preview token")
  T.eq(again.preview_token_changed, true)
  T.eq(rpc(info, nil, INIT).status, 307, "the old configuration no longer reaches it")
  T.eq(rpc(again, nil, INIT).status, 200)
  r = deploy(env, "--name", "team")
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, again.preview_token)
  T.truthy(not r.stdout:find("changed", 1, true), "unchanged since the last deploy: " .. r.stdout)

  r = deploy(env, "--name", "team", "--delete")
  T.eq(r.code, 0, r.stderr)
  T.eq(s:live(), {}, "sandboxes left")
  T.eq(#processes_with(s, ".rlm/bin/rlm"), 0, "processes left")
  no_key_anywhere()
end

tests["deploy: --backend local where bubblewrap cannot run says why and leaves no sandbox"] = function()
  need_root()
  local s = D.standin()
  local r = deploy(D.env(s, {OPENAI_API_KEY = OPENAI_KEY}), "--backend", "local")
  T.eq(r.code, 1)
  T.contains(r.stderr, "bubblewrap does not work inside this Daytona sandbox")
  T.contains(r.stderr, "deploy with --backend daytona")
  T.eq(s:live(), {})
  no_key_anywhere()
end

tests["deploy: a deployment with other keys is not silently reused"] = function()
  need_root()
  local s = D.standin()
  local r = deploy(D.env(s, {OPENAI_API_KEY = OPENAI_KEY}), "--backend", "daytona", "--json")
  T.eq(r.code, 0, r.stderr)
  r = deploy(D.env(s, {OPENAI_API_KEY = OPENAI_KEY .. "-rotated"}), "--backend", "daytona")
  T.eq(r.code, 1)
  T.contains(r.stderr, "made with other keys")
  T.contains(r.stderr, "rlm mcp deploy --delete --name rlm-mcp")
  r = deploy(D.env(s), "--delete")
  T.eq(r.code, 0, r.stderr)
  T.eq(s:live(), {})
  no_key_anywhere()
end

tests["deploy: a sandbox whose glibc is too old is named as such"] = function()
  local deploy_cmd = require "rlm.cmd.mcp_deploy"
  local msg = deploy_cmd.glibc_mismatch(
    "/home/daytona/.rlm/bin/rlm: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found " ..
    "(required by /home/daytona/.rlm/bin/rlm)\n\tlinux-vdso.so.1 (0x00007ffd)\n")
  T.contains(msg, "GLIBC_2.38 not found")
  T.contains(msg, "older than the one this rlm was built with")
  T.eq(deploy_cmd.glibc_mismatch("\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n"), nil)
end

tests["deploy: mistakes in the command line and unknown deployments"] = function()
  local s = D.standin()
  local env = D.env(s)
  T.eq(deploy(env, "--backend", "nope").code, 2)
  T.eq(deploy(env, "--port", "70000").code, 2)
  T.eq(deploy(env, "--status", "--stop").code, 2)
  local r = deploy(env, "--name", "ghost", "--status")
  T.eq(r.code, 1)
  T.contains(r.stderr, "no deployment named ghost")
  r = deploy({PATH = sys.getenv("PATH"), HOME = T.tmpdir()}, "--status")
  T.eq(r.code, 1)
  T.contains(r.stderr, "DAYTONA_API_KEY")
  T.eq(s:requests("POST /api/sandbox"), 0)
  outputs = {}
end

return tests
