--- A user's Python packages in the local sandbox: a virtualenv (its own python, or named by the
-- venv option, RLM_VENV or --venv) or a folder of packages, bound read-only. tests/isolation/run
-- runs this file as root and again as uid 65534.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local rlm = require "rlm"

local tests = {}
local ROOT = sys.getuid() == 0

local function interp(opts)
  local i = rlm.interpreter(opts)
  T.defer(function() i:shutdown() end)
  return i
end

-- A virtualenv made as a user makes one, with a package written here in its site-packages,
-- writable by everyone: read-only must come from the mount, not from the files' modes.
local function make_venv()
  local dir = T.tmpdir()
  local venv = dir .. "/venv"
  local r = assert(sys.run({"/usr/bin/python3", "-m", "venv", "--without-pip", venv}, {timeout = 120}))
  T.eq(r.code, 0, r.stderr)
  local site = assert(sys.run({venv .. "/bin/python", "-c",
                               "import sysconfig; print(sysconfig.get_paths()['purelib'])"})).stdout:gsub("\n$", "")
  T.truthy(site:find(venv, 1, true) == 1, "site-packages outside the venv: " .. site)
  assert(sys.mkdir_p(site .. "/tinypkg"))
  assert(sys.write_file(site .. "/tinypkg/__init__.py", "def double(x):\n    return 2 * x\n"))
  r = assert(sys.run({"chmod", "-R", "a+w", venv}))
  T.eq(r.code, 0, r.stderr)
  return venv, site
end

-- Code that imports the package and tries to change the virtualenv three ways.
local PROBE = [[
import json, os, sys, tinypkg
tries = {}
for name, act in (("write", lambda: open(tinypkg.__file__, "a")),
                  ("create", lambda: open(os.path.join(os.path.dirname(tinypkg.__file__), "new.py"), "w")),
                  ("remove", lambda: os.unlink(tinypkg.__file__))):
    try:
        act()
        tries[name] = "done"
    except OSError as e:
        tries[name] = e.errno
# the mount the package lives on (the longest mount point above it) and whether it is read-only
here, best = os.path.realpath(tinypkg.__file__), ("", [])
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if (here + "/").startswith(f[4].rstrip("/") + "/") and len(f[4]) > len(best[0]):
        best = (f[4], f[5].split(","))
print(json.dumps({"double": tinypkg.double(21), "prefix": sys.prefix, "tries": tries,
                  "ro": "ro" in best[1]}))
]]

local EROFS, EACCES = 30, 13

local function check_probe(i, venv, site)
  local out, run = i:execute(PROBE)
  T.eq(run.error, nil, tostring(run.traceback))
  local got = json.decode(run.stdout)
  T.eq(got.double, 42)
  -- Refused: read-only (EROFS), or, for a sandbox uid that owns nothing, first by permission.
  for _, what in ipairs{"write", "create", "remove"} do
    T.truthy(got.tries[what] == EROFS or got.tries[what] == EACCES, what .. ": " .. tostring(got.tries[what]))
  end
  T.eq(got.ro, true, "the packages are on a read-only mount")
  T.truthy(sys.stat(site .. "/tinypkg/__init__.py"), "the package was removed on the host")
  T.eq(sys.stat(site .. "/tinypkg/new.py"), nil)
  return got, out
end

tests["sandbox code imports a virtualenv's package, which stays read-only"] = function()
  local venv, site = make_venv()
  local got = check_probe(interp{backend = "local", venv = venv}, venv, site)
  T.eq(got.prefix, venv)
end

tests["a virtualenv's python as RLM_PYTHON brings its virtualenv"] = function()
  local venv, site = make_venv()
  local got = check_probe(interp{backend = "local", python = venv .. "/bin/python"}, venv, site)
  T.eq(got.prefix, venv)
end

tests["a folder of packages is added after the system's, read-only"] = function()
  local _, site = make_venv()
  local i = interp{backend = "local", venv = site}
  local got = check_probe(i, site, site)
  T.eq(got.prefix, "/usr")
  -- after the standard library: a json.py there does not replace the real one
  local _, run = i:execute("import sys\nprint(sys.path.index('" .. site .. "') > 0)")
  T.eq(run.stdout, "True\n", run.stderr)
end

tests["RLM_VENV and --venv reach rlm exec; an unusable folder is refused in one line"] = function()
  local venv = make_venv()
  local code = "import tinypkg; SUBMIT(answer=tinypkg.double(4))"
  local env = {PATH = "/usr/bin:/bin", HOME = sys.getenv("HOME") or "/", TMPDIR = sys.getenv("TMPDIR"),
               RLM_VENV = venv}
  local r = T.run_rlm({"exec", code}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, '{"answer":8}\n')
  env.RLM_VENV = nil
  r = T.run_rlm({"exec", "--venv", venv, code}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, '{"answer":8}\n')
  r = T.run_rlm({"exec", "--venv", venv .. "-missing", code}, {env = env})
  T.eq(r.code, 1)
  T.eq(r.stderr, "rlm: venv " .. venv .. "-missing cannot be used: no such folder\n")
  T.eq(r.stdout, "")
end

tests["a virtualenv whose python is not under /usr is refused, saying how to make one"] = function()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/venv/bin"))
  assert(sys.write_file(dir .. "/venv/pyvenv.cfg", "home = /opt/python/bin\n"))
  assert(sys.write_file(dir .. "/venv/bin/python3", "#!/bin/sh\n"))
  assert(sys.chmod(dir .. "/venv/bin/python3", tonumber("755", 8)))
  local err = T.raises(function() interp{backend = "local", venv = dir .. "/venv"} end, "cannot be used")
  T.contains(err, "outside /usr")
  T.contains(err, "/usr/bin/python3 -m venv")
end

if ROOT then
  tests["a virtualenv the sandbox's user cannot reach is refused, saying which folder"] = function()
    local dir = T.tmpdir()
    assert(sys.mkdir_p(dir .. "/closed/venv"))
    assert(sys.chmod(dir .. "/closed", tonumber("700", 8)))
    local err = T.raises(function() interp{backend = "local", venv = dir .. "/closed/venv"} end,
                         "cannot be used")
    T.contains(err, dir .. "/closed lets only its owner through")
  end
end

return tests
