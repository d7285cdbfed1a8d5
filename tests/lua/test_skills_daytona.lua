-- The recipes with --backend daytona, against the Daytona stand-in (and the LLM stand-in for the
-- recipes that call a model): the seed results of test_skills.lua, and failures that say what to
-- do and leave no sandbox behind. Every rlm process gets an environment built from nothing
-- (daytona_fixtures.env), so no variable another test left in this process can reach it.
local T = require "support"
local F = require "rlm_fixtures"
local D = require "daytona_fixtures"
local sys = require "rlm.sys"

local tests = {}

-- Runs `rlm skill ARGS...` with env (from D.env).
local function skill(args, env)
  return T.run_rlm({"skill", table.unpack(args)}, {env = env, timeout = 120})
end

-- After a case: `made` sandboxes were created on s, and every one is gone.
local function none_left(s, made)
  T.eq(s:requests("POST /api/sandbox"), made, "sandboxes created")
  T.eq(s:live(), {}, "sandboxes left in the stand-in")
end

local function volume_names(s)
  local names = {}
  for _, v in ipairs(s:stats().volumes) do names[#names + 1] = v.name end
  table.sort(names)
  return names
end

tests["daytona: rlm-execute gives the seed results for all six patterns"] = function()
  local s = D.standin()
  local env = D.env(s)
  local r = skill({"rlm-execute", "--backend", "daytona"}, env)
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "rlm-execute on the daytona sandbox")
  T.truthy(r.stdout:find("basic%s+%d+ ms%s+1307674368000\n"), "factorial of 15:\n" .. r.stdout)
  T.truthy(r.stdout:find('volume%s+%d+ ms%s+{"count":42,"processed":true}\n'), "saved and re-read JSON")
  T.truthy(r.stdout:find('file%s+%d+ ms%s+{"summary":{"above_13":5,"max":15.0,"mean":13.312,"n":8}}\n'),
           "the bundled example.py:\n" .. r.stdout)
  T.truthy(r.stdout:find("pipeline%s+%d+ ms%s+92\n"), "filtered count 92:\n" .. r.stdout)
  T.truthy(r.stdout:find("canonical%s+%d+ ms%s+29\n"), "filtered count 29:\n" .. r.stdout)
  T.truthy(r.stdout:find('buffers%s+%d+ ms%s+%["Step 1: setup complete","Step 2: data loaded"%]\n'),
           "buffer log:\n" .. r.stdout)
  T.contains(r.stdout, "all 6 patterns ok")
  -- the JSON went through the stand-in's volume, not a host folder
  T.eq(volume_names(s), {"rlm-execute-demo"})
  T.eq(sys.stat(env.XDG_DATA_HOME .. "/rlm/volumes"), nil, "no local volume was made")
  none_left(s, 7)   -- one sandbox per pattern, two for the volume pattern's two sessions
end

tests["daytona: rlm-execute runs a local file in the sandbox"] = function()
  local s = D.standin()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/job.py", "import os\nSUBMIT(total=sum(range(10)), home=os.getcwd())\n"))
  local r = skill({"rlm-execute", "--backend", "daytona", "file", "file=" .. dir .. "/job.py"}, D.env(s))
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, '{"home":"/home/daytona/workspace","total":45}')
  T.contains(r.stdout, "all 1 patterns ok")
  none_left(s, 1)
end

-- Every step of sandbox-execution, the sub-call step included (the LLM stand-in answers "ok").
local function sandbox_execution(s, extra_args)
  F.model{rules = {{match = "single word", reply = "ok"}}}
  local model = D.model_env()
  model.RLM_MODEL = "openai/sub"
  local args = {"sandbox-execution", "--backend", "daytona"}
  for _, a in ipairs(extra_args or {}) do args[#args + 1] = a end
  local r = skill(args, D.env(s, model))
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "timed_out              true")
  T.contains(r.stdout, "TimeoutError: execution exceeded 1 seconds")
  T.contains(r.stdout, "state after timeout    still here")
  T.contains(r.stdout, "n (a Lua integer)      42 integer")
  T.contains(r.stdout, "2432902008176640000")
  T.contains(r.stdout, "empty list stays []    []")
  T.contains(r.stdout, "SUBMIT('positional')   positional")
  T.contains(r.stdout, "not JSON-serialisable (set)")
  T.contains(r.stdout, 'layout (new sandbox)   ["artifacts","buffers","memory","meta"]')
  T.contains(r.stdout, '["alpha","beta","gamma"]')
  T.contains(r.stdout, 'two answers            ["ok","ok"]')
  T.contains(r.stdout, "LLM call limit exceeded: 2 + 1 > 2")
  T.contains(r.stdout, "sandbox-execution: all steps done")
  -- A repository on this machine travels as a bundle: the daemon's clone cannot see it.
  T.eq(s:requests("POST /toolbox/{sid}/git/clone"), 0, "the daemon was not asked to clone a host path")
  T.eq(volume_names(s), {"sandbox-execution-demo"})
  none_left(s, 7)   -- one per step, two for the volume step's two sessions
  return r
