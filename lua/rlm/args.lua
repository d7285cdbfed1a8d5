--- Command-line flags for rlm's commands.
--
--   local opts, rest = args.parse(argv, {model = "string", json = "flag", outputs = "list"})
--   -- accepts --model M, --model=M, --json, --outputs a,b ; "--" ends the flags
--   -- kind "assign" is repeatable NAME=VALUE: --limit memory=1G --limit processes=64
--   --                                          gives opts.limit = {memory = "1G", processes = "64"}
-- An unknown flag or a missing value raises a message that lists the valid flags.
local M = {}

local function valid(spec)
  local names = {}
  for name, kind in pairs(spec) do
    local value = kind == "flag" and "" or kind == "assign" and " NAME=VALUE" or " " .. kind:upper()
    names[#names + 1] = "--" .. name:gsub("_", "-") .. value
  end
  table.sort(names)
  return table.concat(names, ", ")
end

function M.parse(argv, spec)
  local opts, rest = {}, {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--" then
      table.move(argv, i + 1, #argv, #rest + 1, rest)
      break
    end
    local name, inline = a:match("^%-%-([%w%-_]+)=(.*)$")
    name = name or a:match("^%-%-([%w%-_]+)$")
    if name then
      local key = name:gsub("%-", "_")
      local kind = spec[key]
      if not kind then
        error(("unknown option --%s (valid: %s)"):format(name, valid(spec)), 0)
      end
      if kind == "flag" then
        opts[key] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = argv[i]
          if v == nil then error(("option --%s needs a value"):format(name), 0) end
        end
        if kind == "number" then
          local n = tonumber(v)
          if not n then error(("option --%s needs a number, got %q"):format(name, v), 0) end
          v = n
        elseif kind == "list" then
          local list = {}
          for item in v:gmatch("[^,]+") do list[#list + 1] = item:match("^%s*(.-)%s*$") end
          v = list
        elseif kind == "assign" then
          local k, val = v:match("^([%w_]+)=(.+)$")
          if not k then error(("option --%s needs NAME=VALUE, got %q"):format(name, v), 0) end
          v = opts[key] or {}
          v[k] = val
        end
        opts[key] = v
      end
    elseif a:match("^%-%a") and a ~= "-" then
      error(("unknown option %s (valid: %s)"):format(a, valid(spec)), 0)
    else
      rest[#rest + 1] = a
    end
    i = i + 1
  end
  return opts, rest
end

--- Reports a misused command as "rlm CMD: MSG" on stderr, followed by the command's help when
-- given, and returns 2, the exit code for usage errors.
function M.usage(cmd, msg, help)
  io.stderr:write("rlm ", cmd, ": ", msg, "\n", help and "\n" .. help .. "\n" or "")
  return 2
end

return M
