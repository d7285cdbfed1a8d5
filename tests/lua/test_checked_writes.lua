--- Every write of a trajectory, an --events file or a sub-call cache entry is checked: a full
-- disk is a clear one-line error and a non-zero exit, never a run that ends 0 with its record
-- cut; a torn cache entry is never served (a miss, replaced whole).
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

-- The last line of stderr that is not a progress line.
local function error_line(stderr)
  local last
  for line in stderr:gmatch("[^\n]+") do last = line end
  return last or ""
end

-- A reply whose turn prints more than a 16 KB disk holds.
local function big_output_model()
  return F.model{rules = {
    {match = "Task: big", reply = F.code("print('y' * 40000)")},
    {match = ".", reply = F.code("SUBMIT(answer='done')")},
  }}
end

tests["--trace on a full disk: a one-line error and a non-zero exit"] = function()
  if sys.getuid() ~= 0 or not sys.stat("/usr/bin/unshare") then
    T.skip("needs root and unshare to mount a small tmpfs")
  end
  local server = big_output_model()
  local dir = T.tmpdir()
  local disk = dir .. "/disk"
  assert(sys.mkdir_p(disk))
  -- a 16 KB tmpfs in a mount namespace of the command's own: nothing outside sees it
  local shell = ('mount -t tmpfs -o size=16k tmpfs "$1" && shift && exec "$@"')
  local res = assert(sys.run({"/usr/bin/unshare", "-m", "sh", "-c", shell, "sh", disk, T.rlm, "ask",
                              "big", "--trace", disk .. "/run.jsonl", "--quiet"},
                             {env = F.env(server, {TMPDIR = dir}), timeout = 120}))
  T.truthy(res.code ~= 0, "exit " .. tostring(res.code))
  local line = error_line(res.stderr)
  T.contains(line, "cannot write the trajectory " .. disk .. "/run.jsonl: ")
  T.contains(line, "No space left on device")
  T.truthy(not res.stderr:find("stack traceback", 1, true), res.stderr)
end

tests["--events to a full device: a one-line error and a non-zero exit"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='done')")}}}
  local r = T.run_rlm({"ask", "full", "--events", "/dev/full", "--quiet"},
                      {env = F.env(server, {TMPDIR = T.tmpdir()})})
  T.truthy(r.code ~= 0, "exit " .. tostring(r.code))
  T.eq(r.stdout, "", "no answer printed")
  T.contains(error_line(r.stderr), "cannot write --events /dev/full: No space left on device")
  T.truthy(not r.stderr:find("stack traceback", 1, true), r.stderr)
end

-- The path of a sub-call's cache entry, as rlm.run names it.
local function entry_path(cache, model, prompt)
  local h = sys.hash(json.encode{model = model, prompt = prompt})
  return ("%s/subcalls/%s/%s.json"):format(cache, h:sub(1, 2), h)
end

tests["a torn cache entry is a miss: the sub-call is sent again and the entry replaced"] = function()
  local server = F.model{rules = {
    {match = "^ITEM", reply_expr = "prompt.lower()"},
    {match = ".", reply = F.code("SUBMIT(answer=llm_query('ITEM 1'))")},
  }}
  local cache = T.tmpdir()
  local path = entry_path(cache, "openai/root-model", "ITEM 1")
  assert(sys.mkdir_p(path:match("^(.*)/[^/]+$")))
  local whole = json.encode{key = json.encode{model = "openai/root-model", prompt = "ITEM 1"},
                            text = "poisoned", usage = {input_tokens = 1, output_tokens = 1}}
  assert(sys.write_file(path, whole:sub(1, #whole - 10)))
  local rlm = require "rlm"
  local res = rlm.run{task = "torn", context = "abc", cache = cache}
  T.eq(res.answer, "item 1", "the torn entry was not served")
  T.eq(res.usage.cache_hits, 0)
  T.eq(F.stats(server).requests, 2, "the turn and the sub-call")
  local entry = json.decode(assert(sys.read_file(path)))
  T.eq(entry and entry.text, "item 1", "the entry was replaced whole")
  res = rlm.run{task = "torn", context = "abc", cache = cache}
  T.eq(res.usage.cache_hits, 1)
  T.eq(F.stats(server).requests, 3, "the second run sent only its turn")
end

tests["a cache entry that cannot be written ends the run with the reason, non-zero"] = function()
  local server = F.model{rules = {
    {match = "^ITEM", reply_expr = "prompt.lower()"},
    {match = ".", reply = F.code("print(llm_query('ITEM 1'))")},
  }}
  local cache = T.tmpdir()
  -- the entry's folder is a file: the entry cannot be written
  assert(sys.mkdir_p(cache .. "/rlm"))
  assert(sys.write_file(cache .. "/rlm/subcalls", "not a folder"))
  local r = T.run_rlm({"ask", "unwritable", "--cache", "--quiet"},
                      {env = F.env(server, {XDG_CACHE_HOME = cache, TMPDIR = T.tmpdir()})})
  T.truthy(r.code ~= 0, "exit " .. tostring(r.code))
  T.eq(r.stdout, "")
  T.contains(error_line(r.stderr), "cannot write the sub-call cache: " .. cache .. "/rlm/subcalls")
  T.eq(F.stats(server).requests, 2, "the run stopped after the turn that could not cache")
end

return tests
