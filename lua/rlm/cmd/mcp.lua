--- `rlm mcp`: the MCP server, over stdio (default) or Streamable HTTP.
local args = require "rlm.args"
local host = require "rlm.core.host"
local mcp = require "rlm.mcp.server"
local sys = require "rlm.sys"

local M = {}

M.help = [[
usage: rlm mcp [--http [HOST:]PORT] [--backend local|daytona] [--model PROVIDER/NAME]
               [--execute-timeout S] [--max-result BYTES] [--max-sessions N]
               [--sandbox-idle S] [--max-connections N] [--tools FILE.lua]
               [--network FILE.lua]
       rlm mcp deploy [--name N] ...    the server, always on, in a Daytona sandbox
                                        (`rlm mcp deploy --help`)

Serves rlm's tools over the Model Context Protocol: version 2026-07-28 (stateless: no
handshake, server/discover, the tasks extension for the rlm_* runs, sandboxes kept between
calls by a `workspace` handle) and the session versions 2025-11-25, 2025-06-18, 2025-03-26 and
2024-11-05, side by side:
  rlm_execute, rlm_analyze, rlm_code, rlm_decompose     the RLM loop (needs a model)
  sandbox_exec                                          one Python block, fresh sandbox
  sandbox_exec_stateful, sandbox_upload, sandbox_download, sandbox_files, sandbox_shell
                                                        the session's persistent sandbox
  rlm_status                                            backend, model, sandboxes, usage

Without --http it speaks MCP on stdin/stdout (one JSON message per line; logs on stderr) and
exits when stdin ends. With --http it serves Streamable HTTP at http://HOST:PORT/mcp (and
GET /health, which needs no token, for load balancers and deployments); HOST
defaults to 127.0.0.1 and PORT 0 picks a free port (printed as "READY http://HOST:PORT").
Binding to a non-loopback address needs RLM_MCP_TOKEN: every request must then carry
"Authorization: Bearer $RLM_MCP_TOKEN" or "X-Rlm-Token: $RLM_MCP_TOKEN" (the token is checked
on loopback too when set).
Host and Origin must be local; RLM_MCP_ALLOWED_HOSTS and RLM_MCP_ALLOWED_ORIGINS (comma
separated) allow others.

Many agents may share one HTTP server. A session's persistent sandbox is freed after
--sandbox-idle seconds without a call (default 600); the session goes on, and its next call
says that its state was lost. Sessions nobody ends close after an hour idle; past
--max-sessions (default 10000) the least recently used idle one is ended to make room. Past
--max-connections open connections (default 1024) a request is answered 503 with Retry-After.
There is no cap per client address: behind a proxy every client shares one.

The model and backend come from --model/--backend or RLM_MODEL/RLM_BACKEND, as for `rlm ask`.

--tools FILE.lua gives the code of every run and sandbox your tools (the file `rlm ask --tools`
takes: Lua functions and MCP servers, docs/lua-api.md, Tools). A client may add its own with
the tool_servers argument of the rlm_* tools, sandbox_exec and sandbox_exec_stateful: MCP
servers it serves over Streamable HTTP ({url, headers}); stdio commands are refused, as a
client must not start programs on this host. The server reaches those URLs from this host:
over --http only on the hosts listed in RLM_MCP_TOOL_SERVERS (comma separated HOST or
HOST:PORT, or *), none by default, so that a client cannot reach what only this host can.
--network FILE.lua lets the code of every run and sandbox reach the hosts the file lists, with
the keys it names added on this host (the file `rlm ask --network` takes: docs/lua-api.md,
Network).

A tool result is at most --max-result bytes of JSON (default 4 MiB over stdio, where the
official SDKs refuse messages over 10 MiB and the session would end; 16 MiB over HTTP); a
bigger answer is saved as a file in the sandbox and the result gives its path. Output over
64 KiB travels once, in the text (structuredContent lists it as omitted). sandbox_download
sends a big file in parts (offset, length); sandbox_upload takes one in parts (append). Coming from rlm-mcp: its argument names (rlm_code description,
rlm_decompose complex_task and num_subtasks, sandbox_files path) and its /home/daytona/...
paths (read as under the workspace) are accepted.

