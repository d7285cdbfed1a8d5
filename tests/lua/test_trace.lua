local T = require "support"
local F = require "rlm_fixtures"
local rlm = require "rlm"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local tests = {}

tests["a kept record does not change when the tables it was made from change"] = function()
  local budget = require "rlm.budget"
  local b = budget.new{}
  b:settle({calls = 1, tokens = 0, cost = 0}, "p/m", {input_tokens = 10, output_tokens = 5}, 0)
  local w = trace.writer(nil)
  w:write{type = "turn", usage = b:usage()}
  b:settle({calls = 1, tokens = 0, cost = 0}, "p/m", {input_tokens = 10, output_tokens = 5}, 0)
  T.eq(w.records[1].usage.by_model["p/m"].calls, 1)
end

-- The redaction as it was written in Lua, one secret after another: the reference the C
-- version (rlm.core.redact) is held to.
local function redact_reference(s, list)
  for _, secret in ipairs(list) do
    local i = s:find(secret, 1, true)
    while i do
      s = s:sub(1, i - 1) .. "[redacted]" .. s:sub(i + #secret)
      i = s:find(secret, i + 10, true)
    end
  end
  return s
end

tests["redaction finds every secret, wherever it is and however the secrets overlap"] = function()
  local redact = require "rlm.core.redact"
  local cases = {
    {"SECRET01SECRET01", {"SECRET01"}, "[redacted][redacted]"},
    {"xSECRET01", {"SECRET01"}, "x[redacted]"},
    {"SECRET01x", {"SECRET01"}, "[redacted]x"},
    {"SECRET01-LONGER", {"SECRET01-LONGER", "SECRET01"}, "[redacted]"},
    {"SECRET01-LONGER", {"SECRET01", "SECRET01-LONGER"}, "[redacted]-LONGER"},
    {"aaaaaaaaa", {"aaaaaaaa"}, "[redacted]a"},
    {"no secret here", {"SECRET01"}, "no secret here"},
    {"nul\0SECRET01\0", {"SECRET01"}, "nul\0[redacted]\0"},
    {"[redacted]", {"dacted]"}, "[re[redacted]"},
  }
  for _, c in ipairs(cases) do
    T.eq(redact.text(c[1], c[2]), c[3], c[1])
    T.eq(redact_reference(c[1], c[2]), c[3], "reference: " .. c[1])
  end
  -- an empty secret stands for nothing (the Lua loop never ended on one)
  T.eq(redact.text("abc", {""}), "abc")
  T.raises(function() redact.text("abc", {1}) end, "secret 1 is not a string")
  -- random texts over a small alphabet, so secrets occur, overlap and sit side by side
  math.randomseed(7)
  local function word(n)
    local t = {}
    for i = 1, n do t[i] = string.char(96 + math.random(3)) end
    return table.concat(t)
  end
  for _ = 1, 3000 do
    local list = {word(math.random(1, 4)), word(math.random(1, 4))}
    local text = word(math.random(0, 40))
    T.eq(redact.text(text, list), redact_reference(text, list), text .. " / " .. list[1] .. "," .. list[2])
  end
  -- a megabyte with a secret every kilobyte
  local big = (("x"):rep(1000) .. "SECRET01"):rep(1000)
  T.eq(redact.text(big, {"SECRET01"}), (("x"):rep(1000) .. "[redacted]"):rep(1000))
end

tests["a record's copy is deep, keeps metatables and keys, and refuses a record that holds itself"] =
function()
  local redact = require "rlm.core.redact"
  local json = require "rlm.json"
  local inner = {note = "key SECRET01 inside", n = 1.5, ok = true}
  local record = {SECRET01 = "k", list = json.array{"SECRET01", 2}, inner = inner}
  local copy = redact.copy(record, {"SECRET01"})
  T.eq(copy.SECRET01, "k")                      -- keys are kept
  T.eq(copy.inner.note, "key [redacted] inside")
  T.eq(copy.inner.n, 1.5)
  T.eq(copy.inner.ok, true)
  T.eq(copy.list[1], "[redacted]")
  T.eq(getmetatable(copy.list), getmetatable(record.list))
  T.eq(json.encode(redact.copy({empty = json.array{}}, {})), '{"empty":[]}')
  inner.note = "changed"
  T.eq(copy.inner.note, "key [redacted] inside")
  T.truthy(copy.inner ~= inner)
  local loop = {}
  loop.self = loop
  T.raises(function() redact.copy(loop, {"SECRET01"}) end, "does it contain itself")
end

local CHROMIUM_FLAGS = {"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--enable-logging=stderr", "--v=0", "--dump-dom"}

-- Loads a page in headless Chromium; returns the DOM after load and the console errors.
local function browse(path)
  local chromium = sys.which("chromium")
  assert(chromium, "chromium is not installed (make deps installs it)")
  local argv = {chromium, "--user-data-dir=" .. T.tmpdir()}
  for _, f in ipairs(CHROMIUM_FLAGS) do argv[#argv + 1] = f end
  argv[#argv + 1] = "file://" .. path
  local r = assert(sys.run(argv, {timeout = 120}))
  assert(r.code == 0, "chromium failed: " .. r.stderr)
  local errors = {}
  for line in r.stderr:gmatch("[^\n]+") do
    if line:find("CONSOLE", 1, true) or line:find("Uncaught", 1, true) then errors[#errors + 1] = line end
  end
  return r.stdout, errors
end

tests["every provider's key and a per-call api_key are redacted from trajectories"] = function()
  local saved = {}
  for _, name in ipairs{"GROQ_API_KEY", "DEEPSEEK_API_KEY", "MISTRAL_API_KEY", "TOGETHER_API_KEY",
                        "RLM_LOCAL_API_KEY", "OPENROUTER_API_KEY"} do
    saved[name] = sys.getenv(name)
    sys.setenv(name, "sk-" .. name:lower() .. "-0123456789")
  end
  T.defer(function() for k, v in pairs(saved) do sys.setenv(k, v) end end)
  local w = trace.writer()
  local text = ""
  for name in pairs(saved) do text = text .. " " .. sys.getenv(name) end
  -- a key given to one call only, never in the environment
  pcall(require("rlm.llm").complete, {model = "local/m", api_key = "sk-per-call-key-99999",
                                       base_url = "http://127.0.0.1:1/v1", retries = 0, timeout = 1,
                                       messages = {{role = "user", content = "x"}}})
  local rec = w:write{type = "step", reply = text .. " sk-per-call-key-99999"}
  for name in pairs(saved) do
    T.truthy(not rec.reply:find(sys.getenv(name), 1, true), name .. " leaked")
  end
  T.truthy(not rec.reply:find("sk-per-call-key-99999", 1, true), "the per-call key leaked")
  T.contains(rec.reply, "[redacted]")
end

-- A key that is printed cut by a character or in another case is still the key to whoever
-- reads the trajectory.
tests["a key cut by one character, or upper- or lower-cased, is redacted too"] = function()
  local saved = sys.getenv("OPENAI_API_KEY")
  T.defer(function() sys.setenv("OPENAI_API_KEY", saved) end)
  local key = "sk-Live-AbC123xYz789QQ"
  sys.setenv("OPENAI_API_KEY", key)
  local w = trace.writer()
  for _, leaked in ipairs{key, key:sub(1, -2), key:sub(2), key:upper(), key:lower(),
                          key:sub(1, -2):upper(), key:sub(2):lower()} do
    local rec = w:write{type = "step", reply = "the key: " .. leaked .. " (end)"}
    T.eq(rec.reply, "the key: [redacted] (end)", leaked)
  end
  -- the lower bound: what is not the key stays
  local plain = "sk-Live is a prefix, and AbC123 a piece; SK-LIVE-ABC too short to be the key"
  T.eq(w:write{type = "step", reply = plain}.reply, plain)
end

tests["the browser check sees console errors (so it can fail)"] = function()
  local page = T.tmpdir() .. "/bad.html"
  assert(sys.write_file(page, "<html><body><script>no_such_function()</script></body></html>"))
  local _, errors = browse(page)
  T.truthy(#errors >= 1, "a page with a script error reported no console error")
end

tests["rlm trace --html renders every step, sub-calls and child runs in a real browser"] = function()
  F.model{rules = {
    {match = "^SUMMARISE", reply = "a summary"},
    {match = "Task: CHILD", reply = F.code("SUBMIT(answer=llm_query('SUMMARISE ' + context))")},
    {match = "Turn 3 of", reply = F.code("SUBMIT(answer=[a, b])")},
    {match = "Turn 2 of", reply = F.code("b = rlm_query('CHILD', 'child <context> & more')\nprint(b)")},
    {match = "Task: parent", reply = F.code("a = llm_query_batched(['SUMMARISE 1', 'SUMMARISE 2'])\nprint(a)")},
  }}
  local dir = T.tmpdir()
  local res = rlm.run{task = "parent", context = "ctx", trace = dir .. "/t.jsonl", max_depth = 2}
  T.eq(res.answer, {{"a summary", "a summary"}, "a summary"})
  local records = assert(trace.read(dir .. "/t.jsonl"))
  local steps = 0
  for _, r in ipairs(records) do if r.type == "step" then steps = steps + 1 end end
  T.eq(steps, 4, "three parent turns and one child turn")

  local r = T.run_rlm{"trace", dir .. "/t.jsonl", "--html", dir .. "/t.html"}
  T.eq(r.code, 0, r.stderr)
  local dom, errors = browse(dir .. "/t.html")
  T.eq(errors, {}, "console errors")
  local shown = 0
  for _ in dom:gmatch('<details class="step"') do shown = shown + 1 end
  T.eq(shown, steps, "steps in the page")
  for turn = 1, 3 do T.contains(dom, "Turn " .. turn) end
  T.contains(dom, "llm_query_batched")
  T.contains(dom, "child run")
  T.contains(dom, "child &lt;context&gt; &amp; more")   -- text is escaped, not markup
  T.contains(dom, "submitted")
  -- the header: what was asked, the answer, and the totals the trajectory records
  local final
  for _, rec in ipairs(records) do if rec.type == "final" and (rec.depth or 0) == 0 then final = rec end end
  T.contains(dom, '<table class="totals">')
  T.contains(dom, ("%d in, %d out"):format(final.usage.input_tokens, final.usage.output_tokens))
  T.contains(dom, ("%d (%d for code)"):format(final.usage.calls, final.usage.llm_calls))
  -- turns collapsed to one line each until clicked; each block's code shown once
  T.truthy(not dom:find('<details class="step" open', 1, true), "turns start collapsed")
  local _, times = dom:gsub("'SUMMARISE 1'", "")
  T.eq(times, 1, "the code appears once")
  T.contains(dom, [[<span class="s">'SUMMARISE 1'</span>]], "coloured strings")
  -- each sub-call's prompt and answer, with its model and tokens; what the model was sent back
  T.contains(dom, "<div>prompt 2</div><pre>SUMMARISE 2</pre>")
  T.truthy(dom:find("answer 1 <span class=\"meta\">%d+ in / %d+ out tokens"), "tokens per answer")
  T.contains(dom, "sent back to the model")
end

tests["the page shows children that ran at once side by side, each lane with its start and end"] =
function()
  -- together = 8: each child's model call is held until all eight are in flight, so the eight
  -- children provably ran at once; each runs its answer as code, in a sandbox of its own.
  local server = F.model({rules = {
    {match = "Task: CHILD (\\d+)", together = 8,
     reply_expr = "'```repl\\nSUBMIT(answer=\"child ' + m.group(1) + '\")\\n```'"},
    {match = "Task: parent", reply = F.code(
      "SUBMIT(answer='|'.join(rlm_query_batched(['CHILD %d' % i for i in range(8)])))")},
  }})
  local dir = T.tmpdir()
  local res = rlm.run{task = "parent", context = "ctx", trace = dir .. "/t.jsonl", max_depth = 2}
  T.eq(res.answer, "child 0|child 1|child 2|child 3|child 4|child 5|child 6|child 7")
  T.eq(F.stats(server).max_in_flight, 8, "the model saw the eight children at once")
  local records = assert(trace.read(dir .. "/t.jsonl"))
  local root, starts, ends = nil, {}, {}
  for _, r in ipairs(records) do
    if r.type == "start" and r.depth == 0 then root = r end
    if r.depth == 1 and r.type == "start" then starts[r.run] = r.t end
    if r.depth == 1 and r.type == "final" then ends[r.run] = r.t end
  end
  local r = T.run_rlm{"trace", dir .. "/t.jsonl", "--html", dir .. "/t.html"}
  T.eq(r.code, 0, r.stderr)
  local dom, errors = browse(dir .. "/t.html")
  T.eq(errors, {}, "console errors")
  T.contains(dom, "8 child runs, at most 8 at once")
  local lanes = 0
  for id in pairs(starts) do
    lanes = lanes + 1
    -- each child's lane: its id, and when it started and ended, counted from the root's start
    local row = dom:match('<tr class="lane" data%-run="' .. id:gsub("%-", "%%-") .. '".-</tr>')
    T.truthy(row, "no lane for child " .. id)
    T.contains(row, ("%.2f s to %.2f s"):format(starts[id] - root.t, ends[id] - root.t))
  end
  T.eq(lanes, 8, "eight children in the trajectory")
  local _, shown = dom:gsub('<tr class="lane"', "")
  T.eq(shown, 9, "the root's lane and one per child, no more")
end

tests["a 200-turn page with megabytes of output gets ready, and search finds a turn"] =
function()
  local dir = T.tmpdir()
  local w = trace.writer(dir .. "/big.jsonl")
  w:write{type = "start", run = "r1", depth = 0, task = "long", model = "m", sub_model = "s"}
  for turn = 1, 200 do
    w:write{type = "subcall", run = "r1", depth = 0, turn = turn, kind = "llm_query_batched",
            count = 2, prompt_chars = 10, reply_chars = 4, duration = 0.01, replies = {"a", "b"}}
    w:write{type = "step", run = "r1", depth = 0, turn = turn, duration = 0.5,
            reply = "Turn " .. turn .. " plan.\n```repl\nprint(" .. turn .. ")\n```",
            code = {{code = "print(" .. turn .. ")", duration = 0.1,
                     output = ("needle-%d "):format(turn) .. string.rep("y", 12000)}},
            usage = {input_tokens = 100, output_tokens = 10}}
  end
  w:write{type = "final", run = "r1", depth = 0, reason = "submitted", fields = {answer = 1},
          usage = {calls = 200, llm_calls = 400, input_tokens = 20000, output_tokens = 2000,
                   cost = 0.5, elapsed = 100}, iterations = 200}
  w:close()
  local r = T.run_rlm{"trace", dir .. "/big.jsonl", "--html", dir .. "/big.html"}
  T.eq(r.code, 0, r.stderr)
  T.truthy(#assert(sys.read_file(dir .. "/big.html")) > 2e6, "megabytes of output")
  local dom, errors = browse(dir .. "/big.html#q=needle-137%20")
  T.eq(errors, {}, "console errors")
  local ready = tonumber(dom:match('data%-ready="(%d+)"'))
  -- bounded only against a hang: a loaded machine's Chromium is slow
  T.truthy(ready and ready > 0 and ready < 20000, "ready after " .. tostring(ready) .. " ms")
  T.contains(dom, "1 turns match")
  local _, hits = dom:gsub('<details class="step hit" open="">', "")
  T.eq(hits, 1, "the one matching turn is marked and opened")
end

tests["rlm trace opens the reference implementation's logs"] = function()
  local dir = T.tmpdir()
  local lines = {
    {type = "metadata", root_model = "gpt-5", max_depth = 1, max_iterations = 30},
    {type = "iteration", iteration = 1, response = "Look first.\n```repl\nprint(len(context))\n```",
     iteration_time = 1.5, code_blocks = {{code = "print(len(context))", result = {
       stdout = "42\n", stderr = "", execution_time = 0.01,
       rlm_calls = {{prompt = "summarise", response = "a summary", execution_time = 0.5}}}}}},
    {type = "iteration", iteration = 2, response = "FINAL(42)", code_blocks = {},
     final_answer = "42", iteration_time = 0.3},
  }
  local text = {}
  for i, l in ipairs(lines) do text[i] = require("rlm.json").encode(l) end
  assert(sys.write_file(dir .. "/ref.jsonl", table.concat(text, "\n") .. "\n"))
  local r = T.run_rlm{"trace", dir .. "/ref.jsonl"}
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "turn 2")
  T.contains(r.stdout, "result: submitted")
  r = T.run_rlm{"trace", dir .. "/ref.jsonl", "--html", dir .. "/ref.html"}
  T.eq(r.code, 0, r.stderr)
  local dom, errors = browse(dir .. "/ref.html")
  T.eq(errors, {})
  T.contains(dom, "gpt-5")
  T.contains(dom, "a summary")
  T.contains(dom, "42")
end

tests["rlm trace prints each of two children that ran at once as one block, in its parent's turn"] =
function()
  -- the records of two children side by side come interleaved, as a live run writes them
  local dir = T.tmpdir()
  local w = trace.writer(dir .. "/two.jsonl")
  local function child(id, rec)
    rec.run, rec.depth, rec.parent = id, 1, "root"
    w:write(rec)
  end
  w:write{type = "start", run = "root", depth = 0, task = "t", t = 100}
  child("a", {type = "start", task = "A", t = 100.5})
  child("b", {type = "start", task = "B", t = 100.75})
  child("a", {type = "subcall", turn = 1, kind = "llm_query", count = 3, duration = 0.25})
  child("b", {type = "subcall", turn = 1, kind = "llm_query", count = 5, duration = 0.5})
  child("a", {type = "step", turn = 1, duration = 1, code = {}})
  child("b", {type = "step", turn = 1, duration = 1, code = {}})
  child("b", {type = "final", reason = "submitted", t = 102})
  child("a", {type = "final", reason = "submitted", t = 102.5})
  w:write{type = "step", run = "root", depth = 0, turn = 1, duration = 3, code = {}}
  w:write{type = "final", run = "root", depth = 0, reason = "submitted"}
  w:close()
  local r = T.run_rlm{"trace", dir .. "/two.jsonl"}
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, table.concat({
    "turn 1  3.00s  ? in / ? out tokens  0 code blocks",
    "  child b  from 0.75 s to 2.00 s",
    "  turn 1  1.00s  ? in / ? out tokens  0 code blocks",
    "    llm_query x5  0.50s",
    "  result: submitted",
    "  child a  from 0.50 s to 2.50 s",
    "  turn 1  1.00s  ? in / ? out tokens  0 code blocks",
    "    llm_query x3  0.25s",
    "  result: submitted",
    "result: submitted", ""}, "\n"))
end

tests["rlm trace --follow prints a running run's records and stops at its result"] = function()
  local dir = T.tmpdir()
  local path = dir .. "/live.jsonl"
  local w = trace.writer(path)
  w:write{type = "start", run = "r", depth = 0, task = "t"}
  local proc = assert(sys.spawn{argv = {T.rlm, "trace", "--follow", path}, stdin = "null"})
  T.defer(function() proc:close() end)
  w:write{type = "step", run = "r", depth = 0, turn = 1, duration = 0.2, code = {}}
  T.contains(assert(sys.read_line(proc, 10)), "turn 1")
  w:write{type = "final", run = "r", depth = 0, reason = "submitted"}
  T.contains(assert(sys.read_line(proc, 10)), "result: submitted")
  T.eq({sys.wait(proc, 5)}, {"exit", 0})
  w:close()
end

tests["rlm trace --serve serves the page on loopback and reloads it until the run ends"] = function()
  local dir = T.tmpdir()
  local path = dir .. "/live.jsonl"
  local w = trace.writer(path)
  w:write{type = "start", run = "r", depth = 0, task = "served task"}
  local proc = assert(sys.spawn{argv = {T.rlm, "trace", "--serve", path}, stdin = "null"})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 2); proc:close() end)
  local url = assert(sys.read_line(proc, 10)):match("^READY (http://127%.0%.0%.1:%d+/)$")
  T.truthy(url, "READY line")
  local http = require "rlm.http"
  local res = assert(http.request{url = url})
  T.eq(res.status, 200)
  T.contains(res.body, "served task")
  T.contains(res.body, 'http-equiv="refresh"')
  w:write{type = "final", run = "r", depth = 0, reason = "submitted"}
  res = assert(http.request{url = url})
  T.truthy(not res.body:find('http-equiv="refresh"', 1, true), "no reload once the run ended")
  T.eq(assert(http.request{url = url, headers = {Host = "evil.example"}}).status, 403)
  w:close()
end

tests["rlm ask --events - writes the run's records as JSON lines, and nothing else"] = function()
  local server = F.model{rules = {
    {match = "^SUB", reply = "s"},
    {match = ".", reply = F.code("x = llm_query('SUB 1')\nSUBMIT(answer=x)")},
  }}
  local r = T.run_rlm({"ask", "watch", "--events", "-", "--quiet"}, {env = {
    PATH = sys.getenv("PATH"), TMPDIR = sys.getenv("TMPDIR"), RLM_MODEL = "openai/root",
    OPENAI_BASE_URL = server.url .. "/v1", OPENAI_API_KEY = "sk-test-key-0123456789"}})
  T.eq(r.code, 0, r.stderr)
  local kinds = {}
  for line in r.stdout:gmatch("[^\n]+") do
    local rec = assert(require("rlm.json").decode(line), "not JSON: " .. line)
    kinds[#kinds + 1] = rec.type
  end
  T.eq(kinds, {"start", "prompt", "reply", "subcall", "answer", "step", "final"})
end

-- A record is copied however deep the JSON codec can write it (1000 levels), as the Lua walk
-- rlm.core.redact replaced did: a deep but finite record is no cycle.
tests["a record nested 250 deep (no cycle) is written as the Lua scrub wrote it"] = function()
  local deep = {leaf = "x"}
  for _ = 1, 250 do deep = {deep} end
  local w = trace.writer(nil)
  local ok, err = pcall(w.write, w, {type = "start", context = deep})
  T.truthy(ok, "a 250-deep context in the start record: " .. tostring(err))
end

return tests
