--- Runs every bench/*.lua (or those named on the command line) and prints their figures.
-- Benches print numbers; they never pass or fail.
package.path = "bench/?.lua;tests/lua/?.lua;" .. package.path
local sys = require "rlm.sys"

print("######## what users feel (docs/performance.md)\n")

local wanted = {...}
local files = {}
for _, f in ipairs(assert(sys.list_dir("bench"))) do
  if f:match("%.lua$") and f ~= "run.lua" and f ~= "common.lua" then
    local name = f:gsub("%.lua$", "")
    local pick = #wanted == 0
    for _, w in ipairs(wanted) do pick = pick or name == w end
    if pick then files[#files + 1] = f end
  end
end
-- What users feel comes first; the micro-figures after it are regression guards.
local LEAD = {["users.lua"] = 1, ["context.lua"] = 2}
table.sort(files, function(a, b)
  local la, lb = LEAD[a] or math.huge, LEAD[b] or math.huge
  if la ~= lb then return la < lb end
  return a < b
end)
local guards_said = false
for _, f in ipairs(files) do
  if not LEAD[f] and not guards_said then
    guards_said = true
    print("######## regression guards\n")
  end
  -- The disk writes a bench left (the Daytona stand-in's sandbox folders) go out before the
  -- next starts: writeback in flight made each of a sandbox folder's disk writes in the next
  -- one up to 3x slower (rlm exec 1.44x its floor after daytona.lua, 1.17x on a quiet disk).
  sys.run({"sync"})
  print(("== %s"):format(f))
  local ok, err = xpcall(dofile, debug.traceback, "bench/" .. f)
  if not ok then print("bench failed: " .. tostring(err)) end
  require("support").cleanup()
  -- Nor does the garbage it left: swept during the next bench, it lands on whichever side of
  -- a comparison allocates more (a run of json.lua left 112 MB of it).
  collectgarbage("collect")
  print()
end
