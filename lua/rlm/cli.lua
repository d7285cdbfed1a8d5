--- The `rlm` command line. main(args) returns the exit status.
local host = require "rlm.core.host"
local flags = require "rlm.args"
local commands_table = require "rlm.commands"

local M = {}

local USAGE = commands_table.USAGE
M.USAGE = USAGE

M.EXIT = commands_table.EXIT

local function eprint(...)
  io.stderr:write(table.concat({...}, ""), "\n")
end

-- True while a command runs whose deliberate errors (raised without a position, error(msg, 0):
-- "no model", "cannot read the context") are messages for the user, not bugs to trace.
local plain_errors = false

--- Runs fn(...); returns true and its first result, or prints the error as one message with
-- a traceback on stderr and returns false.
local function protected(fn, ...)
  local ok, err = xpcall(fn, function(e)
    if getmetatable(e) == flags.USAGE then return e end
    -- A command's error is one line for the user; where in rlm it was raised (and the
    -- traceback) is for RLM_DEBUG=1.
    if plain_errors and type(e) == "string" and not os.getenv("RLM_DEBUG") then
      return (e:gsub("^[%w_/.-]+%.lua:%d+: ", ""))
    end
    if type(e) ~= "string" then
      local mt = getmetatable(e)
      e = mt and mt.__tostring and tostring(e) or ("(error object is a " .. type(e) .. " value)")
    end
    -- The frames below the script (this CLI) are noise to the user: stop at the xpcall.
    local tb = debug.traceback(e, 2)
    return (tb:gsub("\n\t%[C%]: in function 'xpcall'.*$", ""))
  end, ...)
  if not ok then eprint("rlm: ", tostring(err)) end
  return ok, err
end

local commands = {}
M.commands = commands

commands.version = {
  run = function()
    print("rlm " .. host.version .. " (" .. _VERSION .. ")")
    return 0
  end,
}

commands.help = {
  run = function(args)
    local name = args[1]
    if name == "--man" then
      io.write(require("rlm.help").man(host.version))
    elseif name == "--markdown" then
      io.write(require("rlm.help").markdown())
    elseif (name == "mcp" and args[2] == "deploy") or (name == "trace" and args[2] == "export") then
      print(require("rlm.help").text(name .. " " .. args[2]))
    elseif name and commands[name] then
      print(commands_table.help(name))
    elseif name then
      eprint("rlm: unknown command '", name, "'\n\n", USAGE)
      return 2
    else
      print(USAGE)
    end
    return 0
  end,
}

-- LUA_INIT_5_4, else LUA_INIT, as lua.c runs it before a script: "@FILE" runs that file, any
-- other value is Lua code. Returns true, or false after printing the error.
local function run_lua_init()
  local name, init = "=LUA_INIT_5_4", os.getenv("LUA_INIT_5_4")
  if not init then name, init = "=LUA_INIT", os.getenv("LUA_INIT") end
  if not init then return true end
  local chunk, err
  if init:sub(1, 1) == "@" then
    chunk, err = loadfile(init:sub(2))
  else
    chunk, err = load(init, name)
  end
  if not chunk then
    eprint("rlm: ", err)
    return false
  end
  return (protected(chunk))
end

-- The script's own folder goes in front of package.path and package.cpath, so a helpers.lua
-- beside it is found from any working directory (a folder whose name holds a path's own
-- characters, ';' or '?', is left out).
local function search_beside(file)
  local dir = file:match("^(.*)/[^/]*$") or "."
  dir = require("rlm.sys").realpath(dir == "" and "/" or dir)
  if not dir or dir:find("[;?]") then return end
  dir = dir == "/" and "" or dir
  package.path = ("%s/?.lua;%s/?/init.lua;%s"):format(dir, dir, package.path)
  package.cpath = ("%s/?.so;%s"):format(dir, package.cpath)
end

