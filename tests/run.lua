--- Runs the Lua tests: every tests/lua/test_*.lua returns {name = function ... end}.
--   ./rlm run tests/run.lua [PATTERN...]   only files or tests whose name contains a pattern
-- Files in SEPARATE run only when a pattern names them: tests/isolation/run runs them itself,
-- as root and as an unprivileged user.
-- Each file runs in a child rlm (tests/run.lua --file FILE [PATTERN...]) under a time limit,
-- RLM_TEST_FILE_TIMEOUT seconds (600 unless set): a file that hangs fails with its name, the
-- processes it started are ended, and the other files still run.
package.path = "tests/lua/?.lua;" .. package.path
local sys = require "rlm.sys"
local T = require "support"

local SEPARATE = {["test_isolation.lua"] = true, ["test_venv.lua"] = true}
local FILE_TIMEOUT = tonumber(sys.getenv("RLM_TEST_FILE_TIMEOUT") or "") or 600
-- What a child reports to its parent, on lines of their own: its counts and its failed tests.
local REPORT = "@@rlm-test-report "

local args = {...}
local only_file
if args[1] == "--file" then only_file = table.remove(args, 1) and table.remove(args, 1) end
local patterns = args

local function wanted(file, name)
  if #patterns == 0 then return not SEPARATE[file] end
  for _, p in ipairs(patterns) do
    if file:find(p, 1, true) or name:find(p, 1, true) then return true end
  end
  return false
end

-- The child's part: runs one file's wanted tests, prints a line for each, then its report.
local function run_file(f)
  io.stdout:setvbuf("line")   -- each result reaches the parent as it comes
  local suite = assert(loadfile("tests/lua/" .. f, "t"))()
  local names = {}
  for name in pairs(suite) do names[#names + 1] = name end
  table.sort(names)
  local passed, failed, skipped = 0, {}, 0
  for _, name in ipairs(names) do
    if wanted(f, name) then
      local t0 = sys.now()
      local ok, err = xpcall(suite[name], function(e)
        if T.is_skip(e) then return e end
        return debug.traceback(tostring(e), 2)
      end)
      T.cleanup()
      local dt = string.format("%.2fs", sys.now() - t0)
      if ok then
        passed = passed + 1
        print(string.format("ok    %s: %s (%s)", f, name, dt))
      elseif T.is_skip(err) then
        skipped = skipped + 1
        print(string.format("skip  %s: %s (%s)", f, name, err.reason))
      else
        failed[#failed + 1] = f .. ": " .. name
        print(string.format("FAIL  %s: %s (%s)\n%s", f, name, dt, err))
      end
    end
  end
  print(string.format("%scounts %d %d", REPORT, passed, skipped))
  for _, name in ipairs(failed) do print(REPORT .. "failed " .. name) end
  return 0
end

if only_file then return run_file(only_file) end

-- Ends a child that overran its time: TERM first (rlm ends its sandboxes on it), then KILL for
-- it and every process it had started (stand-ins run in groups of their own).
local function stop(proc)
  local below = T.descendants(proc:pid())
  proc:kill("TERM")
  if not sys.wait(proc, 10) then proc:kill("KILL"); sys.wait(proc, 5) end
  for _, p in ipairs(below) do
    if sys.read_file("/proc/" .. p.pid .. "/cmdline") == p.cmdline then sys.kill(p.pid, "KILL") end
  end
  proc:close()
end

-- The parent's part: runs file f in a child under the time limit and passes its lines on;
-- returns passed, the names of the failed tests, skipped (for a child that never reported,
-- the results it printed).
local function run_child(f)
  local argv = {T.rlm, "run", "tests/run.lua", "--file", f, table.unpack(patterns)}
  local proc, err = sys.spawn{argv = argv, stdin = "null", stderr = "inherit"}
  if not proc then
    print(string.format("FAIL  %s: its run could not start: %s", f, err))
    return 0, {f .. ": (its run could not start)"}, 0
  end
  local deadline = sys.now() + FILE_TIMEOUT
  local passed, failed, skipped, reported = 0, {}, 0, false
  local seen = {ok = 0, skip = 0}
  while true do
    local line, err = sys.read_line(proc, math.max(deadline - sys.now(), 0))
    if err == "timeout" then
      stop(proc)
      failed[#failed + 1] = f .. ": (the file did not finish within " .. FILE_TIMEOUT .. " s)"
      print(string.format("FAIL  %s: did not finish within %d s (RLM_TEST_FILE_TIMEOUT); its "
                          .. "processes were ended", f, FILE_TIMEOUT))
      return seen.ok, failed, seen.skip
    end
    if not line then break end
    local kind, rest = line:match("^" .. REPORT:gsub("%p", "%%%0") .. "(%a+) (.*)$")
    if kind == "counts" then
      local p, s = rest:match("^(%d+) (%d+)$")
      passed, skipped, reported = passed + tonumber(p), skipped + tonumber(s), true
    elseif kind == "failed" then
      failed[#failed + 1] = rest
    else
      local result = line:match("^(%a+) +" .. f:gsub("%p", "%%%0") .. ": ")
      if seen[result] then seen[result] = seen[result] + 1 end
      print(line)
    end
  end
  local how, code = sys.wait(proc, math.max(deadline - sys.now(), 10))
  proc:close()
  if not reported or how ~= "exit" or code ~= 0 then
    failed[#failed + 1] = f .. ": (the file's run ended early)"
    print(string.format("FAIL  %s: its run ended (%s %s) before reporting", f, tostring(how),
                        tostring(code)))
    if not reported then passed, skipped = seen.ok, seen.skip end
  end
  return passed, failed, skipped
end

local files = {}
for _, f in ipairs(assert(sys.list_dir("tests/lua"))) do
  if f:match("^test_.*%.lua$") and (#patterns > 0 or not SEPARATE[f]) then files[#files + 1] = f end
end
table.sort(files)

local passed, failed, skipped = 0, {}, 0
local started = sys.now()
for _, f in ipairs(files) do
  local p, fl, s = run_child(f)
  passed, skipped = passed + p, skipped + s
  table.move(fl, 1, #fl, #failed + 1, failed)
end
print(string.format("\n%d passed, %d failed, %d skipped in %.1fs", passed, #failed, skipped,
  sys.now() - started))
for _, name in ipairs(failed) do print("  failed: " .. name) end
return #failed == 0 and 0 or 1
