--- The secrets rlm never writes anywhere (trajectories, logs, messages): the values of the
-- variables below and of every provider's key variable (rlm.providers, so a provider added
-- there is covered), and every key passed to a call (remember). A leaf module: rlm.llm
-- remembers keys here and rlm.trace scrubs with values(), neither loading the other.
local providers = require "rlm.providers"
local sys = require "rlm.sys"

local M = {}

-- Environment variables whose values must never be written anywhere, besides every model
-- provider's key variable.
M.vars = {"DAYTONA_API_KEY", "DAYTONA_JWT_TOKEN", "RLM_MCP_TOKEN"}

local remembered = {}      -- keys given per call (api_key = ...), never in the environment

--- Treats value as a secret from now on (a key passed to a call rather than set in the
-- environment).
function M.remember(value)
  if type(value) == "string" and #value >= 8 then remembered[value] = true end
end

local function names()
  local out = {}
  for _, n in ipairs(M.vars) do out[#out + 1] = n end
  for _, p in pairs(providers) do
    if p.key_env then out[#out + 1] = p.key_env end
  end
  return out
end

-- Adds secret v and the forms it leaks in to out: cut by a character at either end, and
-- upper- or lower-cased (each at least 8 bytes: shorter would match ordinary words). Longest
-- first, so the whole key goes as one [redacted].
local function add_forms(out, seen, v)
  for _, cut in ipairs{v, v:sub(1, -2), v:sub(2)} do
    for _, form in ipairs{cut, cut:upper(), cut:lower()} do
      if #form >= 8 and not seen[form] then
        seen[form] = true
        out[#out + 1] = form
      end
    end
  end
end

--- The secret values known now: those of the variables that are set, and the remembered keys,
-- each with the forms it leaks in (add_forms).
function M.values()
  local out, seen = {}, {}
  for _, name in ipairs(names()) do
    local v = sys.getenv(name)
    if v and #v >= 8 then add_forms(out, seen, v) end
  end
  local given = {}
  for v in pairs(remembered) do given[#given + 1] = v end
  table.sort(given)   -- same input, same bytes: not the table's order
  for _, v in ipairs(given) do add_forms(out, seen, v) end
  return out
end

return M
