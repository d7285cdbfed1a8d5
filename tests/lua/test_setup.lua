--- The set-up a new user meets: .ci/deps (the package lists, their installation, and what it
-- says without root), the README pointing at its lists, and make install / make uninstall.
-- .ci/deps runs against stand-ins for dpkg-query, apt-get, sudo and id on PATH: nothing is
-- installed, and the paths without root are tried whoever runs the tests.
local T = require "support"
local sys = require "rlm.sys"

local tests = {}

local function words(s)
  local list = {}
  for w in s:gmatch("%S+") do list[#list + 1] = w end
  return list
end

local function list(which)
  local r = assert(sys.run({".ci/deps", "--list", which}, {timeout = 30}))
  T.eq(r.code, 0, r.stderr)
  return words(r.stdout)
end

-- A folder of stand-in commands, the whole PATH (so that no `node` of this machine is seen):
-- every package missing, each apt-get/sudo call recorded in `log` one line per call, `id -u`
-- answering uid, sudo -n succeeding only when sudo_ok; the other tools the script uses linked.
local function stand_ins(o)
  local dir = T.tmpdir()
  local log = T.tmpdir() .. "/calls"
  for _, name in ipairs{"sh", "grep", "sed", "mktemp", "cat", "rm", "env", "seq"} do
    T.eq(assert(sys.run({"ln", "-s", assert(sys.which(name)), dir .. "/" .. name})).code, 0)
  end
  local function tool(name, body)
    assert(sys.write_file(dir .. "/" .. name, "#!/bin/sh\n" .. body .. "\n"))
    assert(sys.chmod(dir .. "/" .. name, tonumber("755", 8)))
  end
  tool("dpkg-query", "exit 1")
  tool("id", ("[ \"$1\" = -u ] && echo %d && exit 0; exec /usr/bin/id \"$@\""):format(o.uid))
  tool("sudo", ('[ "$1" = -n ] && exit %d\necho "sudo $*" >> %s\nexec "$@"'):format(o.sudo_ok and 0 or 1, log))
  tool("apt-get", ('echo "apt-get $*" >> %s\n%s'):format(log, o.apt or "exit 0"))
  return dir, log
end

-- .ci/deps LIST with the stand-ins first on PATH, no terminal (stdin is /dev/null).
local function deps(dir, which)
  local env = sys.environ()
  env.PATH = dir
  return assert(sys.run({".ci/deps", which}, {env = env, timeout = 60}))
end

tests["the run list is part of the test list, and both are short Debian package lists"] = function()
  local run, test = list("run"), list("test")
  T.truthy(#run >= 5 and #run <= 20, "run list of " .. #run)
  T.truthy(#test > #run and #test <= 40, "test list of " .. #test)
  for i, p in ipairs(run) do T.eq(test[i], p, "test list starts with the run list") end
  for _, p in ipairs(test) do T.truthy(p:match("^[a-z0-9][a-z0-9.+-]+$"), "package name " .. p) end
  for _, p in ipairs{"bubblewrap", "python3", "gcc"} do
    T.truthy(table.concat(run, " "):find(p, 1, true), p .. " in the run list")
  end
  for _, p in ipairs{"check", "chromium", "nodejs", "npm", "valgrind"} do
    T.eq(table.concat(run, " "):find("%f[%S]" .. p .. "%f[%s\0]"), nil, p .. " is a test tool")
  end
  T.eq(assert(sys.run({".ci/deps", "--list", "nope"}, {timeout = 30})).code, 2)
end

tests["the README names the script's lists and holds no copy of them"] = function()
  local readme = assert(sys.read_file("README.md"))
  T.contains(readme, ".ci/deps --list run")
  T.contains(readme, ".ci/deps --list test")
  for _, p in ipairs(list("test")) do
    if p:match("%-dev$") then   -- the libraries, which no other sentence would name
      T.eq(readme:find(p, 1, true), nil, "README copies the package " .. p)
    end
  end
end

tests["not root, no terminal, sudo would ask: one line says what to run, nothing installed"] = function()
  local dir, log = stand_ins{uid = 1000, sudo_ok = false}
  local r = deps(dir, "run")
  T.eq(r.code, 1)
  T.eq(r.stdout, "")
  local _, lines = r.stderr:gsub("\n", "")
  T.eq(lines, 1, r.stderr)
  T.contains(r.stderr, "as root, run: apt-get update && apt-get install -y --no-install-recommends "
             .. table.concat(list("run"), " ") .. "\n")
  T.eq(sys.read_file(log), nil, "apt-get or sudo was called")
end

tests["not root, sudo without a password: installs through sudo, one line, no Recommends"] = function()
  local dir, log = stand_ins{uid = 1000, sudo_ok = true, apt = "seq 3500"}
  local r = deps(dir, "test")
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "")
  T.eq(r.stderr, "deps: installing for make test (apt-get --no-install-recommends): "
       .. table.concat(list("test"), " ") .. "\n")
  local calls = assert(sys.read_file(log))
  T.eq(calls, ("sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q\napt-get update -q\n"
       .. "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends %s\n"
       .. "apt-get install -y -q --no-install-recommends %s\n"):format(
         table.concat(list("test"), " "), table.concat(list("test"), " ")))
end

tests["a failing apt-get shows its own output, and .ci/deps fails"] = function()
  local dir = stand_ins{uid = 0, apt = '[ "$1" = install ] && echo "E: Unable to locate package x" && exit 100; exit 0'}
  local r = deps(dir, "run")
  T.eq(r.code, 1)
  T.contains(r.stderr, "deps: installing for make run")
  T.contains(r.stderr, "E: Unable to locate package x\n")
  T.contains(r.stderr, "deps: apt-get failed")
end

tests["make uninstall removes what make install put under PREFIX, and nothing else"] = function()
  local dest = T.tmpdir()
  local function make(target)
    local r = assert(sys.run({"make", "--no-print-directory", target, "DESTDIR=" .. dest, "PREFIX=/opt/rlm"},
                             {timeout = 600}))
    T.eq(r.code, 0, r.stdout .. r.stderr)
  end
  assert(sys.mkdir_p(dest .. "/opt/rlm/bin"))
  assert(sys.write_file(dest .. "/opt/rlm/bin/other", "not rlm's"))
  make("install")
  T.truthy(sys.stat(dest .. "/opt/rlm/bin/rlm"), "bin/rlm installed")
  T.contains(assert(sys.read_file(dest .. "/opt/rlm/share/man/man1/rlm.1")), ".TH")
  make("uninstall")
  T.eq(sys.stat(dest .. "/opt/rlm/bin/rlm"), nil, "bin/rlm left behind")
  T.eq(sys.stat(dest .. "/opt/rlm/share/man/man1/rlm.1"), nil, "rlm.1 left behind")
  T.eq(sys.read_file(dest .. "/opt/rlm/bin/other"), "not rlm's")
end

return tests