end

tests["daytona: sandbox-execution runs every step, its demo repository at v1"] = function()
  local r = sandbox_execution(D.standin())
  T.contains(r.stdout, 'repo files             [".git","README.md"]')
  T.contains(r.stdout, "README.md at the ref   version one")
end

tests["daytona: sandbox-execution stages a given local repository at a given ref"] = function()
  local repo = D.git_repo()
  local r = sandbox_execution(D.standin(), {"repo=" .. repo, "ref=main"})
  T.contains(r.stdout, 'repo files             [".git","NOTES.md","README.md"]')
  T.contains(r.stdout, "README.md at the ref   version two")
end

tests["daytona: rlm daytona-smoke passes with a repository and its own volume"] = function()
  local s = D.standin()
  local repo = D.git_repo()
  local r = T.run_rlm({"daytona-smoke", "--repo", repo, "--volume", "smoke-vol"},
                      {env = D.env(s), timeout = 120})
  T.eq(r.code, 0, r.stdout .. r.stderr)
  for _, step in ipairs{"credentials", "api version", "volume", "sandbox", "daemon", "repo",
                        "execute", "volume write", "volume read", "stop deletes", "delete"} do
    T.truthy(r.stdout:find("\n  " .. step .. " +%d+ ms"), "step " .. step .. " in\n" .. r.stdout)
  end
  T.contains(r.stdout, "entries in workspace/repo (.git, NOTES.md, README.md)")
  T.contains(r.stdout, "daytona-smoke: PASS (11 steps")
  T.truthy(not (r.stdout .. r.stderr):find(D.KEY, 1, true), "the key is never printed")
  T.eq(volume_names(s), {"smoke-vol"})
  none_left(s, 1)
end

local LONG_CODE = [[
lines = context.split("\n")
chunks = ["\n".join(lines[i:i + 6000]) for i in range(0, len(lines), 6000)]
counts = llm_query_batched(["TALLY:\n" + c for c in chunks])
SUBMIT(answer=sum(int(c) for c in counts))]]

tests["daytona: long-context answers over the 5 MB log with llm_query_batched"] = function()
  local s = D.standin()
  F.model{rules = {
    {match = "^TALLY", reply_expr = "str(prompt.count(' ERROR '))"},
    {match = "Task: How many lines", reply = F.code(LONG_CODE)},
  }}
  local r = skill({"long-context", "--backend", "daytona"}, D.env(s, D.model_env()))
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "long-context: 4722185 characters of context")
  T.truthy(r.stdout:find("check: the log has %d+ ERROR lines: right\n"), r.stdout)
  T.contains(r.stdout, "submitted after 1 turn(s); 10 sub-calls")
  T.eq(s:requests("POST /toolbox/{sid}/files/bulk-upload"), 2, "the driver, then the context as a file")
  none_left(s, 1)
end

local PARENT_CODE = [[
sections = ["## " + s for s in context.split("## ") if s.strip()]
summaries = [rlm_query("Summarise this section in one sentence.", s) for s in sections]
SUBMIT(answer="\n".join(summaries))]]

tests["daytona: delegation gives each section a child run beside the parent, in its sandbox"] = function()
  local s = D.standin()
  F.model{rules = {
    {match = "Task: Summarise this section", reply = F.code(
      "SUBMIT(answer=context.split('\\n')[0].strip('# ') + ' - summarised')")},
    {match = "Task: Summarise each", reply = F.code(PARENT_CODE)},
  }}
  local r = skill({"delegation", "--backend", "daytona"}, D.env(s, D.model_env()))
  T.eq(r.code, 0, r.stdout .. r.stderr)
  T.contains(r.stdout, "Onboarding - summarised\nOn-call - summarised\nReleases - summarised\nSecurity - summarised")
  local children = 0
  for _ in r.stdout:gmatch("depth 1: 1 turn%(s%), submitted") do children = children + 1 end
  T.eq(children, 4)
  T.contains(r.stdout, "totals for the tree: 5 model calls")
  none_left(s, 1)
end

-- ---------- failures ----------

