local T = require "support"
local sys = require "rlm.sys"

local tests = {}

tests["clock, env and files"] = function()
  local a = sys.now()
  sys.sleep(0.05)
  local d = sys.now() - a
  T.truthy(d >= 0.045 and d < 0.5, "slept " .. d)
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

tests["spawn with pipes, stdin, exit codes"] = function()
  local r = assert(sys.run({"/bin/sh", "-c", "cat; echo err >&2; exit 3"}, {input = "in\n"}))
  T.eq(r.stdout, "in\n")
  T.eq(r.stderr, "err\n")
  T.eq(r.status, "exit")
  T.eq(r.code, 3)

  local p = assert(sys.spawn{argv = {"/bin/sh", "-c", "while read l; do echo got:$l; done"}})
  p:write("one\n")
  T.eq(sys.read_line(p, 5), "got:one")
  p:write("two\n")
  T.eq(sys.read_line(p, 5), "got:two")
  p:close_stdin()
  local line, why = sys.read_line(p, 5)
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

tests["closing a process kills its whole group"] = function()
  local p = assert(sys.spawn{argv = {"/bin/sh", "-c", "sleep 30 & echo $!; wait"}})
  local child = tonumber(sys.read_line(p, 5))
  p:close()
  sys.sleep(0.1)
  -- Gone, or a zombie waiting for init to reap it; never still running.
  local stat = sys.read_file("/proc/" .. child .. "/stat")
  local state = stat and stat:match("^%d+ %b() (%a)")
  T.truthy(state == nil or state == "Z", "grandchild still running, state " .. tostring(state))
end

return tests
