--- `rlm cache`: shows where the sub-call cache is, how many entries it holds and their size;
-- prune removes old entries and cut writes, clear removes them all.
local T = require "support"
local F = require "rlm_fixtures"
local sys = require "rlm.sys"

local tests = {}

-- The cache of a --cache run with three sub-calls; returns the env and the cache's folder.
local function filled_cache()
  local server = F.model{rules = {
    {match = "^ITEM", reply_expr = "prompt.lower()"},
    {match = ".", reply = F.code("out = llm_query_batched(['ITEM %d' % i for i in range(3)])\n"
                                  .. "SUBMIT(answer=out[2])")},
  }}
  local home = T.tmpdir()
  local env = F.env(server, {XDG_CACHE_HOME = home, TMPDIR = T.tmpdir()})
  local r = T.run_rlm({"ask", "fill", "--cache", "--quiet"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  return env, home .. "/rlm"
end

local function entry_files(dir)
  local out = {}
  for _, sub in ipairs(sys.list_dir(dir .. "/subcalls") or {}) do
    for _, name in ipairs(sys.list_dir(dir .. "/subcalls/" .. sub) or {}) do
      out[#out + 1] = dir .. "/subcalls/" .. sub .. "/" .. name
    end
  end
  table.sort(out)
  return out
end

tests["rlm cache shows the location, the entries and their size"] = function()
  local env, dir = filled_cache()
  local files = entry_files(dir)
  T.eq(#files, 3)
  local bytes = 0
  for _, f in ipairs(files) do bytes = bytes + assert(sys.stat(f)).size end
  T.truthy(bytes > 0)
  local r = T.run_rlm({"cache"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, ("location: %s/subcalls\nentries: 3\nsize: %d bytes\n"):format(dir, bytes))
  T.eq(T.run_rlm({"cache", "show", "--dir", dir}, {env = {PATH = sys.getenv("PATH")}}).stdout,
       r.stdout, "--dir names the same folder")
end

tests["rlm cache prune removes old entries and cut writes; clear removes the rest"] = function()
  local env, dir = filled_cache()
  local files = entry_files(dir)
  -- one entry written 40 days ago, one temporary file a crash left
  T.eq(sys.run({"touch", "-d", "40 days ago", files[1]}).code, 0)
  local leftover = files[2] .. ".tmp.AbC123"
  assert(sys.write_file(leftover, '{"key":'))
  T.contains(T.run_rlm({"cache"}, {env = env}).stdout, "leftovers: 1")
  local r = T.run_rlm({"cache", "prune", "--older-than", "30"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "removed 2 files")
  T.contains(r.stdout, "2 entries left")
  T.eq(entry_files(dir), {files[2], files[3]}, "the old entry and the leftover went")
  r = T.run_rlm({"cache", "clear"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "removed 2 files")
  T.eq(entry_files(dir), {})
  T.contains(T.run_rlm({"cache"}, {env = env}).stdout, "entries: 0\nsize: 0 bytes\n")
end

tests["rlm cache refuses an unknown action and a misplaced option"] = function()
  local r = T.run_rlm({"cache", "drop"})
  T.eq(r.code, 2)
  T.contains(r.stderr, "rlm cache: give show, prune or clear")
  r = T.run_rlm({"cache", "clear", "--older-than", "3"})
  T.eq(r.code, 2)
  T.contains(r.stderr, "--older-than goes with prune")
end

return tests
