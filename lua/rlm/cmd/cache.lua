--- `rlm cache [show|prune|clear]`: what the sub-call cache holds, and removing it.
local args = require "rlm.args"
local cache = require "rlm.cache"
local sys = require "rlm.sys"

local M = {}

M.help = [[
usage: rlm cache [show] [--dir DIR]
       rlm cache prune [--older-than DAYS] [--dir DIR]
       rlm cache clear [--dir DIR]

The sub-call cache (`rlm ask --cache`, rlm.run{cache = true | DIR}) keeps each sub-call's answer
in a file named by a hash of the model and the prompt, so a repeated sub-call is not sent again.
show (the default) prints its location, its entries and their size in bytes. prune removes the
entries last written more than DAYS days ago (default 30) and the leftovers of writes a crash
cut; clear removes every entry. --dir names the cache's folder as rlm.run{cache = DIR} does
(default: $XDG_CACHE_HOME/rlm, else ~/.cache/rlm).]]

local DAY = 86400

local function show(dir)
  local entries, bytes, leftovers = 0, 0, 0
  for _, f in ipairs(cache.files(dir)) do
    if f.entry then entries = entries + 1 else leftovers = leftovers + 1 end
    bytes = bytes + f.size
  end
  print(("location: %s/subcalls"):format(dir))
  print(("entries: %d"):format(entries))
  print(("size: %d bytes"):format(bytes))
  if leftovers > 0 then
    print(("leftovers: %d (cut writes; `rlm cache prune` removes them)"):format(leftovers))
  end
  return 0
end

function M.main(argv)
  local opts, rest = args.parse(argv, {dir = "string", older_than = "number"})
  local action = rest[1] or "show"
  if #rest > 1 or (action ~= "show" and action ~= "prune" and action ~= "clear") then
    return args.usage("cache", "give show, prune or clear", M.help)
  end
  if opts.older_than and action ~= "prune" then
    return args.usage("cache", "--older-than goes with prune", M.help)
  end
  local dir = cache.dir(opts.dir or true)
  if action == "show" then return show(dir) end
  local keep = function() return false end
  if action == "prune" then
    local since = sys.time() - (opts.older_than or 30) * DAY
    keep = function(f) return f.entry and f.mtime >= since end
  end
  local removed, bytes = cache.remove(dir, keep)
  print(("removed %d files (%d bytes); %d entries left"):format(removed, bytes, #cache.files(dir)))
  return 0
end

return M
