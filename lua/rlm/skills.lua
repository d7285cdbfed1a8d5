--- Skills: runnable recipes, each a folder NAME/ with SKILL.md (front matter `name`,
-- `description` and, optionally, `parameters`: the key=value arguments it takes, as
-- "file=PATH, task=QUESTION", and `tools`: a Lua tools file in the folder, as `rlm ask --tools`
-- takes, whose tools the recipe gets as params.tools) and recipe.lua. Bundled skills live in the binary (skills/ in the source
-- tree); a user's own come from the directories in RLM_SKILLS_PATH and win on a name clash.
local host = require "rlm.core.host"
local sys = require "rlm.sys"

local M = {}

local function front_matter(md)
  local block = md:match("^%-%-%-\n(.-)\n%-%-%-")
  local meta = {}
  for line in (block or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([%w_-]+):%s*(.-)%s*$")
    if k then meta[k] = v end
  end
  return meta
end

--- Where `rlm skill new` writes without RLM_SKILLS_PATH, and which is always searched:
-- $XDG_DATA_HOME/rlm/skills (~/.local/share/rlm/skills).
function M.default_dir()
  local base = sys.getenv("XDG_DATA_HOME")
  if not base or base == "" then base = (sys.getenv("HOME") or ".") .. "/.local/share" end
  return base .. "/rlm/skills"
end

local function user_dirs()
  local dirs = {}
  for dir in (sys.getenv("RLM_SKILLS_PATH") or ""):gmatch("[^:]+") do dirs[#dirs + 1] = dir end
  dirs[#dirs + 1] = M.default_dir()
  return dirs
end

--- Every skill: {name, description, source = "bundled"|dir, md = text, recipe = lua text|nil, path}.
function M.list()
  local found, order = {}, {}
  local function add(skill)
    if not found[skill.name] then order[#order + 1] = skill.name end
    found[skill.name] = skill
  end
  for _, path in ipairs(host.resources("skills/")) do
    local name = path:match("^skills/([^/]+)/SKILL%.md$")
    if name then
      local md = host.resource(path)
      local meta = front_matter(md)
      add({name = name, description = meta.description or "", parameters = meta.parameters,
           source = "bundled", md = md, recipe = host.resource("skills/" .. name .. "/recipe.lua"),
           path = "skills/" .. name .. "/recipe.lua", folder = "skills/" .. name, tools = meta.tools})
    end
  end
  for _, dir in ipairs(user_dirs()) do
    for _, name in ipairs(sys.list_dir(dir) or {}) do
      local md = sys.read_file(dir .. "/" .. name .. "/SKILL.md")
      if md then
        local path = dir .. "/" .. name .. "/recipe.lua"
        local meta = front_matter(md)
        add({name = name, description = meta.description or "", parameters = meta.parameters,
             source = dir, md = md, recipe = sys.read_file(path), path = path,
             folder = dir .. "/" .. name, tools = meta.tools})
      end
    end
  end
  table.sort(order)
  local out = {}
  for _, name in ipairs(order) do out[#out + 1] = found[name] end
  return out
end

function M.find(name)
  for _, s in ipairs(M.list()) do
    if s.name == name then return s end
  end
  return nil
end

--- The key=value arguments of a skill: {options = {key = value}, positional = {words}}.
-- Keys are those its `parameters` declare; another key is a mistake that names the valid ones.
function M.parse_args(skill, list)
  local declared, names = {}, {}
  for item in (skill.parameters or ""):gmatch("[^,]+") do
    local key = item:match("^%s*([%w_]+)=")
    if key then declared[key] = true; names[#names + 1] = item:match("^%s*(.-)%s*$") end
  end
  local options, positional = {}, {}
  for _, a in ipairs(list or {}) do
    local k, v = a:match("^([%w_]+)=(.*)$")
    if k and declared[k] then
      options[k] = v
    elseif k then
      error(("unknown argument '%s' (have: %s)"):format(a, #names > 0 and table.concat(names, ", ")
            or "no key=value arguments"), 0)
    else
      positional[#positional + 1] = a
    end
  end
  return {options = options, positional = positional}
end

--- The tools a skill declares (its `tools` file), or nil.
function M.tools(skill)
  if not skill.tools or skill.tools == "" then return nil end
  local what = ("skill %s: tools"):format(skill.name)
  if not skill.tools:match("^[%w_.-]+$") or skill.tools:match("^%.") then
    error(("%s: %s must be a file in the skill's folder"):format(what, skill.tools), 0)
  end
  local path = skill.folder .. "/" .. skill.tools
  local text = skill.source == "bundled" and host.resource(path) or nil
  if skill.source == "bundled" and not text then error(("%s: no file %s"):format(what, path), 0) end
  return require("rlm.tools").load_file(path, what, text)
end

--- Runs a skill's recipe. params: {backend = ..., args = {...}, tools = a tools option}; the
-- recipe receives them as `...`, with params.options (its key=value arguments),
-- params.positional (the other words) and params.tools (the skill's tools and the caller's).
function M.run(name, params)
  local skill = M.find(name)
  if not skill then
    local names = {}
    for _, s in ipairs(M.list()) do names[#names + 1] = s.name end
    error(("no skill named '%s' (have: %s)"):format(name, table.concat(names, ", ")), 0)
  end
  if not skill.recipe then error(("skill '%s' has no recipe.lua"):format(name), 0) end
  params = params or {}
  local parsed = M.parse_args(skill, params.args)
  local options = params.options or {}       -- a caller's own (rlm daytona-smoke's flags)
  for k, v in pairs(parsed.options) do options[k] = v end
  params.options, params.positional = options, parsed.positional
  params.tools = require("rlm.tools").combine(M.tools(skill), params.tools)
  local chunk, err = load(skill.recipe, "@" .. skill.path, "t")
  if not chunk then error(err, 0) end
  return chunk(params)
end

M.template_md = [[
---
name: %s
description: What this skill does, in one line (shown by `rlm skill list`).
parameters: greeting=WORD
---

# %s

When to use it: ...

Parameters: `--backend local|daytona`, `greeting=WORD`, and any other words after the name.

What it prints: ...
]]

M.template_recipe = [[
-- %s: a starting recipe. Run it with `rlm skill %s [--backend local|daytona] [ARGS...]`.
-- params.tools: the tools of SKILL.md's `tools:` file and of --tools, for the code to call.
local rlm = require "rlm"
local params = ...

local interp <close> = rlm.interpreter{backend = params.backend, tools = params.tools}
interp:start()
local out, run = interp:execute([=[
import platform
SUBMIT(python=platform.python_version(), words=WORDS)
]=], {WORDS = params.positional})
print(("%%s: python %%s in the sandbox, words: %%s"):format(params.options.greeting or "hello",
  out.python, table.concat(out.words, " ")))
]]

--- Writes a starting skill NAME into dir (the first RLM_SKILLS_PATH entry, else default_dir(),
-- both of which `rlm skill NAME` searches).
function M.new(name, dir)
  if not name:match("^[%w][%w_-]*$") then
    error("a skill name uses letters, digits, '-' and '_' only: " .. name, 0)
  end
  dir = dir or user_dirs()[1]
  local folder = dir .. "/" .. name
  if sys.stat(folder) then error(folder .. " already exists", 0) end
  assert(sys.mkdir_p(folder))
  assert(sys.write_file(folder .. "/SKILL.md", M.template_md:format(name, name)))
  assert(sys.write_file(folder .. "/recipe.lua", M.template_recipe:format(name, name)))
  return folder
end

return M