Coming from rlm-mcp, its environment works too: MCP_TRANSPORT=http (or streamable-http) with
MCP_PORT (default 8000) serves HTTP on 127.0.0.1:MCP_PORT unless --http is given, and
RLM_MAX_OUTPUT_CHARS sets the default of --max-result.

Test only: --fixtures FILE (or RLM_MCP_FIXTURES=FILE) adds the fixture tools, resources and
prompts of FILE (the project's tests/mcp/fixtures.lua), which the official MCP conformance suite
calls. They are not part of rlm; never use them otherwise.]]

local SPEC = {http = "string", backend = "string", model = "string", execute_timeout = "number",
              fixtures = "string", max_result = "number", max_sessions = "number",
              sandbox_idle = "number", max_connections = "number", tools = "string",
              network = "string"}

local MIB = 1024 * 1024
-- What one tool result may carry by default: well under the official SDKs' 10 MiB message
-- limit on stdio (base64 and JSON escapes grow the payload), more over HTTP.
local MAX_RESULT = {stdio = 4 * MIB, http = 16 * MIB}

local function eprint(...)
  io.stderr:write("rlm mcp: ", table.concat({...}), "\n")
  io.stderr:flush()
end

--- "8080" | "HOST:8080" | "[v6]:8080" -> host, port
function M.parse_address(text)
  local h, p = text:match("^%[([^%]]+)%]:(%d+)$")
  if not h then h, p = text:match("^([^:]+):(%d+)$") end
  if not h then h, p = "127.0.0.1", text:match("^(%d+)$") end
  local port = tonumber(p)
  if not port or port > 65535 then
    error(("--http needs [HOST:]PORT, got %q"):format(text), 0)
  end
  return h, port
end

