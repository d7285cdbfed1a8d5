--- Never lose work: every run ends with a reason, history stays within the window, runs resume,
-- replay and cache. A scripted model plays the root and the sub-model.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local parse = require "rlm.parse"
local rlm = require "rlm"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

tests["a model server that fails from turn 2 on: model_error, exit 3, nothing on stdout"] = function()
  local server = F.model{rules = {
    {match = "Task: fails", reply = F.code("x = 41")},
    {match = ".", fault = "401"},
  }}
  local r = T.run_rlm({"ask", "fails", "--quiet"}, {env = F.env(server)})
  T.eq(r.code, 3, r.stderr)
  T.eq(r.stdout, "", "no null, no answer printed")
  T.contains(r.stderr, "rlm ask: no answer: model_error (model call failed")
  T.contains(r.stderr, "extraction failed")
  r = T.run_rlm({"ask", "fails", "--quiet", "--json"}, {env = F.env(server)})
  T.eq(json.decode(r.stdout).reason, "model_error")
end

tests["a failed root call still extracts an answer from the work so far"] = function()
  F.model{rules = {
    {match = "run ended before SUBMIT was called \\(model call failed", reply = '{"answer": "7"}'},
    {match = "Task: half", reply = F.code("print('found 7')")},
    {match = ".", fault = "401"},
  }}
  local res = rlm.run{task = "half", context = "abc"}
  T.eq(res.reason, "model_error")
  T.eq(res.extracted, true)
  T.eq(res.answer, "7")
end

tests["max_iterations = 0 makes no model call at all"] = function()
  local server = F.model{rules = {{match = ".", reply = '{"answer": "paid"}'}}}
  local res = rlm.run{task = "none", context = "abc", max_iterations = 0}
  T.eq(res.extracted, false)
  T.eq(F.stats(server).requests, 0)
end

tests["50 turns of 10,000-character outputs stay within a 32,000-token window"] = function()
  local server = F.model{rules = {
    {match = "^Your conversation for the task below has grown too long",
     reply = "Each turn printed 10,000 y characters; nothing else is known."},
    {match = "Turn 50 of", reply = F.code("SUBMIT(answer=str(turns))")},
    {match = "Task: long", reply = F.code("turns = 1\nprint('y' * 10000)")},
    {match = ".", reply = F.code("turns += 1\nprint('y' * 10000)")},
  }}
  local path = T.tmpdir() .. "/long.jsonl"
  local res = rlm.run{task = "long", context = "abc", max_iterations = 50, context_window = 32000,
                      trace = path}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(res.answer, "49", "the REPL kept its state through every compaction")
  local sizes = F.stats(server).prompt_sizes
  local biggest = 0
  for _, n in ipairs(sizes) do biggest = math.max(biggest, n) end
  T.truthy(biggest <= 32000, "the biggest request was " .. biggest .. " tokens")
  local compactions, first = 0, nil
  for _, r in ipairs(assert(trace.read(path))) do
    if r.type == "compaction" then
      compactions = compactions + 1
      first = first or r.turn
    end
  end
  T.truthy(compactions >= 3, compactions .. " compactions")
  -- Flat after the first compaction: the late turns cost no more than the early ones did.
  local early, late = 0, 0
  for i, n in ipairs(sizes) do
    if i > first and i <= first + 10 then early = math.max(early, n) end
    if i > #sizes - 10 then late = math.max(late, n) end
  end
  T.truthy(late <= early * 1.1, ("late turns %d tokens, early ones %d"):format(late, early))
  local html = T.tmpdir() .. "/long.html"
  local r = T.run_rlm({"trace", path, "--html", html})
  T.eq(r.code, 0, r.stderr)
  T.contains(assert(sys.read_file(html)), "Each turn printed 10,000 y characters")
end

