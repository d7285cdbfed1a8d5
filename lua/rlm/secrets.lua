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

--- The secret values known now: those of the variables that are set, and the remembered keys.
function M.values()
  local out = {}
  for _, name in ipairs(names()) do
    local v = sys.getenv(name)
    if v and #v >= 8 then out[#out + 1] = v end
  end
  for v in pairs(remembered) do out[#out + 1] = v end
  return out
end

return M
