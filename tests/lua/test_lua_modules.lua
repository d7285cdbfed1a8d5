--- How a user's script finds Lua modules: as lua5.4 does (its default paths, LUA_PATH and
-- LUA_CPATH, LuaRocks' trees), plus the script's own folder, never the working directory unless
-- asked, and rlm's own modules first; LUA_INIT; `rlm FILE` and `#!/usr/bin/env rlm`.
local T = require "support"
local sys = require "rlm.sys"

local tests = {}

-- The Debian packages of the Lua modules these tests load (.ci/deps test installs them).
local DEBIAN = {lpeg = "lua-lpeg", ["pl.stringx"] = "lua-penlight", lfs = "lua-filesystem",
                socket = "lua-socket"}
local DEBIAN_ORDER = {"lpeg", "pl.stringx", "lfs", "socket"}

local function require_test_packages()
  local missing = {}
  for _, module in ipairs(DEBIAN_ORDER) do
    if not pcall(require, module) then missing[#missing + 1] = DEBIAN[module] end
  end
  if not sys.which("luarocks") then missing[#missing + 1] = "luarocks" end
  if #missing > 0 then
    error("these tests need the Debian packages " .. table.concat(missing, " ") ..
          ": run `.ci/deps test` (make test does) or apt-get install them", 0)
  end
end

-- The environment of a user who ran `eval "$(luarocks --lua-version=5.4 --tree TREE path)"`,
-- with rlm on PATH: nothing else.
local function luarocks_env(tree)
  local r = assert(sys.run({"luarocks", "--lua-version=5.4", "--tree", tree, "path"}, {timeout = 120}))
  T.eq(r.code, 0, r.stderr)
  local env = {HOME = tree, PATH = T.rlm:match("^(.*)/[^/]*$") .. ":/usr/bin:/bin"}
  for name, value in r.stdout:gmatch("export (LUA_C?PATH[_%d]*)='([^']*)'") do env[name] = value end
  T.truthy(env.LUA_PATH and env.LUA_CPATH, "luarocks path printed no LUA_PATH/LUA_CPATH: " .. r.stdout)
  return env
end

-- A rock made from files here, installed into a tree of the test's own, without network.
local function make_rock(dir)
  local src, tree = dir .. "/rock", dir .. "/tree"
  assert(sys.mkdir_p(src))
  assert(sys.write_file(src .. "/tinyrock.lua", "return {answer = 42}\n"))
  assert(sys.write_file(src .. "/tinyrock-1.0-1.rockspec", [[
package = "tinyrock"
version = "1.0-1"
source = {url = "."}
build = {type = "builtin", modules = {tinyrock = "tinyrock.lua"}}
]]))
  local r = assert(sys.run({"luarocks", "--lua-version=5.4", "--tree", tree, "make",
                            "tinyrock-1.0-1.rockspec"}, {cwd = src, timeout = 120, env = {HOME = dir,
                            PATH = "/usr/bin:/bin"}}))
  T.eq(r.code, 0, r.stderr)
  return tree
end

local SCRIPT = [[
#!/usr/bin/env rlm
local lpeg = require "lpeg"
local stringx = require "pl.stringx"
local lfs = require "lfs"
local socket = require "socket"
local rock = require "tinyrock"
local helpers = require "helpers"
local digits = lpeg.C(lpeg.R("09") ^ 1)
print(digits:match("2026-11"), stringx.strip("  pl  "), lfs.attributes("/", "mode"),
      type(socket.gettime()), rock.answer, helpers.twice(21), arg[0]:match("[^/]*$"), ...)
]]

local EXPECTED = "2026\tpl\tdirectory\tnumber\t42\t42\tscript.lua\ta\tb\n"

tests["a script uses lpeg, Penlight, lfs, LuaSocket, a rock and a helper beside it"] = function()
  require_test_packages()
  local dir = T.tmpdir()
  local env = luarocks_env(make_rock(dir))
  assert(sys.mkdir_p(dir .. "/bin"))
  local script = dir .. "/bin/script.lua"
  assert(sys.write_file(script, SCRIPT))
  assert(sys.chmod(script, tonumber("755", 8)))
  assert(sys.write_file(dir .. "/bin/helpers.lua", "return {twice = function(n) return 2 * n end}\n"))
  local elsewhere = T.tmpdir()   -- the working directory is not the script's folder
  local r = T.run_rlm({"run", script, "a", "b"}, {env = env, cwd = elsewhere})
  T.eq(r.stderr, "")
  T.eq(r.stdout, EXPECTED)
  r = T.run_rlm({script, "a", "b"}, {env = env, cwd = elsewhere})
  T.eq(r.stderr, "")
  T.eq(r.stdout, EXPECTED)
  -- as an executable: the kernel runs `/usr/bin/env rlm SCRIPT a b`, env finds rlm on PATH
  r = assert(sys.run({script, "a", "b"}, {env = env, cwd = elsewhere, timeout = 60}))
  T.eq(r.stderr, "")
  T.eq(r.stdout, EXPECTED)
  T.eq(r.code, 0)
end

tests["the default paths are lua5.4's, less the working directory"] = function()
  require_test_packages()
  local cwd = T.tmpdir()
  assert(sys.write_file(cwd .. "/lpeg.lua", "return {hijacked = true}\n"))
  assert(sys.write_file(cwd .. "/mine.lua", "return {mine = true}\n"))
  local probe = "print(require('lpeg').hijacked, pcall(require, 'mine'))"
  local r = T.run_rlm({"-e", probe}, {env = {PATH = "/usr/bin:/bin"}, cwd = cwd})
  T.eq(r.code, 0, r.stderr)
  T.truthy(r.stdout:match("^nil\tfalse\tmodule 'mine' not found"), r.stdout)
  T.contains(r.stdout, "/usr/share/lua/5.4/mine.lua")   -- the message lists where it looked
  -- a user who puts the working directory in LUA_PATH gets it
  r = T.run_rlm({"-e", probe}, {env = {PATH = "/usr/bin:/bin", LUA_PATH = "./?.lua;;"}, cwd = cwd})
  T.eq(r.code, 0, r.stderr)
  T.truthy(r.stdout:match("^true\ttrue\ttable"), r.stdout)
  -- LUA_PATH_5_4 wins over LUA_PATH, as in lua5.4
  r = T.run_rlm({"-e", "print(package.path)"}, {env = {LUA_PATH = "/a/?.lua", LUA_PATH_5_4 = "/b/?.lua"}})
  T.eq(r.stdout, "/b/?.lua\n")
end

tests["rlm's own modules win over the user's paths"] = function()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/rlm"))
  assert(sys.write_file(dir .. "/rlm/json.lua", "return {hijacked = true}\n"))
  assert(sys.write_file(dir .. "/cjson.lua", "return {hijacked = true}\n"))
  local r = T.run_rlm({"-e", "print(require('rlm.json').hijacked, require('cjson').hijacked, " ..
                             "type(require('rlm.json').encode))"},
                      {env = {LUA_PATH = dir .. "/?.lua", LUA_CPATH = dir .. "/?.so"}})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "nil\tnil\tfunction\n")
end

tests["LUA_INIT runs first, as code or @file, and LUA_INIT_5_4 wins"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/init.lua", "GREETING = 'from file'\n"))
  local script = dir .. "/s.lua"
  assert(sys.write_file(script, "print(GREETING)\n"))
  local r = T.run_rlm({script}, {env = {LUA_INIT = "GREETING = 'from code'"}})
  T.eq(r.stdout, "from code\n", r.stderr)
  r = T.run_rlm({"run", script}, {env = {LUA_INIT = "GREETING = 'plain'", LUA_INIT_5_4 = "@" .. dir .. "/init.lua"}})
  T.eq(r.stdout, "from file\n", r.stderr)
  r = T.run_rlm({"run", script}, {env = {LUA_INIT = "error('init failed')"}})
  T.eq(r.code, 1)
  T.contains(r.stderr, "LUA_INIT:1: init failed")
  T.eq(r.stdout, "")
end

tests["rlm FILE is rlm run FILE; a word that is neither stays an unknown command"] = function()
  local dir = T.tmpdir()
  local script = dir .. "/s"   -- no .lua: found as a file
  assert(sys.write_file(script, "print(arg[-1] ~= nil, arg[0], ...)\nreturn 4\n"))
  local r = T.run_rlm({script, "x"})
  T.eq(r.code, 4, r.stderr)
  T.eq(r.stdout, "true\t" .. script .. "\tx\n")
  r = T.run_rlm({"s", "x"}, {cwd = dir})
  T.eq(r.stdout, "true\ts\tx\n", r.stderr)
  r = T.run_rlm({"no-such-thing"}, {cwd = dir})
  T.eq(r.code, 2)
  T.contains(r.stderr, "unknown command 'no-such-thing'")
  r = T.run_rlm({dir .. "/missing.lua"})
  T.eq(r.code, 1)
  T.contains(r.stderr, "missing.lua")
end

return tests
