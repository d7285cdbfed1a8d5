--- How the Lua modules hang together: no require cycle among them, and a module is loaded only
-- when what it serves is asked for.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

-- The rlm modules each lua/rlm file requires by name, in its code (comments and the text of
-- strings left out): rlm.core.* are C bindings, which require no Lua module.
local function require_graph()
  local graph, files = {}, 0
  local list = assert(io.popen("find lua/rlm -name '*.lua'"))
  for path in list:lines() do
    files = files + 1
    local name = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", ".")
    local src = assert(sys.read_file(path))
    src = src:gsub("%-%-%[(=*)%[.-%]%1%]", ""):gsub("%-%-[^\n]*", "")
    local deps = {}
    for before, dep in src:gmatch("(.?)require%s*%(?%s*[\"']([%w_.]+)[\"']") do
      if before ~= "\"" and before ~= "'" and dep:match("^rlm") and not dep:match("^rlm%.core%.") then
        deps[#deps + 1] = dep
      end
    end
    graph[name] = deps
  end
  list:close()
  return graph, files
end

-- Every cycle found by a depth-first walk, each as "a -> b -> a".
local function cycles(graph)
  local found, state, stack = {}, {}, {}
  local function visit(m)
    if state[m] == "open" then
      local i = #stack
      while stack[i] ~= m do i = i - 1 end
      found[#found + 1] = table.concat(stack, " -> ", i) .. " -> " .. m
      return
    end
    if state[m] == "done" or not graph[m] then return end
    state[m] = "open"
    stack[#stack + 1] = m
    for _, dep in ipairs(graph[m]) do visit(dep) end
    stack[#stack] = nil
    state[m] = "done"
  end
  local names = {}
  for m in pairs(graph) do names[#names + 1] = m end
  table.sort(names)
  for _, m in ipairs(names) do visit(m) end
  return found
end

local tests = {}

tests["no require cycle among the lua/rlm modules, eager or lazy"] = function()
  local graph, files = require_graph()
  T.truthy(files >= 40, ("only %d modules found under lua/rlm"):format(files))
  -- the walk finds a cycle when there is one
  T.eq(cycles{a = {"b"}, b = {"c"}, c = {"a"}}, {"a -> b -> c -> a"})
  T.truthy(#graph["rlm.cli"] > 0 and #graph["rlm.llm"] > 0, "the requires were not read")
  T.eq(cycles(graph), {})
end

tests["a local rlm ask loads no Daytona module"] = function()
  local server = F.model{rules = {{match = "Task: local", reply = F.code("SUBMIT(answer='42')")}}}
  -- the command as `rlm ask` runs it (rlm.cli.main), then what it loaded
  local script = T.lua_script([[
local status = require("rlm.cli").main({"ask", "local", "--quiet"})
local names = {}
for name in pairs(package.loaded) do names[#names + 1] = name end
table.sort(names)
print("status " .. tostring(status))
print(table.concat(names, "\n"))
]])
  local r = T.run_rlm({"run", script}, {env = F.env(server)})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "42\nstatus 0\n", r.stderr)
  T.contains(r.stdout, "\nrlm.backend.local\n", "the run used no local sandbox")
  T.eq(r.stdout:match("[^\n]*daytona[^\n]*"), nil, "a Daytona module was loaded")
end

return tests
