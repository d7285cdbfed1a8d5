-- rlm.llm (lua/rlm/llm.lua over host/lllm.c) against the LLM stand-in.
local T = require "support"
local llm = require "rlm.llm"
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"
local async = require "rlm.async"
local prices = require "rlm.prices"

local KEY = "sk-test-SECRET-0123456789"
local OPENAI, ANTHROPIC = "/v1/chat/completions", "/v1/messages"

local tests = {}

-- A usage table as results carry it, with nothing read from or written to a prompt cache.
local function usage(input, output)
  return {input_tokens = input, output_tokens = output, cache_read_tokens = 0,
          cache_write_tokens = 0}
end

-- A stand-in (with a rule script when given) and request builders for both providers.
local function standin(opts)
  opts = opts or {}
  local argv = {"tests/standins/llm", "--api-key", KEY}
  if opts.script then
    local path = T.tmpdir() .. "/script.json"
    assert(sys.write_file(path, json.encode(opts.script)))
    argv[#argv + 1] = "--script"
    argv[#argv + 1] = path
  end
  if opts.latency_ms then
    argv[#argv + 1] = "--latency-ms"
    argv[#argv + 1] = tostring(opts.latency_ms)
  end
  if opts.together then   -- model requests wait until this many are in flight at once
    argv[#argv + 1] = "--together"
    argv[#argv + 1] = tostring(opts.together)
  end
  local s = T.server(argv)
  function s.req(model, fields)
    local r = {model = model, api_key = KEY, backoff = 0.02,
               base_url = model:match("^anthropic/") and s.url or s.url .. "/v1"}
    for k, v in pairs(fields or {}) do r[k] = v end
    return r
  end
  function s.stats()
    return json.decode(assert(http.request{url = s.url .. "/_stats"}).body)
  end
  function s.fault(spec)
    local res = assert(http.request{url = s.url .. "/_fault", method = "POST", body = json.encode(spec)})
    assert(res.status == 200, res.body)
  end
  return s
end

local MODELS = {"openai/gpt-4o", "anthropic/claude-sonnet-4-5"}

local function path_of(model)
  return model:match("^anthropic/") and ANTHROPIC or OPENAI
end

-- Asserts the key appears nowhere in v (strings, tables, their tostring).
local function no_key(v, what)
  local text = type(v) == "table" and (tostring(v) .. json.encode(v)) or tostring(v)
  if text:find(KEY, 1, true) or text:find(KEY:sub(4), 1, true) then
    error((what or "value") .. " leaks the API key: " .. text, 2)
  end
end

tests["both providers answer with text, finish_reason, usage and model"] = function()
  local s = standin()
  for _, model in ipairs(MODELS) do
    local res, err = llm.complete(s.req(model, {prompt = "hello there", system = "Be terse."}))
    T.truthy(res, err)
    T.eq(res.text, "echo: hello there")
    T.eq(res.finish_reason, "stop")
    T.eq(res.model, model:match("/(.*)"))
    -- the stand-in counts ~4 characters a token: prompt 11 + system 10, reply 17
    T.eq(res.usage, usage(5, 5))
    T.eq(res.attempts, 1)
    no_key(res, "result")
  end
end

tests["extra replaces a member of the body rather than repeating it, on both wires"] = function()
  local s = standin()
  for _, model in ipairs{"openai/gpt-4o", "anthropic/claude-sonnet-4-5"} do
    assert(llm.complete(s.req(model, {prompt = "hi", temperature = 0.5, max_tokens = 9,
      stop = "END", extra = {temperature = 0.1, max_tokens = 7, max_completion_tokens = 7,
                             stop = {"X"}, stop_sequences = {"Y"}, seed = 3}})))
    local st = s.stats()
    T.eq(st.last_body.temperature, 0.1, model)
    T.eq(st.last_body.seed, 3, model)
    T.eq(st.last_body[model:match("^openai") and "max_completion_tokens" or "max_tokens"], 7, model)
    T.eq(st.last_body[model:match("^openai") and "stop" or "stop_sequences"],
         model:match("^openai") and {"X"} or {"Y"}, model)
    T.eq(st.last_duplicates, {}, model .. ": keys written twice")
  end
end

tests["a bare prompt's body is what its messages would make: a number system is text"] = function()
  local s = standin()
  assert(llm.complete(s.req("anthropic/claude-sonnet-4-5", {prompt = "hi", system = 7})))
  T.eq(s.stats().last_body.system, "7")
end

tests["a provider's max_tokens_field is written as an escaped JSON name"] = function()
  local s = standin()
  llm.providers.quoted = {wire = "openai", base_url = s.url .. "/v1", key_env = "RLM_TEST_NO_KEY",
                          max_tokens_field = 'max"tokens\\'}
  T.defer(function() llm.providers.quoted = nil end)
  assert(llm.complete{model = "quoted/gpt-4o", api_key = KEY, prompt = "hi", max_tokens = 9})
  T.eq(s.stats().last_body['max"tokens\\'], 9)
end

tests["system prompt, stop and max_tokens go where each API wants them"] = function()
  local s = standin()
  assert(llm.complete(s.req("openai/gpt-4o", {system = "SYS", stop = "END", max_tokens = 50,
                                              temperature = 0.5, prompt = "hi"})))
  local st = s.stats()
  local body = st.last_body
  T.eq(body.messages, {{role = "system", content = "SYS"}, {role = "user", content = "hi"}})
  T.eq(body.stop, {"END"})
  T.eq(body.max_completion_tokens, 50)
  T.eq(body.temperature, 0.5)
  T.eq(body.model, "gpt-4o")
  T.eq(body.stream, nil)
  T.eq(st.last_headers.authorization, "***")
  T.eq(st.last_headers["anthropic-version"], nil)

  assert(llm.complete(s.req("anthropic/claude-sonnet-4-5", {
    system = "SYS", stop = {"END", "FIN"}, temperature = 0,
    messages = {{role = "system", content = "MORE"}, {role = "user", content = "hi"}}})))
  st = s.stats()
  body = st.last_body
  T.eq(body.system, "SYS\n\nMORE")
  T.eq(body.messages, {{role = "user", content = "hi"}})

  -- a bare prompt (what a batch of sub-calls sends) makes the same body as one user message
  assert(llm.complete(s.req("anthropic/claude-sonnet-4-5", {system = "SYS", prompt = "hi"})))
  T.eq(s.stats().last_body.system, "SYS")
  T.eq(s.stats().last_body.messages, {{role = "user", content = "hi"}})
  T.eq(body.stop_sequences, {"END", "FIN"})
  T.eq(body.max_tokens, llm.max_tokens)
  T.eq(body.temperature, 0)
  T.eq(body.model, "claude-sonnet-4-5")
  T.eq(st.last_headers["x-api-key"], "***")
  T.eq(st.last_headers["anthropic-version"], "2023-06-01")
  T.eq(st.last_headers.authorization, nil)
end

tests["stop sequences and the token limit end answers, streamed or not"] = function()
  local s = standin{script = {rules = {{match = "count", reply = "one two three four five six"}}}}
  for _, model in ipairs(MODELS) do
    for _, stream in ipairs{false, true} do
      local on_delta = stream and function() end or nil
      local res = assert(llm.complete(s.req(model, {prompt = "count", stop = "four",
                                                    on_delta = on_delta})))
      T.eq(res.text, "one two three ", model)
      T.eq(res.finish_reason, "stop", model)
      res = assert(llm.complete(s.req(model, {prompt = "count", max_tokens = 2, on_delta = on_delta})))
      T.eq(res.text, "one two ", model)
      T.eq(res.finish_reason, "length", model)
    end
  end
end

tests["a refusal is finish_reason refusal on both wires, streamed or not"] = function()
  local why = "I can't help with \"that\"."
  local s = standin{script = {rules = {{match = "refuse", refusal = why}}}}
  for _, model in ipairs(MODELS) do
    for _, stream in ipairs{false, true} do
      local on_delta = stream and function() end or nil
      local res = assert(llm.complete(s.req(model, {prompt = "refuse", on_delta = on_delta})))
      T.eq(res.finish_reason, "refusal", model)
      if model:match("^openai") then   -- the text comes as message.refusal, content null
        T.eq({res.text, res.refusal}, {"", why}, model)
      else                              -- the text is content, stop_reason "refusal"
        T.eq({res.text, res.refusal}, {why, nil}, model)
      end
    end
  end
end

tests["a model served on the Responses API: text, limit, refusal, usage, streamed or not"] = function()
  local s = standin{script = {rules = {{match = "refuse", refusal = "No."},
                                       {match = "count", reply = "one two three four"}}}}
  local model = "openai/o3-pro"   -- providers.openai.wires sends it to /v1/responses
  for _, stream in ipairs{false, true} do
    local on_delta = stream and function() end or nil
    local res = assert(llm.complete(s.req(model, {system = "Be brief.", on_delta = on_delta,
      messages = {{role = "user", content = "count"}}, reasoning_effort = "high"})))
    T.eq({res.text, res.finish_reason, res.model}, {"one two three four", "stop", "o3-pro"})
    T.eq(res.usage, usage(4, 5))
    local st = s.stats()
    T.eq(st.paths["/v1/responses"] ~= nil, true)
    local body = st.last_body
    T.eq({body.instructions, body.input, body.reasoning, body.messages},
         {"Be brief.", {{role = "user", content = "count"}}, {effort = "high"}, nil})
    res = assert(llm.complete(s.req(model, {prompt = "count", max_tokens = 2, on_delta = on_delta})))
    T.eq({res.text, res.finish_reason}, {"one two ", "length"})
    T.eq(s.stats().last_body.max_output_tokens, 2)
    res = assert(llm.complete(s.req(model, {prompt = "refuse", on_delta = on_delta})))
    T.eq({res.text, res.finish_reason, res.refusal}, {"", "refusal", "No."})
  end
  T.raises(function() llm.complete(s.req(model, {prompt = "x", stop = "y"})) end,
           "the Responses API takes no stop sequences")
end

tests["streaming delivers the text in deltas, with usage, for both providers"] = function()
  local reply = ("The quick brown fox jumps over the lazy dog. "):rep(20)
  local s = standin{script = {rules = {{match = "fox", reply = reply}}}}
  for _, model in ipairs(MODELS) do
    local deltas = {}
    local res, err = llm.complete(s.req(model, {prompt = "fox please", system = "S",
                                                on_delta = function(t) deltas[#deltas + 1] = t end}))
    T.truthy(res, err)
    T.eq(res.text, reply, model)
    T.eq(table.concat(deltas), reply, model)
    T.eq(res.finish_reason, "stop")
    T.eq(res.model, model:match("/(.*)"))
    T.eq(res.usage, usage(3, #reply // 4))
    local body = s.stats().last_body
    T.eq(body.stream, true)
    if model:match("^openai") then T.eq(body.stream_options, {include_usage = true}) end
  end
end

tests["batch of 64 runs concurrently, in input order"] = function()
  local s = standin{together = 64,
                    script = {rules = {{match = "^n=(\\d+)$", reply_expr = "'got ' + m.group(1)"}}}}
  local reqs = {}
  for i = 1, 64 do
    reqs[i] = s.req(MODELS[i % 2 + 1], {prompt = "n=" .. i})
  end
  local results = llm.batch(reqs, {concurrency = 64})
  for i, r in ipairs(results) do T.eq(r.text, "got " .. i) end
  T.eq(#results, 64)
  T.eq(s.stats().max_in_flight, 64, "calls in flight at once")
end

tests["a failed batch item is an error in its slot; the others succeed"] = function()
  local s = standin{script = {rules = {{match = "bad", fault = "401"}}}}
  local results = llm.batch({s.req("openai/gpt-4o", {prompt = "good 1"}),
                             s.req("openai/gpt-4o", {prompt = "bad"}),
                             s.req("anthropic/claude-sonnet-4-5", {prompt = "good 3"})},
                            {concurrency = 2})
  T.eq(results[1].text, "echo: good 1")
  T.eq(results[2].status, 401)
  T.eq(results[2].kind, "http")
  T.contains(results[2].error, "openai/gpt-4o: HTTP 401")
  T.eq(results[3].text, "echo: good 3")
end

tests["a batch keeps to its concurrency: each freed slot takes the next request"] = function()
  local s = standin{latency_ms = 200, together = 2}
  local reqs = {}
  for i = 1, 6 do reqs[i] = s.req(MODELS[i % 2 + 1], {prompt = "r" .. i}) end
  local t0 = sys.now()
  local results = llm.batch(reqs, {concurrency = 2})
  local took = sys.now() - t0
  for i, r in ipairs(results) do T.eq(r.text, "echo: r" .. i) end
  -- two in flight at most: three rounds of 200 ms, over no more than two connections
  T.truthy(took >= 0.58, ("6 calls of 200 ms, 2 at a time, took only %.2f s"):format(took))
  T.truthy(s.stats().connections <= 2, "more than two connections for a concurrency of 2")
  T.eq(s.stats().max_in_flight, 2, "calls in flight at once")
  -- below 1 is one at a time, as rlm.run's batch_concurrency = 0 always ran; not a number raises
  t0 = sys.now()
  results = llm.batch({reqs[1], reqs[2], reqs[3]}, {concurrency = 0})
  T.eq(results[3].text, "echo: r3")
  T.truthy(sys.now() - t0 >= 0.58, "concurrency 0 ran calls side by side")
  T.eq(#llm.batch({reqs[1], reqs[2]}, {concurrency = 1.5}), 2)
  T.raises(function() llm.batch(reqs, {concurrency = "2"}) end, "concurrency must be a number")
end

tests["a request the wire layer refuses fails its own slot in a batch; the rest are sent"] = function()
  local s = standin()
  local results = llm.batch({s.req("openai/gpt-4o", {prompt = "a"}),
                             s.req("openai/gpt-4o", {prompt = "b", headers = {["x-bad"] = "1\r\n2"}}),
                             s.req("anthropic/claude-sonnet-4-5", {prompt = "c"})},
                            {concurrency = 1})
  T.eq(results[1].text, "echo: a")
  T.eq(results[2].kind, "misuse")
  T.contains(results[2].error, "line break")
  T.eq(results[3].text, "echo: c")
  T.eq(s.stats().requests, 2)
  local usage = llm.usage()
  T.truthy(usage.calls >= 2)
end

tests["a batch streams to on_delta where a request asks, and reads whole streams otherwise"] = function()
  -- numbered words: the stand-in sends one event per word; on_delta gets them as they came,
  -- several at a time when the stream outruns the task (how many is the machine's business)
  local words = {}
  for i = 1, 200 do words[i] = "w" .. i .. " " end
  local long = table.concat(words)
  local s = standin{script = {rules = {{match = "long", reply = long}}}}
  local deltas = {}
  local results = llm.batch({
    s.req("openai/gpt-4o", {prompt = "long", on_delta = function(t) deltas[#deltas + 1] = t end}),
    s.req("anthropic/claude-sonnet-4-5", {prompt = "long", stream = true}),
    s.req("openai/gpt-4o", {prompt = "plain"})}, {concurrency = 3})
  T.eq(results[1].text, long)
  T.eq(table.concat(deltas), long, "every event, in order, once")
  for i, d in ipairs(deltas) do
    T.truthy(d:match("^w%d+ ") and d:match("^[w%d ]+$") and d:sub(-1) == " ",
             ("delta %d is whole words: %q"):format(i, d))
  end
  T.eq(results[2].text, long)
  T.eq(results[3].text, "echo: plain")
  -- without on_delta, a streamed answer is read in C at its end (the same text and usage)
  local only = llm.batch({s.req("anthropic/claude-sonnet-4-5", {prompt = "long", stream = true})})
  T.eq(only[1].text, long)
  T.eq(s.stats().last_body.stream, true)
  T.truthy(only[1].usage.output_tokens > 0)
end

tests["complete works inside tasks, side by side"] = function()
  local s = standin{together = 2}
  local a = async.spawn(llm.complete, s.req("openai/gpt-4o", {prompt = "a"}))
  local b = async.spawn(llm.complete, s.req("anthropic/claude-sonnet-4-5", {prompt = "b"}))
  T.eq(a:join().text, "echo: a")
  T.eq(b:join().text, "echo: b")
  T.eq(s.stats().max_in_flight, 2, "the two calls overlapped")
end

tests["429 with Retry-After: 1 waits about a second, then succeeds"] = function()
  local s = standin()
  for _, model in ipairs(MODELS) do
    s.fault{path = path_of(model), status = 429, count = 1, retry_after = 1}
    local t0 = sys.now()
    local res, err = llm.complete(s.req(model, {prompt = "x"}))
    local took = sys.now() - t0
    T.truthy(res, err)
    T.eq(res.attempts, 2)
    T.truthy(took >= 0.95 and took < 5, ("waited %.2f s"):format(took))
  end
  T.eq(s.stats().requests, 4)
end

tests["429 asking to wait past the deadline fails at once, saying so"] = function()
  local s = standin()
  s.fault{path = OPENAI, status = 429, count = 1, retry_after = 30}
  local t0 = sys.now()
  local res, err = llm.complete(s.req("openai/gpt-4o", {prompt = "x", timeout = 10}))
  T.eq(res, nil)
  T.truthy(sys.now() - t0 < 8, "gave up before its deadline")
  T.contains(err.message, "HTTP 429 Too Many Requests: Rate limit reached")
  T.contains(err.message, "asked to wait 30 s")
  T.eq(err.retry_after, 30)
  T.eq(err.status, 429)
end

tests["5xx and cut responses are retried; 401 is not"] = function()
  local s = standin()
  for _, model in ipairs(MODELS) do
    local path = path_of(model)
    s.fault{path = path, status = 500, count = 1}
    local res, err = llm.complete(s.req(model, {prompt = "x"}))
    T.truthy(res, err)
    T.eq(res.attempts, 2)
    s.fault{path = path, status = 529, count = 2}
    res, err = llm.complete(s.req(model, {prompt = "x", on_delta = function() end}))
    T.truthy(res, err)
    T.eq(res.attempts, 3)
    s.fault{path = path, kind = "cut", count = 1}
    res, err = llm.complete(s.req(model, {prompt = "x"}))
    T.truthy(res, err)
    T.eq(res.attempts, 2)

    http.request{url = s.url .. "/_reset", method = "POST"}
    s.fault{path = path, status = 401, count = 1}
    res, err = llm.complete(s.req(model, {prompt = "x"}))
    T.eq(res, nil)
    T.eq({kind = err.kind, status = err.status, attempts = err.attempts},
         {kind = "http", status = 401, attempts = 1})
    T.contains(err.message, model .. ": HTTP 401 Unauthorized: ")
    T.contains(err.message, model:match("^openai") and "Incorrect API key" or "invalid x-api-key")
    T.eq(s.stats().requests, 1)
    no_key(err, "error")
  end
end

tests["retries give up with the last error when the failure persists"] = function()
  local s = standin()
  s.fault{path = OPENAI, status = 503, count = 10}
  local res, err = llm.complete(s.req("openai/gpt-4o", {prompt = "x", retries = 2}))
  T.eq(res, nil)
  T.eq(err.attempts, 3)
  T.contains(err.message, "HTTP 503 Service Unavailable: The engine is currently overloaded")
  T.contains(err.message, "gave up after 3 attempts")
  T.eq(s.stats().requests, 3)
end

tests["a malformed body is a clear error, not retried"] = function()
  local s = standin()
  for _, model in ipairs(MODELS) do
    http.request{url = s.url .. "/_reset", method = "POST"}
    s.fault{path = path_of(model), kind = "malformed", count = 1}
    local res, err = llm.complete(s.req(model, {prompt = "x"}))
    T.eq(res, nil)
    T.eq(err.kind, "malformed")
    T.contains(err.message, model .. ": the response is not valid JSON (invalid JSON at byte")
    T.eq(s.stats().requests, 1)

    s.fault{path = path_of(model), kind = "malformed", count = 1}
    res, err = llm.complete(s.req(model, {prompt = "x", on_delta = function() end}))
    T.eq(res, nil)
    T.eq(err.kind, "malformed")
    T.contains(err.message, "a stream event is not valid JSON")
  end
end

-- Serves every POST with the body bodies[path] (status 200, JSON) from this process's own
-- server, so a test can hand the client any answer text at all.
local function raw_answers(bodies)
  local httpd = require "rlm.core.httpd"
  local server = assert(httpd.listen{host = "127.0.0.1", port = 0})
  local stop = false
  local serving = async.spawn(function()
    while not stop do
      async.await(server:id(), 0.05)
      for req in function() return server:next() end do
        req:respond(200, {["Content-Type"] = "application/json"}, bodies[req:path()] or "{}")
      end
    end
  end)
  T.defer(function() stop = true; serving:join(1); server:close() end)
  local url = ("http://127.0.0.1:%d"):format(server:port())
  return function(model)
    return {model = model, api_key = KEY, prompt = "x", retries = 0,
            base_url = model:match("^anthropic/") and url or url .. "/v1"}
  end
end

tests["an answer's fields are read exactly: escapes, decoys, duplicate keys, any layout"] = function()
  local bodies = {}
  local req = raw_answers(bodies)
  bodies[OPENAI] = ' {"id":"x", "choices" : [ {"index":0,"logprobs":null,' ..
    '"extra":{"content":"decoy","message":{"content":"decoy 2"}},' ..
    '"message" : {"role":"assistant","content":"caf\\u00e9 \\"q\\" \\ud83d\\ude00 \\\\ end"},' ..
    '"finish_reason":"length"}, {"message":{"content":"second choice"}}],' ..
    '"usage":{"prompt_tokens":5,"completion_tokens":7.9,"prompt_tokens":11},' ..
    '"model":"m-1","mod\\u0065l":"m-2"} '
  local res = assert(llm.complete(req("openai/gpt-4o")))
  T.eq(res.text, 'café "q" 😀 \\ end')
  T.eq(res.finish_reason, "length")
  T.eq(res.model, "m-2")
  T.eq(res.usage, usage(11, 7))

  bodies[ANTHROPIC] = '{"content":[{"type":"text","text":"A"},' ..
    '{"type":"tool_use","id":"t","input":{"type":"text","text":"decoy"}},' ..
    '{"text":"B\\n","type":"text"}],"stop_reason":"end_turn","model":"claude-x",' ..
    '"usage":{"input_tokens":1e300,"output_tokens":4}}'
  res = assert(llm.complete(req("anthropic/claude-sonnet-4-5")))
  T.eq(res.text, "AB\n")
  T.eq(res.finish_reason, "stop")
  T.eq(res.model, "claude-x")
  T.eq(res.usage, usage(0, 4))   -- past any count: none

  bodies[OPENAI] = '{"error":{"message":"over quota \\u2014 sorry"}}'
  local _, err = llm.complete(req("openai/gpt-4o"))
  T.eq(err.kind, "provider")
  T.contains(err.message, "the provider reported an error: over quota — sorry")

  bodies[OPENAI] = '{"error":{"message":"stale"},"error":"fresh"}'
  _, err = llm.complete(req("openai/gpt-4o"))
  T.contains(err.message, "the provider reported an error: fresh")

  -- a key with a dot is one key, not a path
  bodies[OPENAI] = '{"error.message":"dotted","usage.prompt_tokens":9,' ..
    '"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]}'
  res = assert(llm.complete(req("openai/gpt-4o")))
  T.eq(res.text, "ok")
  T.eq(res.usage.input_tokens, 0)

  for _, body in ipairs{'{"choices":{"1":{"message":{"content":"an object is no list"}}}}',
                        '{"choices":[{"message":{"content":"stale"}}],"choices":[]}',
                        '{"choices.1":{},"choices.1.message.content":"dotted"}'} do
    bodies[OPENAI] = body
    _, err = llm.complete(req("openai/gpt-4o"))
    T.eq(err.kind, "malformed", body)
    T.contains(err.message, "the response has no choices", body)
  end
end

tests["a fault anywhere in an answer, even far from the fields read, makes it malformed"] = function()
  local bodies = {}
  local req = raw_answers(bodies)
  local good = '{"choices":[{"message":{"content":"ok"},"finish_reason":"stop"}]'
  for _, tail in ipairs{',"x":[1,2,]}', ',"x":"\\u12G4"}', ',"x":"a\tb"}', ',"x":01}', '}}',
                        ',"x":1e999}', '} trailing'} do
    bodies[OPENAI] = good .. tail
    local res, err = llm.complete(req("openai/gpt-4o"))
    T.eq(res, nil, tail)
    T.eq(err.kind, "malformed", tail)
    T.contains(err.message, "the response is not valid JSON (invalid JSON at byte", tail)
  end
  bodies[OPENAI] = good .. "}"
  T.eq(assert(llm.complete(req("openai/gpt-4o"))).text, "ok")
end

tests["a stream that stays cut is a clear error"] = function()
  local s = standin()
  for _, model in ipairs(MODELS) do
    s.fault{path = path_of(model), kind = "cut", count = 5}
    local res, err = llm.complete(s.req(model, {prompt = "x", retries = 1,
                                                      on_delta = function() end}))
    T.eq(res, nil)
    T.eq(err.kind, "cut")
    T.contains(err.message, "was cut off")
    http.request{url = s.url .. "/_reset", method = "POST"}
  end
end

tests["a call that outlasts its timeout fails with kind timeout"] = function()
  local s = standin{latency_ms = 30000}
  local t0 = sys.now()
  local res, err = llm.complete(s.req("openai/gpt-4o", {prompt = "x", timeout = 0.3}))
  T.eq(res, nil)
  T.eq(err.kind, "timeout")
  T.contains(err.message, "within 0.3 s")
  local took = sys.now() - t0
  T.truthy(took >= 0.29 and took < 15, ("ended after %.2f s, the answer was 30 s away"):format(took))
end

tests["the key never shows, even when the provider echoes it"] = function()
  local s = standin()
  -- The stand-in's 400 message quotes the bad value, which here is the key itself.
  local res, err = llm.complete(s.req("openai/gpt-4o", {prompt = "x",
                                                              extra = {max_completion_tokens = KEY}}))
  T.eq(res, nil)
  T.eq(err.status, 400)
  T.contains(err.message, "[redacted]")
  no_key(err, "error")
  local results = llm.batch{s.req("openai/gpt-4o", {prompt = "x", extra = {max_completion_tokens = KEY}}),
                            s.req("openai/gpt-4o", {prompt = "ok"})}
  no_key(results, "batch results")
  no_key(llm.usage(), "usage")
  -- A refused connection names the URL but not the key.
  local dead = standin()
  dead.proc:kill("KILL")
  sys.wait(dead.proc, 2)
  res, err = llm.complete(dead.req("anthropic/claude-sonnet-4-5", {prompt = "x", retries = 0}))
  T.eq(err.kind, "connect")
  T.contains(err.message, "cannot reach " .. dead.url .. "/v1/messages")
  no_key(err, "error")
end

tests["keys, base URLs and the default model come from the environment"] = function()
  local s = standin()
  local saved = {}
  for _, name in ipairs{"OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY",
                        "ANTHROPIC_BASE_URL", "RLM_MODEL"} do
    saved[name] = sys.getenv(name)
  end
  T.defer(function() for name, v in pairs(saved) do sys.setenv(name, v) end end)
  for name in pairs(saved) do sys.setenv(name, nil) end

  T.raises(function() llm.complete{prompt = "x"} end, "set RLM_MODEL")
  -- a missing key is a setting the caller branches on: nil and the error, not a raise
  local res, err = llm.complete{model = "openai/gpt-4o", prompt = "x"}
  T.eq(res, nil)
  T.eq(err.kind, "no_key")
  T.eq(tostring(err), "openai/gpt-4o needs an API key: set OPENAI_API_KEY (or pass api_key)")
  T.eq("rlm: " .. err, "rlm: " .. err.message)
  T.raises(function() llm.complete("x") end, "must be a table")
  T.eq(s.stats().requests, 0)
  -- in a batch, the request that cannot be sent fails its own slot; the others go
  local slots = llm.batch{s.req("openai/gpt-4o", {prompt = "x"}),
                          {model = "anthropic/claude-haiku-4-5", prompt = "x"}}
  T.eq(slots[2].kind, "misuse")
  T.contains(slots[2].error, "set ANTHROPIC_API_KEY")
  T.eq(slots[1].error, nil)
  T.eq(s.stats().requests, 1)

  sys.setenv("OPENAI_API_KEY", KEY)
  sys.setenv("OPENAI_BASE_URL", s.url .. "/v1/")
  sys.setenv("ANTHROPIC_API_KEY", KEY)
  sys.setenv("ANTHROPIC_BASE_URL", s.url)
  sys.setenv("RLM_MODEL", "anthropic/claude-haiku-4-5")
  T.eq(assert(llm.complete{prompt = "env"}).model, "claude-haiku-4-5")
  T.eq(assert(llm.complete{model = "gpt-4o-mini", prompt = "env"}).model, "gpt-4o-mini")
  T.eq(s.stats().models, {"gpt-4o", "claude-haiku-4-5", "gpt-4o-mini"})
end

tests["local servers need no key; other providers are table entries"] = function()
  local s = standin()
  local saved = sys.getenv("RLM_LOCAL_BASE_URL")
  T.defer(function() sys.setenv("RLM_LOCAL_BASE_URL", saved) end)
  sys.setenv("RLM_LOCAL_BASE_URL", s.url .. "/v1")
  -- No key at all: the request goes out without one (the stand-in insists on a key).
  local res, err = llm.complete{model = "local/qwen2.5-7b", prompt = "x"}
  T.eq(err.status, 401)
  T.contains(err.message, "local/qwen2.5-7b: HTTP 401 Unauthorized: You didn't provide an API key")
  res = assert(llm.complete{model = "local/qwen2.5-7b", prompt = "x", api_key = KEY})
  T.eq(res.model, "qwen2.5-7b")
  T.eq(s.stats().last_body.max_tokens, nil)

  T.raises(function() llm.complete{model = "nowhere/m", prompt = "x"} end,
           "names no known provider")
  llm.providers.mine = {wire = "anthropic", base_url = s.url, key_env = "RLM_TEST_MINE_KEY",
                        headers = {["X-Extra"] = "1"}}
  T.defer(function() llm.providers.mine = nil end)
  T.contains(tostring(select(2, llm.complete{model = "mine/claude-x", prompt = "x"})), "set RLM_TEST_MINE_KEY")
  res = assert(llm.complete{model = "mine/org/claude-x", prompt = "x", api_key = KEY})
  T.eq(res.model, "org/claude-x")
  T.eq(s.stats().last_headers["x-extra"], "1")
end

tests["usage is counted per model and priced from the price table"] = function()
  local s = standin{script = {rules = {{match = "long", reply = ("x"):rep(400)}}}}
  prices["openai/test-model"] = {input = 2.0, output = 10.0}
  T.defer(function() prices["openai/test-model"] = nil end)
  llm.reset_usage()
  local a = assert(llm.complete(s.req("openai/test-model", {prompt = ("p"):rep(400)})))
  local b = assert(llm.complete(s.req("openai/test-model", {prompt = "long"})))
  -- the stand-in echoes 200 characters of the prompt: "echo: " .. 200 = 206 characters
  T.eq(a.usage, usage(100, 52))
  T.eq(b.usage, usage(1, 100))
  T.eq(a.cost, (100 * 2.0 + 52 * 10.0) / 1e6)
  assert(llm.complete(s.req("anthropic/claude-unpriced", {prompt = "x"})))
  s.fault{path = OPENAI, status = 401, count = 1}
  T.eq(llm.complete(s.req("openai/test-model", {prompt = "x"})), nil)

  local u = llm.usage()
  T.eq(u.models["openai/test-model"], {calls = 2, errors = 1, input_tokens = 101,
                                       output_tokens = 152, unpriced = 0, cache_read_tokens = 0,
                                       cache_write_tokens = 0,
                                       cost = (101 * 2.0 + 152 * 10.0) / 1e6})
  T.eq(u.models["anthropic/claude-unpriced"].unpriced, 1)
  T.eq(u.models["anthropic/claude-unpriced"].cost, 0)
  T.eq(u.calls, 3)
  T.eq(u.errors, 1)
  T.eq(u.input_tokens, 101 + 1)
  T.eq(u.cost, (101 * 2.0 + 152 * 10.0) / 1e6)
  -- A dated version is priced by its base entry.
  T.eq(llm.cost("anthropic/claude-sonnet-4-5-20250929", {input_tokens = 1e6, output_tokens = 0}), 3.0)
  -- Input read from the prompt cache costs a tenth on Anthropic, written a quarter more.
  T.eq(llm.cost("anthropic/claude-sonnet-4-5", {input_tokens = 3e6, output_tokens = 0,
                                                cache_read_tokens = 1e6, cache_write_tokens = 1e6}),
       3.0 + 0.3 + 3.75)
  llm.reset_usage()
  T.eq(llm.usage().calls, 0)
end

tests["misuse raises before anything is sent"] = function()
  local s = standin()
  T.raises(function() llm.complete(s.req("openai/gpt-4o", {})) end, "non-empty list 'messages'")
  T.raises(function() llm.complete(s.req("openai/gpt-4o", {prompt = "x", on_delta = 1})) end,
           "'on_delta' must be a function")
  T.raises(function() llm.complete(s.req("openai/gpt-4o", {prompt = "x", headers = {["X-A"] = "1\r\nB: 2"}})) end,
           "line break")
  T.raises(function() llm.complete(s.req("anthropic/claude-x", {prompt = "x", max_tokens = 0})) end,
           "positive integer")
  T.eq(s.stats().requests, 0)
end

-- Batches against misuse and interrupts.

-- Runs a Lua script in a child rlm (`rlm run`), argv passed as its `...`; sh_prefix (optional)
-- is shell run before it (a ulimit, say). Returns sys.run's result: code, stdout, stderr.
local function child_script(src, args, sh_prefix)
  local argv = {"/bin/sh", "-c", (sh_prefix or ":") .. ' && exec "$0" run "$@"', T.rlm,
                T.lua_script(src)}
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  return assert(sys.run(argv, {timeout = 60}))
end

tests["a streaming batch item that raises keeps its message, not 'table: 0x...'"] = function()
  local s = standin()
  -- the old path put async.map's failed item into the slot as it was: {error = message, kind}
  local results = llm.batch({
    s.req("openai/gpt-4o", {prompt = "a", on_delta = function() error("on_delta blew up", 0) end}),
    s.req("openai/gpt-4o", {prompt = "b", on_delta = function() end,
                            headers = {["x-bad"] = "1\r\n2"}})}, {concurrency = 2})
  T.contains(results[1].error, "on_delta blew up")
  T.contains(results[2].error, "line break")
end

tests["a request C refuses in a batch is not counted as a failed call in llm.usage()"] =
function()
  -- Before, core.start raised inside run() before account(): a request that was never sent was
  -- neither a call nor an error (as a Lua-side misuse still is not).
  local s = standin()
  llm.reset_usage()
  local results = llm.batch({s.req("openai/gpt-4o", {prompt = "b", headers = {["x-bad"] = "1\r\n2"}}),
                             s.req("openai/gpt-4o", {prompt = "c", api_key = false, model = 7})})
  T.contains(results[1].error, "line break")
  T.truthy(results[2].error, "a request with model = 7 fails its slot")
  T.eq(s.stats().requests, 0)
  local u = llm.usage()
  T.eq(u.errors, 0, "errors counted for requests never sent")
  llm.reset_usage()
end

tests["no model call goes out once a signal arrived while a batch starts its calls"] =
function()
  local s = standin{script = {rules = {{match = "^SLOW", reply = "slow", latency_ms = 4000}}}}
  -- The first request reads as a table whose fields are looked up (as a proxy's would be); the
  -- lookup is where a SIGTERM happens to arrive. The two requests after it must not be sent.
  -- Then a batch one at a time, interrupted while its second call runs: the third is not sent,
  -- and neither it nor the cancelled call counts as a failed call.
  local script = [[
local llm = require "rlm.llm"
local async = require "rlm.async"
local sys = require "rlm.sys"
local url, key, phase = ...
local function req(p) return {model = "openai/gpt-4o", api_key = key, base_url = url .. "/v1", prompt = p} end
local ok, err
if phase == "start" then
  local plain, killed = req("first"), false
  local first = setmetatable({}, {__index = function(_, k)
    if not killed then killed = true; sys.kill(sys.getpid(), "TERM") end
    return plain[k]
  end})
  ok, err = pcall(llm.batch, {first, req("second"), req("third")}, {concurrency = 3})
else
  async.spawn(function() async.sleep(1.0); sys.kill(sys.getpid(), "TERM") end)
  ok, err = pcall(llm.batch, {req("fast"), req("SLOW"), req("third")}, {concurrency = 1})
end
local u = llm.usage()
print(("ok=%s calls=%d errors=%d"):format(tostring(ok), u.calls, u.errors), tostring(err))
]]
  local r = child_script(script, {s.url, KEY, "start"})
  T.contains(r.stdout, "ok=false calls=0 errors=0", r.stderr)
  T.contains(r.stdout, "interrupted (SIGTERM)", r.stderr)
  T.eq(s.stats().requests, 0, "requests sent after the signal; child said: " .. r.stdout .. r.stderr)
  r = child_script(script, {s.url, KEY, "mid"})
  T.contains(r.stdout, "ok=false calls=1 errors=0", r.stderr)
  T.contains(r.stdout, "interrupted (SIGTERM)", r.stderr)
  T.eq(s.stats().requests, 2, "the request after the interrupted one was sent: " .. r.stdout)
end

tests["calls that finished before an interrupt stay in llm.usage()"] = function()
  local s = standin{script = {rules = {{match = "^SLOW", reply = "slow", latency_ms = 60000}}}}
  -- Before, each call was counted as it finished; the fast call here was paid for.
  local r = child_script([[
local llm = require "rlm.llm"
local async = require "rlm.async"
local sys = require "rlm.sys"
local http = require "rlm.http"
local json = require "rlm.json"
local url, key = ...
-- One call at a time: the SLOW one reaches the stand-in once the fast one is in; the
-- interrupt comes then (and the SLOW one is never answered).
async.spawn(function()
  while json.decode(http.request{url = url .. "/_stats"}.body).requests < 2 do
    async.sleep(0.02)
  end
  sys.kill(sys.getpid(), "TERM")
end)
local function req(p) return {model = "openai/gpt-4o", api_key = key, base_url = url .. "/v1", prompt = p} end
local ok, err = pcall(llm.batch, {req("fast"), req("SLOW")}, {concurrency = 1})
local u = llm.usage()
print(("ok=%s calls=%d input_tokens=%d"):format(tostring(ok), u.calls, u.input_tokens))
]], {s.url, KEY})
  T.contains(r.stdout, "ok=false", r.stderr)
  T.contains(r.stdout, "calls=1 ", "the finished call was dropped from llm.usage(): " .. r.stdout)
end

return tests
