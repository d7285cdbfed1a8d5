local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

-- Runs `rlm skill ...` with a private data directory (so volumes start empty).
local function skill(args, env_extra)
  local env = sys.environ()
  env.XDG_DATA_HOME = env.XDG_DATA_HOME_TEST or T.tmpdir()
  for k, v in pairs(env_extra or {}) do env[k] = v end
  local argv = {"skill"}
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return T.run_rlm(argv, {env = env, timeout = 120})
end

tests["skill list, show, unknown names and bad parameters"] = function()
  local r = skill{"list"}
  T.eq(r.code, 0, r.stderr)
  for _, name in ipairs{"rlm-execute", "sandbox-execution", "long-context",
                        "delegation", "diagnostics"} do
    T.contains(r.stdout, name)
  end
  r = skill{"show", "rlm-execute"}
  T.contains(r.stdout, "name: rlm-execute")
  r = skill{"no-such-skill"}
  T.eq(r.code, 2)
  T.contains(r.stderr, 'unknown skill "no-such-skill" (see `rlm skill list`)')
  r = skill{"rlm-execute", "bogus"}
  T.eq(r.code, 1)
  T.contains(r.stderr, "unknown pattern 'bogus'")
  r = skill{"rlm-execute", "--backend", "cloud"}
  T.eq(r.code, 2, "a usage mistake")
  T.contains(r.stderr, 'unknown backend "cloud"')
end

tests["rlm-execute gives the seed results on the local sandbox"] = function()
  local r = skill{"rlm-execute"}
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "basic")
  T.contains(r.stdout, "1307674368000")
  T.contains(r.stdout, '{"count":42,"processed":true}')
  T.contains(r.stdout, "pipeline")
  T.truthy(r.stdout:find("pipeline%s+%d+ ms%s+92\n"), "filtered count 92:\n" .. r.stdout)
  T.truthy(r.stdout:find("canonical%s+%d+ ms%s+29\n"), "filtered count 29:\n" .. r.stdout)
  T.contains(r.stdout, '["Step 1: setup complete","Step 2: data loaded"]')
  T.contains(r.stdout, "all 6 patterns ok")
end

tests["the volume written by one rlm process is read back by another"] = function()
  local data = T.tmpdir()
  local first = skill({"rlm-execute", "volume"}, {XDG_DATA_HOME = data})
  T.eq(first.code, 0, first.stderr)
  local saved = assert(sys.read_file(data .. "/rlm/volumes/rlm-execute-demo/artifacts/results.json"))
  T.eq(json.decode(saved), {processed = true, count = 42})
  local r = T.run_rlm({"exec", "--volume", "rlm-execute-demo",
    "import json\nSUBMIT(data=json.load(open('/home/daytona/memory/artifacts/results.json')))"},
    {env = (function() local e = sys.environ() e.XDG_DATA_HOME = data return e end)()})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, '"count":42')
end

tests["rlm-execute runs a local file"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/job.py", "x = sum(range(10))\nprint('x is', x)\nSUBMIT(total=x)\n"))
  local r = skill{"rlm-execute", "file", "file=" .. dir .. "/job.py"}
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, '{"total":45}')
end

tests["sandbox-execution shows every parameter, with sub-calls under a budget"] = function()
  F.model{rules = {{match = "single word", reply = "ok"}}}
  local r = skill({"sandbox-execution"}, {RLM_MODEL = "openai/sub"})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "timed_out              true")
  T.contains(r.stdout, "state after timeout    still here")
  T.contains(r.stdout, "2432902008176640000")
  T.contains(r.stdout, "not JSON-serialisable (set)")
  T.contains(r.stdout, '["artifacts","buffers","memory","meta"]')
  T.contains(r.stdout, "version one")
  T.contains(r.stdout, '["alpha","beta","gamma"]')
  T.contains(r.stdout, '["ok","ok"]')
  T.contains(r.stdout, "LLM call limit exceeded: 2 + 1 > 2")
end

local LONG_CODE = [[
lines = context.split("\n")
chunks = ["\n".join(lines[i:i + 6000]) for i in range(0, len(lines), 6000)]
counts = llm_query_batched(["TALLY:\n" + c for c in chunks])
SUBMIT(answer=sum(int(c) for c in counts))]]

tests["long-context answers over a 5 MB log with llm_query_batched"] = function()
  F.model{rules = {
    {match = "^TALLY", reply_expr = "str(prompt.count(' ERROR '))"},
    {match = "Task: How many lines", reply = F.code(LONG_CODE)},
  }}
  local r = skill{"long-context"}
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "check: the log has")
  T.contains(r.stdout, ": right")
  T.contains(r.stdout, "10 sub-calls")
end

local PARENT_CODE = [[
sections = ["## " + s for s in context.split("## ") if s.strip()]
summaries = [rlm_query("Summarise this section in one sentence.", s) for s in sections]
SUBMIT(answer="\n".join(summaries))]]

tests["delegation hands each section to a child run"] = function()
  F.model{rules = {
    {match = "Task: Summarise this section", reply = F.code(
      "SUBMIT(answer=context.split('\\n')[0].strip('# ') + ' - summarised')")},
    {match = "Task: Summarise each", reply = F.code(PARENT_CODE)},
  }}
  local r = skill{"delegation"}
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "Onboarding - summarised\nOn-call - summarised\nReleases - summarised\nSecurity - summarised")
  local children = 0
  for _ in r.stdout:gmatch("depth 1: 1 turn%(s%), submitted") do children = children + 1 end
  T.eq(children, 4)
  T.contains(r.stdout, "totals for the tree: 5 model calls")
