-- The attacker's tests of the local sandbox: each plays hostile code (or a hostile driver) and
-- checks, on the host, that the boundary held. tests/isolation/run runs this file as root and
-- again as uid 65534; `make test` runs that.
local T = require "support"
local sys = require "rlm.sys"
local json = require "rlm.json"
local async = require "rlm.async"
local http = require "rlm.http"
local rlm = require "rlm"

local tests = {}
local ROOT = sys.getuid() == 0

local MiB = 1 << 20

local function interp(opts)
  local i = rlm.interpreter(opts)
  T.defer(function() i:shutdown() end)
  return i
end

-- Runs code that must finish without a Python error; returns what it printed, parsed as JSON
-- when it printed JSON.
local function probe(i, code)
  local out, run = i:execute(code)
  T.eq(run.error, nil, "probe error: " .. tostring(run.traceback))
  local ok, v = pcall(json.decode, run.stdout)
  return ok and v or run.stdout, out
end

-- The host uid of the sandbox's Python, from /proc.
local function host_uid(pid)
  local status = assert(sys.read_file(("/proc/%d/status"):format(pid)))
  return tonumber(status:match("\nUid:%s*(%d+)"))
end

-- Runs fn while a task ticks every 20 ms; returns fn's results and the longest gap between
-- ticks, so a test can show the host stayed responsive.
local function while_ticking(fn)
  local last, worst, stop = sys.now(), 0, false
  local ticker = async.spawn(function()
    while not stop do
      async.sleep(0.02)
      local now = sys.now()
      worst = math.max(worst, now - last)
      last = now
    end
  end)
  local res = table.pack(fn())
  stop = true
  ticker:join()
  return worst, table.unpack(res, 1, res.n)
end

-- 1. Host root from inside ---------------------------------------------------------------------

tests["the code never runs as host root and cannot write a sysctl"] = function()
  local sysctl = "/proc/sys/fs/lease-break-time"
  local before = assert(sys.read_file(sysctl))
  local i = interp{}
  local r = probe(i, [[
import json, os
res = {}
for p in ["/proc/sys/fs/lease-break-time", "/proc/sys/kernel/core_pattern",
          "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger"]:
    try:
        fd = os.open(p, os.O_WRONLY)
        os.write(fd, b"46\n")
        res[p] = "WRITTEN"
    except OSError as e:
        res[p] = e.strerror
res["uid"] = os.getuid()
print(json.dumps(res))]])
  T.eq(assert(sys.read_file(sysctl)), before, "the host's lease-break-time")
  for path, what in pairs(r) do
    if path ~= "uid" then T.truthy(what ~= "WRITTEN", path .. " was written") end
  end
  T.eq(r.uid, 1000, "the code's own uid inside")
  local uid = host_uid(i:pid())
  T.truthy(uid ~= 0, "the sandbox's Python runs as host uid 0")
  if ROOT then
    T.truthy(uid >= 0x70000000 and uid < 0x70000000 + 65536, "a uid of the sandboxes' range: " .. uid)
  else
    T.eq(uid, sys.getuid(), "the host uid of the sandbox")
  end
end

tests["a sandbox uid of 0 is refused"] = function()
  if not ROOT then T.skip("only root can choose the sandbox's uid") end
  T.raises(function() rlm.interpreter{uid = 0} end, "must never run as host root")
end

-- 6. Kernel surface ----------------------------------------------------------------------------

tests["namespaces, mounts and risky kernel interfaces are closed; ordinary Python works"] = function()
  local i = interp{}
  local r = probe(i, [[
import ctypes, json, os, subprocess, threading, multiprocessing
libc = ctypes.CDLL(None, use_errno=True)
res = {}
for name, nr in [("mount", 165), ("bpf", 321), ("io_uring_setup", 425), ("keyctl", 250),
                 ("perf_event_open", 298), ("ptrace", 101), ("init_module", 175),
                 ("kexec_load", 246), ("unshare", 272), ("setns", 308), ("userfaultfd", 323)]:
    r = libc.syscall(nr, 0, 0, 0, 0, 0)
    res[name] = [r, ctypes.get_errno()]
p = subprocess.run(["unshare", "-Urm", "true"], capture_output=True)
res["unshare -Urm"] = p.returncode
status = dict(l.split(":", 1) for l in open("/proc/self/status"))
res["status"] = {k: status[k].strip() for k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}
t = threading.Thread(target=lambda: None); t.start(); t.join()
with multiprocessing.Pool(2) as pool:
    res["pool"] = pool.map(abs, [-1, -2])
pid = os.fork()
if pid == 0:
    os._exit(7)
res["fork"] = os.waitpid(pid, 0)[1] >> 8
res["sub"] = subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout
print(json.dumps(res))]])
  for _, name in ipairs{"mount", "bpf", "io_uring_setup", "keyctl", "perf_event_open", "ptrace",
                        "init_module", "kexec_load", "unshare", "setns", "userfaultfd"} do
    T.eq(r[name][1], -1, name .. " returned")
    T.truthy(r[name][2] == 1 or r[name][2] == 38, name .. ": EPERM or ENOSYS, got " .. r[name][2])
  end
  T.truthy(r["unshare -Urm"] ~= 0, "unshare -Urm must fail")
  T.eq(r.status, {CapEff = "0000000000000000", CapBnd = "0000000000000000", NoNewPrivs = "1",
                  Seccomp = "2"})
  T.eq(r.pool, {1, 2})
  T.eq(r.fork, 7)
  T.eq(r.sub, "ok\n")
end

-- vsock is not namespaced: a sandbox without network could reach the host's or a VM's vsock
-- services. Only the families Python uses (unix, inet, inet6, netlink) open; personality can
-- only be read (a persona without address randomisation would outlive exec).
tests["sockets of other families than unix, inet and netlink, and personality changes, are refused"] = function()
  for _, network in ipairs{false, true} do
    local i = interp{network = network}
    local r = probe(i, [[
import ctypes, json, socket
res = {}
for name, family, kind in [("vsock", 40, 1), ("packet", 17, 2), ("alg", 38, 5), ("bluetooth", 31, 1),
                           ("key", 15, 3), ("tipc", 30, 2), ("rds", 21, 5), ("xdp", 44, 3),
                           ("can", 29, 3), ("appletalk", 5, 2), ("x25", 9, 5), ("unspec", 0, 1),
                           ("high", 46, 1)]:
    try:
        socket.socket(family, kind).close()
        res[name] = "CREATED"
    except OSError as e:
        res[name] = e.errno
libc = ctypes.CDLL(None, use_errno=True)
res["persona"] = libc.syscall(135, 0xffffffff)
res["no_randomize"] = [libc.syscall(135, 0x0040000), ctypes.get_errno()]
res["high_bits"] = [libc.syscall(135, 0x80040000), ctypes.get_errno()]
res["after"] = libc.syscall(135, 0xffffffff)
res["linux"] = libc.syscall(135, 0)
opened = []
for family, kind in [(socket.AF_UNIX, 1), (socket.AF_INET, 1), (socket.AF_INET6, 2), (16, 3)]:
    socket.socket(family, kind).close()
    opened.append(family)
res["opened"] = opened
print(json.dumps(res))]])
    for _, name in ipairs{"vsock", "packet", "alg", "bluetooth", "key", "tipc", "rds", "xdp", "can",
                          "appletalk", "x25", "unspec", "high"} do
      T.eq(r[name], 1, ("network=%s: socket family %s (EPERM expected)"):format(network, name))
    end
    T.eq(r.no_randomize, {-1, 1}, "personality(ADDR_NO_RANDOMIZE)")
    T.eq(r.high_bits, {-1, 1}, "personality(0x80040000)")
    T.eq({r.persona, r.after, r.linux}, {0, 0, 0}, "the persona read, unchanged, and PER_LINUX set")
    T.eq(r.opened, {1, 2, 10, 16}, "the families Python needs")
  end
