local T = require "support"
local sys = require "rlm.sys"

local tests = {}

tests["clock, env and files"] = function()
  local a = sys.now()
  sys.sleep(0.05)
  local d = sys.now() - a
  T.truthy(d >= 0.045 and d < 5, "slept " .. d)
  T.eq(type(sys.time()), "number")
  sys.setenv("RLM_TEST_VAR", "v1")
  T.eq(sys.getenv("RLM_TEST_VAR"), "v1")
  T.eq(sys.environ().RLM_TEST_VAR, "v1")
  sys.setenv("RLM_TEST_VAR", nil)
  T.eq(sys.getenv("RLM_TEST_VAR"), nil)

  local dir = T.tmpdir()
  local p = dir .. "/a/b/c.txt"
  assert(sys.mkdir_p(dir .. "/a/b"))
  assert(sys.write_file(p, "hello\0world"))
  T.eq(sys.read_file(p), "hello\0world")
  assert(sys.write_file(p, "second"))
  T.eq(sys.read_file(p), "second")
  T.eq(sys.list_dir(dir .. "/a/b"), {"c.txt"}, "no temp files left behind")
  T.eq(sys.stat(p).type, "file")
  T.eq(sys.stat(p).size, 6)
  local none, err = sys.read_file(dir .. "/missing")
  T.eq(none, nil)
  T.contains(err, "No such file")
  local ok, werr = sys.write_file(dir .. "/no/such/dir/x", "y")
  T.eq(ok, nil)
  T.contains(werr, "No such file")
  assert(sys.remove(dir .. "/a", true))
  T.eq(sys.stat(dir .. "/a"), nil)
end

tests["cpu_time grows with work, not with sleep"] = function()
  local c0 = sys.cpu_time()
  local x = 0
  for i = 1, 3e6 do x = x + i % 7 end
  local c1 = sys.cpu_time()
  T.truthy(c1 - c0 > 0.001, "busy work used " .. (c1 - c0) .. " s of CPU")
  sys.sleep(0.2)
  local c2 = sys.cpu_time()
  T.truthy(c2 - c1 < 0.05, "a 0.2 s sleep used " .. (c2 - c1) .. " s of CPU")
end

tests["spawn with pipes, stdin, exit codes"] = function()
  local r = assert(sys.run({"/bin/sh", "-c", "cat; echo err >&2; exit 3"}, {input = "in\n"}))
  T.eq(r.stdout, "in\n")
  T.eq(r.stderr, "err\n")
  T.eq(r.status, "exit")
  T.eq(r.code, 3)

  local p = assert(sys.spawn{argv = {"/bin/sh", "-c", "while read l; do echo got:$l; done"}})
  p:write("one\n")
  T.eq(sys.read_line(p, 60), "got:one")
  p:write("two\n")
  T.eq(sys.read_line(p, 60), "got:two")
  p:close_stdin()
  local line, why = sys.read_line(p, 60)
  T.eq(line, nil)
  T.eq(why, "eof")
  T.eq(select("#", sys.wait(p, 5)), 2)
  p:close()
end

tests["a missing program is an error value, not a crash"] = function()
  local p, err = sys.spawn{argv = {"/no/such/program"}}
  T.eq(p, nil)
  T.contains(err, "cannot run '/no/such/program'")
  T.contains(err, "No such file")
end

