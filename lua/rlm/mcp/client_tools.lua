--- Tool servers an MCP client passes to rlm's run and sandbox tools (`tool_servers`): MCP
-- servers the agent serves over Streamable HTTP, whose tools the sandbox code then calls as
-- Python functions (rlm.tools), with the headers the agent gives kept on this host. A client may
-- not pass a stdio command: that would have the server start a program of the client's choosing
-- on its host.
--
--   client_tools.SCHEMA                      the argument's JSON schema
--   client_tools.check(list, hosts) -> servers | nil, "one line saying what is wrong"
--
-- The server reaches those URLs from its own host and network. Over stdio its client is the
-- user who started it; over HTTP a client may be anyone with the token, who must not use the
-- server to reach addresses only it can (an internal service, a cloud's metadata address): there
-- the operator lists the hosts clients may name (RLM_MCP_TOOL_SERVERS), and none by default.
local json = require "rlm.json"

local M = {}

local FIELDS = {"url", "headers", "prefix", "only", "max_calls", "price"}
local KNOWN = {}
for _, f in ipairs(FIELDS) do KNOWN[f] = true end
-- What a stdio server's entry holds (rlm.tools, an MCP client's configuration).
local STDIO = {command = true, args = true, env = true, cwd = true}
-- Headers the MCP client of rlm.tools sets itself, or the HTTP layer does.
local OWN_HEADERS = {host = true, ["content-length"] = true, ["transfer-encoding"] = true,
                     connection = true, ["content-type"] = true, accept = true,
                     ["mcp-session-id"] = true, ["mcp-protocol-version"] = true}

M.REFUSED = "a client cannot have the server start programs on its host (a stdio command); " ..
  "serve the tools over Streamable HTTP and pass {url, headers}"

M.SCHEMA = {type = "array", description = "MCP servers you serve over Streamable HTTP whose " ..
  "tools the sandbox code may call as Python functions: each {url, headers?, prefix?, only?, " ..
  "max_calls?, price?}. The server connects to them from its host (headers stay there); stdio " ..
  "commands are refused. Each call counts against the run's budget.",
  items = {type = "object", properties = {
    url = {type = "string", minLength = 1, description = "the server's MCP endpoint, http(s)://.../mcp"},
    headers = {type = "object", description = "HTTP headers sent with every request to it " ..
               "(Authorization, ...): names to text"},
    prefix = {type = "string", description = "put before each of its tool names (to tell two " ..
              "servers' tools apart)"},
    only = {type = "array", items = {type = "string"}, description = "only these of its tools"},
    max_calls = {type = "integer", minimum = 0, description = "calls a run may make to each of its tools"},
    price = {type = "number", minimum = 0, description = "USD a call, counted against max_cost"},
  }}}

local function check_one(i, s)
  local where = ("tool_servers[%d]"):format(i - 1)
  if type(s) ~= "table" or json.is_array(s) and #s > 0 then return nil, where .. " must be an object" end
  local keys = {}
  for k in pairs(s) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    if STDIO[k] then return nil, ("%s: %s"):format(where, M.REFUSED) end
    if not KNOWN[k] then
      return nil, ("%s: unknown field '%s'; the valid ones: %s"):format(where, k, table.concat(FIELDS, ", "))
    end
  end
  if type(s.url) ~= "string" or not s.url:match("^https?://[^%s/]+") then
    return nil, where .. ".url must be an http:// or https:// URL"
  end
  local server = {url = s.url, prefix = s.prefix, max_calls = s.max_calls, price = s.price}
  if s.headers ~= nil then
    server.headers = {}
    for k, v in pairs(s.headers) do
      if type(v) ~= "string" or not tostring(k):match("^[%w!#$%%&'*+.^_`|~-]+$") or v:find("[\r\n]") then
        return nil, ("%s.headers: each must be a header name with a line of text"):format(where)
      end
      if OWN_HEADERS[tostring(k):lower()] then
        return nil, ("%s.headers: %s is set by rlm itself"):format(where, k)
      end
      server.headers[k] = v
    end
  end
  if s.only ~= nil then
    server.only = {}
    for _, name in ipairs(s.only) do server.only[name] = true end
  end
  return server
end

-- Whether url's host (HOST or HOST:PORT, as written) is one of hosts (a set; "*": any).
local function host_allowed(url, hosts)
  if not hosts or hosts["*"] then return true end
  local authority = url:match("^https?://([^/?#]+)"):lower():gsub("^.*@", "")
  return hosts[authority] or hosts[authority:gsub(":%d+$", "")] or false
end

--- The servers of a client's tool_servers argument (already checked against SCHEMA), as
-- rlm.tools takes them; nil, why for the first one that will not do. hosts: the set of hosts
-- a client may name (nil: any).
function M.check(list, hosts)
  if list == nil then return nil end
  local out = {}
  for i, s in ipairs(list) do
    local server, err = check_one(i, s)
    if server and not host_allowed(server.url, hosts) then
      server, err = nil, ("tool_servers[%d]: this server reaches no tool server a client names " ..
        "at %s (its operator lists the hosts clients may name in RLM_MCP_TOOL_SERVERS)")
        :format(i - 1, server.url:match("^https?://([^/?#]+)"))
    end
    if not server then return nil, err end
    out[i] = server
  end
  return out
end

return M
