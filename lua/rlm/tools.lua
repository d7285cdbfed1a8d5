--- The user's tools, callable from sandbox code as Python functions while every call runs on
-- the host (keys, connections and the MCP servers' environments never enter the sandbox).
--
--   tools = {
--     search = {description = "Searches the web.", call = function(args) return {...} end,
--               params = {{name = "query", type = "string", description = "what to find"},
--                         {name = "limit", type = "integer", required = false}},
--               price = 0.005, max_calls = 20},          -- USD a call; calls a run may make
--     now = function() return os.date("!%FT%TZ") end,   -- a bare function: no parameters
--     {command = {"node", "server.js"}, env = {API_KEY = "..."}},   -- every tool of an MCP
--     {url = "http://127.0.0.1:9000/mcp", headers = {Authorization = "Bearer ..."}},  -- server
--   }
--
-- Parameters may also be given as a JSON schema (`parameters = {type = "object", properties =
-- ..., required = {...}}`, as MCP servers give them). A tool's answer is JSON: what call returns
-- (a Lua table, string, number, boolean or nil); an error it raises (or returns as nil, err) is
-- a RuntimeError in the code with its message.
local json = require "rlm.json"

local M = {}

local PY_TYPES = {string = "str", integer = "int", number = "float", boolean = "bool",
                  array = "list", object = "dict"}
local PY_KEYWORDS = {}
for w in ([[False None True and as assert async await break class continue def del elif else
  except finally for from global if import in is lambda nonlocal not or pass raise return try
  while with yield]]):gmatch("%S+") do PY_KEYWORDS[w] = true end

local function identifier(name, what)
  if type(name) ~= "string" or not name:match("^[%a_][%w_]*$") or PY_KEYWORDS[name] then
    error(("tools: %s %s is not a Python name (letters, digits, _)"):format(what, tostring(name)), 0)
  end
  return name
end

-- A parameter (a Python name) with its type and description as a schema gives them; a type list (["string", "null"])
-- reads "string|null", anything else that is not text is left out.
local function param(where, name, p, required)
  identifier(name, where .. " parameter")
  if type(p) ~= "table" then p = {} end
  local ty = p.type
  if type(ty) == "table" then
    local names = {}
    for _, t in ipairs(ty) do names[#names + 1] = PY_TYPES[t] or tostring(t) end
    ty = table.concat(names, "|")
  end
  return {name = name, type = type(ty) == "string" and ty or nil, required = required,
          description = type(p.description) == "string" and p.description or nil}
end

-- The parameter list of a JSON schema: the required ones in the schema's order, then the
-- others by name (a schema's properties have no order of their own).
local function from_schema(schema, where)
  if schema == nil then return {} end
  if type(schema) ~= "table" or (schema.type ~= nil and schema.type ~= "object") then
    error(("tools: %s: parameters must be a JSON schema of type object"):format(where), 0)
  end
  local props, out, seen = schema.properties or {}, {}, {}
  -- A server's word is checked before it is used: a schema that is not one names the tool.
  if type(props) ~= "table" or type(schema.required or {}) ~= "table" then
    error(("tools: %s: its schema's properties must be an object and required a list"):format(where), 0)
  end
  for _, name in ipairs(schema.required or {}) do
    if not seen[name] then out[#out + 1] = param(where, name, props[name], true) end
    seen[name] = true
  end
  local rest = {}
  for name in pairs(props) do
    if type(name) ~= "string" then
      error(("tools: %s: its schema's properties must be an object"):format(where), 0)
    end
    if not seen[name] then rest[#rest + 1] = name end
  end
  table.sort(rest)
  for _, name in ipairs(rest) do
    out[#out + 1] = param(where, name, props[name], false)
  end
  return out
end

local function lua_tool(name, t)
  identifier(name, "name")
  if type(t) == "function" then t = {call = t} end
  if type(t) ~= "table" or type(t.call) ~= "function" then
    error(("tools: %s must be a function or a table with call = function(args)"):format(name), 0)
  end
  local params = t.params and {} or from_schema(t.parameters, name)
  for i, p in ipairs(t.params or {}) do
    if type(p) ~= "table" then error(("tools: %s: params[%d] must be {name =, type =}"):format(name, i), 0) end
    params[i] = {name = p.name or p[1], type = p.type or p[2], description = p.description or p[3],
                 required = p.required ~= false}
  end
  for _, p in ipairs(params) do identifier(p.name, name .. " parameter") end
  if t.price ~= nil and (type(t.price) ~= "number" or t.price < 0) then
    error(("tools: %s: price must be a number of USD per call"):format(name), 0)
  end
  if t.max_calls ~= nil and (math.type(t.max_calls) ~= "integer" or t.max_calls < 0) then
    error(("tools: %s: max_calls must be a whole number"):format(name), 0)
  end
  return {name = name, description = t.description or "", params = params, fn = t.call,
          price = t.price, max_calls = t.max_calls}
end

--- The tools of a `tools` option, sorted by name (the same prompt and functions in every
-- process). MCP servers are connected here; their tools carry `server`. Raises for misuse.
function M.load(tools)
  if tools == nil then return {} end
  if type(tools) ~= "table" then error("tools must be a table (see rlm.tools)", 0) end
  local list, names = {}, {}
  for k, v in pairs(tools) do
    if type(k) == "string" then list[#list + 1] = lua_tool(k, v) end
  end
  -- The servers started or reached so far end with a failure: none outlives a refused option.
  local clients = {}
  local ok, err = pcall(function()
    for i, server in ipairs(tools) do
      if type(server) ~= "table" or not (server.command or server.url) then
        error(("tools[%d] must be an MCP server: {command = {...}} or {url = ...}"):format(i), 0)
      end
      local client = require("rlm.mcp.client").connect(server)
      clients[#clients + 1] = client
      for _, t in ipairs(client.tools) do
        if server.only == nil or server.only[t.name] then
          local name = (server.prefix or "") .. t.name
          list[#list + 1] = {name = identifier(name, "MCP tool name"), remote = t.name,
            description = type(t.description) == "string" and t.description or "",
            params = from_schema(t.inputSchema, name),
            server = client, price = server.price, max_calls = server.max_calls}
        end
      end
    end
    table.sort(list, function(a, b) return a.name < b.name end)
    for _, t in ipairs(list) do
      if names[t.name] then
        error(("tools: two tools are named %s (give an MCP server a prefix)"):format(t.name), 0)
      end
      names[t.name] = t
    end
  end)
  if not ok then
    for _, c in ipairs(clients) do c:close() end
    error(err, 0)
  end
  return list, names
end

--- The tools a Lua file returns (`rlm ask --tools`, `rlm mcp --tools`, a skill's `tools`): the
-- file runs with its own folder as `...`, so it may name programs beside it. text: the file's
-- text when it is not on disk (a bundled skill's). Raises naming what.
function M.load_file(path, what, text)
  what = what or "--tools"
  local chunk, err
  if text then chunk, err = load(text, "@" .. path, "t") else chunk, err = loadfile(path, "t") end
  if not chunk then error(what .. ": " .. err, 0) end
  local t = chunk(path:match("^(.*)/[^/]*$") or ".")
  if type(t) ~= "table" then error(("%s: %s must return a table of tools"):format(what, path), 0) end
  return t
end

--- One tools option of several (nil ones left out): the named tools and the servers of each.
function M.combine(...)
  local out, any = {}, false
  for i = 1, select("#", ...) do
    local tools = select(i, ...)
    for k, v in pairs(tools or {}) do
      if type(k) == "string" then
        if out[k] ~= nil then error(("tools: two tools are named %s"):format(k), 0) end
        out[k], any = v, true
      end
    end
    for _, server in ipairs(tools or {}) do out[#out + 1] = server; any = true end
  end
  return any and out or nil
end

local function py_string(s)
  return '"""' .. tostring(s):gsub("\\", "\\\\"):gsub('"""', '\\"\\"\\"') .. '"""'
end

--- Python defining each tool as a function of its parameters that calls the host.
function M.python(list)
  -- A tool may not hide a Python builtin or one of rlm's (a server's tool named print or
  -- llm_query); a tool of the same name defined before (new tools in a running sandbox) may go.
  local names = {}
  for i, t in ipairs(list) do names[i] = ("%q,"):format(t.name) end
  local out = {("_rlm_taken = [n for n in (%s) if n in __builtins__ and not getattr(__builtins__[n], " ..
    "'__rlm_tool__', False)]\nif _rlm_taken:\n    raise NameError('a tool may not take the name of a " ..
    "Python or rlm function: ' + ', '.join(_rlm_taken) + ' (give its MCP server a prefix)')\n" ..
    "del _rlm_taken\n"):format(table.concat(names, " "))}
  for _, t in ipairs(list) do
    local sig, pass, doc = {}, {}, {t.description}
    for _, p in ipairs(t.params) do
      sig[#sig + 1] = p.required and p.name or (p.name .. "=None")
      pass[#pass + 1] = ("%q: %s"):format(p.name, p.name)
      doc[#doc + 1] = ("%s (%s%s)%s"):format(p.name, PY_TYPES[p.type] or p.type or "any",
        p.required and "" or ", optional", p.description and (": " .. p.description) or "")
    end
    -- A builtin, as llm_query is: not one of the code's variables, and kept when it resets.
    out[#out + 1] = ("def %s(%s):\n    %s\n    return _rlm_tool(%q, {%s})\n%s.__rlm_tool__ = True\n" ..
      "__builtins__[%q] = %s\ndel %s\n")
      :format(t.name, table.concat(sig, ", "), py_string(table.concat(doc, "\n    ")), t.name,
              table.concat(pass, ", "), t.name, t.name, t.name, t.name)
  end
  return table.concat(out, "\n")
end

--- The tools as the system prompt lists them, one line each.
function M.prompt_text(list)
  if #list == 0 then return "" end
  local out = {"Tools (Python functions; each call runs outside the REPL and returns JSON data):"}
  for _, t in ipairs(list) do
    local sig = {}
    for _, p in ipairs(t.params) do sig[#sig + 1] = p.required and p.name or (p.name .. "=None") end
    local desc = t.description:match("^[^\n]*")
    out[#out + 1] = ("- %s(%s)%s"):format(t.name, table.concat(sig, ", "), desc ~= "" and (": " .. desc) or "")
  end
  return table.concat(out, "\n") .. "\n"
end

--- Calls a tool with args (a table); returns its answer (JSON-able) or nil, err.
function M.invoke(t, args)
  if t.server then return t.server:call(t.remote, args) end
  local ok, res, err = pcall(t.fn, args)
  if not ok then return nil, tostring(res):gsub("^[^:\n]+:%d+: ", "") end
  if res == nil and err ~= nil then return nil, tostring(err) end
  if res == nil then return json.null end
  return res
end

--- Closes the MCP servers of a tool list.
function M.close(list)
  local done = {}
  for _, t in ipairs(list or {}) do
    if t.server and not done[t.server] then done[t.server] = true; t.server:close() end
  end
end

return M
