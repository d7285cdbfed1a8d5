--- Command-line flags for rlm's commands.
--
--   local opts, rest = args.parse(argv, {model = "string", json = "flag", outputs = "list"})
--   -- accepts --model M, --model=M, --json, --outputs a,b ; "--" ends the flags
--   -- kind "assign" is repeatable NAME=VALUE: --limit memory=1G --limit processes=64
--   --                                          gives opts.limit = {memory = "1G", processes = "64"}
-- An unknown flag or a missing value raises a message that lists the valid flags.
local M = {}

--- The metatable of a mistake in the command line itself (exit 2, one line, no traceback).
M.USAGE = {__tostring = function(e) return e.message end}

--- Raises a command-line mistake.
function M.fail(message)
  error(setmetatable({message = message}, M.USAGE), 0)
end

-- Edit distance between a and b (insertions, deletions, substitutions).
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = {[0] = i}
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

--- The name among names (a list or a set) closest to `name`, when one is close enough to be a
-- likely typo; else nil. For "unknown option x (did you mean y?)" messages.
function M.closest(name, names)
  local best, best_d
  local list = names[1] and names or {}
  if not names[1] then for k in pairs(names) do list[#list + 1] = k end end
  table.sort(list)
  for _, candidate in ipairs(list) do
    local d = distance(name:lower(), candidate:lower())
    if d <= math.max(2, #name // 4) and (not best_d or d < best_d) then best, best_d = candidate, d end
  end
  return best
end

--- "unknown option NAME" with the closest valid name, when there is one.
function M.unknown(what, name, names)
  local near = M.closest(tostring(name), names)
  return ("unknown %s %q%s"):format(what, tostring(name), near and (" (did you mean %q?)"):format(near) or "")
end

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
        local near = M.closest(key, spec)
        M.fail(("unknown option --%s%s (valid: %s)"):format(name,
          near and (" (did you mean --%s?)"):format((near:gsub("_", "-"))) or "", valid(spec)))
      end
      if kind == "flag" then
        opts[key] = true
      else
        local v = inline
        if v == nil then
          i = i + 1
          v = argv[i]
          if v == nil then M.fail(("option --%s needs a value"):format(name)) end
        end
        if kind == "number" then
          local n = tonumber(v)
          if not n then M.fail(("option --%s needs a number, got %q"):format(name, v)) end
          v = n
        elseif kind == "list" then
          local list = {}
          for item in v:gmatch("[^,]+") do list[#list + 1] = item:match("^%s*(.-)%s*$") end
          v = list
        elseif kind == "assign" then
          local k, val = v:match("^([%w_]+)=(.+)$")
          if not k then M.fail(("option --%s needs NAME=VALUE, got %q"):format(name, v)) end
          v = opts[key] or {}
          v[k] = val
        end
        opts[key] = v
      end
    elseif a:match("^%-%a") and a ~= "-" then
      M.fail(("unknown option %s (valid: %s)"):format(a, valid(spec)))
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
