-- The interpreter on the local backend: the backend contract (backend_contract.lua), then what is
-- the local backend's own: isolation, files on the host, signals, bubblewrap.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local async = require "rlm.async"
local registry = require "rlm.registry"
local rlm = require "rlm"
local contract = require "backend_contract"

local tests = contract.run{backend = "local"}

-- An interpreter shut down after the test, pass or fail.
local function interp(opts)
  local i = rlm.interpreter(opts)
  T.defer(function() i:shutdown() end)
  return i
end

local function host_env(extra)
  local env = {PATH = sys.getenv("PATH"), HOME = sys.getenv("HOME"), TMPDIR = sys.getenv("TMPDIR"),
               RLM_LUA_PATH = sys.getenv("RLM_LUA_PATH")}
  for k, v in pairs(extra or {}) do env[k] = v end
  return env
end

tests["a killed driver is a clear error and the interpreter recovers"] = function()
  local i = interp{}
  i:execute("x = 1")
  local pid = T.truthy(i:pid(), "driver pid")
  T.truthy(pid ~= i.sandbox.proc:pid(), "the pid is the driver inside bwrap, not bwrap")
  assert(sys.kill(pid, "KILL"))
  local out, run = i:execute("SUBMIT(y=2)")
  T.eq(out, nil)
  T.truthy(run.state_lost, "state_lost")
  T.contains(run.error, "SandboxError")
  out, run = i:execute("SUBMIT(y=2, had_x='x' in globals())")
  T.eq(out, {y = 2, had_x = false})
  T.eq(run.state_lost, false)
end

