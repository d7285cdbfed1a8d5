--- What a newcomer trips over: every README example as written, options that must flow or be
-- refused by name, bytes that must survive, and mistakes that must be one line with the
-- documented exit code.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

-- The ```lua blocks of a Markdown file, with the line each starts at.
local function lua_blocks(path)
  local blocks, current, start = {}, nil, nil
  local n = 0
  for line in (assert(sys.read_file(path)) .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if current then
      if line:match("^```") then
        blocks[#blocks + 1] = {code = table.concat(current, "\n"), line = start}
        current = nil
      else
        current[#current + 1] = line
      end
    elseif line:match("^```lua") then
      current, start = {}, n + 1
    end
  end
  return blocks
end

-- README blocks that cannot run here as written, and why; every other block must run.
local NOT_HERE = {
  {"rlm.daytona", "needs a Daytona account"},
  {'backend = "daytona"', "needs a Daytona account"},
  {"127.0.0.1:8080", "needs a server of the reader's"},
  {"list_of_requests", "a fragment: list_of_requests is the reader's"},
  {"llm.usage()", "a fragment of the block above it"},
  {"llm.complete{", "needs a provider's key and network"},
  {"issues-server.js", "a fragment: the reader's own tools (tests/lua/test_tools.lua runs them)"},
  {"api.search.example", "needs the reader's search API and key"},
  {"api.search.brave.com", "needs a Brave Search key (tests/lua/test_netproxy.lua runs the same)"},
  {"server-github", "needs npx, the network and a GitHub token"},
  {"KB_TOKEN", "needs the reader's MCP server and its token (tests/lua/test_mcp_tools.lua runs one)"},
}

-- The README and the reference in docs/: every page a reader copies from.
local function doc_pages()
  local pages = {"README.md"}
  for _, f in ipairs(assert(sys.list_dir("docs"))) do
    if f:match("%.md$") then pages[#pages + 1] = "docs/" .. f end
  end
  table.sort(pages)
  return pages
end

tests["every Lua example of the README and docs/ runs as written"] = function()
  local server = F.model{rules = {
    {match = ".", reply = F.code("SUBMIT(answer='acme', evidence=['3 tickets'])")},
  }}
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/tickets.jsonl", '{"customer":"acme"}\n'))
  local ran = 0
  for _, page in ipairs(doc_pages()) do
    for _, b in ipairs(lua_blocks(page)) do
      local why
      for _, skip in ipairs(NOT_HERE) do
        if b.code:find(skip[1], 1, true) then why = skip[2] break end
      end
      if not why then
        local file = dir .. "/example.lua"
        assert(sys.write_file(file, b.code))
        local r = T.run_rlm({"run", file}, {cwd = dir, env = {
          PATH = sys.getenv("PATH"), HOME = dir, TMPDIR = sys.getenv("TMPDIR"),
          OPENAI_BASE_URL = server.url .. "/v1", OPENAI_API_KEY = "sk-test-key-0123456789"}})
        T.eq(r.code, 0, ("%s:%d: %s"):format(page, b.line, r.stderr))
        ran = ran + 1
      end
    end
  end
  T.truthy(ran >= 5, ran .. " examples ran")
end

tests["rlm.run raises on misuse, as rlm.interpreter does, naming the caller's line"] = function()
  F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer=1)")}}}
  local ok, err = pcall(function() local r = rlm.run{task = "x", context = "y", backend = "nope"}; return r end)
  T.eq(ok, false)
  T.contains(tostring(err), 'unknown backend "nope" (known: daytona, local)')
  T.contains(tostring(err), "test_newcomer.lua:")
  ok, err = pcall(rlm.run, {task = "x", context = "y", limits = {memory = "lots"}})
  T.eq(ok, false, "a bad limit is misuse too")
end

tests["rlm.run passes the interpreter's options on, and refuses a typo by name"] = function()
  F.model{rules = {{match = ".", reply = F.code("import os\nSUBMIT(answer=os.environ.get('FOO'))")}}}
  local res = rlm.run{task = "env", context = "x", env = {FOO = "bar"}, start_timeout = 20,
                      network = false}
  T.eq(res.answer, "bar")
  T.raises(function() rlm.run{task = "x", max_iteration = 1} end,
           'unknown rlm.run option "max_iteration" (did you mean "max_iterations"?)')
  T.raises(function() rlm.run{task = "x", max_llm_calls = "x"} end,
           "rlm.run option max_llm_calls must be a number, not a string")
  T.raises(function() rlm.interpreter{exec_timeout = 3} end,
           'unknown interpreter option "exec_timeout" (did you mean "execute_timeout"?)')
end

tests["the seeds' option names are aliases"] = function()
  local i <close> = rlm.interpreter{sub_lm = "local/sub", max_recursion_depth = 1,
                                    delegate_max_iterations = 2, async_execute = true}
  T.eq(i.opts.sub_model, "local/sub")
  T.eq(i.opts.max_depth, 1)
  T.eq(i.opts.child_max_iterations, 2)
  T.raises(function() rlm.interpreter{sub_lm = "a/b", sub_model = "a/c"} end,
           "sub_lm and sub_model are the same option")
end

tests["a context over 64 KB keeps every byte, as a small one does"] = function()
  F.model{rules = {{match = ".", reply = F.code(
    "raw = context.encode('utf-8', 'surrogateescape')\nSUBMIT(answer=[len(raw), raw[:3].hex()])")}}}
  for _, size in ipairs{100, 100 * 1024} do
    local context = "\xff\xfeA" .. string.rep("b", size)
    local res = rlm.run{task = "bytes", context = context}
    T.eq(res.answer, {#context, "fffe41"}, size .. " bytes")
  end
end

tests["rlm exec: --max-output, --stdin, sys.exit(0), a whole-second timeout"] = function()
  local r = T.run_rlm({"exec", "--max-output", "40", "print('x' * 1000)"})
  T.eq(r.code, 0)
  T.contains(r.stdout, "characters cut")
  T.contains(T.run_rlm({"exec", "--help"}).stdout, "--max-output N")
  local file = T.tmpdir() .. "/in.txt"
  assert(sys.write_file(file, "line one\nline two\n"))
  r = T.run_rlm({"exec", "--stdin", file, "import sys\nprint(len(sys.stdin.readlines()))"})
  T.eq(r.stdout, "2\n")
  r = T.run_rlm({"exec", "--stdin", "-", "import sys\nprint(sys.stdin.read().upper())"},
                {input = "piped"})
  T.eq(r.stdout, "PIPED\n")
  r = T.run_rlm({"exec", "import sys\nprint('bye')\nsys.exit(0)"})
  T.eq(r.code, 0, r.stderr)
  r = T.run_rlm({"exec", "--timeout", "1", "while True: pass"})
  T.contains(r.stderr, "exceeded 1 seconds")
  T.raises(function()
    local i <close> = rlm.interpreter{}
    i:execute("pass", {"x"})
  end, "variables must be name = value")
end

tests["rlm skill new writes where rlm skill finds it; show --source"] = function()
  local data = T.tmpdir()
  local env = {PATH = sys.getenv("PATH"), HOME = data, XDG_DATA_HOME = data,
               TMPDIR = sys.getenv("TMPDIR")}
  local r = T.run_rlm({"skill", "new", "mine"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, data .. "/rlm/skills/mine")
  r = T.run_rlm({"skill", "mine"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  r = T.run_rlm({"skill", "show", "rlm-execute", "--source"})
  T.contains(r.stdout, "local ")
end

-- Each mistake: one line on stderr, no traceback, the documented exit code.
tests["user mistakes are one line with the documented exit code"] = function()
  local bad_python = T.tmpdir() .. "/venv/bin/python3"
  assert(sys.mkdir_p(bad_python:match("^(.*)/")))
  assert(sys.write_file(bad_python, "#!/bin/sh\n"))
  assert(sys.chmod(bad_python, tonumber("755", 8)))
  local cases = {
    {{"exec", "--timeout", "0", "x"}, 1, "timeout must be a positive number"},
    {{"exec", "--backend", "bogus", "x"}, 1, 'unknown backend "bogus"'},
    {{"exec", "--tmeout", "3", "x"}, 2, "did you mean --timeout?"},
    {{"ask", ""}, 2, "give the task"},
    {{"trace", "/etc/hostname"}, 1, "cannot read the trajectory"},
    {{"skill", "nope"}, 2, 'unknown skill "nope"'},
    {{"skill", "show", "nope"}, 2, "no skill named 'nope'"},
    {{"skill", "rlm-execute", "file=/missing.py"}, 1, "/missing.py"},
    {{"nope"}, 2, "unknown command"},
    {{"exec", "print(1)"}, 1, "outside /usr", {RLM_PYTHON = bad_python}},
  }
  for _, c in ipairs(cases) do
    local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR")}
    for k, v in pairs(c[4] or {}) do env[k] = v end
    local r = T.run_rlm(c[1], {env = env})
    local what = table.concat(c[1], " ")
    T.eq(r.code, c[2], what .. ": " .. r.stderr)
    T.contains(r.stderr, c[3])
    T.truthy(not r.stderr:find("stack traceback", 1, true), what .. " printed a traceback")
    T.truthy(not r.stderr:find("%.lua:%d+:"), what .. " printed a source position: " .. r.stderr)
  end
  -- rlm run - reads the script from stdin, as lua - does
  T.eq(T.run_rlm({"run", "-"}, {input = "print(6 * 7)"}).stdout, "42\n")
  local help = T.run_rlm({"ask", "--help"}).stdout
  T.contains(help, "--max-tokens")
  T.contains(help, "--quiet")
end

tests["RLM_BACKEND reaches rlm ask, as rlm mcp's help says"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  local r = T.run_rlm({"ask", "t", "--quiet"}, {env = {PATH = sys.getenv("PATH"),
    TMPDIR = sys.getenv("TMPDIR"), RLM_BACKEND = "bogus", RLM_MODEL = "openai/m",
    OPENAI_BASE_URL = server.url .. "/v1", OPENAI_API_KEY = "sk-test-key-0123456789"}})
  T.contains(r.stderr, 'unknown backend "bogus"')
end

tests["llm.batch: one request that cannot be sent fails its own slot only"] = function()
  local server = F.model{rules = {{match = ".", reply = "fine"}}}
  local results = require("rlm.llm").batch{
    {model = "openai/m", prompt = "a"},
    {model = "nosuchprovider/m", prompt = "b"},
  }
  T.eq(results[1].text, "fine")
  T.eq(results[2].kind, "misuse")
  T.contains(results[2].error, "names no known provider")
  T.eq(F.stats(server).requests, 1)
end

return tests
