--- llm_query_batched_iter: the code takes a batch's answers as they arrive.
local T = require "support"
local async = require "rlm.async"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

local function completion(text)
  return json.encode{id = "x", object = "chat.completion", model = "m",
    choices = {{index = 0, finish_reason = "stop", message = {role = "assistant", content = text}}},
    usage = {prompt_tokens = 10, completion_tokens = 10, total_tokens = 20}}
end

local function openai_at(url)
  local saved = {OPENAI_BASE_URL = sys.getenv("OPENAI_BASE_URL"), OPENAI_API_KEY = sys.getenv("OPENAI_API_KEY")}
  T.defer(function() for k in pairs{OPENAI_BASE_URL = 1, OPENAI_API_KEY = 1} do sys.setenv(k, saved[k]) end end)
  sys.setenv("OPENAI_BASE_URL", url .. "/v1")
  sys.setenv("OPENAI_API_KEY", "sk-test-key-0123456789")
end

-- The held prompt is answered only once the code, holding the other answers, asks for it: a
-- batch that gave its answers only when all were in would wait out the hold (20 s) first.
local CODE = [[
seen = []
for i, answer in llm_query_batched_iter(["held", "quick 1", "quick 2", "quick 3"]):
    seen.append((i, answer))
    if len(seen) == 3:
        seen.append(("asked", llm_query("release")))
SUBMIT(answer=repr(seen))]]

tests["the code works on a batch's first answers while the rest are coming"] = function()
  local released, held_waited_out = false, false
  local url = T.serve(function(req)
    local body = json.decode(req:body())
    local prompt = body.messages[#body.messages].content
    local reply
    if body.messages[1].role == "system" then
      reply = "```repl\n" .. CODE .. "\n```"
    elseif prompt == "held" then
      local t0 = sys.now()
      while not released and sys.now() - t0 < 20 do async.sleep(0.02) end
      held_waited_out = not released
      reply = "H"
    elseif prompt == "release" then
      released, reply = true, "ok"
    else
      reply = prompt:upper()
    end
    req:respond(200, {["Content-Type"] = "application/json"}, completion(reply))
  end)
  openai_at(url)
  local res = rlm.run{task = "iterate", context = "x", model = "openai/m", max_iterations = 2}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(held_waited_out, false)
  local quick = res.answer:match("^%[(.-), %('asked', 'ok'%), %(0, 'H'%)%]$")
  T.truthy(quick, res.answer)
  local got = {}
  for i, a in quick:gmatch("%((%d), '([^']*)'%)") do got[#got + 1] = i .. "=" .. a end
  table.sort(got)
  T.eq(got, {"1=QUICK 1", "2=QUICK 2", "3=QUICK 3"})
end

tests["every index comes once, refused and failed items as [ERROR] strings"] = function()
  local url = T.serve(function(req)
    local body = json.decode(req:body())
    local prompt = body.messages[#body.messages].content
    if body.messages[1].role == "system" then
      req:respond(200, {["Content-Type"] = "application/json"}, completion(
        "```repl\nout = sorted(llm_query_batched_iter(['a', 'bad', 'c', 'x' * 4000000]))\n"
        .. "SUBMIT(answer=repr([(i, a[:7]) for i, a in out]))\n```"))
    elseif prompt == "bad" then
      req:respond(400, {["Content-Type"] = "application/json"}, '{"error":{"message":"no"}}')
    else
      req:respond(200, {["Content-Type"] = "application/json"}, completion(prompt:upper()))
    end
  end)
  openai_at(url)
  local res = rlm.run{task = "all", context = "x", model = "openai/m", max_iterations = 2,
                      context_windows = {["openai/m"] = 100000}}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(res.answer, "[(0, 'A'), (1, '[ERROR]'), (2, 'C'), (3, '[ERROR]')]")
end

return tests
