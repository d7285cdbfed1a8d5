--- Shared set-up for RLM loop tests: an LLM stand-in playing the model from a script.
local T = require "support"
local json = require "rlm.json"
local sys = require "rlm.sys"

local F = {}

--- Starts tests/standins/llm with the given script (a Lua table) and points the openai
-- provider at it; returns the server. The environment is restored after the test.
function F.model(script, extra_args)
  local dir = T.tmpdir()
  local path = dir .. "/script.json"
  assert(sys.write_file(path, json.encode(script)))
  local argv = {"tests/standins/llm", "--api-key", "sk-test-key-0123456789", "--script", path}
  for _, a in ipairs(extra_args or {}) do argv[#argv + 1] = a end
  local server = T.server(argv)
  -- Restore every name, unset ones included (pairs would skip the nils and leave them set).
  local names = {"OPENAI_BASE_URL", "OPENAI_API_KEY", "RLM_MODEL"}
  local saved = {}
  for _, name in ipairs(names) do saved[name] = sys.getenv(name) end
  T.defer(function()
    for _, name in ipairs(names) do sys.setenv(name, saved[name]) end
  end)
  sys.setenv("OPENAI_BASE_URL", server.url .. "/v1")
  sys.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
  sys.setenv("RLM_MODEL", "openai/root-model")
  return server
end

--- The environment of an `rlm` subprocess that talks to the stand-in server as the root model
-- openai/root-model; extra adds or replaces variables.
function F.env(server, extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               OPENAI_BASE_URL = server.url .. "/v1", OPENAI_API_KEY = "sk-test-key-0123456789",
               RLM_MODEL = "openai/root-model"}
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

--- A reply that runs one block of Python.
function F.code(src)
  return "Let me do that.\n```repl\n" .. src .. "\n```\n"
end

--- The stand-in's statistics.
function F.stats(server)
  local res = assert(require("rlm.http").request{url = server.url .. "/_stats"})
  return assert(json.decode(res.body))
end

return F