tests["kill, timeouts and large output"] = function()
  local p = assert(sys.spawn{argv = {"/bin/sleep", "30"}})
  local line, why = sys.read_line(p, 0.1)
  T.eq(why, "timeout")
  p:kill("TERM")
  local how, sig = sys.wait(p, 5)
  T.eq(how, "signal")
  T.eq(sig, 15)
  p:close()

  local r = assert(sys.run({"/bin/sh", "-c", "head -c 5000000 /dev/zero"}))
  T.eq(#r.stdout, 5000000)

  local slow, err = sys.run({"/bin/sleep", "10"}, {timeout = 0.2})
  T.eq(slow, nil)
  T.contains(err, "timed out")
end

-- A process's state letter (R, S, Z...), nil once it is gone.
local function state_of(pid)
  local stat = sys.read_file("/proc/" .. pid .. "/stat")
  return stat and stat:match("^%d+ %b() (%a)")
end

local function ended(pid)
  local state = state_of(pid)
  return state == nil or state == "Z"
end

tests["closing a process kills its whole group"] = function()
  local p = assert(sys.spawn{argv = {"/bin/sh", "-c", "sleep 30 & echo $!; wait"}})
  local child = tonumber(sys.read_line(p, 60))
  p:close()
  -- Gone, or a zombie waiting for init to reap it, once the kill has landed (a loaded machine
  -- may take a moment); never still running.
  local deadline = sys.now() + 20
  while not ended(child) and sys.now() < deadline do sys.sleep(0.01) end
  T.truthy(ended(child), "grandchild still running, state " .. tostring(state_of(child)))
end

-- The children of this process that have ended but were not reaped, by pid.
local function zombie_children()
  local me, found = tostring(sys.getpid()), {}
  for _, name in ipairs(sys.list_dir("/proc")) do
    local stat = name:match("^%d+$") and sys.read_file("/proc/" .. name .. "/stat")
    local state, ppid = (stat or ""):match("^%d+ %b() (%a) (%d+)")
    if state == "Z" and ppid == me then found[#found + 1] = tonumber(name) end
  end
  return found
end

-- close() does not wait for the killed child's end (about 0.3 ms that every sandbox's end
-- paid); the child is reaped by the loop or at a later spawn, so none piles up as a zombie.
tests["close kills without waiting; the killed are reaped later"] = function()
  local pids, most = {}, 0
  for i = 1, 100 do
    local p = assert(sys.spawn{argv = {"/bin/sleep", "30"}, stdin = "null"})
    pids[i] = p:pid()
    p:close()
    if i % 25 == 0 then most = math.max(most, #zombie_children()) end
  end
  -- unreaped, 25 or more would wait at each look; a loaded machine lets a few die late
  T.truthy(most <= 10, most .. " zombies at once: the killed are not being reaped")
  local deadline = sys.now() + 20
  for _, pid in ipairs(pids) do
    while not ended(pid) and sys.now() < deadline do sys.sleep(0.01) end
  end
  sys.wait(assert(sys.spawn{argv = {"/bin/true"}, stdin = "null"}))
  T.eq(zombie_children(), {}, "the next spawn reaps them")
  for _, pid in ipairs(pids) do T.eq(sys.stat("/proc/" .. pid), nil, "pid " .. pid) end
end

tests["pidfd follows a process that is not a child to its end"] = function()
  local p = assert(sys.spawn{argv = {"/bin/sh", "-c", "sleep 30 & echo $!; wait"}})
  local grandchild = tonumber(sys.read_line(p, 60))
  local h = assert(sys.pidfd(grandchild))
  T.eq(h:ended(), false)
  T.eq(h:ended(0.05), false, "still running")
  assert(sys.kill(grandchild, "KILL"))
  T.eq(h:ended(5), true)
  h:close()
  T.raises(function() h:ended() end, "closed")
  local none, err = sys.pidfd(2^31 - 1)
  T.eq(none, nil)
  T.contains(err, "pidfd_open")
  p:close()
end

-- The descriptors a child sees, as "fd:target" lines (the listing's own is closed by then).
local LIST_FDS = [[
import os
for fd in sorted(int(f) for f in os.listdir("/proc/self/fd")):
    try:
        print(f"{fd}:{os.readlink(f'/proc/self/fd/{fd}')}")
    except OSError:
        pass]]

tests["a write that empties the queue wakes a task waiting for stdin to drain"] = function()
  -- p:write marks the process ready only when earlier bytes were queued (host/lsys.c): its
  -- own bytes written whole need no wake-up, but whoever waits on the earlier ones does.
  local async = require "rlm.async"
  local p <close> = assert(sys.spawn{argv = {"/bin/sh", "-c", "sleep 0.2; cat >/dev/null"},
                                     stdin = "pipe"})
  p:write(string.rep("a", 100000))   -- more than the pipe holds, less than the child drains
  T.truthy(p:pending_input() > 0, "the pipe took it all at once")
  local drained_after
  local t0 = sys.now()
  local waiter = async.spawn(function()
    while p:pending_input() > 0 do
      if not async.await(p:id(), 30) then break end
    end
    drained_after = sys.now() - t0
    p:close_stdin()
  end)
  async.spawn(function()
    local t = sys.now()
    while sys.now() - t < 0.5 do end   -- past the child's first reads, the loop not polling
    p:write("b")
  end)
  waiter:join(60)
  -- a missed wake-up would leave the waiter to its 30 s timeout
  T.truthy(drained_after and drained_after < 20, "the waiter woke after " .. tostring(drained_after))
  T.eq(sys.wait(p, 5), "exit")
end

tests["a child gets fds 0-2 and the passed ones, nothing else"] = function()
  local leaked = assert(io.open("/etc/hostname"))            -- fopen: inheritable
  T.defer(function() leaked:close() end)
  local echo = T.server{"tests/standins/echo"}
  assert(require("rlm.http").request{url = echo.url .. "/echo"})   -- a keep-alive socket
  local r = assert(sys.run({"/usr/bin/python3", "-c", LIST_FDS .. [[

for fd in (3, 4, 9):
    print(fd, repr(os.read(fd, 100)) if os.path.exists(f"/proc/self/fd/{fd}") else None)]]},
    {pass = {[3] = "three", [4] = "four\0bytes", [9] = ""}}))
  T.eq(r.code, 0, r.stderr)
  local fds = {}
  for fd in r.stdout:gmatch("(%d+):") do fds[#fds + 1] = tonumber(fd) end
  T.eq(fds, {0, 1, 2, 3, 4, 9}, r.stdout)
  T.truthy(not r.stdout:find("socket:", 1, true), "a socket reached the child")
  T.truthy(not r.stdout:find("/etc/hostname", 1, true), "the open file reached the child")
  T.contains(r.stdout, "3 b'three'")
  T.contains(r.stdout, "4 b'four\\x00bytes'")
  T.contains(r.stdout, "9 b''")
  T.raises(function() sys.spawn{argv = {"true"}, pass = {[2] = "x"}} end, "descriptor numbers 3-1023")
  T.raises(function() sys.spawn{argv = {"true"}, pass = {[3] = 42}} end, "must be a string")
end

-- pass = {[fd] = {fd = n}}: the child gets a copy of rlm's own descriptor, a folder held (as
-- bwrap's --bind-fd takes it): what it names is the folder, wherever its name has gone.
tests["a passed descriptor reaches the child as the folder it holds"] = function()
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/held"))
  assert(sys.write_file(dir .. "/held/inside", "x"))
  local held <close> = assert(require("rlm.core.sandbox").open_folder(dir .. "/held"))
  assert(os.rename(dir .. "/held", dir .. "/moved"))
  local r = assert(sys.run({"/bin/ls", "/proc/self/fd/7/"}, {pass = {[7] = {fd = held:fd()}}}))
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "inside\n")
  local p, err = sys.spawn{argv = {"true"}, pass = {[7] = {fd = 1000}}}
  T.eq(p, nil)
  T.contains(err, "spawn: cannot pass descriptor 1000")
end

-- pass = {[fd] = {file = path}}: the child gets the file itself, opened read-only, with no copy
-- made in rlm; a file that cannot be opened fails the spawn with its name.
tests["a passed file reaches the child read-only; one that cannot be opened fails the spawn"] = function()
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/f", "file bytes\0and more"))
  local r = assert(sys.run({"/usr/bin/python3", "-c", [[
import os
print(repr(os.read(5, 100)))
try:
    os.write(5, b"x")
    print("wrote")
except OSError as e:
    print("refused", e.errno)]]}, {pass = {[5] = {file = dir .. "/f"}}}))
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "b'file bytes\\x00and more'\nrefused 9\n")
  T.eq(sys.read_file(dir .. "/f"), "file bytes\0and more")
  local p, err = sys.spawn{argv = {"true"}, pass = {[3] = "x", [5] = {file = dir .. "/missing"}}}
  T.eq(p, nil)
  T.contains(err, "spawn: cannot pass " .. dir .. "/missing: No such file")
  T.raises(function() sys.spawn{argv = {"true"}, pass = {[3] = {file = 42}}} end,
           "must be a string, {file = path} or {fd = n}")
  T.raises(function() sys.spawn{argv = {"true"}, pass = {[3] = {}}} end, "or {fd = n}")
  -- optional: a file that cannot be opened, or is no regular file, reads as empty
  r = assert(sys.run({"/bin/sh", "-c", "cat <&5; echo .; cat <&6; echo ."},
                     {pass = {[5] = {file = dir .. "/missing", optional = true},
                              [6] = {file = dir, optional = true}}}))
  T.eq(r.stdout, ".\n.\n")
  p, err = sys.spawn{argv = {"true"}, pass = {[5] = {file = dir}}}
  T.eq(p, nil)
  T.contains(err, "spawn: cannot pass " .. dir .. ": Invalid argument")
  -- a FIFO is no regular file: refused without blocking rlm on its open
  assert(sys.run({"mkfifo", dir .. "/fifo"}))
  local t0 = sys.now()
  p, err = sys.spawn{argv = {"true"}, pass = {[5] = {file = dir .. "/fifo"}}}
  T.eq(p, nil)
  T.truthy(sys.now() - t0 < 10, "the open of a FIFO blocked")
  -- fields are read raw: a table whose __index raises leaks no descriptor
  local before = #assert(sys.list_dir("/proc/self/fd"))
  local trap = setmetatable({}, {__index = function() error("trap") end})
  for _ = 1, 20 do
    T.raises(function() sys.spawn{argv = {"true"}, pass = {[3] = "x", [4] = trap}} end,
             "or {fd = n}")
  end
  T.eq(#assert(sys.list_dir("/proc/self/fd")), before, "descriptors leaked")
end

tests["rlimits, uid and gid apply in the child"] = function()
  local r = assert(sys.run({"/bin/sh", "-c", "ulimit -n; ulimit -f; ulimit -c"},
                           {rlimits = {nofile = 64, fsize = 1024 * 1024, core = 0}}))
  T.eq(r.stdout, "64\n2048\n0\n")
  T.raises(function() sys.spawn{argv = {"true"}, rlimits = {cpu = 1}} end, "unknown rlimit cpu")
  local id = sys.run({"/usr/bin/id", "-u"}, {uid = 65534, gid = 65534})
  if sys.getuid() == 0 then
    T.eq(id.stdout, "65534\n")
    local groups = assert(sys.run({"/usr/bin/id", "-G"}, {uid = 65534, gid = 65534}))
    T.eq(groups.stdout, "65534\n", "no supplementary groups kept")
  else
    local p, err = sys.spawn{argv = {"/usr/bin/id"}, uid = 0, gid = 0}
    T.eq(p, nil)
    T.contains(err, "Operation not permitted")
  end
end

tests["max_line: a child's endless line stops the reading, rlm's memory stays flat"] = function()
  local status = function() return assert(sys.read_file("/proc/self/status")) end
  local rss0 = tonumber(status():match("VmRSS:%s*(%d+)"))
  local p = assert(sys.spawn{argv = {"/usr/bin/python3", "-c", [[
import os
os.write(1, b"first\nsecond\n")
chunk = b"x" * (1 << 20)
for _ in range(1024):
    os.write(2, chunk)
os.write(2, b"TAIL")
for _ in range(1024):
    os.write(1, chunk)]]}, max_line = 4 << 20, max_stderr = 4096})
  T.eq(sys.read_line(p, 60), "first")
  T.eq(sys.read_line(p, 60), "second")
  T.eq({sys.read_line(p, 30)}, {nil, "overflow"})
  T.eq(p:overflowed(), true)
  local err = p:read("stderr")
  T.truthy(#err <= 4096, "stderr keeps its tail only: " .. #err)
  T.eq(err:sub(-4), "TAIL")
  local rss = tonumber(status():match("VmRSS:%s*(%d+)"))
  T.truthy(rss - rss0 < 64 * 1024, ("rlm grew by %d KiB"):format(rss - rss0))
  p:close()
end

-- A waiting line pauses the reading (the child blocks on a full pipe), however many lines
-- follow; a payload after a line is read whole, newlines and all, then lines go on.
tests["lines pause the reading; a payload after a line comes whole; write takes many strings"] = function()
  local status = function() return tonumber(assert(sys.read_file("/proc/self/status")):match("VmRSS:%s*(%d+)")) end
  local p = assert(sys.spawn{argv = {"/usr/bin/python3", "-c", [[
import os, sys
head = sys.stdin.buffer.readline()
body = sys.stdin.buffer.read(int(head))
os.write(1, b"%d\n" % len(body) + body + b"after\n")
line = b"y" * 1023 + b"\n"
for _ in range(64 * 1024):
    os.write(1, line)]]}, max_line = 1 << 20})
  local body = ("a\nb\0c"):rep(100000)
  assert(p:write(tostring(#body), "\n", body))
  local rss0 = status()
  T.eq(sys.read_line(p, 60), tostring(#body))
  T.truthy(sys.read_payload(p, #body, 10) == body, "the payload came back changed")
  T.eq(sys.read_line(p, 60), "after")
  T.eq(#sys.read_line(p, 60), 1023)
  sys.sleep(0.3)   -- 64 MiB of lines wait in the child, not in rlm
  T.truthy(status() - rss0 < 16 * 1024, ("rlm grew by %d KiB"):format(status() - rss0))
  p:close()
end

-- read_file reads a regular file at its size into the string itself; what has no size (/proc,
-- a pipe) or grows while it is read goes on in blocks. Every length around the string
-- layout's thresholds comes back whole, and a big file costs its size once.
tests["read_file: any length, files without a size, a file that grows, a big file once"] = function()
  local dir = T.tmpdir()
  for _, n in ipairs{0, 1, 39, 40, 41, 63, 64, 65, 1023, 1024, 1025, 65536, 65537, 300001} do
    local data = ("%d\0"):format(n):rep(n):sub(1, n)
    assert(sys.write_file(dir .. "/f", data))
    T.truthy(sys.read_file(dir .. "/f") == data, "length " .. n .. " came back changed")
  end
  -- /proc reports size 0 and has more
  local status = assert(sys.read_file("/proc/self/status"))
  T.truthy(status:match("VmRSS:") and status:sub(-1) == "\n", "a /proc file came back cut")
  -- a named pipe whose writer sends 3 MB in pieces
  local fifo = dir .. "/pipe"
  T.eq(sys.run{"mkfifo", fifo}.code, 0)
  local writer = assert(sys.spawn{argv = {"/usr/bin/python3", "-c",
    "import sys\nwith open(sys.argv[1], 'wb') as f:\n    for i in range(3000): f.write(b'%09d' % i + b'x' * 990 + b'\\n')",
    fifo}})
  local piped = assert(sys.read_file(fifo))
  T.eq(#piped, 3000 * 1000)
  T.eq(piped:sub(-1000), ("%09d"):format(2999) .. ("x"):rep(990) .. "\n")
  T.eq(sys.wait(writer, 10), "exit")
  -- a file that grows while it is read: every byte present at the end is read
  local grow = dir .. "/grow"
  assert(sys.write_file(grow, ("g"):rep(1 << 20)))
  local appender = assert(sys.spawn{argv = {"/usr/bin/python3", "-c",
    "import sys\nwith open(sys.argv[1], 'ab') as f:\n    for i in range(2000): f.write(b'h' * 4096); f.flush()",
    grow}})
  local seen = assert(sys.read_file(grow))
  T.truthy(#seen >= 1 << 20 and seen:sub(1, 1 << 20) == ("g"):rep(1 << 20), "the start was lost")
  T.truthy(not seen:sub((1 << 20) + 1):find("[^h]"), "bytes other than the appended ones")
  T.eq(sys.wait(appender, 30), "exit")
  T.eq(#assert(sys.read_file(grow)), (1 << 20) + 2000 * 4096)
  -- 64 MB: the host's memory grows by the file once, not by a growing buffer and a copy
  local big = dir .. "/big"
  assert(sys.write_file(big, ("0123456789abcdef"):rep(1 << 22)))
  collectgarbage()
  local rss = function() return tonumber(sys.read_file("/proc/self/status"):match("VmHWM:%s*(%d+)")) end
  T.eq(sys.run{"sh", "-c", "echo 5 > /proc/" .. sys.getpid() .. "/clear_refs"}.code, 0)   -- resets VmHWM
  local before = rss()
  local data = assert(sys.read_file(big))
  local peak = rss() - before
  T.eq(#data, 64 << 20)
  T.truthy(peak < 80 * 1024, ("reading 64 MB raised the peak by %d MB"):format(peak // 1024))
end

-- spawn starts children by vfork: the child shares rlm's memory until it execs. What the child
-- starts with, and what rlm keeps, must be as with fork.
tests["a spawned child starts with no signal blocked or ignored; rlm keeps its environment"] =
function()
  -- rlm ignores SIGPIPE and handles SIGHUP, SIGINT, SIGQUIT and SIGTERM; none of that reaches
  -- the child, and no signal is blocked there. (What rlm itself was started with ignored is
  -- not its to change: glibc's own signals 32 and 33 can come so.)
  local r = assert(sys.run{"/bin/grep", "^Sig[BI]", "/proc/self/status"})
  T.contains(r.stdout, "SigBlk:\t0000000000000000")
  local ignored = tonumber(r.stdout:match("SigIgn:\t(%x+)"), 16)
  for _, signo in ipairs{1, 2, 3, 13, 15} do
    T.eq(ignored >> (signo - 1) & 1, 0, "signal " .. signo .. " is ignored in the child")
  end
  -- a bare name is looked up on the PATH of the env given, and rlm's own stays as it was
  local path, before = sys.getenv("PATH"), sys.environ()
  local p = assert(sys.spawn{argv = {"sh", "-c", "echo $X"}, env = {X = "given", PATH = "/usr/bin:/bin"}})
  T.eq(sys.read_line(p, 60), "given")
  p:close()
  local none, err = sys.spawn{argv = {"sh", "-c", "true"}, env = {PATH = "/nonexistent"}}
  T.eq(none, nil)
  T.contains(err, "No such file")
  T.eq(sys.getenv("PATH"), path)
  T.eq(sys.environ(), before)
  T.eq(sys.getenv("X"), nil)
  -- a file without "#!" runs under /bin/sh, given an env or not, by name or by path
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/bare-script", "echo ran \"$@\" $X\n"))
  assert(sys.chmod(dir .. "/bare-script", tonumber("755", 8)))
  for _, opts in ipairs{{argv = {dir .. "/bare-script", "a b"}},
                        {argv = {dir .. "/bare-script", "a b"}, env = {X = "with-env"}},
                        {argv = {"bare-script", "a b"}, env = {X = "by-name", PATH = "/nonexistent:" .. dir}}} do
    local q = assert(sys.spawn(opts))
    T.eq(sys.read_line(q, 60), ("ran a b %s"):format(opts.env and opts.env.X or ""):gsub(" $", ""))
    q:close()
  end
end

tests["SIGTERM while rlm spawns children ends it as an interrupt; nothing is left running"] =
function()
  local script = T.lua_script([[
local sys = require "rlm.sys"
print("started")
io.stdout:flush()
for i = 1, 100000 do
  local p = assert(sys.spawn{argv = {"/bin/true"}, stdout = "null", stderr = "null", stdin = "null"})
  sys.wait(p, 5)
end
print("not interrupted")
]])
  for _ = 1, 3 do
    local p = assert(sys.spawn{argv = {T.rlm, "run", script}})
    T.eq(sys.read_line(p, 60), "started")
    sys.sleep(0.05 + math.random() * 0.1)
    p:kill("TERM")
    T.eq({sys.wait(p, 10)}, {"exit", 143})
    T.eq(p:read("stdout"), "")
    p:close()
  end
  -- no /bin/true of theirs left behind, stopped or running
  local ps = assert(sys.run{"/bin/sh", "-c", "ps -eo stat,args | grep '[/]bin/true' || true"})
  T.eq(ps.stdout, "")
end

-- place_passed moves the status pipe above the passed descriptors with F_DUPFD, which fails
-- (EINVAL) when that number is not below RLIMIT_NOFILE; the child must report that on the pipe
-- where it is, not on descriptor -1 (rlm read end-of-file as "exec succeeded" and handed back
-- a process that exited 127 instead of nil, message).
tests["spawn refuses, rather than reporting a start, when the status pipe cannot be placed"] =
function()
  local script = T.lua_script([[
local sys = require "rlm.sys"
local p, err = sys.spawn{argv = {"/bin/true"}, stdin = "null", stdout = "null",
                         stderr = "null", pass = {[100] = "x"}}
if p then print("started", sys.wait(p, 5)) else print("refused", err) end
]])
  local r = assert(sys.run({T.rlm, "run", script}, {rlimits = {nofile = 64}, timeout = 20}))
  T.eq(r.stdout:match("^%a+"), "refused", r.stdout)
end

-- uid and gid go to the kernel as 32 bits, where 4294967295 is (uid_t)-1, "leave unchanged",
-- and 2^32 is 0: as root the child would silently stay root. Such ids, and a uid without a gid
-- (the child would keep rlm's groups), are misuse.
tests["a uid or gid the kernel would read as -1 or wrap is refused, never run as root"] =
function()
  for _, ids in ipairs{{uid = 4294967295, gid = 65534}, {uid = 1 << 32, gid = 65534},
                       {uid = 65534, gid = 4294967295}, {uid = -2, gid = 65534}} do
    T.raises(function() sys.run({"/bin/true"}, ids) end, "must be a whole number from 0 to 4294967294")
  end
  T.raises(function() sys.run({"/bin/true"}, {uid = 65534}) end, "uid needs gid too")
  if sys.getuid() == 0 then   -- the highest id that is one is taken
    local r = assert(sys.run({"/bin/grep", "^[UG]id:", "/proc/self/status"},
                             {uid = 4294967294, gid = 4294967294}))
    T.contains(r.stdout, "Uid:\t4294967294\t")
    T.contains(r.stdout, "Gid:\t4294967294\t")
  end
end

return tests
