-- rlm.limits: sizes, defaults and the one-line errors a user sees for a bad limit.
local T = require "support"
local limits = require "rlm.limits"
local args = require "rlm.args"

local tests = {}

tests["sizes take bytes and K/M/G suffixes; anything else is refused"] = function()
  T.eq(limits.size(4096), 4096)
  T.eq(limits.size("64K"), 65536)
  T.eq(limits.size("512M"), 512 * 1024 * 1024)
  T.eq(limits.size("2G"), 2 << 30)
  T.eq(limits.size("1.5G"), 3 << 29)
  T.eq(limits.size("2GiB"), 2 << 30)
  for _, bad in ipairs{"lots", "-1G", "1T", "", "1e9", {}} do
    local n, err = limits.size(bad)
    T.eq(n, nil, tostring(bad))
    T.truthy(err, "a reason for " .. tostring(bad))
  end
end

tests["resolve fills the defaults and names what is wrong"] = function()
  local l = limits.resolve{memory = "1G", processes = "64"}
  T.eq(l.memory, 1 << 30)
  T.eq(l.processes, 64)
  T.eq(l.tmp, limits.defaults.tmp)
  T.raises(function() limits.resolve{memroy = "1G"} end, 'unknown limit "memroy" (known: ')
  T.raises(function() limits.resolve{processes = 2.5} end, "limits.processes must be a whole number")
  T.raises(function() limits.resolve{memory = "lots"} end, 'limits.memory: "lots" is not a size')
  T.raises(function() limits.resolve{memory = "1M"} end, "too small to run Python (at least 64 MiB)")
  T.raises(function() limits.resolve("1G") end, "limits must be a table")
end

tests["--limit is repeatable NAME=VALUE on the command line"] = function()
  local opts = args.parse({"--limit", "memory=1G", "--limit=processes=64", "x"}, {limit = "assign"})
  T.eq(opts.limit, {memory = "1G", processes = "64"})
  T.raises(function() args.parse({"--limit", "memory"}, {limit = "assign"}) end,
           'option --limit needs NAME=VALUE, got "memory"')
end

return tests