-- A run whose third turn hangs, so it can be interrupted there.
local function three_turns()
  return F.model{rules = {
    {match = "^SUB", reply = "pong"},
    {match = "Task: count", reply = F.code("x = 1\nprint('one')")},
    {match = "Turn 2 of", reply = F.code("x += 1\ns = llm_query('SUB ping')\nprint(s)")},
    -- the first answer hangs (interrupted, or stopped by execute_timeout), the next one submits
    {match = "Turn [34] of", replies = {F.code("import time\nprint('sleeping')\ntime.sleep(60)"),
                                        F.code("SUBMIT(answer=f'{x}-{s}')")}},
  }}
end

tests["SIGINT in turn 3, then --resume: turns 1-3 are not asked again and the state is rebuilt"] =
function()
  local server = three_turns()
  local dir = T.tmpdir()
  local path = dir .. "/run.jsonl"
  local env = F.env(server, {TMPDIR = dir})
  local proc = assert(sys.spawn{argv = {T.rlm, "ask", "count", "--trace", path}, env = env,
                                stdin = "null", stdout = "pipe", stderr = "pipe"})
  T.defer(function() proc:close() end)
  local deadline = sys.now() + 60
  while F.stats(server).requests < 4 and sys.now() < deadline do sys.sleep(0.05) end
  sys.sleep(0.3)   -- into turn 3's code; a signal still in turn 3's call resumes the same way
  proc:kill(2)
  T.eq({sys.wait(proc, 30)}, {"exit", 130})
  local before = F.stats(server).requests
  T.eq(before, 4, "turns 1-3 and one sub-call")
  -- turn 3's reply was kept: it runs again, now under a timeout, and turn 4 submits
  local r = T.run_rlm({"ask", "--resume", path, "--execute-timeout", "1"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "2-pong\n", "x and s came back from the replayed turns")
  T.eq(F.stats(server).requests - before, 1, "only turn 4 was asked")
  -- the file now holds the whole run: a second resume replays it to the same answer
  local again = T.run_rlm({"ask", "--resume", path, "--execute-timeout", "1"}, {env = env})
  T.eq(again.code, 0, again.stderr)
  T.eq(again.stdout, "2-pong\n")
  T.eq(F.stats(server).requests - before, 1, "the second resume asked for nothing")
  local records = assert(trace.read(path))
  local resumed = false
  for _, rec in ipairs(records) do resumed = resumed or rec.type == "resume" end
  T.truthy(resumed, "the resume is recorded")
end

tests["rlm replay: zero model requests; a changed recording is reported"] = function()
  local server = three_turns()
  local path = T.tmpdir() .. "/run.jsonl"
  -- turn 3's first reply sleeps: let it time out, then the second one submits
  local res = rlm.run{task = "count", context = "abc", trace = path, execute_timeout = 1}
  T.eq(res.reason, "submitted")
  local before = F.stats(server).requests
  -- no key and no model set: a replay calls no model
  local env = F.env(server)
  env.OPENAI_API_KEY, env.RLM_MODEL = nil, nil
  local r = T.run_rlm({"replay", path}, {env = env})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "no differences")
  T.eq(F.stats(server).requests, before, "no model request")

  local text = assert(sys.read_file(path))
  local changed = text:gsub('"output":"one\\n"', '"output":"uno\\n"')
  T.truthy(changed ~= text, "the recording was changed")
  assert(sys.write_file(path, changed))
  r = T.run_rlm({"replay", path}, {env = F.env(server)})
  T.eq(r.code, 1)
  T.contains(r.stdout, "turn 1, block 1 differs at line 1:\n  recorded: uno\n  replayed: one")
end

