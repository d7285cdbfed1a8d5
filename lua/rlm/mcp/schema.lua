--- The part of JSON Schema the tools' input schemas use: type, properties, required,
-- additionalProperties = false, enum, items, minimum, maximum, minLength.
--   schema.check(value, schema) -> nil | "message naming the place"
local json = require "rlm.json"

local M = {}

local function is_integer(v)
  return math.type(v) == "integer" or (math.type(v) == "float" and v == math.floor(v))
end

local TYPES = {
  object = function(v) return type(v) == "table" and not (json.is_array(v) and #v > 0) end,
  array = function(v) return type(v) == "table" and (json.is_array(v) or next(v) == nil or #v > 0) end,
  string = function(v) return type(v) == "string" end,
  integer = is_integer,
  number = function(v) return type(v) == "number" end,
  boolean = function(v) return type(v) == "boolean" end,
  null = function(v) return v == json.null end,
}

local function type_name(v)
  if v == json.null then return "null" end
  if type(v) == "table" then return (json.is_array(v) or #v > 0) and "array" or "object" end
  return type(v)
end

local check

local function check_object(v, s, path)
  for _, name in ipairs(s.required or {}) do
    if v[name] == nil then return ("%s: missing required property '%s'"):format(path, name) end
  end
  local props = s.properties or {}
  for k, item in pairs(v) do
    local sub = props[k]
    if sub then
      local err = check(item, sub, path .. "." .. tostring(k))
      if err then return err end
    elseif s.additionalProperties == false then
      return ("%s: unknown property '%s'"):format(path, tostring(k))
    end
  end
end

function check(v, s, path)
  if s.type and TYPES[s.type] and not TYPES[s.type](v) then
    return ("%s must be %s %s, got %s"):format(path, s.type == "integer" and "an" or "a", s.type,
                                               type_name(v))
  end
  if s.enum then
    local found = false
    for _, allowed in ipairs(s.enum) do
      if allowed == v then found = true break end
    end
    if not found then
      local names = {}
      for _, a in ipairs(s.enum) do names[#names + 1] = tostring(a) end
      return ("%s must be one of %s"):format(path, table.concat(names, ", "))
    end
  end
  if type(v) == "number" then
    if s.minimum and v < s.minimum then return ("%s must be at least %s"):format(path, s.minimum) end
    if s.maximum and v > s.maximum then return ("%s must be at most %s"):format(path, s.maximum) end
  end
  if type(v) == "string" and s.minLength and #v < s.minLength then
    return ("%s must not be empty"):format(path)
  end
  if s.type == "object" then return check_object(v, s, path) end
  if s.type == "array" and s.items then
    for i, item in ipairs(v) do
      local err = check(item, s.items, ("%s[%d]"):format(path, i - 1))
      if err then return err end
    end
  end
end

function M.check(value, schema)
  local err = check(value, schema, "arguments")
  return err
end

return M
