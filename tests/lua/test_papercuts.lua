--- Small things a first user ran into (issue 46), each as that user met it.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"

local tests = {}

local function write_lines(path, records)
  local lines = {}
  for i, r in ipairs(records) do lines[i] = json.encode(r) end
  assert(sys.write_file(path, table.concat(lines, "\n") .. "\n"))
end

tests["rlm trace on a file that is no trajectory says so and exits 1"] = function()
  local dir = T.tmpdir()
  for name, content in pairs{["notes.txt"] = "hello\n", ["other.jsonl"] = '{"a":1}\n{"b":2}\n',
                             ["empty.jsonl"] = ""} do
    assert(sys.write_file(dir .. "/" .. name, content))
  end
  local r = T.run_rlm{"trace", dir .. "/notes.txt"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "cannot read the trajectory")
  r = T.run_rlm{"trace", dir .. "/other.jsonl"}
  T.eq(r.code, 1)
  T.eq(r.stderr, "rlm: " .. dir .. "/other.jsonl is not a trajectory: none of its lines is a " ..
                 "record of a run (write one with rlm ask --trace FILE.jsonl)\n")
  T.eq(r.stdout, "")
  r = T.run_rlm{"trace", dir .. "/empty.jsonl"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "it holds no records")
end

-- A run's records as the file holds them: a turn's sub-calls and child run come before the
-- turn's own record, which is written when its code has ended.
local RECORDS = {
  {type = "start", depth = 0, run = "r0", task = "t"},
  {type = "subcall", kind = "llm_query_batched", turn = 1, count = 3, duration = 0.5, depth = 0, run = "r0"},
  {type = "start", depth = 1, run = "r1", parent = "r0", task = "child"},
  {type = "subcall", kind = "llm_query", turn = 1, count = 1, duration = 0.25, depth = 1, run = "r1", parent = "r0"},
  {type = "step", turn = 1, duration = 1, usage = {input_tokens = 5, output_tokens = 6}, code = {"x"}, depth = 1, run = "r1", parent = "r0"},
  {type = "final", reason = "submitted", depth = 1, run = "r1", parent = "r0"},
  {type = "subcall", kind = "rlm_query", child = "r1", turn = 1, count = 1, duration = 2, depth = 0, run = "r0"},
  {type = "step", turn = 1, duration = 3, usage = {input_tokens = 10, output_tokens = 20}, code = {"a"}, depth = 0, run = "r0"},
  {type = "budget_warning", turn = 1, limit = "calls", remaining = 1, of = 10, depth = 0, run = "r0"},
  {type = "subcall", kind = "llm_query", turn = 2, count = 1, duration = 0.5, depth = 0, run = "r0"},
  {type = "step", turn = 2, duration = 1, usage = {input_tokens = 30, output_tokens = 40}, code = {"b"}, depth = 0, run = "r0"},
  {type = "final", reason = "submitted", depth = 0, run = "r0"},
}

local EXPECTED = table.concat({
  "turn 1  3.00s  10 in / 20 out tokens  1 code blocks",
  "  llm_query_batched x3  0.50s",
  "  child r1",
  "  turn 1  1.00s  5 in / 6 out tokens  1 code blocks",
  "    llm_query x1  0.25s",
  "  result: submitted",
  "  rlm_query x1  2.00s",
  "  budget: calls has 1 of 10 left",
  "turn 2  1.00s  30 in / 40 out tokens  1 code blocks",
  "  llm_query x1  0.50s",
  "result: submitted",
}, "\n") .. "\n"

tests["rlm trace and --follow put a turn's sub-calls and child runs under that turn"] = function()
  local path = T.tmpdir() .. "/run.jsonl"
  write_lines(path, RECORDS)
  local r = T.run_rlm{"trace", path}
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, EXPECTED)
  r = T.run_rlm({"trace", path, "--follow"}, {timeout = 60})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, EXPECTED)
end

tests["rlm mcp with stdin at its end, from /dev/null or closed, ends and says why"] = function()
  local say = "rlm mcp: stdin ended before any message"
  local r = assert(sys.run({"sh", "-c", 'exec "$0" mcp < /dev/null', T.rlm}, {timeout = 60}))
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stderr, say)
  T.eq(r.stdout, "")
  r = assert(sys.run({"sh", "-c", 'exec "$0" mcp <&-', T.rlm}, {timeout = 60}))
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stderr, say)
  -- a file of requests is read as a pipe would be
  local file = T.tmpdir() .. "/requests.jsonl"
  assert(sys.write_file(file, '{"jsonrpc":"2.0","id":7,"method":"ping"}\n'))
  r = assert(sys.run({"sh", "-c", 'exec "$0" mcp < "$1"', T.rlm, file}, {timeout = 60}))
  T.eq(r.code, 0, r.stderr)
  T.eq(json.decode(r.stdout), {jsonrpc = "2.0", id = 7, result = json.object{}})
  T.eq(r.stderr, "")
end

