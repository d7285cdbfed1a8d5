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

-- The edit distance between a and b (insertions, deletions, substitutions), case ignored.
local function distance(a, b)
  a, b = a:lower(), b:lower()
  local row = {}
  for j = 0, #b do row[j] = j end
  for i = 1, #a do
    local diagonal, left = row[0], i
    row[0] = i
    for j = 1, #b do
      local up = row[j]
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      left = math.min(up + 1, left + 1, diagonal + cost)
      diagonal, row[j] = up, left
    end
  end
  return row[#b]
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

-- "unknown property 'x'", with the valid name closest to it when one is close, and the list.
local function unknown(path, name, props)
  local valid, best, best_d = sorted_keys(props), nil, math.huge
  for _, p in ipairs(valid) do
    local d = distance(name, p)
    if d < best_d then best, best_d = p, d end
  end
  local hint = ""
  if best and best_d <= math.max(2, #name // 3) then hint = (" (did you mean '%s'?)"):format(best) end
  return ("%s: unknown property '%s'%s; the valid ones: %s"):format(path, name, hint,
                                                                   table.concat(valid, ", "))
end

-- Unknown names first: a misspelt one is why a required one is missing.
local function check_object(v, s, path)
  local props = s.properties or {}
  if s.additionalProperties == false then
    for _, k in ipairs(sorted_keys(v)) do
      if not props[k] then return unknown(path, k, props) end
    end
  end
  for _, name in ipairs(s.required or {}) do
    if v[name] == nil then return ("%s: missing required property '%s'"):format(path, name) end
  end
  for _, k in ipairs(sorted_keys(v)) do
    if props[k] then
      local err = check(v[k], props[k], path .. "." .. k)
      if err then return err end
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