end

-- 2. Inherited descriptors ---------------------------------------------------------------------

-- What the code finds on every descriptor number: the readlink target of each open one, and
-- whether any of them is a socket it can use.
local FD_PROBE = [[
import json, os, socket, stat
seen, sockets = {}, []
for fd in range(0, 1024):
    try:
        st = os.fstat(fd)
    except OSError:
        continue
    try:
        seen[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        seen[fd] = "?"
    if stat.S_ISSOCK(st.st_mode):
        try:
            s = socket.socket(fileno=os.dup(fd))
            s.settimeout(1)
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
            sockets.append([fd, s.recv(100).decode("latin-1")])
        except OSError as e:
            sockets.append([fd, str(e)])
print(json.dumps({"fds": seen, "sockets": sockets}))]]

-- Only the driver's own: /dev/null on 0, its capture files, the three protocol pipes.
local function check_own_fds(r)
  T.eq(#r.sockets, 0, "sockets reached from inside: " .. json.encode(r.sockets))
  local n = 0
  for fd, target in pairs(r.fds) do
    n = n + 1
    local own = target == "/dev/null" or target:match("^/run/rlm/rlm%-driver%-") or
                target:match("^pipe:")
    T.truthy(own, ("fd %s inside points at %s"):format(fd, target))
  end
  T.truthy(n <= 8, "at most the driver's 8 descriptors, got " .. json.encode(r.fds))
end

tests["no descriptor of the host reaches the sandbox, keep-alive connections included"] = function()
  local leaked = assert(io.open("/etc/hostname"))   -- fopen: inheritable
  T.defer(function() leaked:close() end)
  local echo = T.server{"tests/standins/echo"}
  local res = assert(http.request{url = echo.url .. "/echo"})
  T.eq(res.status, 200, "the keep-alive connection is open")
  local i = interp{}
  check_own_fds(probe(i, FD_PROBE))
end

tests["a descriptor rlm inherits from its parent does not reach the sandbox"] = function()
  local code = FD_PROBE
  local r = assert(sys.run({"/bin/sh", "-c", 'exec 7</etc/hostname 9</etc/hostname; exec "$0" exec "$1"',
                            T.rlm, code}, {timeout = 60}))
  T.eq(r.code, 0, "rlm exec: " .. r.stderr)
  check_own_fds(json.decode(r.stdout))
end

-- 6. env reaches only the inside ---------------------------------------------------------------

tests["env reaches only the code: bwrap runs with a fixed environment"] = function()
  local marker = "rlm-env-marker-" .. sys.getpid()
  local i = interp{env = {LD_PRELOAD = "/nonexistent/rlm-preload.so", RLM_MARKER = marker}}
  local r = probe(i, "import json, os\nprint(json.dumps(dict(os.environ)))")
  T.eq(r.RLM_MARKER, marker)
  T.eq(r.LD_PRELOAD, "/nonexistent/rlm-preload.so")
  -- Every host-side process of the sandbox (the bwrap processes above the driver).
  local pid = i:pid()
  local ppid = tonumber(assert(sys.read_file(("/proc/%d/stat"):format(pid))):match("^%d+ %b() %a (%d+)"))
  local checked = 0
  while ppid and ppid ~= sys.getpid() and ppid > 1 do
    local environ = sys.read_file(("/proc/%d/environ"):format(ppid)) or ""
    local cmdline = sys.read_file(("/proc/%d/cmdline"):format(ppid)) or ""
    T.truthy(not environ:find(marker, 1, true), "bwrap's environment holds the code's env")
    T.truthy(not environ:find("LD_PRELOAD", 1, true), "bwrap's environment holds LD_PRELOAD")
    T.truthy(not cmdline:find(marker, 1, true), "the host's process list shows the code's env")
    checked = checked + 1
    ppid = tonumber(assert(sys.read_file(("/proc/%d/stat"):format(ppid))):match("^%d+ %b() %a (%d+)"))
  end
  T.truthy(checked >= 1, "found the bwrap process")
end

-- 3. Symlink race ------------------------------------------------------------------------------

tests["host file operations hold against code swapping a directory for a link"] = function()
  local outside = T.tmpdir()
  assert(sys.write_file(outside .. "/host-marker", "HOST-SECRET"))
  local i = interp{}
  -- A thread that swaps d (a directory with a decoy) and l (a link to the host folder) with
  -- renameat2(RENAME_EXCHANGE) for as long as the host works on d.
  probe(i, ([[
import ctypes, os, threading
os.makedirs("d", exist_ok=True)
open("d/decoy", "w").write("decoy")
if not os.path.islink("l"):
    os.symlink(%q, "l")
libc = ctypes.CDLL(None, use_errno=True)
swaps = [0]
stop = threading.Event()
def swap():
    while not stop.is_set():
        if libc.syscall(316, -100, b"d", -100, b"l", 2) == 0:
            swaps[0] += 1
threading.Thread(target=swap, daemon=True).start()]]):format(outside))
  local wrote, read, listed = 0, 0, 0
  for k = 1, 3000 do
    if pcall(i.upload, i, "d/f" .. k, "x") then wrote = wrote + 1 end
    T.eq(i:download("d/host-marker"), nil, "download reached the host's file")
    if i:download("d/decoy") == "decoy" then read = read + 1 end
    if k % 20 == 0 then
      local entries = i:files("/home/daytona/workspace/d")
      for _, e in ipairs(entries or {}) do
        T.truthy(not e.path:find("host-marker", 1, true), "files() listed the host's folder")
      end
      if entries then listed = listed + 1 end
    end
  end
  local swaps = probe(i, "stop.set()\nprint(swaps[0])")
  T.truthy(swaps > 100, "the swapper ran (" .. tostring(swaps) .. " swaps)")
  T.truthy(wrote > 0 and read > 0 and listed > 0,
           ("the host worked between swaps (%d writes, %d reads, %d listings)"):format(wrote, read, listed))
  T.eq(sys.list_dir(outside), {"host-marker"}, "files in the host folder")
  T.eq(sys.read_file(outside .. "/host-marker"), "HOST-SECRET")
end

tests["uploads belong to the sandbox's user, and links are never followed"] = function()
  local i = interp{}
  probe(i, "import os\nos.symlink('/etc', 'etc-link')\nos.symlink('/etc/passwd', 'pw')")
  T.contains(select(2, i:upload("etc-link/evil", "x")), "symbolic link")
  local passwd = sys.read_file("/etc/passwd")
  assert(i:upload("pw", "replaced"))                      -- replaces the link, not its target
  T.eq(sys.read_file("/etc/passwd"), passwd)
  T.eq(probe(i, "import os\nprint(os.path.islink('pw'), open('pw').read())"), "False replaced\n")
  local data, err = i:download("etc-link/passwd")
  T.eq(data, nil)
  T.contains(err, "symbolic link")
  T.eq(i:files("/home/daytona/workspace/etc-link"), nil)
  assert(i:upload("sub/dir/file.txt", "mine"))
  local r = probe(i, [[
import json, os
open("sub/dir/file.txt", "a").write(" and mine")
os.rename("sub/dir", "sub/dir2")
print(json.dumps(open("sub/dir2/file.txt").read()))]])
  T.eq(r, "mine and mine", "the code can change what the host uploaded")
end

-- The staged context is handed to the sandbox's uid in-process: a link planted in it is
-- handed over itself, and what it points at on the host keeps its owner.
tests["staging hands the context to the sandbox's uid without following links"] = function()
  if not ROOT then T.skip("only root hands folders to another uid") end
  local dir = T.tmpdir()
  local target = dir .. "/host-secret"
  assert(sys.write_file(target, "mine"))
  assert(sys.mkdir_p(dir .. "/ctx/deep/er"))
  assert(sys.write_file(dir .. "/ctx/deep/er/notes.txt", "notes"))
  T.eq(sys.run({"ln", "-s", target, dir .. "/ctx/deep/link"}).code, 0)
  local i = interp{context_paths = {dir .. "/ctx"}}
  local out = i:execute([[
import os
base = 'context/ctx/deep'
try:
    wrote = open(base + '/er/notes.txt', 'a').write(' and more')
except OSError as e:
    wrote = e.strerror
SUBMIT(owners=sorted({os.lstat(os.path.join(d, n)).st_uid for d, ds, fs in os.walk(base)
                      for n in ds + fs} | {os.stat(base).st_uid}), wrote=wrote)]])
  T.eq(out.owners, {1000}, "everything staged belongs to the sandbox's user")
  T.eq(out.wrote, "Read-only file system", "the context is read-only")
  T.eq(sys.stat(target).uid, 0, "the link's target keeps its owner")
end

-- 4. Resource limits ---------------------------------------------------------------------------

-- Runs a bomb under small limits; checks its error, that the host kept ticking, and that the
-- same interpreter still works.
local function bomb(limits, code, needle)
  local i = interp{limits = limits, execute_timeout = 60}
  local gap, _, run = while_ticking(function() return i:execute(code) end)
  T.truthy(run.error, "the bomb went off without an error: " .. run.stdout)
  T.contains(run.error, needle, "the error")
  T.truthy(gap < 0.5, ("the host stalled for %.2f s"):format(gap))
  local out = i:execute("SUBMIT(answer=1)")
  T.eq(out, {answer = 1}, "the interpreter after the bomb")
  return run, i
end

tests["a memory bomb stops at limits.memory with MemoryError"] = function()
  bomb({memory = "256M"}, "x = bytearray(300 * 2**20)", "MemoryError")
  bomb({memory = "256M"}, "xs = []\nwhile True:\n    xs.append(bytearray(2**20))", "MemoryError")
end

-- Waits until the processes of uid stop changing in number: when rlm is not root, the sandbox
-- shares the user's uid, and its process limit counts from the processes alive when it starts
-- (those of an earlier test still being reaped would leave it room they then free).
local function settle_processes(uid)
  local last, stable = -1, 0
  local deadline = sys.now() + 5
  while stable < 5 and sys.now() < deadline do
    local n = sys.count_processes(uid)
    stable = n == last and stable + 1 or 0
    last = n
    sys.sleep(0.05)
  end
end

tests["a fork bomb stops at limits.processes"] = function()
  settle_processes(sys.getuid())
  local run = bomb({processes = 32}, [[
import subprocess
procs = []
try:
    while True:
        procs.append(subprocess.Popen(["sleep", "30"]))
finally:
    print(len(procs))
    for p in procs:
        p.kill()
        p.wait()]], "Resource temporarily unavailable")
  local started = tonumber(run.stdout:match("%d+"))
  -- Not root, the sandbox shares the user's uid and its limit counts from what was alive at its
  -- start: tasks of earlier sandboxes still being reaped (threads are counted too, and /proc
  -- shows only processes) can leave a few more. Root gives the sandbox a uid of its own.
  local slack = sys.getuid() == 0 and 0 or 8
  T.truthy(started and started <= 32 + slack, "processes started before the wall: " .. run.stdout)
  -- and the wall is the limit, not a sandbox that can start nothing: bwrap, its init and the
  -- driver (and its threads) count too, so a few fewer than 32. Not root, the user's other
  -- processes that end or start meanwhile (other sandboxes of the same uid) move it further.
  T.truthy(started >= (sys.getuid() == 0 and 32 - 8 or 8),
           "processes started before the wall: " .. run.stdout)
end

-- A sandbox's files as another host user sees them: what `cat` run as uid 65534 reads.
local function read_as_nobody(path)
  return sys.run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat", path},
                 {timeout = 30})
end

tests["each sandbox of root's has a uid of its own, no other host user's"] = function()
  if not ROOT then T.skip("only root hands sandboxes uids of their own") end
  local a, b = interp{}, interp{}
  local ua = host_uid(assert(a:start():pid()))
  local ub = host_uid(assert(b:start():pid()))
  T.truthy(ua ~= ub, ("two sandboxes, one uid (%d)"):format(ua))
  for _, u in ipairs{ua, ub} do
    T.truthy(u ~= 0 and u ~= 65534 and u >= 1000, "a sandbox runs as uid " .. u)
  end
  -- a root-only file staged as context, and a file the code wrote: host `nobody` reads neither
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/secret.txt", "root only"))
  assert(sys.chmod(dir .. "/secret.txt", tonumber("600", 8)))
  local c = interp{context_paths = {dir .. "/secret.txt"}}
  probe(c, "open('mine.txt', 'w').write('written inside')\nprint(open('context/secret.txt').read())")
  for _, path in ipairs{c.sandbox.context .. "/secret.txt", c.sandbox.workspace .. "/mine.txt"} do
    T.eq(sys.read_file(path) ~= nil, true, "the file is there: " .. path)
    local r = read_as_nobody(path)
    T.truthy(r and r.code ~= 0 and r.stdout == "", "host uid 65534 read " .. path)
  end
end

-- A file others may read, in a folder only root may enter: its staged copy is as closed.
tests["a context file behind a root-only folder stays closed to host nobody"] = function()
  if not ROOT then T.skip("root's files, another user's eyes") end
  local dir = T.tmpdir() .. "/closed"
  assert(sys.mkdir_p(dir .. "/inner"))
  assert(sys.chmod(dir, tonumber("700", 8)))
  assert(sys.write_file(dir .. "/open.txt", "behind a closed folder"))
  assert(sys.chmod(dir .. "/open.txt", tonumber("644", 8)))
  assert(sys.write_file(dir .. "/inner/deep.txt", "deeper"))
  assert(sys.chmod(dir .. "/inner/deep.txt", tonumber("644", 8)))
  assert(sys.chmod(dir .. "/inner", tonumber("755", 8)))
  local c = interp{context_paths = {dir .. "/open.txt", dir .. "/inner"}}
  T.eq(probe(c, "print(open('context/open.txt').read(), open('context/inner/deep.txt').read())"),
       "behind a closed folder deeper\n")
  for _, path in ipairs{c.sandbox.context .. "/open.txt", c.sandbox.context .. "/inner/deep.txt"} do
    local r = read_as_nobody(path)
    T.truthy(r and r.code ~= 0 and r.stdout == "", "host uid 65534 read " .. path)
  end
end

-- What the code keeps in its volume is as closed to other host users as its workspace: a new
-- volume, and one made before it was (0755).
tests["a volume's files stay closed to host nobody"] = function()
  if not ROOT then T.skip("root's sandboxes, another user's eyes") end
  local top = T.tmpdir()
  assert(sys.chmod(top, tonumber("711", 8)))
  local saved = sys.getenv("XDG_DATA_HOME")
  T.defer(function() sys.setenv("XDG_DATA_HOME", saved) end)
  sys.setenv("XDG_DATA_HOME", top .. "/data")
  assert(sys.mkdir_p(top .. "/data/rlm/volumes/old"))
  assert(sys.chmod(top .. "/data/rlm/volumes/old", tonumber("755", 8)))
  for _, name in ipairs{"new", "old"} do
    local i = interp{volume_name = name}
    probe(i, "open('/home/daytona/memory/kept.txt', 'w').write('kept')\nprint(1)")
    local path = i.sandbox.memory .. "/kept.txt"
    T.eq(sys.read_file(path), "kept")
    local r = read_as_nobody(path)
    T.truthy(r and r.code ~= 0 and r.stdout == "", "host uid 65534 read " .. path)
  end
end

-- A second root-run rlm: its sandbox runs a fork bomb and holds its processes at the wall.
local HOLDER = [[
local rlm = require "rlm"
local i = rlm.interpreter{limits = {processes = 64}, timeout = 300}
local _, run = i:execute([=[
import subprocess
procs = []
try:
    while True:
        procs.append(subprocess.Popen(["sleep", "300"]))
except OSError:
    pass
print(len(procs))]=])
io.stderr:write("bomb holds " .. run.stdout)
print("READY http://127.0.0.1:1")
io.stdout:flush()
pcall(require("rlm.sys").sleep, 300)   -- until the test stops it
]]

tests["a TMPDIR or volume store another user can write is refused, and nothing is handed over"] = function()
  if not ROOT then T.skip("only root hands folders to another uid") end
  local theirs = T.tmpdir() .. "/theirs"
  assert(sys.mkdir_p(theirs))
  assert(sys.chmod(theirs, tonumber("755", 8)))
  T.eq(sys.run({"chown", "65534:65534", theirs}).code, 0)
  local saved = {TMPDIR = sys.getenv("TMPDIR"), XDG_DATA_HOME = sys.getenv("XDG_DATA_HOME")}
  T.defer(function() for k, v in pairs(saved) do sys.setenv(k, v) end end)
  local function refused(opts, needle)
    local ok, err = pcall(function()
      local i <close> = rlm.interpreter(opts)
      i:start()
    end)
    T.eq(ok, false, "a sandbox started under " .. theirs)
    T.contains(err, needle)
    T.contains(err, "belongs to uid 65534")
    T.truthy(not tostring(err):find("\n"), "one line: " .. tostring(err))
  end
  sys.setenv("TMPDIR", theirs)
  refused({}, "TMPDIR")
  sys.setenv("TMPDIR", saved.TMPDIR)
  sys.setenv("XDG_DATA_HOME", theirs)
  refused({volume_name = "planted"}, "XDG_DATA_HOME")
  T.eq(sys.list_dir(theirs), {}, "nothing made or handed over there")
end

-- Another host user (uid 65534) who may write a folder on the way to TMPDIR or the volume
-- store: TMPDIR and XDG_DATA_HOME are links of theirs, which they keep flipping between a
-- folder only root can change and one of their own, and in their own they keep swapping every
-- sandbox folder (and a volume) for a link to a victim folder of root's. rlm starts sandboxes
-- meanwhile; each starts in the safe folder or is refused, and the victim is never chowned,
-- chmoded, written or bound.
local RACER = [[
import os, sys, time
top, victim = sys.argv[1], sys.argv[2]
att, safe = top + "/att", top + "/safe"
def point(name, target):
    os.symlink(target, att + "/new-" + name)
    os.rename(att + "/new-" + name, att + "/" + name)
def plant(path):
    try:
        if not os.path.islink(path):
            os.rename(path, "%s/moved-%f" % (att, time.time()))
    except OSError:
        pass
    try:
        os.symlink(victim, path)
        return 1
    except OSError:
        return 0
flips = plants = 0
os.makedirs(att + "/evildata/rlm/volumes")
plants += plant(att + "/evildata/rlm/volumes/racevol")
point("tmp", safe)
seen = set()
while not os.path.exists(att + "/stop"):
    flips += 1
    point("data", [top + "/sdata", att + "/evildata"][flips % 2])
    for entry in sorted(set(os.listdir(safe)) - seen):
        # a sandbox folder rlm made through the link: the same name of ours, there
        seen.add(entry)
        plants += plant(att + "/evil/" + entry)
        for inner in ["/workspace", "/memory", "/workspace/context"]:
            plants += plant(safe + "/" + entry + inner)   # refused: root's folder
        point("tmp", att + "/evil")
        time.sleep(0.05)
        point("tmp", safe)
print(flips, plants)
]]

-- Starts a sandbox (with context, or a volume, by k) that writes into its folders; what it
-- found in them first. Raises what the start raised.
local function start_and_write(k, context)
  local opts = k % 3 == 1 and {context_paths = {context}} or k % 3 == 2 and {volume_name = "racevol"} or {}
  local i <close> = rlm.interpreter(opts)
  local out = i:execute([[
import os
found = sorted(os.listdir('.')) + sorted('memory/' + n for n in os.listdir('/home/daytona/memory'))
open('written-by-sandbox', 'w').write('x')
open('/home/daytona/memory/written-by-sandbox', 'w').write('x')
SUBMIT(found=found)]])
  return out.found
end

tests["another user racing links into the sandbox's folders never has a folder handed over"] = function()
  local top = T.tmpdir()
  local context = top .. "/context.txt"
  assert(sys.write_file(context, "context"))
  assert(sys.chmod(context, tonumber("644", 8)))
  local saved = {TMPDIR = sys.getenv("TMPDIR"), XDG_DATA_HOME = sys.getenv("XDG_DATA_HOME")}
  T.defer(function()   -- both, set or not (pairs would skip one that was not)
    sys.setenv("TMPDIR", saved.TMPDIR)
    sys.setenv("XDG_DATA_HOME", saved.XDG_DATA_HOME)
  end)
  local function normally(n)    -- the lower bound: sandboxes start and run as ever
    for k = 1, n do
      local found = start_and_write(k, context)
      T.truthy(#found == 0 or found[1] == "context" or found[1] == "memory/written-by-sandbox",
               "a fresh sandbox found: " .. json.encode(found))
    end
  end
  if not ROOT then
    normally(6)
    T.skip("only root hands folders to another uid; the lower bound ran")
  end
  local victim = top .. "/victim"
  for _, d in ipairs{"/safe", "/sdata", "/victim", "/att", "/att/evil"} do
    assert(sys.mkdir_p(top .. d))
    assert(sys.chmod(top .. d, tonumber("755", 8)))
  end
  assert(sys.write_file(victim .. "/keep", "victim\n"))
  T.eq(sys.run({"chown", "-R", "65534:65534", top .. "/att"}).code, 0)
  local racer = assert(sys.spawn{argv = {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
    "/usr/bin/python3", "-c", RACER, top, victim}, stdin = "null", stdout = "pipe", stderr = "inherit"})
  T.defer(function() racer:close() end)
  sys.setenv("TMPDIR", top .. "/att/tmp")
  sys.setenv("XDG_DATA_HOME", top .. "/att/data")
  for _ = 1, 3000 do   -- its first links, or its end
    if sys.stat(top .. "/att/tmp") or racer:status() then break end
    sys.sleep(0.01)
  end
  T.truthy(sys.stat(top .. "/att/tmp"), "the racer made its links")
  local started, refused, other = 0, 0, {}
  for k = 1, 30 do
    local ok, found = pcall(start_and_write, k, context)
    if ok then
      started = started + 1
      T.truthy(not table.concat(found, " "):find("keep", 1, true), "the victim was bound: " .. json.encode(found))
    elseif tostring(found):find("^refusing") then
      refused = refused + 1
    else
      other[#other + 1] = tostring(found)
    end
  end
  -- the same racer against sandboxes of a TMPDIR and store only root can change: all start
  sys.setenv("TMPDIR", top .. "/safe")
  sys.setenv("XDG_DATA_HOME", top .. "/sdata")
  normally(6)
  assert(sys.write_file(top .. "/att/stop", ""))
  T.eq(sys.wait(racer, 30), "exit", "the racer ends")
  local flips = tonumber(racer:read("stdout"):match("^(%d+)"))
  T.truthy(flips and flips > 10, "the racer flipped the links: " .. tostring(flips))
  T.eq(sys.list_dir(victim), {"keep"}, "entries of the victim folder")
  T.eq(sys.read_file(victim .. "/keep"), "victim\n")
  local st, kept = sys.stat(victim), sys.stat(victim .. "/keep")
  T.eq({st.uid, st.mode, kept.uid, kept.mode}, {0, tonumber("755", 8), 0, tonumber("644", 8)},
       "owner and mode of the victim folder and its file")
  T.eq(other, {}, "starts that failed otherwise than by a refusal")
  T.truthy(started >= 1, ("no sandbox started (%d refused)"):format(refused))
end

tests["a fork bomb at its wall in one rlm stops no sandbox of another"] = function()
  if not ROOT then T.skip("as an ordinary user, every sandbox is the user's own uid") end
  local holder = T.server({T.rlm, "run", T.lua_script(HOLDER)}, 120)
  T.truthy(holder.url, "the bomb holds its processes")
  local failures = {}
  for k = 1, 20 do
    local ok, err = pcall(function()
      local i <close> = rlm.interpreter{limits = {processes = 64}}
      local out = i:execute("SUBMIT(answer=1)")
      assert(out and out.answer == 1, "no answer")
    end)
    if not ok then failures[#failures + 1] = k .. ": " .. tostring(err) end
  end
  T.eq(failures, {}, "sandboxes that failed to start beside the bomb")
end

tests["open files and file size stop at their limits"] = function()
  bomb({open_files = 64}, "fs = [open('/dev/null') for _ in range(100)]", "Too many open files")
  bomb({file_size = "8M"}, "open('big', 'wb').write(b'x' * (9 << 20))", "File too large")
end

tests["/tmp and /dev/shm stop at limits.tmp"] = function()
  for _, dir in ipairs{"/tmp", "/dev/shm"} do
    bomb({tmp = "16M"}, ("open('%s/fill', 'wb').write(b'x' * (32 << 20))"):format(dir),
         "No space left on device")
  end
end

tests["a print flood stops at limits.output and never fills /tmp"] = function()
  local run = bomb({output = "1M"}, "while True:\n    print('x' * 1000)", "No space left on device")
  T.truthy(#run.stdout <= 10000 + 100, "stdout cut to max_output_chars")
end

tests["a shell command that prints without end is stopped at limits.output"] = function()
  local i = interp{limits = {output = "1M"}}
  local gap, r = while_ticking(function() return i:shell("yes", 30) end)
  T.truthy(#r.output < (1 << 20) + 200, ("kept %d bytes"):format(#r.output))
  T.contains(r.output, "limits.output")
  T.truthy(gap < 0.5, ("the host stalled for %.2f s"):format(gap))
end

tests["a workspace bomb stops at limits.workspace and the files stay"] = function()
  local run, i = bomb({workspace = "64M"}, [[
import os
for k in range(400):
    with open(f"fill{k}", "wb") as f:
        f.write(b"x" * (4 << 20))]], "No space left on device")
  local used = require("rlm.core.sandbox").usage(i.sandbox.workspace)
  T.truthy(used <= 64 * MiB, ("the workspace holds %d MiB"):format(used >> 20))
  T.truthy(used >= 56 * MiB, ("the workspace holds only %d MiB"):format(used >> 20))
  T.truthy(#i:files() > 0, "the files written before the stop stay")
  -- Cleaning up is allowed, and makes room again.
  local out = i:execute("import glob, os\nfor f in glob.glob('fill*'): os.remove(f)\nSUBMIT(answer=2)")
  T.eq(out, {answer = 2})
end

-- Root in a container without CAP_SYS_ADMIN can run bwrap (it makes a user namespace) but not
-- mount a tmpfs: the workspace is then measured while code runs, said once, and still stops
-- code that writes past it.
tests["without CAP_SYS_ADMIN the workspace is measured, and says so"] = function()
  if not ROOT then T.skip("dropping CAP_SYS_ADMIN is root's case") end
  local script = T.tmpdir() .. "/ws.lua"
  assert(sys.write_file(script, [[
local rlm = require "rlm"
local i <close> = rlm.interpreter{limits = {workspace = "8M"}}
local _, first = i:execute("print(6 * 7)")
io.write(first.stdout)
local _, run = i:execute("open('big', 'wb').write(b'x' * (32 << 20))\nimport time; time.sleep(2)")
print(run.error)
]]))
  local r = assert(sys.run({"setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin",
                            T.rlm, "run", script}, {timeout = 120}))
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "42\n")
  T.contains(r.stdout, "LimitError: the code wrote")
  T.contains(r.stdout, "limits.workspace")
  local said = select(2, r.stderr:gsub("limits.workspace is measured while code runs", ""))
  T.eq(said, 1, r.stderr)
end

tests["a repository counts against limits.workspace; a context does not"] = function()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/small"))
  assert(sys.write_file(dir .. "/small/data", ("x"):rep(3 * MiB)))
  assert(sys.write_file(dir .. "/big.txt", ("y"):rep(8 * MiB)))
  local i = interp{limits = {workspace = "4M"}, repo_url = dir .. "/small",
                   context_paths = {dir .. "/big.txt"}}
  T.eq(probe(i, "import os\nprint(os.path.getsize('repo/data'), os.path.getsize('context/big.txt'))"),
       ("%d %d\n"):format(3 * MiB, 8 * MiB))
  -- The host reaches the context where it lies, on disk: listed, read, never written.
  local listed = {}
  for _, e in ipairs(assert(i:files())) do listed[e.path] = e.size end
  T.eq(listed["/home/daytona/workspace/context/big.txt"], 8 * MiB)
  T.eq(listed["/home/daytona/workspace/repo/data"], 3 * MiB)
  T.eq(#assert(i:download("context/big.txt", 0, 4)), 4)
  local wrote, why = i:upload("context/new.txt", "x")
  T.eq(wrote, nil)
  T.contains(why, "read-only")
  assert(sys.write_file(dir .. "/small/more", ("x"):rep(2 * MiB)))
  local ok, err = pcall(function() interp{limits = {workspace = "4M"}, repo_url = dir .. "/small"}:start() end)
  T.eq(ok, false, "a 5 MiB repository staged under a 4 MiB limit")
  T.contains(err, "limits.workspace")
end

-- Another spelling of a context path (./context, context/.) names the same read-only folder:
-- not the empty folder beneath its mount on the workspace's tmpfs, which the code never sees.
tests["the context is read-only and the same however its path is spelled"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/c.txt", "context bytes"))
  local i = interp{context_paths = {dir .. "/c.txt"}}
  i:start()
  for _, path in ipairs{"./context/new.txt", "context/./new.txt", "./context"} do
    local wrote, why = i:upload(path, "x")
    T.eq(wrote, nil, "uploaded " .. path)
    T.contains(why, "read-only")
  end
  for _, path in ipairs{"./context/c.txt", "context/./c.txt", "/home/daytona/workspace/./context/c.txt"} do
    T.eq(i:download(path, 0, 100), "context bytes", path)
  end
  local listed = {}
  for _, e in ipairs(assert(i:files("./context"))) do listed[#listed + 1] = e.path end
  T.eq(listed, {"/home/daytona/workspace/context/c.txt"})
  T.eq(probe(i, "import os\nprint(sorted(os.listdir('context')))"), "['c.txt']\n")
end

-- A context path that ends in . or .. (relative, or not) is staged under the name of the folder
-- it names, inside context/: never beside it, in the sandbox's own folder.
tests["a context path ending in . or .. is staged inside context/"] = function()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/outer/inner"))
  assert(sys.write_file(dir .. "/outer/inner/f", "deep"))
  assert(sys.write_file(dir .. "/outer/g", "shallow"))
  local i = interp{context_paths = {dir .. "/outer/inner/..", dir .. "/outer/inner/."}}
  T.eq(probe(i, [[
import json
print(json.dumps([open(p).read() for p in ("context/outer/g", "context/outer/inner/f", "context/inner/f")]))]]),
       {"shallow", "deep", "deep"})
  local names = sys.list_dir(i.sandbox.root)
  table.sort(names)
  T.eq(names, {"context", "files"}, "what the sandbox's folder holds")
end

-- What the sandbox's workspace and memory hold, counted in blocks (st_blocks: a sparse or
-- preallocated file counts what it takes, not its size).
local function held(i)
  return require("rlm.core.sandbox").usage(i.sandbox.workspace) +
         require("rlm.core.sandbox").usage(i.sandbox.memory)
end

tests["fallocate past limits.workspace fails within it, and the session goes on"] = function()
  -- fallocate grows a file by 2 GiB in one call (file_size lets it reach the file system); -n
  -- keeps the file's size, so no size limit sees it
  local i = interp{limits = {workspace = "64M", file_size = "4G"}, execute_timeout = 60}
  local _, run = i:execute([[
import subprocess
for args in (["-l", "2G", "big"], ["-n", "-l", "2G", "big"], ["-l", "2G", "/home/daytona/memory/m"]):
    r = subprocess.run(["fallocate", *args], capture_output=True, text=True)
    print(r.returncode, r.stderr.strip())]])
  T.eq(run.error, nil, "the block itself went on")
  local lines = {}
  for line in run.stdout:gmatch("[^\n]+") do lines[#lines + 1] = line end
  T.eq(#lines, 3, run.stdout)
  for _, line in ipairs(lines) do
    T.truthy(not line:match("^0 "), "fallocate succeeded: " .. line)
    T.contains(line, "No space left on device")
  end
  T.truthy(held(i) <= 64 * MiB, ("%d MiB landed"):format(held(i) >> 20))
  -- Up to just under the limit works, sparse or not.
  local got = probe(i, [[
import os
os.posix_fallocate(os.open("pre", os.O_WRONLY | os.O_CREAT), 0, 30 << 20)
with open("plain", "wb") as f:
    f.write(b"x" * (30 << 20))
print(sum(os.stat(n).st_blocks * 512 for n in ("pre", "plain")) >> 20)]])
  T.eq(got, 60)
  T.eq(i:execute("SUBMIT(answer=1)"), {answer = 1})
end

-- A writer the code leaves behind: it starts writing once its block has returned, and goes on
-- until the disk refuses it (or it has written far past the limit).
local LEFT_BEHIND = [[
import subprocess, sys
subprocess.Popen([sys.executable, "-c", """
import os, time
time.sleep(1)
chunk = b"x" * (1 << 20)
for k in range(256):
    try:
        with open(f"late{k}", "wb") as f:
            f.write(chunk)
    except OSError:
        pass
open("writer-done", "w").close()
"""], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("started")]]

tests["a writer that outlives its block stops at limits.workspace and is reported"] = function()
  local i = interp{limits = {workspace = "64M"}, execute_timeout = 60}
  T.eq(probe(i, LEFT_BEHIND), "started\n")
  local deadline = sys.now() + 120
  while not sys.stat(i.sandbox.workspace .. "/writer-done") and sys.now() < deadline do
    sys.sleep(0.2)
  end
  T.truthy(sys.stat(i.sandbox.workspace .. "/writer-done"), "the writer ended")
  -- The bound: the limit, and one 4 KiB block of slack.
  local used = held(i)
  T.truthy(used <= 64 * MiB + 4096, ("%d MiB landed past a 64 MiB limit"):format(used >> 20))
  T.truthy(used >= 56 * MiB, ("the writer wrote only %d MiB"):format(used >> 20))
  local _, run = i:execute("print(len([n for n in __import__('os').listdir() if n.startswith('late')]))")
  T.eq(run.error, nil)
  T.contains(run.stderr, "limits.workspace", "the host reports the full workspace")
  T.eq(i:execute("SUBMIT(answer=1)"), {answer = 1})
end

-- 5. The host's own memory ---------------------------------------------------------------------

-- Python defining writable_pipes(): the pipes the driver writes to the host, in fd order.
local WRITABLE_PIPES = [[
import fcntl, os, stat
def writable_pipes():
    for fd in range(3, 1024):   # the driver keeps its own descriptors high
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and \
                    fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:
                yield fd
        except OSError:
            pass
]]

-- Peak RSS of a child rlm that runs script; the script's stdout comes back too.
local function child_peak(script)
  local path = T.tmpdir() .. "/flood.lua"
  assert(sys.write_file(path, "local WRITABLE_PIPES = " .. ("%q"):format(WRITABLE_PIPES) .. "\n" ..
                              script .. [[

local status = require("rlm.sys").read_file("/proc/self/status")
print("VmHWM " .. status:match("VmHWM:%s*(%d+)"))]]))
  local r = assert(sys.run({T.rlm, "run", path}, {timeout = 180}))
  T.eq(r.code, 0, "the flooded rlm: " .. r.stderr:sub(1, 2000))
  return tonumber(r.stdout:match("VmHWM (%d+)")) * 1024, r.stdout
end

tests["a 1 GB flood on each of the driver's descriptors leaves rlm's memory flat"] = function()
  local peak, out = child_peak([[
local i <close> = require("rlm").interpreter{}
-- The driver's real stderr and its protocol descriptor are the pipes it writes; it dups stderr
-- first (driver.py main), so the lower one is stderr, flooded from a thread (rlm reads it only
-- so fast, so it blocks) while the protocol is flooded.
local _, run = i:execute(WRITABLE_PIPES .. [=[
import threading
chunk = b"x" * (1 << 20)
def flood(fd):
    for _ in range(1024):
        os.write(fd, chunk)
stderr, protocol = writable_pipes()
threading.Thread(target=flood, args=(stderr,), daemon=True).start()
flood(protocol)
]=])
print("ERROR " .. tostring(run.error))
print("LOST " .. tostring(run.state_lost))
local after = i:execute("SUBMIT(answer=5)")
print("AFTER " .. tostring(after and after.answer))]])
  T.contains(out, "ERROR SandboxError", "the flood's run.error")
  T.contains(out, "LOST true")
  T.contains(out, "AFTER 5", "the interpreter after the flood")
  T.truthy(peak < 100 << 20, ("rlm's peak RSS was %d MiB"):format(peak >> 20))
end

-- The driver's real stderr is the code's to write too (it keeps only the last 64 KiB): a block
-- that floods it for its whole length must not keep rlm reading at a full core meanwhile.
tests["a stderr flood through a block costs rlm little CPU, and the last words still come"] = function()
  local _, out = child_peak([[
local sys = require "rlm.sys"
local i <close> = require("rlm").interpreter{}
i:execute("SUBMIT(answer=0)")
local cpu, wall = sys.cpu_time(), sys.now()
local _, run = i:execute(WRITABLE_PIPES .. [=[
import time
err = list(writable_pipes())[0]
chunk = b"e" * 65536
end = time.monotonic() + 3
while time.monotonic() < end:
    os.write(err, chunk)
os.write(err, b"LAST WORDS\n")
os._exit(3)
]=])
print(("SHARE %.3f"):format((sys.cpu_time() - cpu) / (sys.now() - wall)))
print("WALL " .. (sys.now() - wall))
print("ERROR " .. tostring(run.error))
print("AFTER " .. tostring(i:execute("SUBMIT(answer=5)").answer))]])
  local share = tonumber(out:match("SHARE ([%d.]+)"))
  T.truthy(share and share < 0.05, "rlm's share of a core while the block flooded stderr: " .. out)
  T.truthy(tonumber(out:match("WALL ([%d.]+)")) >= 3, "the block ran its length: " .. out)
  T.contains(out, "LAST WORDS", "the driver's last words in the error")
  T.contains(out, "AFTER 5", "the interpreter after the flood")
end

-- Sends `line` on every pipe the driver writes to the host, then ends the driver, as hostile
-- code may: the host reads the forged event where it expects the real one.
local function forge(i, line)
  return i:execute(WRITABLE_PIPES .. ("for fd in writable_pipes():\n    os.write(fd, %q.encode())\nos._exit(0)")
                   :format(line .. "\n"))
end

-- Executes until the interpreter answers again (a forged event may cost one restart).
local function recovers(i)
  for _ = 1, 3 do
    local out = i:execute("SUBMIT(answer=3)")
    if out and out.answer == 3 then return true end
  end
  return false
end

tests["a forged done event is cut to max_output_chars on the host"] = function()
  local i = interp{max_output_chars = 1000}
  local forged = json.encode{ev = "done", id = 1, stdout = ("F"):rep(2000000), stderr = "",
                             submitted = json.null}
  local _, run = forge(i, forged)
  T.truthy(run.stdout:find("FFFF", 1, true), "the forged event was taken")
  T.truthy(#run.stdout <= 1000 + 100, ("run.stdout is %d characters"):format(#run.stdout))
  T.truthy(recovers(i), "the interpreter answers again")
end

tests["a malformed event restarts the driver with a clear error"] = function()
  for _, line in ipairs{'{"ev":"done","id":1,"stdout":12345}', '{"ev":"call","id":1,"kind":"rm_rf"}',
                        '{"ev":"done","id":1,"submitted":"not an object"}', 'not json at all'} do
    local i = interp{}
    local _, run = forge(i, line)
    T.truthy(run.error and run.error:match("^SandboxError"), line .. ": " .. tostring(run.error))
    T.eq(run.state_lost, true)
    T.truthy(recovers(i), "the interpreter answers again after " .. line)
  end
end

-- Payloads (raw bytes after a line) are announced by the driver, that is by whatever code can
-- write to its pipe: an announcement past limits.submit, a malformed one, one cut short by the
-- driver's end, or one with no fields to go to is a protocol fault, never an allocation of
-- what it claims or a hang.
tests["forged payload announcements are protocol faults"] = function()
  local done = '{"ev":"done","id":1,"stdout":"","stderr":"","submitted":%s,"payloads":%s}'
  for _, forged in ipairs{
      done:format("{}", '[{"name":"x","bytes":100000000000}]'),
      done:format("{}", '[{"name":"x","bytes":-1}]'),
      done:format("{}", '[{"name":7,"bytes":1}]'),
      done:format("{}", '"not a list"'),
      done:format("{}", '[{"name":"x","bytes":1000}]') .. "\nonly this much",
      done:format("null", '[{"name":"x","bytes":1}]') .. "\nx"} do
    local i = interp{limits = {submit = "1M"}}
    local t0 = sys.now()
    local _, run = forge(i, forged)
    T.truthy(run.error and run.error:match("^SandboxError"), forged .. ": " .. tostring(run.error))
    T.eq(run.state_lost, true)
    T.truthy(sys.now() - t0 < 10, "the host waited for bytes that never came")
    T.truthy(recovers(i), "the interpreter answers again after " .. forged)
  end
end

-- What held before and must keep holding -------------------------------------------------------

tests["no network, no host files, no host processes, no keys"] = function()
  sys.setenv("OPENAI_API_KEY", "sk-host-only-secret")
  T.defer(function() sys.setenv("OPENAI_API_KEY", nil) end)
  local echo = T.server{"tests/standins/echo"}
  local port = tonumber(echo.url:match(":(%d+)$"))
  local i = interp{}
  local r = probe(i, ([[
import json, os, socket
res = {}
def attempt(name, fn):
    try:
        fn()
        res[name] = "CONNECTED"
    except OSError as e:
        res[name] = e.__class__.__name__
def tcp():
    socket.create_connection(("127.0.0.1", %d), timeout=2)
def tcp6():
    socket.create_connection(("::1", %d), timeout=2)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"x", ("8.8.8.8", 53))
    s.settimeout(1)
    s.recv(10)
def abstract():
    s = socket.socket(socket.AF_UNIX)
    s.connect("\0rlm-isolation-test")
attempt("tcp", tcp); attempt("tcp6", tcp6); attempt("udp", udp); attempt("abstract", abstract)
res["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
res["files"] = [p for p in ["/root", "/etc/shadow", "/home/daytona/.ssh", %q] if os.path.exists(p)]
res["keys"] = [k for k in os.environ if "KEY" in k]
print(json.dumps(res))]]):format(port, port, T.rlm))
  for _, k in ipairs{"tcp", "tcp6", "udp", "abstract"} do
    T.truthy(r[k] ~= "CONNECTED", k .. " reached the host")
  end
  T.truthy(#r.pids <= 6, "processes visible inside: " .. json.encode(r.pids))
  T.eq(r.files, {}, "host paths visible inside")
  T.eq(r.keys, {}, "keys inside")
end

-- Attacks on the raw payloads, the timer, the bytecode cache and staging (a review) ---------

-- Byte counts that sum past 2^64 would wrap to a small total in Lua's integers: each is checked
-- against what is left of limits.submit, so the host reads none of them (the first is 8 MB,
-- eight times the limit) and execute gives a SandboxError, never a raised "out of memory".
tests["payload sizes that wrap around are a protocol fault, not past limits.submit"] = function()
  local i = interp{limits = {submit = "1M"}}
  local big = 8000000
  local line = json.encode{ev = "done", id = 1, stdout = "", stderr = "", submitted = {}}
  line = line:sub(1, -2) .. (',"payloads":[{"name":"a","bytes":%d},{"name":"b","bytes":%s},' ..
    '{"name":"c","bytes":%d}]}'):format(big, "9223372036854775807",
    math.maxinteger - big + 2)                     -- 2^63 + 1 - big: the three sum to 2^64
  -- Writes the line, then the 8 MB of payload a, on every pipe the driver writes.
  local code = WRITABLE_PIPES .. ([[
line = %q.encode() + b"\n"
body = b"x" * %d
for fd in writable_pipes():
    os.write(fd, line)
    os.write(fd, body)
os._exit(0)
]]):format(line, big)
  local ok, out, run = pcall(i.execute, i, code)
  T.truthy(ok, "execute raised: " .. tostring(out))
  T.truthy(run.error and run.error:match("^SandboxError"), tostring(run.error))
end

-- A SUBMIT far past limits.submit is refused before its JSON is made: each character of this
-- one would be escaped to six, 1.8 GB of text the sandbox's memory limit has no room for (and
-- 10 GB of it took half a minute to encode before the cap was looked at).
tests["a SUBMIT far past limits.submit is refused before it is encoded"] = function()
  local i = interp{limits = {submit = "1M", memory = "1G"}}
  local _, run = i:execute("SUBMIT(answer=['\\u00e9' * (300 << 20)])")
  T.truthy(run.error and run.error:find("over the limit of 1048576 bytes (limits.submit)", 1, true),
           "the error: " .. tostring(run.error))
  local out = i:execute("SUBMIT(answer=['\\u00e9' * 1000])")   -- the lower bound
  T.eq(out, {answer = {("\u{e9}"):rep(1000)}})
end

-- Payloads that come one byte at a time, each just in time for a timeout of its own, must not
-- keep the host waiting past execute_timeout (or max_time): the event and its payloads share
-- one deadline.
tests["a drip-fed payload announcement cannot outlast execute_timeout"] = function()
  local i = interp{execute_timeout = 1}
  local n = 8
  local payloads = {}
  for k = 1, n do payloads[k] = ('{"name":"p%d","bytes":1}'):format(k) end
  local line = '{"ev":"done","id":1,"stdout":"","stderr":"","submitted":{},"payloads":[' ..
               table.concat(payloads, ",") .. ']}'
  local code = WRITABLE_PIPES .. ([[
import signal, time
signal.signal(signal.SIGALRM, signal.SIG_IGN)   # the driver's own timer no longer stops this
fds = list(writable_pipes())
for fd in fds:
    os.write(fd, %q.encode() + b"\n")
for _ in range(%d):
    time.sleep(0.9)
    for fd in fds:
        os.write(fd, b"x")
os._exit(0)
]]):format(line, n)
  local t0 = sys.now()
  local _, run = i:execute(code)
  local took = sys.now() - t0
  T.truthy(took < 4, ("a 1 s execute took %.1f s (error: %s)"):format(took, tostring(run.error)))
end

-- The driver leaves a block's timer to run out after the block: it must fire into the driver's
-- own handler, not into one the block left (here one raising, a common pattern for a timeout
-- of one's own), which would kill the driver between blocks and lose the state.
tests["a block's timer does not fire after the block"] = function()
  local i = interp{}
  local _, run = i:execute([[
import signal
def mine(*args):
    raise TimeoutError("my own timeout")
signal.signal(signal.SIGALRM, mine)
x = 42
]], nil, {timeout = 0.5})
  T.eq(run.error, nil)
  async.sleep(1.0)
  local out, run2 = i:execute("SUBMIT(answer=x)")
  T.eq(run2.state_lost, false, "state lost: " .. tostring(run2.error))
  T.eq(out and out.answer, 42)
end

-- The driver's bytecode is checked by an FNV hash that anyone can compute: whoever could write
-- the cache folder would run code as the driver of every later sandbox (and see every variable
-- and prompt). A folder others may write (XDG_CACHE_HOME on a shared /tmp, a user's home under
-- sudo -E) is not used: the source is.
tests["a driver cache folder others can write is not trusted"] = function()
  local python = "/usr/bin/python3"
  local host = require "rlm.core.host"
  local source = host.resource("lua/rlm/driver.py")
  local real = sys.realpath(python)
  local st = sys.stat(real)
  local name = ("driver-%s.pyc"):format(
    sys.hash(table.concat({host.digest("lua/rlm/driver.py"), real, st.size, st.mtime}, "\0")))
  local planted = "import os\nos.environ['RLM_PLANTED'] = 'yes'\n" .. source
  local r = assert(sys.run({python, "-I", "-S", "-c", "import marshal,sys;sys.stdout.buffer.write(" ..
    "marshal.dumps(compile(sys.stdin.buffer.read(),'<rlm-driver>','exec')))"}, {input = planted}))
  -- Whether the planted driver ran, from a cache folder with the given mode.
  local function planted_ran(mode)
    local dir = T.tmpdir()
    local folder = dir .. "/rlm"
    assert(sys.mkdir_p(folder))
    assert(sys.chmod(folder, tonumber(mode, 8)))
    assert(sys.write_file(folder .. "/" .. name, sys.hash(r.stdout) .. "\n" .. r.stdout))
    local env = sys.environ()
    env.XDG_CACHE_HOME = dir
    local res = T.run_rlm({"exec", "import os; print(os.environ.get('RLM_PLANTED'))"}, {env = env})
    T.eq(res.code, 0, res.stderr)
    return res.stdout:find("yes", 1, true) ~= nil
  end
  -- The control: in a folder of rlm's own, the file under that name is the driver that runs.
  T.truthy(planted_ran("700"), "the planted file is not at the name rlm reads: the test is stale")
  T.truthy(not planted_ran("1777"), "the planted driver ran from a folder others can write")
end

-- The host removes a sandbox's folder while its code may still run (it does not wait for the
-- code's end). Removal by path would follow a link the code put where a folder it emptied
-- was, into any host folder: rlm (root, often) deleting host files. The code here swaps the
-- folder being emptied for a link to a host folder as soon as the first entries go.
tests["code that swaps its emptied folder for a link cannot steer the host's removal"] = function()
  local canary = T.tmpdir() .. "/host-folder"
  for round = 1, 2 do
    assert(sys.mkdir_p(canary))
    assert(sys.write_file(canary .. "/victim", "host file\n"))
    local i = rlm.interpreter{}
    local _, run = i:execute([==[
import os, time
W = '/home/daytona/workspace'
os.makedirs(W + '/a')
for n in range(4000):
    open('%s/a/f%05d' % (W, n), 'w').close()
open(W + '/a/victim', 'w').close()
first = [W + '/a/' + n for n in os.listdir(W + '/a')[:3]]
if os.fork() == 0:
    while True:
        if not all(os.path.lexists(p) for p in first):
            os.rename(W + '/a', W + '/a_real')
            os.symlink(TARGET, W + '/a')
            os._exit(0)
time.sleep(0.1)
]==], {TARGET = canary})
    T.eq(run.error, nil)
    local root = i.sandbox.root
    i:shutdown()
    T.eq(sys.read_file(canary .. "/victim"), "host file\n", "round " .. round .. ": a host file was deleted")
    T.eq(sys.stat(root), nil, "the sandbox's folder is left behind")
  end
end

-- As an ordinary user the workspace and what the code makes in it are the user's own, and the
-- code may take every permission off them: rlm still removes them all when the sandbox ends.
tests["code that takes the permissions off its folders leaves no sandbox folder behind"] = function()
  local i = rlm.interpreter{}
  local _, run = i:execute([[
import os
os.makedirs('a/b/c')
open('a/b/c/f', 'w').write('x')
os.makedirs('readonly/d')
open('readonly/g', 'w').write('y')
os.chmod('a/b', 0)
os.chmod('a', 0o100)
os.chmod('readonly', 0o500)
os.makedirs('/home/daytona/memory/closed/x')
os.chmod('/home/daytona/memory/closed', 0)
os.chmod('.', 0)
]])
  T.eq(run.error, nil)
  local root = i.sandbox.root
  T.truthy(sys.stat(i.sandbox.workspace), "the workspace is there before the end")
  i:shutdown()
  T.eq(sys.stat(root), nil, "the sandbox's folder is left behind")
end

-- A local repository cloned with git's hard links would share .git/objects' inodes with the
-- host's repository; handed to the sandbox's uid, they could be chmod-ed and rewritten. The
-- clone makes copies, and files with other links are never handed over.
tests["a staged repository shares no inode with the host's"] = function()
  if not ROOT then T.skip("needs root (the sandbox's uid differs from rlm's)") end
  local src = T.tmpdir() .. "/repo"
  assert(sys.mkdir_p(src))
  assert(sys.write_file(src .. "/README", "host content\n"))
  for _, argv in ipairs{{"git", "init", "-q", src}, {"git", "-C", src, "add", "README"},
                        {"git", "-C", src, "-c", "user.name=t", "-c", "user.email=t@t",
                         "commit", "-qm", "x"}} do
    local r = assert(sys.run(argv))
    assert(r.code == 0, r.stderr)
  end
  local i = interp{repo_url = src}
  local r = probe(i, [[
import json, os
hit = []
for d, _, files in os.walk("/home/daytona/workspace/repo/.git/objects"):
    for f in files:
        p = os.path.join(d, f)
        st = os.stat(p)
        if st.st_nlink > 1 and st.st_uid == os.getuid():
            os.chmod(p, 0o644)
            with open(p, "ab") as fh:
                fh.write(b"sandbox was here")
            hit.append(p)
print(json.dumps(hit))
]])
  T.eq(r, {}, "object files shared with the host's repository, now the sandbox's")
  local r2 = assert(sys.run({"git", "-C", src, "fsck", "--full"}))
  T.eq(r2.code, 0, "the host's repository after the sandbox: " .. r2.stderr:sub(1, 300))
end

-- repo_ref reaches git checkout on the host, as rlm's user (root, often): one that begins with
-- '-' would be an option, and --pathspec-from-file=FILE puts FILE's lines in the error.
tests["a repo_ref that is an option is refused before git sees it"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/secret", "host secret line\n"))
  local src = dir .. "/repo"
  assert(sys.mkdir_p(src))
  assert(sys.write_file(src .. "/README", "x\n"))
  for _, argv in ipairs{{"git", "init", "-q", src}, {"git", "-C", src, "add", "README"},
                        {"git", "-C", src, "-c", "user.name=t", "-c", "user.email=t@t",
                         "commit", "-qm", "x"}} do
    local r = assert(sys.run(argv))
    assert(r.code == 0, r.stderr)
  end
  local ok, err = pcall(function()
    interp{repo_url = src, repo_ref = "--pathspec-from-file=" .. dir .. "/secret"}:start()
  end)
  T.eq(ok, false)
  T.truthy(not tostring(err):find("host secret", 1, true), err)
  T.contains(err, "repo_ref")
  -- an ordinary ref still checks out
  T.eq(probe(interp{repo_url = src, repo_ref = "HEAD"}, "print(open('repo/README').read())"), "x\n\n")
end

return tests
