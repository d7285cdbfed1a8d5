--- Shared set-up for tests on the Daytona stand-in (tests/standins/daytona): start it, point the
-- daytona backend at it, read its /_control hooks, and build environments for child rlm processes.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local http = require "rlm.http"

local D = {}

D.KEY = "sk-daytona-5ecret-never-in-the-sandbox"

local Standin = {}
Standin.__index = Standin

function Standin:control(method, path, body)
  local res = assert(http.request{url = self.url .. "/_control/" .. path, method = method,
                                  body = body and json.encode(body)})
  assert(res.status // 100 == 2, "/_control/" .. path .. " answered " .. res.status)
  return json.decode(res.body)
end

function Standin:stats() return self:control("GET", "stats") end

--- How many requests the stand-in served on a route, e.g. "POST /api/sandbox".
function Standin:requests(route) return self:stats().requests[route] or 0 end

--- The ids of the sandboxes that exist now.
function Standin:live() return self:stats().sandboxes end

--- spec as /_control/faults takes it: {method, path, status, count, ...}.
function Standin:fault(spec) return self:control("POST", "faults", spec) end

--- Starts the stand-in and points the daytona backend of this process at it; the environment is
-- restored after the test.
function D.standin()
  local s = T.daytona_standin(D.KEY)
  s.env = {DAYTONA_API_KEY = D.KEY, DAYTONA_API_URL = s.url .. "/api"}
  for k, v in pairs(s.env) do
    local old = sys.getenv(k)
    sys.setenv(k, v)
    T.defer(function() sys.setenv(k, old) end)
  end
  return setmetatable(s, Standin)
end

--- The environment of a child rlm process, built from nothing so that variables other tests
-- left in this process (RLM_MODEL, OPENAI_BASE_URL, ...) cannot reach it: the basics, a private
-- XDG_DATA_HOME (so local volumes start empty), the stand-in's DAYTONA_* when s is given, then extra.
function D.env(s, extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH"), XDG_DATA_HOME = T.tmpdir()}
  for k, v in pairs(s and s.env or {}) do env[k] = v end
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

--- The variables rlm_fixtures.model set for its LLM stand-in, for a child process.
function D.model_env()
  local env = {}
  for _, k in ipairs{"OPENAI_BASE_URL", "OPENAI_API_KEY", "RLM_MODEL"} do
    env[k] = assert(sys.getenv(k), k .. " is not set: start the model with rlm_fixtures.model first")
  end
  return env
end

--- A git repository with README.md "version one" tagged v1, then "version two" on main.
function D.git_repo()
  local dir = T.tmpdir() .. "/repo"
  local env = {PATH = sys.getenv("PATH"), HOME = dir, GIT_AUTHOR_NAME = "t",
               GIT_AUTHOR_EMAIL = "t@example.com", GIT_COMMITTER_NAME = "t",
               GIT_COMMITTER_EMAIL = "t@example.com"}
  local function git(...)
    local r = assert(sys.run({"git", "-C", dir, ...}, {env = env}))
    assert(r.code == 0, "git " .. table.concat({...}, " ") .. ": " .. r.stderr)
  end
  assert(sys.mkdir_p(dir))
  git("init", "--quiet", "-b", "main")
  assert(sys.write_file(dir .. "/README.md", "version one\n"))
  git("add", "README.md")
  git("commit", "--quiet", "-m", "one")
  git("tag", "v1")
  assert(sys.write_file(dir .. "/README.md", "version two\n"))
  assert(sys.write_file(dir .. "/NOTES.md", "added later\n"))
  git("add", "NOTES.md")
  git("commit", "--quiet", "-am", "two")
  return dir
end

return D