tests["a driver's end is reported with its own last words, not an earlier driver's"] = function()
  local i = interp{}
  -- the driver's real stderr: the first of its own writable pipes (driver.py's main dups it first)
  local die = [[
import fcntl, os, stat
fd = min(f for f in range(3, 1024) if os.path.exists('/proc/self/fd/%d' % f)
         and stat.S_ISFIFO(os.fstat(f).st_mode)
         and fcntl.fcntl(f, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY)
os.write(fd, b'WORDS\n')
os._exit(3)]]
  local _, run = i:execute((die:gsub("WORDS", "first words")))
  T.contains(run.error, "first words")
  _, run = i:execute((die:gsub("WORDS", "second words")))
  T.contains(run.error, "second words")
  T.eq(run.error:find("first words", 1, true), nil, run.error)
end

-- The capture files are never emptied under a writer that may still be at it: what was taken
-- is freed instead. Forty blocks of 1 MB each go through a capture folder of 4 MB.
tests["output taken is freed: blocks print 20x the capture folder's size in all"] = function()
  local i = interp{limits = {output = "2M"}, max_output_chars = 100}
  for k = 1, 40 do
    local _, run = i:execute("import sys\nsys.stdout.write('y' * 1000000)\nprint('e', file=sys.stderr)")
    T.eq({run.error, run.stdout_chars, run.stderr}, {nil, 1000000, "e\n"}, "block " .. k)
  end
  local _, run = i:execute("import os\nst = os.statvfs('/run/rlm')\n" ..
                           "print((st.f_blocks - st.f_bfree) * st.f_frsize)")
  T.truthy(tonumber(run.stdout) < 1 << 20, "the capture folder holds " .. run.stdout)
  -- a growing file would pass limits.file_size: it starts again from empty before that, and
  -- at once when no thread of the code's may still write (each block has all of the limit)
  i = interp{limits = {file_size = "1M"}, max_output_chars = 100}
  for k = 1, 10 do
    local _, run = i:execute(("print('z' * %d)"):format(k % 2 == 0 and 499999 or 599999))
    T.eq({run.error, run.stdout_chars}, {nil, k % 2 == 0 and 500000 or 600000},
         "block " .. k .. " under limits.file_size")
  end
  i:execute("import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()")
  for k = 1, 10 do
    local _, run = i:execute("print('z' * 299999)")
    T.eq({run.error, run.stdout_chars}, {nil, 300000}, "block " .. k .. " beside a thread")
  end
end

tests["writes outside the workspace and the volume fail; the host is unchanged"] = function()
  local i = interp{}
  local home = assert(sys.getenv("HOME"))
  local marker = "rlm-escape-" .. sys.getpid()
  local targets = {"/etc/" .. marker, "/usr/" .. marker, "/" .. marker, home .. "/" .. marker,
                   "/home/daytona/" .. marker, "/work/" .. marker}
  local out, run = i:execute([[
import os
res = {}
for p in targets:
    try:
        with open(p, "w") as f:
            f.write("x")
        res[p] = "written"
    except OSError as e:
        res[p] = type(e).__name__
SUBMIT(res=res, uid=os.getuid(), env=dict(os.environ))
]], {targets = targets})
  T.eq(run.error, nil)
  for _, p in ipairs(targets) do
    T.truthy(out.res[p] ~= "written", p .. " must not be writable: " .. tostring(out.res[p]))
    T.eq(sys.stat(p), nil, "host path " .. p)
  end
  T.eq(out.uid, 1000)
  T.eq(out.env.HOME, "/home/daytona")
  T.eq(out.env.OPENAI_API_KEY, nil)
end

tests["no network unless network = true"] = function()
  local server = T.server{"tests/standins/echo"}
  local code = [[
import urllib.request
try:
    with urllib.request.urlopen(url + "/delay?ms=0", timeout=3) as r:
        SUBMIT(status=r.status)
except OSError as e:
    SUBMIT(failed=type(e).__name__ + ": " + str(e))
]]
  local out = interp{}:execute(code, {url = server.url})
  T.truthy(out.failed, "connection should fail, got " .. json.encode(out))
  T.contains(out.failed, "refused")
  out = interp{network = true}:execute(code, {url = server.url})
  T.eq(out, {status = 200}, "with network = true the same request works")
end

tests["volume round trip across two rlm processes"] = function()
  local data = T.tmpdir()
  local env = host_env{XDG_DATA_HOME = data}
  local w = T.run_rlm({"exec", "--volume", "round-trip", [[
import json, os
os.makedirs("/home/daytona/memory/artifacts", exist_ok=True)
with open("/home/daytona/memory/artifacts/results.json", "w") as f:
    json.dump({"answer": 42, "items": []}, f)
SUBMIT(written=True)
]]}, {env = env})
  T.eq(w.code, 0, "writer: " .. w.stderr)
  T.eq(w.stdout, '{"written":true}\n')
  T.truthy(sys.stat(data .. "/rlm/volumes/round-trip/artifacts/results.json"), "on the host volume")
  local r = T.run_rlm({"exec", "--volume", "round-trip", [[
import json
with open("/home/daytona/memory/artifacts/results.json") as f:
    SUBMIT(**json.load(f))
]]}, {env = env})
  T.eq(r.code, 0, "reader: " .. r.stderr)
  T.eq(json.decode(r.stdout), {answer = 42, items = json.array{}})
  -- without --volume the memory folder is transient
  local t = T.run_rlm({"exec", "import os\nSUBMIT(n=len(os.listdir('/home/daytona/memory')))"},
                      {env = env})
  T.eq(t.stdout, '{"n":0}\n')
end

tests["upload, download and files"] = function()
  local i = interp{}
  local blob = "bin\0\xff\n" .. string.rep("z", 100000)
  assert(i:upload("/home/daytona/workspace/in/data.bin", blob))
  assert(i:upload("rel.txt", "relative"))
  assert(i:upload("/home/daytona/memory/m.txt", "mem"))
  local out = i:execute("SUBMIT(n=len(open('in/data.bin','rb').read()), r=open('rel.txt').read())")
  T.eq(out, {n = #blob, r = "relative"})
  i:execute("open('made.txt', 'w').write('from python')")
  T.eq(i:download("/home/daytona/workspace/made.txt"), "from python")
  T.eq(i:download("in/data.bin"), blob)
  local none, err = i:download("missing.txt")
  T.eq(none, nil)
  T.contains(err, "No such file")
  local paths = {}
  for _, e in ipairs(assert(i:files())) do paths[#paths + 1] = e.path .. ":" .. e.type end
  T.eq(paths, {"/home/daytona/workspace/in:dir", "/home/daytona/workspace/in/data.bin:file",
               "/home/daytona/workspace/made.txt:file", "/home/daytona/workspace/rel.txt:file"})
  T.eq(assert(i:files("/home/daytona/memory"))[1].path, "/home/daytona/memory/m.txt")
  T.contains(select(2, i:upload("/etc/passwd", "x")), "outside")
  T.contains(select(2, i:upload("../escape.txt", "x")), "'..'")
  -- a link made inside must not lead the host out of the sandbox
  i:execute("import os\nos.symlink('/etc', 'etc-link')")
  none, err = i:download("etc-link/hostname")
  T.eq(none, nil)
  T.contains(err, "symbolic link")
  T.contains(select(2, i:upload("etc-link/evil", "x")), "symbolic link")
end

tests["missing bubblewrap is a clear error before anything is created"] = function()
  local tmp = T.tmpdir()
  local old = sys.getenv("TMPDIR")
  sys.setenv("TMPDIR", tmp)
  T.defer(function() sys.setenv("TMPDIR", old) end)
  local live = #registry.list()
  local err = T.raises(function() rlm.interpreter{bwrap = "/nonexistent/bwrap"} end,
                       "sudo apt-get install bubblewrap python3")
  T.contains(err, "/nonexistent/bwrap")
  sys.setenv("RLM_BWRAP", "/nonexistent/bwrap")
  T.defer(function() sys.setenv("RLM_BWRAP", nil) end)
  T.raises(function() rlm.interpreter{} end, "bubblewrap")
  sys.setenv("RLM_BWRAP", nil)
  sys.setenv("RLM_PYTHON", "/nonexistent/python3")
  T.defer(function() sys.setenv("RLM_PYTHON", nil) end)
  T.raises(function() rlm.interpreter{} end, "python3 (/nonexistent/python3)")
  sys.setenv("RLM_PYTHON", nil)
  T.eq(#registry.list(), live, "nothing registered")
  T.eq(sys.list_dir(tmp), {}, "nothing created")
  local r = T.run_rlm({"exec", "SUBMIT(x=1)"}, {env = host_env{RLM_BWRAP = "/nonexistent/bwrap"}})
  T.eq(r.code, 1)
  T.contains(r.stderr, "sudo apt-get install bubblewrap python3")
end

tests["a failed start leaves nothing behind"] = function()
  local tmp = T.tmpdir()
  local old = sys.getenv("TMPDIR")
  sys.setenv("TMPDIR", tmp)
  T.defer(function() sys.setenv("TMPDIR", old) end)
  local live = #registry.list()
  local i = rlm.interpreter{context_paths = {tmp .. "/missing"}}
  T.raises(function() i:start() end, "context_paths")
  T.eq(i.sandbox, nil)
  T.eq(#registry.list(), live)
  T.eq(sys.list_dir(tmp), {}, "the staging folder was removed")
end

tests["shutdown, <close> and GC end the sandbox and unregister it"] = function()
  local live = #registry.list()
  local root, pid
  do
    local i <close> = rlm.interpreter{}
    i:execute("pass")
    root, pid = i.sandbox.root, i:pid()
    T.eq(#registry.list(), live + 1)
  end
  T.eq(#registry.list(), live)
  T.eq(sys.stat(root), nil, "the transient folder is gone")
  local deadline = sys.now() + 20
  while sys.stat("/proc/" .. pid) and sys.now() < deadline do sys.sleep(0.01) end
  T.eq(sys.stat("/proc/" .. pid), nil, "the driver is gone")
  local function make() local i = rlm.interpreter{}; i:start(); return i.sandbox.root end
  root = make()
  collectgarbage(); collectgarbage()
  T.eq(sys.stat(root), nil, "collected interpreters clean up")
  T.eq(#registry.list(), live)
  local i = rlm.interpreter{}
  i:shutdown()
  i:shutdown()
  T.raises(function() i:execute("pass") end, "shut down")
end

-- Starts an rlm whose script opens a sandbox, reports it, then does `after`; returns the process,
-- the sandbox's folder and its driver's pid.
local function rlm_with_sandbox(after, env)
  local proc = assert(sys.spawn{argv = {T.rlm, "-e", [[
local i = require("rlm").interpreter{}
i:start()
print(i.sandbox.root .. " " .. i:pid())
io.stdout:flush()
]] .. after}, stdin = "pipe", stderr = "pipe", env = env})
  T.defer(function() proc:close() end)
  local line = assert(sys.read_line(proc, 60))
  local root, pid = line:match("^(%S+) (%d+)$")
  T.truthy(sys.stat(root), "the sandbox exists while it runs")
  return proc, root, pid
end

local function gone(root, pid, how)
  T.eq(sys.stat(root), nil, how .. ": the transient folder is gone")
  local deadline = sys.now() + 20
  while sys.stat("/proc/" .. pid) and sys.now() < deadline do sys.sleep(0.01) end
  T.eq(sys.stat("/proc/" .. pid), nil, how .. ": the driver is gone")
end

tests["an interrupted rlm ends its sandboxes, whatever the signal"] = function()
  for _, sig in ipairs{{"INT", 2}, {"TERM", 15}, {"HUP", 1}, {"QUIT", 3}} do
    local proc, root, pid = rlm_with_sandbox('i:execute("import time\\ntime.sleep(100)")')
    sys.sleep(0.2)
    proc:kill(sig[2])
    T.eq({sys.wait(proc, 30)}, {"exit", 128 + sig[2]}, sig[1])
    T.contains(proc:read("stderr"), "interrupted (SIG" .. sig[1] .. ")")
    gone(root, pid, sig[1])
  end
end

-- A container started without an init makes rlm PID 1 of its pid namespace: every orphan there
-- is its child, one per sandbox (bwrap's own pid 1, whose parent is gone when it ends).
tests["as PID 1 rlm reaps every sandbox's orphan, passes signals on and keeps its exit status"] =
    function()
  local probe = sys.run({"unshare", "--pid", "--fork", "--mount-proc", "true"})
  if not probe or probe.code ~= 0 then T.skip("unshare cannot make a pid namespace here") end
  local r = sys.run({"unshare", "--pid", "--fork", "--mount-proc", T.rlm, "-e", "os.exit(7)"},
                    {timeout = 10})
  T.eq(r.code, 7, r.stderr)
  local proc = assert(sys.spawn{argv = {"unshare", "--pid", "--fork", "--mount-proc", T.rlm, "-e", [[
local rlm, sys = require "rlm", require "rlm.sys"
for _ = 1, 5 do
  local i <close> = rlm.interpreter{}
  i:execute("x = 1")
end
local function count_zombies()
  local zombies = 0
  for _, name in ipairs(sys.list_dir("/proc")) do
    local stat = name:match("^%d+$") and sys.read_file("/proc/" .. name .. "/stat")
    if stat and stat:match("%) Z ") then zombies = zombies + 1 end
  end
  return zombies
end
-- orphans are reaped as they come: give a loaded machine time, not a fixed pause
local deadline = sys.now() + 20
local zombies = count_zombies()
while zombies > 0 and sys.now() < deadline do sys.sleep(0.05); zombies = count_zombies() end
local i = rlm.interpreter{}
i:start()
print(zombies .. " " .. i.sandbox.root)
io.stdout:flush()
i:execute("import time\ntime.sleep(100)")
]]}, stdin = "pipe", stderr = "pipe", env = host_env()})
  T.defer(function() proc:close() end)
  local line = assert(sys.read_line(proc, 60), proc:read("stderr"))
  local zombies, root = line:match("^(%d+) (%S+)$")
  T.eq(zombies, "0", "zombies left in the namespace after 5 sandboxes")
  sys.sleep(0.2)
  local kids = sys.read_file(("/proc/%d/task/%d/children"):format(proc:pid(), proc:pid()))
  local pid1 = T.truthy(kids and tonumber(kids:match("%d+")), "unshare's child, the namespace's PID 1")
  assert(sys.kill(pid1, "TERM"))   -- as `docker stop` does
  T.eq({sys.wait(proc, 30)}, {"exit", 143})
  T.contains(proc:read("stderr"), "interrupted (SIGTERM)")
  T.eq(sys.stat(root), nil, "the sandbox's folder is gone")
end

tests["the folder of an rlm killed by SIGKILL is removed by the next rlm; a live one's never"] = function()
  local tmp = T.tmpdir()
  local env = host_env{TMPDIR = tmp}
  local sleep = 'i:execute("import time\\ntime.sleep(100)")'
  local killed, killed_root, killed_pid = rlm_with_sandbox(sleep, env)
  local alive, alive_root, alive_pid = rlm_with_sandbox(sleep, env)
  T.truthy(sys.stat(killed_root), "a live rlm's folder is not taken for an orphan")
  killed:kill(9)
  T.eq({sys.wait(killed, 5)}, {"signal", 9})
  T.truthy(sys.stat(killed_root), "SIGKILL leaves the folder behind")
  local r = T.run_rlm({"exec", "print(1)"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  gone(killed_root, killed_pid, "SIGKILL, then another rlm")
  T.truthy(sys.stat(alive_root), "the live rlm's folder stays")
  T.eq(select(2, sys.wait(alive, 0.1)), "timeout", "and that rlm still runs")
  alive:kill(15)
  sys.wait(alive, 5)
  gone(alive_root, alive_pid, "SIGTERM")
  T.eq(sys.list_dir(tmp), {})
end

-- A sandbox's end does not wait for bwrap's exit: its folder is removed while the driver dies.
-- Code that keeps writing into the workspace until the last moment must not keep it.
tests["a sandbox whose code is still writing when it ends leaves no folder"] = function()
  for round = 1, 30 do
    local i = rlm.interpreter{}
    i:execute([[
import os, threading
def scribble():
    n = 0
    while True:
        n += 1
        d = '/home/daytona/workspace/d%d' % (n % 50)
        os.makedirs(d, exist_ok=True)
        with open('%s/f%d' % (d, n), 'w') as f:
            f.write('x')
for _ in range(4):
    threading.Thread(target=scribble, daemon=True).start()
]])
    sys.sleep(0.02)
    local root = i.sandbox.root
    T.truthy(#assert(sys.list_dir(i.sandbox.workspace)) > 0, "the code writes")
    -- half the rounds as an interrupted execute ends: the driver killed first, then the end
    if round % 2 == 0 then i.sandbox:kill_driver() end
    i:shutdown()
    T.eq(sys.stat(root), nil, "the sandbox's folder is left behind")
  end
end

-- Orphans (folders of rlms killed by SIGKILL) could fill the disk that staging needs: a start
-- that fails must still have removed them, or every later start fails the same way.
tests["a start that fails still removes the folders of rlms killed earlier"] = function()
  local tmp = T.tmpdir()
  local orphan = tmp .. "/rlm-sandbox.ORPHAN"
  assert(sys.mkdir_p(orphan .. "/workspace"))
  assert(sys.write_file(orphan .. "/workspace/big", ("x"):rep(1000)))
  -- one of an rlm from before the folder itself was the lock: a lock file inside
  assert(sys.mkdir_p(tmp .. "/rlm-sandbox.OLDONE/workspace"))
  assert(sys.write_file(tmp .. "/rlm-sandbox.OLDONE/.owner-lock", ""))
  -- ... and a live one of those, its lock file held
  assert(sys.mkdir_p(tmp .. "/rlm-sandbox.OLDLIVE/workspace"))
  local held <close> = assert(sys.lock(tmp .. "/rlm-sandbox.OLDLIVE/.owner-lock", true))
  -- and one still being made (empty: its lock is taken before anything goes in)
  assert(sys.mkdir_p(tmp .. "/rlm-sandbox.MAKING"))
  local r = T.run_rlm({"-e", "local i = require('rlm').interpreter{context_paths = {'/nonexistent/x'}}\n" ..
                             "print(pcall(i.execute, i, '1'))"}, {env = host_env{TMPDIR = tmp}})
  T.contains(r.stdout, "false")
  T.contains(r.stdout, "does not exist")
  local left = assert(sys.list_dir(tmp))
  table.sort(left)
  T.eq(left, {"rlm-sandbox.MAKING", "rlm-sandbox.OLDLIVE"},
       "the orphans, and the failed start's own folder, are gone; the live and the new stay")
end

tests["os.exit ends the sandboxes a script left open"] = function()
  for _, call in ipairs{"os.exit(3)", "os.exit(3, true)"} do
    -- exits on a line from the test: once the sandbox has been seen
    local proc, root, pid = rlm_with_sandbox("io.read('l') " .. call)
    proc:write("go\n")
    T.eq({sys.wait(proc, 5)}, {"exit", 3}, call)
    gone(root, pid, call)
  end
end

tests["rlm exec prints fields, stdout, --json and reads stdin"] = function()
  local r = T.run_rlm({"exec", "print('hi')"})
  T.eq(r.code, 0)
  T.eq(r.stdout, "hi\n")
  r = T.run_rlm({"exec", "-"}, {input = "import math\nSUBMIT(answer=math.factorial(15))\n"})
  T.eq(r.stdout, '{"answer":1307674368000}\n')
  r = T.run_rlm({"exec", "--json", "1/0"})
  T.eq(r.code, 1)
  local res = json.decode(r.stdout)
  T.eq(res.error, "ZeroDivisionError: division by zero")
  T.eq(res.exit, 1)
  r = T.run_rlm({"exec", "--timeout", "1", "while True: pass"})
  T.eq(r.code, 1)
  T.contains(r.stderr, "Timeout")
end

-- The driver runs from bytecode compiled once into the user's cache folder; a damaged or
-- unwritable cache only costs the compile, never a start. Each case is a fresh rlm process,
-- so nothing compiled earlier in this one hides the cache.
tests["the driver starts from cached bytecode; a damaged or unwritable cache is no failure"] = function()
  local cache = T.tmpdir()
  local probe = [[
import os
def link(fd):
    try:
        return os.readlink('/proc/self/fd/' + fd)
    except OSError:
        return ''
SUBMIT(loader='marshal.loads' in open('/proc/self/cmdline').read(),
       memfd=any('memfd:' in link(fd) for fd in os.listdir('/proc/self/fd')))]]
  local function run(cache_home)
    local r = T.run_rlm({"exec", probe}, {env = host_env{XDG_CACHE_HOME = cache_home}})
    T.eq(r.code, 0, "rlm exec: " .. r.stderr)
    return json.decode(r.stdout)
  end
  local function cached()
    local names = assert(sys.list_dir(cache .. "/rlm"))
    T.eq(#names, 1, "cache files")
    return cache .. "/rlm/" .. names[1]
  end
  T.eq(run(cache), {loader = true, memfd = false})
  local file = cached()
  local good = assert(sys.read_file(file))
  local sum, code = good:match("^(%x+)\n(.*)$")
  T.eq(sys.hash(code), sum, "the file carries the hash of its bytecode")
  -- Bytes flipped in the middle: the hash catches it, the driver is compiled again.
  local mid = #good // 2
  assert(sys.write_file(file, good:sub(1, mid - 1) .. string.char(good:byte(mid) ~ 0xff) .. good:sub(mid + 1)))
  T.eq(run(cache), {loader = true, memfd = false})
  T.eq(sys.read_file(cached()), good, "rewritten")
  -- A cache folder that cannot be made: the source is handed over instead.
  assert(sys.write_file(cache .. "/file", "x"))
  T.eq(run(cache .. "/file"), {loader = false, memfd = false})
end

-- The driver starts without site (python -S) and runs it at the first import that needs it:
-- packages in a site folder still import, and their .pth files still run.
tests["site folders and .pth files work though the driver starts without site"] = function()
  local i = interp{env = {PYTHONUSERBASE = "/home/daytona/workspace/base"}}
  local version = i:execute("import sys\nSUBMIT(v='%d.%d' % sys.version_info[:2])").v
  local dir = ("base/lib/python%s/site-packages/"):format(version)
  assert(i:upload(dir .. "probe_mod.py", "VALUE = 'from the user site'\n"))
  assert(i:upload(dir .. "probe.pth", "import os; os.environ['PROBE_PTH'] = 'ran'\n"))
  local out, run = i:execute("import sys\nbefore = 'site' in sys.modules\nimport probe_mod, os\n" ..
                             "SUBMIT(before=before, value=probe_mod.VALUE, pth=os.environ.get('PROBE_PTH'))")
  T.eq(run.error, nil)
  T.eq(out, {before = false, value = "from the user site", pth = "ran"})
end

tests["the sandbox's /etc: a few entries, read-only, read again at each start"] = function()
  local i = interp{}
  local out = i:execute([[
import os
entries = sorted(os.listdir('/etc'))
writable = [e for e in entries if os.access('/etc/' + e, os.W_OK)]
SUBMIT(entries=entries, writable=writable, passwd=open('/etc/passwd').read())]])
  T.eq(out.writable, {})
  T.contains(out.passwd, "daytona:x:1000:1000")
  for _, e in ipairs(out.entries) do
    T.truthy(({passwd = 1, group = 1, alternatives = 1, ssl = 1, localtime = 1, timezone = 1,
               hosts = 1, ["resolv.conf"] = 1, ["nsswitch.conf"] = 1, ["gai.conf"] = 1,
               ["host.conf"] = 1, protocols = 1, services = 1, ["mime.types"] = 1,
               ["ld.so.cache"] = 1, ["python3.11"] = 1, ["os-release"] = 1})[e], "unexpected /etc/" .. e)
  end
  local hosts = sys.read_file("/etc/hosts")
  local seen = i:execute("SUBMIT(hosts=open('/etc/hosts').read())")
  T.eq(seen.hosts, hosts)
end

-- A big string crosses each way without a copy on the host: rlm's peak memory stays under
-- 1.5 times the value (the bench times it; here the memory is the promise). A child rlm
-- measures itself, its peak reset once the value exists.
tests["a 64 MB value each way keeps rlm's peak memory under 1.5x the value"] = function()
  local dir = T.tmpdir()
  local script = dir .. "/big.lua"
  assert(sys.write_file(script, [[
local sys = require "rlm.sys"
local MB = 1024 * 1024
local function peak() return tonumber(sys.read_file("/proc/self/status"):match("VmHWM:%s*(%d+)")) * 1024 end
local function reset_peak()   -- "5" resets VmHWM (proc(5), clear_refs)
  collectgarbage(); collectgarbage()
  local f = assert(io.open("/proc/self/clear_refs", "w")); f:write("5"); f:close()
end
local i <close> = require("rlm").interpreter{limits = {submit = "128M", output = "128M"}}
i:execute("pass")
local big = ("a"):rep(64 * MB)
reset_peak()
local out = assert(i:execute("SUBMIT(n=len(v), head=v[:3])", {v = big}))
print(("IN %d %d %s"):format(peak(), out.n, out.head))
big = nil
reset_peak()
out = assert(i:execute("SUBMIT(s='b' * (64 * 1024 * 1024))"))
print(("BACK %d %d"):format(peak(), #out.s))]]))
  local r = T.run_rlm({"run", script}, {timeout = 120})
  T.eq(r.code, 0, r.stderr)
  local into, n, head = r.stdout:match("IN (%d+) (%d+) (%a+)")
  local back, m = r.stdout:match("BACK (%d+) (%d+)")
  T.eq({tonumber(n), head, tonumber(m)}, {64 << 20, "aaa", 64 << 20})
  local limit = 1.5 * (64 << 20)
  into, back = math.tointeger(into), math.tointeger(back)
  T.truthy(into < limit, ("peak %d MiB sending the value"):format(into >> 20))
  T.truthy(back < limit, ("peak %d MiB taking it back"):format(back >> 20))
end

return tests
