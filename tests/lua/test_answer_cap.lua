--- Every answer rlm reads from a server has a size cap: a server that sends without end (or a
-- huge body) ends in a clear error, with memory flat, instead of growing rlm until the OOM
-- killer ends it.
local T = require "support"
local sys = require "rlm.sys"

local tests = {}

-- tests/standins/endless: every answer an endless body, chunked or with a huge Content-Length.
local function endless_server()
  return T.server{"tests/standins/endless"}
end

-- Runs a Lua script in its own rlm process; returns its output lines and peak memory (kB).
local function run_script(src, env)
  local r = T.run_rlm({"run", T.lua_script(src .. [[

local status = io.open("/proc/self/status"):read("a")
print("peak_kb " .. status:match("VmHWM:%s*(%d+)"))
]])}, {env = env, timeout = 300})
  T.eq(r.code, 0, r.stderr)
  return r.stdout, tonumber(r.stdout:match("peak_kb (%d+)"))
end

tests["rlm.http: an endless answer fails as too_large, memory flat; max_bytes sets the cap"] =
function()
  local server = endless_server()
  local out, peak = run_script(([[
local http = require "rlm.http"
for _, path in ipairs{"/chunked", "/sized"} do
  local res, err = http.request{url = %q .. path, retries = 0, timeout = 120}
  print(path, res, err and err.kind, tostring(err))
end
local res, err = http.request{url = %q .. "/chunked", retries = 0, max_bytes = 1000000}
print("small", res, err and err.kind, tostring(err))
]]):format(server.url, server.url))
  T.contains(out, "/chunked\tnil\ttoo_large\t")
  T.contains(out, "/sized\tnil\ttoo_large\t")
  T.contains(out, "small\tnil\ttoo_large\tthe answer is larger than 1000000 bytes")
  T.contains(out, "/chunked\tnil\ttoo_large\tthe answer is larger than 67108864 bytes")
  T.truthy(peak and peak > 1000 and peak < 160 * 1024, "peak " .. tostring(peak) .. " kB")
end

tests["a model that answers without end: a clear error, peak memory under 100 MB"] = function()
  local server = endless_server()
  local env = sys.environ()
  env.OPENAI_BASE_URL, env.OPENAI_API_KEY = server.url .. "/v1", "sk-test-key-0123456789"
  env.ANTHROPIC_BASE_URL, env.ANTHROPIC_API_KEY = server.url, "sk-test-key-0123456789"
  local out, peak = run_script([[
local llm = require "rlm.llm"
for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
  for _, stream in ipairs{false, true} do
    local res, err = llm.complete{model = model, messages = {{role = "user", content = "hi"}},
                                  max_tokens = 4096, retries = 0, timeout = 120,
                                  on_delta = stream and function() end or nil}
    print(model, stream, res, err and err.kind, tostring(err))
  end
end
]], env)
  for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
    for _, stream in ipairs{"false", "true"} do
      T.contains(out, ("%s\t%s\tnil\ttoo_large\t"):format(model, stream))
    end
  end
  T.contains(out, "the answer is larger than 9437184 bytes, more than its max_tokens can need")
  T.truthy(peak and peak > 1000 and peak < 100 * 1024, "peak " .. tostring(peak) .. " kB")
end

return tests
