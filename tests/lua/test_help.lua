--- The help has one source: `rlm help`, every `rlm COMMAND --help`, the manual page and
-- docs/cli.md must say the same, and the manual page must be valid roff.
local T = require "support"
local help = require "rlm.help"
local sys = require "rlm.sys"

local tests = {}

-- The commands `rlm help` lists: the first word(s) of each indented line.
local function listed()
  local r = T.run_rlm({"help"})
  T.eq(r.code, 0, r.stderr)
  local names = {}
  for line in r.stdout:gmatch("[^\n]+") do
    local name = line:match("^  (%-?[%w-]+)")
    if name then
      if line:match("^  mcp deploy") then name = "mcp deploy" end
      if line:match("^  trace export") then name = "trace export" end
      names[#names + 1] = name
    end
  end
  table.sort(names)
  return names
end

tests["rlm help lists exactly the commands the manual documents"] = function()
  local documented = {}
  for i, name in ipairs(help.ORDER) do documented[i] = name end
  table.sort(documented)
  T.eq(listed(), documented)
end

tests["the manual page holds every command's --help, line for line, and is valid roff"] = function()
  local r = T.run_rlm({"help", "--man"})
  T.eq(r.code, 0, r.stderr)
  local man = r.stdout
  T.truthy(man:find('^%.TH RLM 1 ""'), "a man(7) header")
  for _, name in ipairs(help.ORDER) do
    local argv = {}
    for word in name:gmatch("%S+") do argv[#argv + 1] = word end
    argv[#argv + 1] = "--help"
    local h = T.run_rlm(argv)
    T.eq(h.code, 0, name .. ": " .. h.stderr)
    T.contains(man, ('.SS "rlm %s"'):format(name))
    for line in h.stdout:gmatch("[^\n]+") do
      local roff = line:gsub("\\", "\\e")
      if roff:match("^[.']") then roff = "\\&" .. roff end
      T.contains(man, roff, "rlm " .. name .. " --help")
    end
  end
  local groff = sys.which and sys.which("groff")
  if not groff then T.skip("groff is not installed (Debian package groff-base)") end
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/rlm.1", man))
  local g = assert(sys.run({groff, "-man", "-Tutf8", "-ww", "-z", dir .. "/rlm.1"}, {timeout = 30}))
  T.eq(g.code, 0, g.stderr)
  T.eq(g.stderr, "", "groff warns")
end

tests["docs/cli.md is what `rlm help --markdown` prints (run `make docs` after changing a help text)"] = function()
  local r = T.run_rlm({"help", "--markdown"})
  T.eq(r.code, 0, r.stderr)
  T.eq(assert(sys.read_file("docs/cli.md")), r.stdout)
end

return tests
