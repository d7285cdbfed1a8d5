--- Runs the Lua tests: every tests/lua/test_*.lua returns {name = function ... end}.
--   ./rlm run tests/run.lua [PATTERN...]   only files or tests whose name contains a pattern
-- Files in SEPARATE run only when a pattern names them: tests/isolation/run runs them itself,
-- as root and as an unprivileged user.
package.path = "tests/lua/?.lua;" .. package.path
local sys = require "rlm.sys"
local T = require "support"

local SEPARATE = {["test_isolation.lua"] = true}

local patterns = {...}
local function wanted(file, name)
  if #patterns == 0 then return not SEPARATE[file] end
  for _, p in ipairs(patterns) do
    if file:find(p, 1, true) or name:find(p, 1, true) then return true end
  end
  return false
end

local files = {}
for _, f in ipairs(assert(sys.list_dir("tests/lua"))) do
  if f:match("^test_.*%.lua$") then files[#files + 1] = f end
end
table.sort(files)

local passed, failed, skipped = 0, {}, 0
local started = sys.now()
for _, f in ipairs(files) do
  local path = "tests/lua/" .. f
  local chunk = assert(loadfile(path, "t"))
  local suite = chunk()
  local names = {}
  for name in pairs(suite) do names[#names + 1] = name end
  table.sort(names)
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
end
print(string.format("\n%d passed, %d failed, %d skipped in %.1fs", passed, #failed, skipped,
  sys.now() - started))
for _, name in ipairs(failed) do print("  failed: " .. name) end
return #failed == 0 and 0 or 1
