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

commands.run = {
  run = function(args)
    local file = args[1]
    if not file then
      eprint("rlm run: missing FILE.lua\n\n", commands_table.help("run"))
      return 2
    end
    -- "-" reads the script from stdin, as `lua -` does
    local chunk, err
    if file == "-" then
      chunk, err = load(io.stdin:read("a"), "=stdin", "t")
    else
      chunk, err = loadfile(file, "t")
    end
    if not chunk then
      eprint("rlm: ", err)
      return 1
    end
    local script_args = {[0] = file, table.unpack(args, 2)}
    _G.arg = script_args
    local ok, status = protected(chunk, table.unpack(args, 2))
    if not ok then return 1 end
    return math.type(status) == "integer" and status or 0
  end,
}

commands["-e"] = {
  run = function(args)
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
    _G.arg = {[0] = "-e", table.unpack(args, 2)}
    local ok, status = protected(chunk, table.unpack(args, 2))
    if not ok then return 1 end
    return math.type(status) == "integer" and status or 0
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

function M.main(argv)
  local name = argv[1]
  if name == nil or name == "--help" or name == "-h" then
    print(USAGE)
    return name and 0 or 2
  end
  if name == "--version" then name = "version" end
  local cmd = commands[name]
  if not cmd then
    eprint("rlm: unknown command '", name, "'\n\n", USAGE)
    return 2
  end
  local rest = table.move(argv, 2, #argv, 1, {})
  if (rest[1] == "--help" or rest[1] == "-h") and name ~= "-e" then
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
  local ok, status = protected(cmd.run, rest)
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