tests["daytona: a bad parameter says what is valid and makes no request to Daytona"] = function()
  local s = D.standin()
  local env = D.env(s, {OPENAI_API_KEY = "sk-unused", RLM_MODEL = "openai/gpt-4o"})
  local cases = {
    {{"rlm-execute", "bogus"}, "unknown pattern 'bogus' (have: basic, volume, file, pipeline"},
    {{"sandbox-execution", "bogus=1"}, "unknown argument 'bogus=1' (have: repo=URL|PATH, ref=REF"},
    {{"long-context", "colour=red"}, "unknown argument 'colour=red' (have: file=PATH"},
    {{"delegation", "depth=3"}, "unknown argument 'depth=3' (have: file=PATH"},
  }
  for _, c in ipairs(cases) do
    local args = {c[1][1], "--backend", "daytona", table.unpack(c[1], 2)}
    local r = skill(args, env)
    T.eq(r.code, 1, table.concat(args, " "))
    T.contains(r.stderr, c[2], table.concat(args, " "))
  end
  local r = T.run_rlm({"daytona-smoke", "--nope"}, {env = env})
  T.eq(r.code, 2)
  T.contains(r.stderr, "--nope")
  r = skill({"rlm-execute", "--backend", "dayton"}, env)
  T.eq(r.code, 2, "a usage mistake")
  T.contains(r.stderr, 'unknown backend "dayton" (did you mean "daytona"?)')
  T.eq(s:stats().total, 0, "not one request reached the stand-in")
end

tests["daytona: a missing key says which variable to set and makes no sandbox"] = function()
  local s = D.standin()
  for _, name in ipairs{"long-context", "delegation"} do
    local r = skill({name, "--backend", "daytona"}, D.env(s, {RLM_MODEL = "openai/gpt-4o"}))
    T.eq(r.code, 1, name)
    T.contains(r.stderr, "openai/gpt-4o needs an API key: set OPENAI_API_KEY", name)
  end
  local r = skill({"rlm-execute", "--backend", "daytona"}, D.env(nil, {DAYTONA_API_URL = s.url .. "/api"}))
  T.eq(r.code, 1)
  T.contains(r.stderr, "rlm: no Daytona credentials: set DAYTONA_API_KEY")
  T.truthy(not r.stderr:find("traceback", 1, true), "a plain message, not a traceback:\n" .. r.stderr)
  r = T.run_rlm({"daytona-smoke"}, {env = D.env(nil, {DAYTONA_API_URL = s.url .. "/api"})})
  T.eq(r.code, 1)
  T.contains(r.stdout, "daytona-smoke: FAIL at credentials: no Daytona credentials: set DAYTONA_API_KEY")
  T.eq(s:stats().total, 0, "not one request reached the stand-in")
end

tests["daytona: code that raises in the sandbox fails the recipe and deletes the sandbox"] = function()
  local s = D.standin()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/bad.py", "x = 1\nraise ValueError('bad input on line 2')\n"))
  local r = skill({"rlm-execute", "--backend", "daytona", "file", "file=" .. dir .. "/bad.py"}, D.env(s))
  T.eq(r.code, 1)
  T.contains(r.stderr, "sandbox code failed")
  T.contains(r.stderr, "ValueError: bad input on line 2")
  none_left(s, 1)
end

tests["daytona: a recipe that raises while it holds an open sandbox leaves none behind"] = function()
  local s = D.standin()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/broken"))
  assert(sys.write_file(dir .. "/broken/SKILL.md", "---\nname: broken\ndescription: raises\n---\n"))
  -- no <close> and no shutdown: only rlm's own clean-up can delete this sandbox
  assert(sys.write_file(dir .. "/broken/recipe.lua", [[
local params = ...
local interp = require("rlm").interpreter{backend = params.backend}
interp:execute("x = 1")
error("the recipe broke after its sandbox " .. interp.sandbox.id .. " was made", 0)
]]))
  local r = skill({"broken", "--backend", "daytona"}, D.env(s, {RLM_SKILLS_PATH = dir}))
  T.eq(r.code, 1)
  T.contains(r.stderr, "the recipe broke after its sandbox ")
  none_left(s, 1)
end

tests["daytona: a model that fails mid-recipe ends it with the reason and deletes the sandbox"] = function()
  local s = D.standin()
  F.model{rules = {{match = "Task: How many lines", fault = "401"}}}
  local r = skill({"long-context", "--backend", "daytona"}, D.env(s, D.model_env()))
  T.eq(r.code, 1, r.stdout .. r.stderr)
  T.contains(r.stdout, "how: model_error (model call failed")
  T.contains(r.stdout, "WRONG")
  T.truthy(not (r.stdout .. r.stderr):find("sk-test-key-0123456789", 1, true), "the model key is never printed")
  none_left(s, 1)
end

tests["daytona: a Daytona failure after the sandbox exists deletes it"] = function()
  local s = D.standin()
  s:fault{method = "POST", path = "/toolbox/", status = 400, count = 1000}
  local r = skill({"rlm-execute", "--backend", "daytona", "basic"}, D.env(s))
  T.eq(r.code, 1)
  T.contains(r.stderr, "400 Bad Request: injected fault")
  T.truthy(not r.stderr:find("traceback", 1, true), "a plain message, not a traceback:\n" .. r.stderr)
  none_left(s, 1)
end

return tests