-- Runs a Lua script as `lua` does: LUA_INIT first, then the chunk with `...` and the global
-- `arg` (arg[0] the script, arg[1..] its arguments, the words before it at negative indices).
-- `before` is the command line up to the script.
local function run_script(chunk, before, args)
  local script_args = {table.unpack(args, 2)}
  for i, word in ipairs(before) do script_args[i - #before - 1] = word end
  script_args[0] = args[1]
  _G.arg = script_args
  if not run_lua_init() then return 1 end
  local ok, status = protected(chunk, table.unpack(args, 2))
  if not ok then return 1 end
  return math.type(status) == "integer" and status or 0
end

local function run_file(args, before, usage)
  local file = args[1]
  if not file then
    eprint(usage)
    return 2
  end
  -- "-" reads the script from stdin, as `lua -` does
  local chunk, err
  if file == "-" then
    chunk, err = load(io.stdin:read("a"), "=stdin", "t")
  else
    chunk, err = loadfile(file, "t")
    if chunk then search_beside(file) end
  end
  if not chunk then
    eprint("rlm: ", err)
    return 1
  end
  return run_script(chunk, before, args)
end

commands.run = {
  run = function(args, argv0)
    return run_file(args, {argv0, "run"}, "rlm run: missing FILE.lua\n\n" .. commands_table.help("run"))
  end,
}

commands["-e"] = {
  run = function(args, argv0)
    local code = args[1]
    if not code then
      eprint("rlm -e: missing CODE")
      return 2
    end
    local chunk, err = load(code, "=(command line)", "t")
    if not chunk then
      eprint("rlm: ", err)
      return 1
    end
    local status = run_script(chunk, {argv0}, {"-e", table.unpack(args, 2)})
    return status
  end,
}

-- The commands kept in modules of their own, loaded only when used.
for name, module in pairs(commands_table.MODULES) do
  commands[name] = {plain_errors = true, run = function(args) return require(module).main(args) end}
end

-- An error, an interrupt (`run` reports its script's as status 1), os.exit or a script that
-- never shut its interpreters down may leave sandboxes behind: end them all, through the one
-- registry, while the event loop can still carry remote deletions (finalisers at exit cannot).
local function end_sandboxes()
  local registry = package.loaded["rlm.registry"]
  if registry then
    registry.cleanup_all()
    registry.settle()      -- each backend's remote deletions; a second Ctrl-C stops the wait
  end
end

-- `rlm FILE [ARGS]` is `rlm run FILE [ARGS]`, as `lua FILE` is, so `#!/usr/bin/env rlm` works:
-- a word that names no command but holds a '/' or ends in .lua, or names a file.
local function names_a_script(word)
  if word:find("/", 1, true) or word:match("%.lua$") then return true end
  local f = io.open(word, "r")
  if f then f:close() end
  return f ~= nil
end

function M.main(argv)
  local name = argv[1]
  if name == nil or name == "--help" or name == "-h" then
    print(USAGE)
    return name and 0 or 2
  end
  if name == "--version" then name = "version" end
  local cmd = commands[name]
  local rest = table.move(argv, 2, #argv, 1, {})
  if not cmd and names_a_script(name) then
    cmd, rest = {run = function(args) return run_file(args, {argv[0]}) end}, argv
  elseif not cmd then
    eprint("rlm: unknown command '", name, "'\n\n", USAGE)
    return 2
  elseif (rest[1] == "--help" or rest[1] == "-h") and name ~= "-e" then
    print(commands_table.help(name))
    return 0
  end
  plain_errors = cmd.plain_errors or false
  local exit = os.exit
  -- A script may leave through os.exit: its sandboxes end first, as on every other way out.
  os.exit = function(...)
    end_sandboxes()
    return exit(...)
  end
  local ok, status = protected(cmd.run, rest, argv[0])
  os.exit = exit
  if not ok then
    status = getmetatable(status) == flags.USAGE and M.EXIT.usage or M.EXIT.failed
  else
    status = math.type(status) == "integer" and status or 0
  end
  end_sandboxes()
  return status
end

return M
