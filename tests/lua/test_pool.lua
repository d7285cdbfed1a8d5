-- The pool: many sandboxes, snippets in input order, stateless, broken sandboxes replaced.
local T = require "support"
local sys = require "rlm.sys"
local rlm = require "rlm"
local registry = require "rlm.registry"

local tests = {}

tests["8 sandboxes map 100 snippets in order; a crashed one is replaced"] = function()
  local live = #registry.list()
  local pool = rlm.pool{size = 8}
  T.defer(function() pool:shutdown() end)
  local codes = {}
  for k = 1, 100 do codes[k] = ("SUBMIT(i=%d, sq=%d * %d)"):format(k, k, k) end
  codes[37] = "import os\nos._exit(3)"
  codes[50] = "1/0"
  local t0 = sys.now()
  local results = pool:map(codes)
  local took = sys.now() - t0
  T.eq(#results, 100)
  for k = 1, 100 do
    local out, run = results[k][1], results[k][2]
    if k == 37 then
      T.eq(out, nil)
      T.truthy(run.state_lost, "snippet 37 lost its sandbox")
      T.contains(run.error, "SandboxError")
    elseif k == 50 then
      T.eq(run.error, "ZeroDivisionError: division by zero")
    else
      T.eq(out, {i = k, sq = k * k}, "snippet " .. k)
    end
  end
  T.truthy(pool.replaced >= 1, "the crashed sandbox was replaced")
  T.eq(#registry.list(), live + 8, "still 8 sandboxes")
  T.truthy(took < 120, ("took %.2f s"):format(took))
  pool:shutdown()
  T.eq(#registry.list(), live)
end

tests["snippets do not see each other's state"] = function()
  local pool <close> = rlm.pool{size = 2}
  local codes = {}
  for k = 1, 10 do codes[k] = "seen = 'leak' in globals()\nleak = 1\nSUBMIT(seen=seen)" end
  for k, r in ipairs(pool:map(codes)) do T.eq(r[1], {seen = false}, "snippet " .. k) end
end

tests["map takes variables for all snippets, for each, or one code over a list of them"] = function()
  local pool <close> = rlm.pool{size = 3}
  local code = "SUBMIT(y=x * factor)"
  local each = {}
  for k = 1, 12 do each[k] = {x = k, factor = 10} end
  local results = pool:map(code, each)
  T.eq(#results, 12)
  for k, r in ipairs(results) do T.eq(r[1], {y = 10 * k}, "item " .. k) end
  results = pool:map({code, code, "SUBMIT(y=x)"}, {{x = 1, factor = 2}, {x = 3, factor = 4}, {x = 5}})
  T.eq({results[1][1], results[2][1], results[3][1]}, {{y = 2}, {y = 12}, {y = 5}})
  results = pool:map({code, code}, {x = 2, factor = 3})   -- one table: the same for every snippet
  T.eq({results[1][1], results[2][1]}, {{y = 6}, {y = 6}})
  T.raises(function() pool:map({code}, {{x = 1}, {x = 2}}) end, "1 code strings but 2 variable tables")
  T.raises(function() pool:map(code, {x = 1}) end, "a list of variable tables")
end

tests["several local sandboxes mount one volume at once and see each other's files"] = function()
  local saved = sys.getenv("XDG_DATA_HOME")
  sys.setenv("XDG_DATA_HOME", T.tmpdir())
  T.defer(function() sys.setenv("XDG_DATA_HOME", saved) end)
  local pool <close> = rlm.pool{size = 4, volume_name = "shared"}
  local items = {}
  for k = 1, 8 do items[k] = {k = k} end
  local results = pool:map("open(f'/home/daytona/memory/{k}.txt', 'w').write(str(k))\n" ..
                           "SUBMIT(ok=True)", items)
  for k, r in ipairs(results) do T.eq(r[1], {ok = true}, "writer " .. k .. ": " .. tostring(r[2].error)) end
  results = pool:map("import os\nSUBMIT(seen=sorted(os.listdir('/home/daytona/memory')))", {{}, {}, {}, {}})
  local all = {}
  for k = 1, 8 do all[#all + 1] = k .. ".txt" end
  table.sort(all)
  for k, r in ipairs(results) do T.eq(r[1], {seen = all}, "reader " .. k) end
end

tests["pool options are checked up front"] = function()
  T.raises(function() rlm.pool{size = 0} end, "positive integer")
  T.raises(function() rlm.pool{bwrap = "/nonexistent/bwrap"} end, "sudo apt-get install bubblewrap python3")
  T.raises(function() rlm.pool{nonsense = 1} end, "unknown interpreter option")
end

return tests
