--- The LLM stand-in bills prompt caching as the providers do, so tests of rlm's accounting
-- assert real savings rather than rlm's own arithmetic (tests/standins/llm, PromptCache).
local T = require "support"
local http = require "rlm.http"
local json = require "rlm.json"

local tests = {}

local KEY = "sk-test-key-0123456789"

local function post(server, path, body)
  local res = assert(http.request{url = server.url .. path, method = "POST", body = json.encode(body),
    headers = {["content-type"] = "application/json", authorization = "Bearer " .. KEY,
               ["anthropic-version"] = "2023-06-01"}})
  T.eq(res.status, 200, res.body)
  return json.decode(res.body).usage
end

local function openai(server, system, user, cache_key)
  return post(server, "/v1/chat/completions", {model = "gpt-4.1-mini", prompt_cache_key = cache_key,
    messages = {{role = "system", content = system}, {role = "user", content = user}}})
end

tests["OpenAI: a repeated prefix of 1,024 tokens or more is cached, in steps of 128"] = function()
  local server = T.server{"tests/standins/llm", "--api-key", KEY}
  local system = ("s"):rep(5000)                       -- 1,250 tokens
  local u = openai(server, system, "first question")
  T.eq(u.prompt_tokens, math.ceil((5000 + 14) / 4))
  T.eq(u.prompt_tokens_details.cached_tokens, 0, "nothing is cached on the first request")
  u = openai(server, system, "second question")
  T.eq(u.prompt_tokens_details.cached_tokens, 1152, "1,024 + 128: the shared 1,253 tokens, stepped")
  u = openai(server, system, "third", "another-key")
  T.eq(u.prompt_tokens_details.cached_tokens, 0, "another prompt_cache_key lands on another cache")
  u = openai(server, ("s"):rep(3000), "short")
  T.eq(u.prompt_tokens_details.cached_tokens, 0, "below 1,024 tokens nothing is cached")
end

local function anthropic(server, system, user, model)
  return post(server, "/v1/messages", {model = model or "claude-standin", max_tokens = 50,
    system = {{type = "text", text = system, cache_control = {type = "ephemeral"}}},
    messages = {{role = "user", content = user}}})
end

tests["Anthropic: a breakpoint's prefix is written once, then read"] = function()
  local server = T.server{"tests/standins/llm", "--api-key", KEY}
  local system = ("s"):rep(8000)                        -- 2,000 tokens up to the breakpoint
  local u = anthropic(server, system, "first")
  T.eq(u.cache_creation_input_tokens, 2000)
  T.eq(u.cache_read_input_tokens, 0)
  T.eq(u.input_tokens, math.ceil(8005 / 4) - 2000, "only the part after the breakpoint is input")
  u = anthropic(server, system, "second")
  T.eq(u.cache_read_input_tokens, 2000)
  T.eq(u.cache_creation_input_tokens, 0)
  u = anthropic(server, system, "third", "claude-haiku-4-5")
  T.eq(u.cache_creation_input_tokens, 0, "below Haiku's minimum of 2,048 tokens nothing is cached")
  u = post(server, "/v1/messages", {model = "claude-standin", max_tokens = 50, system = system,
    messages = {{role = "user", content = "no breakpoint"}}})
  T.eq(u.cache_read_input_tokens, 0, "without a breakpoint nothing is read")
  T.eq(u.input_tokens, math.ceil((8000 + 13) / 4))
  local billed = json.decode(assert(http.request{url = server.url .. "/_stats"}).body).billed
  T.eq(billed["claude-standin"].cache_read, 2000)
  T.eq(billed["claude-standin"].cache_write, 2000)
end

tests["Anthropic: each turn reads the previous turn's prefix through the lookback"] = function()
  local server = T.server{"tests/standins/llm", "--api-key", KEY}
  local messages = {}
  local last
  for turn = 1, 4 do
    messages[#messages + 1] = {role = "user", content = {{type = "text", text = ("u"):rep(6000),
                                                          cache_control = {type = "ephemeral"}}}}
    last = post(server, "/v1/messages", {model = "claude-standin", max_tokens = 50,
                                         messages = messages})
    if turn > 1 then
      T.eq(last.cache_read_input_tokens, ((turn - 1) * 6000 + (turn - 2) * 2) // 4, "turn " .. turn)
    end
    -- the breakpoint moves to the newest block, as a client marks only its last turn
    messages[#messages].content[1].cache_control = nil
    messages[#messages + 1] = {role = "assistant", content = "ok"}
  end
  T.truthy(last.cache_creation_input_tokens > 0 and last.input_tokens >= 0, json.encode(last))
end

tests["a cached prefix is forgotten after its lifetime"] = function()
  local server = T.server{"tests/standins/llm", "--api-key", KEY, "--cache-ttl", "0.5"}
  local system = ("s"):rep(8000)
  anthropic(server, system, "first")
  require("rlm.sys").sleep(1.0)
  local u = anthropic(server, system, "after the lifetime")
  T.eq(u.cache_read_input_tokens, 0)
  T.eq(u.cache_creation_input_tokens, 2000)
end

return tests