tests["a trajectory cut mid-line is read up to its last whole record"] = function()
  local path = T.tmpdir() .. "/cut.jsonl"
  assert(sys.write_file(path, '{"type":"start","task":"t"}\n{"type":"step","turn":1}\n{"type":"st'))
  local records, cut = trace.read(path)
  T.eq(#records, 2)
  T.eq(cut, true)
  local r = T.run_rlm({"trace", path})
  T.eq(r.code, 0, r.stderr)
end

tests["a second --cache run of a 25-prompt batch sends no sub-call"] = function()
  local server = F.model{rules = {
    {match = "^ITEM", reply_expr = "prompt.lower()"},
    {match = ".", reply = F.code("out = llm_query_batched(['ITEM %d' % i for i in range(25)])\n"
                                  .. "SUBMIT(answer=out[24])")},
  }}
  local cache = T.tmpdir()
  local prices = {["openai/root-model"] = {input = 1, output = 1},
                  ["openai/sub-model"] = {input = 2, output = 2}}
  local first = rlm.run{task = "cache", context = "abc", sub_model = "openai/sub-model",
                        cache = cache, prices = prices}
  T.eq(first.answer, "item 24")
  T.eq(first.usage.cache_hits, 0)
  local _, per_model = 0, {}
  for _, m in ipairs(F.stats(server).models) do per_model[m] = (per_model[m] or 0) + 1 end
  T.eq(per_model["sub-model"], 25)
  local second = rlm.run{task = "cache", context = "abc", sub_model = "openai/sub-model",
                         cache = cache, prices = prices}
  T.eq(second.answer, "item 24")
  per_model = {}
  for _, m in ipairs(F.stats(server).models) do per_model[m] = (per_model[m] or 0) + 1 end
  T.eq(per_model["sub-model"], 25, "no sub-call reached the server the second time")
  T.eq(second.usage.cache_hits, 25)
  T.truthy(second.usage.cache_saved > 0, "the money saved is counted")
  T.eq(second.usage.llm_calls, 0)
end

tests["what the model receives: sizes in characters, whole UTF-8, variables without a length"] =
function()
  local server = F.model{rules = {
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer='ok')")},
    {match = ".", reply = F.code("import math\nn = 5\nf = math.sqrt")},
  }}
  local context = string.rep("é", 600)          -- 600 characters, 1200 bytes
  local res = rlm.run{task = "look", context = context}
  T.eq(res.reason, "submitted")
  local st = F.stats(server)
  local body = json.encode(st.last_body)
  T.contains(body, "600 characters")
  T.truthy(not body:find("(nil)", 1, true), "no (nil) size")
  T.truthy(not body:find("REPL variables: (none)", 1, true), "context and the code's variables show")
  T.contains(body, "n: int")
  -- the preview is whole characters: the first message holds exactly 500 of them
  local first = st.last_body.messages[2].content
  T.truthy(first:find(string.rep("é", 500), 1, true) and not first:find(string.rep("é", 501), 1, true),
           "500 whole characters in the preview")
end

tests["a turn's prompt names at most 50 variables and counts the rest"] = function()
  local server = F.model{rules = {
    {match = "Turn 2 of", reply = F.code("SUBMIT(answer='ok')")},
    {match = ".", reply = F.code("for i in range(5000):\n    globals()['v%d' % i] = i")},
  }}
  local res = rlm.run{task = "many", context = "abc"}
  T.eq(res.reason, "submitted")
  local prompt = F.stats(server).last_body.messages[4].content
  T.truthy(#prompt < 3000, "the turn's prompt is " .. #prompt .. " characters")
  T.truthy(prompt:find("... and %d+ more %(SHOW_VARS%(%) lists them%)"), prompt:sub(1, 300))
end

tests["parse: CRLF fences, python3 blocks and a multi-line FINAL"] = function()
  T.eq(parse.code_blocks("x\r\n```python3\r\nprint(1)\r\n```\r\n"), {"print(1)"})
  T.eq(parse.final("Done.\nFINAL(first line\nsecond line)"), {text = "first line\nsecond line"})
end

tests["unknown SUBMIT fields are refused with the outputs named"] = function()
  F.model{rules = {
    {match = "which this task does not ask for", reply = F.code("SUBMIT(answer='fixed')")},
    {match = ".", reply = F.code("SUBMIT(answer='a', extra=1)")},
  }}
  local res = rlm.run{task = "fields", context = "abc"}
  T.eq(res.answer, "fixed")
  T.eq(res.iterations, 2)
end

return tests
