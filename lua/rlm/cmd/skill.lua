--- `rlm skill`: list, show, run and create recipes.
local args = require "rlm.args"
local skills = require "rlm.skills"

local M = {}

M.help = [[
usage: rlm skill list                 name and description of every skill
       rlm skill show NAME [--source] print a skill's SKILL.md (--source: its recipe.lua)
       rlm skill NAME [--backend local|daytona] [--tools FILE.lua] [ARGS...]
                                      run a skill (the local sandbox by default)
       rlm skill new NAME             write a starting skill into the first RLM_SKILLS_PATH
                                      directory (or ~/.local/share/rlm/skills)

Bundled skills ship inside rlm; your own live in the directories of RLM_SKILLS_PATH
(colon-separated) and in $XDG_DATA_HOME/rlm/skills (~/.local/share/rlm/skills), one folder per
skill with SKILL.md and recipe.lua. A skill may declare tools (`tools: FILE.lua` in its
SKILL.md front matter, a file beside it, as `rlm ask --tools` takes); --tools FILE.lua adds
yours. The recipe passes them to its runs (params.tools).]]

function M.main(argv)
  local sub = argv[1]
  if sub == nil then
    io.stderr:write(M.help, "\n")
    return 2
  end
  if sub == "list" then
    for _, s in ipairs(skills.list()) do
      print(("%-20s %s%s"):format(s.name, s.description,
        s.source == "bundled" and "" or ("  [" .. s.source .. "]")))
    end
    return 0
  elseif sub == "show" then
    local opts, rest = args.parse(table.move(argv, 2, #argv, 1, {}), {source = "flag"})
    local s = rest[1] and skills.find(rest[1])
    if not s then
      return args.usage("skill show", ("no skill named '%s' (see `rlm skill list`)"):format(
        tostring(rest[1])))
    end
    io.write(opts.source and (s.recipe or "") or s.md)
    return 0
  elseif sub == "new" then
    if not argv[2] then
      return args.usage("skill new", "give the new skill's NAME")
    end
    local folder = skills.new(argv[2])
    -- outside the default folder, it is found only while RLM_SKILLS_PATH names its folder
    local dir = folder:match("^(.*)/[^/]*$")
    if dir == skills.default_dir() then
      print(("wrote %s; run it with `rlm skill %s`"):format(folder, argv[2]))
    else
      print(("wrote %s; run it with `RLM_SKILLS_PATH=%s rlm skill %s` (or export RLM_SKILLS_PATH)")
        :format(folder, dir, argv[2]))
    end
    return 0
  end
  if (argv[2] == "--help" or argv[2] == "-h") and skills.find(sub) then
    print(("usage: rlm skill %s [--backend local|daytona] [--tools FILE.lua] [ARGS...]\n"):format(sub))
    io.write(skills.find(sub).md)
    return 0
  end
  local opts, rest = args.parse(table.move(argv, 2, #argv, 1, {}), {backend = "string", tools = "string"})
  local backends = require("rlm.interpreter").backends
  if opts.backend and not backends[opts.backend] then
    args.fail(args.unknown("backend", opts.backend, backends))
  end
  if not skills.find(sub) then
    local names = {}
    for _, s in ipairs(skills.list()) do names[#names + 1] = s.name end
    args.fail(args.unknown("skill", sub, names) .. " (see `rlm skill list`)")
  end
  local status = skills.run(sub, {backend = opts.backend, args = rest,
    tools = opts.tools and require("rlm.tools").load_file(opts.tools)})
  return math.type(status) == "integer" and status or 0
end

return M