tests["a TMPDIR that does not exist is named as the cause"] = function()
  local missing = T.tmpdir() .. "/gone"
  local r = T.run_rlm({"exec", "print(1)"}, {env = {PATH = "/usr/bin:/bin", TMPDIR = missing}})
  T.eq(r.code, 1)
  T.eq(r.stderr, "rlm: TMPDIR is " .. missing .. ", where no folder can be made: No such file or directory\n")
  T.eq(r.stdout, "")
end

tests["rlm skill NAME --help shows the skill; skill new's hint runs as printed"] = function()
  local r = T.run_rlm{"skill", "rlm-execute", "--help"}
  T.eq(r.code, 0, r.stderr)
  T.truthy(r.stdout:find("^usage: rlm skill rlm%-execute %[%-%-backend local|daytona%] %[%-%-tools FILE%.lua%] %[ARGS%.%.%.%]\n"), r.stdout)
  T.contains(r.stdout, "name: rlm-execute")
  local dir, data = T.tmpdir(), T.tmpdir()
  local env = {PATH = "/usr/bin:/bin", HOME = data, XDG_DATA_HOME = data}
  env.RLM_SKILLS_PATH = dir
  r = T.run_rlm({"skill", "new", "mine"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  env.RLM_SKILLS_PATH = nil   -- set for that one command only, as a user may
  local hint = r.stdout:match("run it with `([^`]+)`")
  T.eq(hint, "RLM_SKILLS_PATH=" .. dir .. " rlm skill mine")
  r = T.run_rlm({"skill", "mine", "--help"}, {env = {PATH = env.PATH, HOME = data, XDG_DATA_HOME = data,
                                                     RLM_SKILLS_PATH = dir}})
  T.eq(r.code, 0, r.stderr)
  -- in the default folder, always searched, the plain command is the hint
  r = T.run_rlm({"skill", "new", "other"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout:match("run it with `([^`]+)`"), "rlm skill other")
  r = T.run_rlm({"skill", "other", "--help"}, {env = env})
  T.eq(r.code, 0, r.stderr)
end

-- rlm ask with no model, key or server reachable: each case must stop before any of them.
local function ask(args, extra)
  local env = {PATH = "/usr/bin:/bin", HOME = T.tmpdir(), OPENAI_API_KEY = "sk-test-0123456789",
               OPENAI_BASE_URL = "http://127.0.0.1:9/v1"}
  for k, v in pairs(extra or {}) do env[k] = v end
  local argv = {"ask"}
  table.move(args, 1, #args, 2, argv)
  return T.run_rlm(argv, {env = env})
end

tests["--max-iterations 0 is refused before the run, saying why"] = function()
  local r = ask{"task", "--model", "openai/gpt-4o", "--max-iterations", "0"}
  T.eq(r.code, 2)
  T.eq(r.stderr, "rlm: --max-iterations must be a whole number of turns, at least 1 (got 0): a run "
                 .. "of no turns cannot answer\n")
  r = ask{"task", "--model", "openai/gpt-4o", "--max-iterations", "1.5"}
  T.eq(r.code, 2)
  T.contains(r.stderr, "(got 1.5)")
end

tests["a binary context file is refused; text that is not UTF-8 comes with a note"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/image.bin", "\x89PNG\r\n\x1a\n\0\0\0\rIHDR"))
  local r = ask{"task", "--model", "openai/gpt-4o", "--context", dir .. "/image.bin"}
  T.eq(r.code, 1)
  T.eq(r.stderr, "rlm: the context " .. dir .. "/image.bin is binary (a NUL byte at offset 8): give "
                 .. "text, or put the file in the sandbox from Lua (rlm.run{context_paths = {FILE}})\n")
  assert(sys.write_file(dir .. "/latin1.txt", "caf\xe9\n"))
  r = ask({"task", "--context", dir .. "/latin1.txt"}, {OPENAI_API_KEY = ""})
  T.eq(r.code, 1)
  T.contains(r.stderr, "rlm: note: the context " .. dir .. "/latin1.txt is not UTF-8")
  T.contains(r.stderr, "no model")
end

tests["the command line's hints name its flags, not Lua fields"] = function()
  local r = ask{"task"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "no model: give --model provider/name")
  r = ask{"task", "--model", "openai/unpriced-x", "--max-cost", "1"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "with --prices FILE.json or RLM_PRICES")
  T.contains(r.stderr, '{"openai/unpriced-x": {"input": USD, "output": USD}}')
end

tests["the docs say what the trace page's script is for, as the page has one"] = function()
  local dir = T.tmpdir()
  write_lines(dir .. "/run.jsonl", RECORDS)
  local r = T.run_rlm{"trace", dir .. "/run.jsonl", "--html", dir .. "/page.html"}
  T.eq(r.code, 0, r.stderr)
  local page = assert(sys.read_file(dir .. "/page.html"))
  T.contains(page, "<script>")
  T.eq(page:find("<script src", 1, true), nil)   -- inline: the page works offline
  local docs = assert(sys.read_file("docs/lua-api.md"))
  T.eq(docs:find("(no script", 1, true), nil)
  T.contains(docs, "one small inline script adds a search")
end

return tests