local function list_env(name)
  local v = sys.getenv(name)
  if not v or v == "" then return nil end
  local out = {}
  for item in v:gmatch("[^,%s]+") do out[#out + 1] = item end
  return out
end

-- rlm-mcp's variables, where no option says otherwise.
local SEED_PORT = 8000
local HTTP_TRANSPORTS = {http = true, ["streamable-http"] = true, streamable_http = true}

function M.seed_environment(opts)
  local transport = (sys.getenv("MCP_TRANSPORT") or ""):lower()
  if transport ~= "" and transport ~= "stdio" and not HTTP_TRANSPORTS[transport] then
    error(("MCP_TRANSPORT=%s: use stdio or http (streamable-http)"):format(transport), 0)
  end
  if HTTP_TRANSPORTS[transport] and not opts.http then
    local port = sys.getenv("MCP_PORT")
    if port and port ~= "" and not port:match("^%d+$") then
      error(("MCP_PORT=%s: a port number, such as 8000"):format(port), 0)
    end
    opts.http = "127.0.0.1:" .. ((port and port ~= "") and port or SEED_PORT)
  end
  local chars = sys.getenv("RLM_MAX_OUTPUT_CHARS")
  if chars and chars ~= "" and not opts.max_result then
    opts.max_result = tonumber(chars:match("^%d+$"))
    if not opts.max_result then
      error(("RLM_MAX_OUTPUT_CHARS=%s: a whole number of characters"):format(chars), 0)
    end
  end
end

--- The conformance suite's fixtures: a Lua file of the tests (they never ship in the binary).
function M.load_fixtures(path)
  local chunk, err = loadfile(path, "t")
  if not chunk then error(("--fixtures: %s"):format(err), 0) end
  return chunk()
end

--- The tools of a --tools file, had once now: a file that will not do stops the server here
-- rather than failing every run.
function M.load_tools(path)
  local lib = require "rlm.tools"
  local tools = lib.load_file(path)
  local list = lib.load(tools)
  lib.close(list)
  return tools
end

--- The hosts an HTTP client may name in tool_servers (rlm.mcp.client_tools): those the
-- operator lists in RLM_MCP_TOOL_SERVERS, none by default.
function M.tool_server_hosts()
  local hosts = {}
  for _, name in ipairs(list_env("RLM_MCP_TOOL_SERVERS") or {}) do hosts[name:lower()] = true end
  return hosts
end

--- The server with rlm's tools (and, in test mode, the conformance fixtures).
function M.build(opts)
  local max_result = opts.max_result or MAX_RESULT[opts.http and "http" or "stdio"]
  local cfg = {backend = opts.backend or sys.getenv("RLM_BACKEND"),
               model = opts.model or sys.getenv("RLM_MODEL"),
               execute_timeout = opts.execute_timeout, max_result = max_result,
               tools = opts.tools and M.load_tools(opts.tools),
               network = opts.network and require("rlm.netproxy").load_file(opts.network),
               tool_server_hosts = opts.http and M.tool_server_hosts() or nil,
               -- a download part fits in a result: base64 grows it by 4/3, escapes by up to 6x
               -- for control bytes in text, so take a third to be safe
               part_bytes = math.max(1024, math.floor(max_result / 3))}
  if cfg.backend == "" then cfg.backend = nil end
  if cfg.model == "" then cfg.model = nil end
  local tools = require("rlm.mcp.tools").new(cfg)
  local fixtures = opts.fixtures and M.load_fixtures(opts.fixtures) or nil
  local server = mcp.new{
    name = "rlm", title = "rlm — Recursive Language Models", version = host.version,
    instructions = "Tools for long-context work: rlm_execute/rlm_analyze run a model that " ..
      "explores large inputs by writing Python in a sandbox; sandbox_* run code directly.",
    tools = tools.list, fixtures = fixtures, log = function(text) eprint(text) end,
    on_close = tools.close_session, on_idle = tools.free_sandbox, max_result = max_result,
  }
  if fixtures then
    for _, t in ipairs(fixtures.tools) do server:add_tool(t) end
  end
  return server, cfg
end

function M.main(argv)
  if argv[1] == "deploy" then
    return require("rlm.cmd.mcp_deploy").main({table.unpack(argv, 2)})
  end
  local opts, rest = args.parse(argv, SPEC)
  if #rest > 0 then
    return args.usage("mcp", ("unexpected argument '%s'"):format(rest[1]), M.help)
  end
  opts.fixtures = opts.fixtures or sys.getenv("RLM_MCP_FIXTURES")
  if opts.fixtures == "" then opts.fixtures = nil end
  M.seed_environment(opts)
  local server = M.build(opts)
  if opts.fixtures then eprint("TEST MODE: conformance fixtures are registered") end
  -- SIGINT/SIGTERM are how a server is stopped: after the cleanup, no traceback.
  local ok, err = pcall(M.serve, server, opts)
  if ok then return 0 end
  if tostring(err):find("interrupted", 1, true) then
    eprint("stopped")
    return 0
  end
  error(err, 0)
end

function M.serve(server, opts)
  if not opts.http then
    return require("rlm.mcp.stdio").serve(server)
  end
  local h, port = M.parse_address(opts.http)
  local token = sys.getenv("RLM_MCP_TOKEN")
  if token == "" then token = nil end
  local http = require "rlm.mcp.http"
  if not http.is_loopback(h) and not token then
    error(("binding to %s exposes the sandboxes to the network: set RLM_MCP_TOKEN to a secret " ..
           "that clients must send as a bearer token (or bind to 127.0.0.1)"):format(h), 0)
  end
  for _, name in ipairs{"max_sessions", "max_connections", "sandbox_idle"} do
    local v = opts[name]
    if v and (v ~= math.floor(v) or v < 1) then
      error(("--%s needs a whole number of at least 1, got %s"):format(name:gsub("_", "-"), v), 0)
    end
  end
  http.serve(server, {host = h, port = port, token = token, max_sessions = opts.max_sessions,
                      max_connections = opts.max_connections, sandbox_idle = opts.sandbox_idle,
                      allowed_hosts = list_env("RLM_MCP_ALLOWED_HOSTS"),
                      allowed_origins = list_env("RLM_MCP_ALLOWED_ORIGINS")},
    function(bound)
      local shown = h:find(":") and ("[" .. h .. "]") or h
      io.stdout:write(("READY http://%s:%d\n"):format(shown, bound))
      io.stdout:flush()
      eprint(("serving MCP at http://%s:%d%s"):format(shown, bound, http.PATH))
    end)
end

return M
