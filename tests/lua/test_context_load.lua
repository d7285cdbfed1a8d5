--- A long context: the first model call needs only its size and preview, so the sandbox starts
-- and takes the context while that call is in flight; the first code still sees all of it.
local T = require "support"
local async = require "rlm.async"
local interpreter = require "rlm.interpreter"
local json = require "rlm.json"
local loop = require "rlm.core.loop"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

local KEY = "sk-test-key-0123456789"

-- Points the openai provider at url for this test.
local function openai_at(url)
  local names = {"OPENAI_BASE_URL", "OPENAI_API_KEY"}
  local saved = {}
  for _, name in ipairs(names) do saved[name] = sys.getenv(name) end
  T.defer(function() for _, name in ipairs(names) do sys.setenv(name, saved[name]) end end)
  sys.setenv("OPENAI_BASE_URL", url .. "/v1")
  sys.setenv("OPENAI_API_KEY", KEY)
end

local function completion(text)
  return json.encode{id = "x", object = "chat.completion", model = "m",
    choices = {{index = 0, finish_reason = "stop", message = {role = "assistant", content = text}}},
    usage = {prompt_tokens = 10, completion_tokens = 10, total_tokens = 20}}
end

-- The local backend, whose context upload waits (up to `patience` seconds) for gate.open:
-- a run that loads the context before its first model call finds the gate shut.
local function gated_backend(gate, patience)
  local base = require "rlm.backend.local"
  return setmetatable({create = function(opts)
    local sb = base.create(opts)
    local upload = sb.upload
    function sb.upload(self, path, data)
      if not gate.open then
        gate.waiter = loop.new_id()
        async.await(gate.waiter, patience)
      end
      gate.uploaded = true
      return upload(self, path, data)
    end
    return sb
  end}, {__index = base})
end

tests["the first model call goes out before the context is in the sandbox; the code sees it all"] = function()
  local gate, seen = {}, {}
  package.loaded["test.gated_backend"] = gated_backend(gate, 20)
  interpreter.backends.gated = "test.gated_backend"
  T.defer(function()
    interpreter.backends.gated = nil
    package.loaded["test.gated_backend"] = nil
  end)
  local url = T.serve(function(req)
    local body = json.decode(req:body())
    seen[#seen + 1] = {uploaded = gate.uploaded == true, prompt = body.messages[#body.messages].content}
    gate.open = true
    if gate.waiter then loop.ready(gate.waiter) end
    req:respond(200, {["Content-Type"] = "application/json"},
      completion("```repl\nprint(len(context))\nSUBMIT(answer=str(len(context)) + context[-3:])\n```"))
  end)
  openai_at(url)
  -- 8 MB with two-byte characters in it: counted in characters, never cut
  local context = ("ab\u{e9}cd\n"):rep(8 * 1024 * 1024 // 7) .. "end"
  local chars = utf8.len(context)
  local res = rlm.run{task = "measure", context = context, model = "openai/m", backend = "gated",
                      max_iterations = 2}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(res.answer, tostring(chars) .. "end")
  T.eq(#seen, 1)
  T.eq(seen[1].uploaded, false, "the context was loaded before the first model call")
  T.truthy(seen[1].prompt:find(tostring(chars), 1, true), "the prompt gives the context's length")
  T.truthy(gate.uploaded)
end

tests["a sandbox that cannot start ends the run as a sandbox_error with its reason"] = function()
  local base = require "rlm.backend.local"
  package.loaded["test.broken_backend"] = setmetatable({create = function()
    error("no room for a sandbox", 0)
  end}, {__index = base})
  interpreter.backends.broken = "test.broken_backend"
  T.defer(function()
    interpreter.backends.broken = nil
    package.loaded["test.broken_backend"] = nil
  end)
  local calls = 0
  local url = T.serve(function(req)
    calls = calls + 1
    req:respond(200, {["Content-Type"] = "application/json"}, completion("```repl\nprint(1)\n```"))
  end)
  openai_at(url)
  local res = rlm.run{task = "t", context = "x", model = "openai/m", backend = "broken",
                      max_iterations = 2}
  T.eq(res.reason, "sandbox_error", tostring(res.detail))
  T.truthy(tostring(res.detail):find("no room for a sandbox", 1, true), res.detail)
  T.eq(res.iterations, 0)
  T.truthy(calls <= 1)
end

-- The driver's peak resident memory (VmHWM) in kB, read by the code in the sandbox, beside the
-- context's length.
local PEAK_CODE = [[
peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
SUBMIT(answer=f"{peak} {len(context)}")]]

tests["the driver holds a long context once: its peak stays under 1.5x the text"] = function()
  local url = T.serve(function(req)
    req:respond(200, {["Content-Type"] = "application/json"},
      completion("```repl\n" .. PEAK_CODE .. "\n```"))
  end)
  openai_at(url)
  local MB = 1024 * 1024
  local context = (("0123456789abcdef"):rep(4) .. "\n"):rep(64 * MB // 65)
  local res = rlm.run{task = "peak", context = context, model = "openai/m", max_iterations = 2}
  T.eq(res.reason, "submitted", tostring(res.detail))
  local peak_kb, chars = res.answer:match("^(%d+) (%d+)$")
  T.eq(tonumber(chars), #context)
  local ratio = tonumber(peak_kb) * 1024 / #context
  -- read().decode() held the bytes and the text together: 2x and the interpreter's own
  T.truthy(ratio >= 1 and ratio < 1.5, ("driver peak %.2fx the context"):format(ratio))
end

return tests