end

tests["an LLM recipe without a key says what to set and creates no sandbox"] = function()
  local env = sys.environ()
  env.OPENAI_API_KEY, env.RLM_MODEL = nil, "openai/gpt-4o"
  local data = T.tmpdir()
  env.XDG_DATA_HOME = data
  env.TMPDIR = T.tmpdir()
  local r = T.run_rlm({"skill", "long-context"}, {env = env})
  T.eq(r.code, 1)
  T.contains(r.stderr, "needs an API key: set OPENAI_API_KEY")
  T.eq(sys.list_dir(env.TMPDIR), {}, "no sandbox folder was made")
end

tests["diagnostics checks the machine and says how to fix failures"] = function()
  local r = skill{"diagnostics", "quick"}
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "ok    local backend")
  T.contains(r.stdout, "ok    local sandbox                runs SUBMIT(ok=True) with Python 3.")
  T.contains(r.stdout, "ok    volume")
  T.contains(r.stdout, "all checks passed")
  r = skill({"diagnostics", "quick"}, {RLM_BWRAP = "/no/such/bwrap"})
  T.eq(r.code, 1)
  T.contains(r.stdout, "FAIL  local backend                the local sandbox needs bubblewrap")
  T.contains(r.stdout, "bubblewrap (/no/such/bwrap) was not found")
  T.contains(r.stdout, "fix: sudo apt-get install bubblewrap")
  T.truthy(not r.stdout:find("\n%a+ +local sandbox "), "no sandbox is tried without its tools")
  -- every provider's key variable comes from the provider table, with a model set but no key
  r = skill({"diagnostics", "quick"}, {RLM_MODEL = "groq/llama-3.3-70b", GROQ_API_KEY = ""})
  T.contains(r.stdout, "warn  GROQ_API_KEY")
  T.truthy(r.stdout:find("\nFAIL  model +groq/llama%-3%.3%-70b needs an API key: set GROQ_API_KEY"), r.stdout)
end

tests["skill new writes a starting recipe that runs from RLM_SKILLS_PATH"] = function()
  local dir = T.tmpdir()
  local r = skill({"new", "my-skill"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 0, r.stderr)
  r = skill({"list"}, {RLM_SKILLS_PATH = dir})
  T.contains(r.stdout, "my-skill")
  r = skill({"my-skill", "a", "greeting=hi", "b"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "hi: python 3")
  T.contains(r.stdout, "words: a b")
  r = skill({"my-skill", "colour=red"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 1)
  T.contains(r.stderr, "unknown argument 'colour=red' (have: greeting=WORD)")
end

-- A skill whose SKILL.md declares `tools: tools.lua`: a Lua tool and a stdio MCP server named
-- relative to the skill's folder (the file gets the folder as `...`).
local function tool_skill(dir)
  local folder = dir .. "/tool-user"
  assert(sys.mkdir_p(folder))
  assert(sys.write_file(folder .. "/SKILL.md", "---\nname: tool-user\ndescription: Calls tools.\n" ..
    "tools: tools.lua\n---\n# tool-user\n"))
  assert(sys.write_file(folder .. "/tools.lua", "local dir = ...\nreturn {triple = {params = " ..
    "{{name = 'n', type = 'integer'}}, call = function(a) return a.n * 3 end},\n" ..
    "{command = {'/usr/bin/python3', dir .. '/mcp_tools'}}}\n"))
  assert(sys.write_file(folder .. "/mcp_tools", assert(sys.read_file("tests/standins/mcp_tools"))))
  assert(sys.write_file(folder .. "/recipe.lua", [=[
local interp <close> = require("rlm").interpreter{backend = (...).backend, tools = (...).tools}
local out = interp:execute([[
def defined(name):
    try:
        eval(name)
        return True
    except NameError:
        return False
names = [n for n in ('triple', 'add', 'quad') if defined(n)]
SUBMIT(answer='%d %s' % (triple(2) + add(1, 1)['sum'], names))]])
print(out.answer)
]=]))
  return folder
end

tests["a skill's declared tools reach its recipe's runs, with the caller's --tools"] = function()
  local dir = T.tmpdir()
  tool_skill(dir)
  local r = skill({"tool-user"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.eq(r.stdout, "8 ['triple', 'add']\n")
  local extra = dir .. "/extra.lua"
  assert(sys.write_file(extra, "return {quad = function() return 4 end}\n"))
  r = skill({"tool-user", "--tools", extra}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.eq(r.stdout, "8 ['triple', 'add', 'quad']\n")
  -- the same name twice, a file that is not there, a path out of the folder: one line each
  assert(sys.write_file(extra, "return {triple = function() return 4 end}\n"))
  r = skill({"tool-user", "--tools", extra}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 1)
  T.contains(r.stderr, "tools: two tools are named triple")
  assert(sys.remove(dir .. "/tool-user/tools.lua"))
  r = skill({"tool-user"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 1)
  T.contains(r.stderr, "skill tool-user: tools: cannot open " .. dir .. "/tool-user/tools.lua")
  local md = dir .. "/tool-user/SKILL.md"
  assert(sys.write_file(md, assert(sys.read_file(md)):gsub("tools: tools.lua", "tools: ../x.lua")))
  r = skill({"tool-user"}, {RLM_SKILLS_PATH = dir})
  T.eq(r.code, 1)
  T.contains(r.stderr, "skill tool-user: tools: ../x.lua must be a file in the skill's folder")
end

return tests
