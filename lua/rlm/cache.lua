--- The sub-call cache: one file per answer, named by a hash of the model and the prompt, under
-- DIR/subcalls/ (DIR: rlm.run{cache = DIR}, or $XDG_CACHE_HOME/rlm for cache = true). Entries
-- are written whole or not at all (a temporary file renamed into place) and an entry that does
-- not read back as its own key's answer is never served: it is a miss, and replaced.
local json = require "rlm.json"
local sys = require "rlm.sys"

local M = {}

--- The cache's folder for a cache option (true: $XDG_CACHE_HOME/rlm, else ~/.cache/rlm; a
-- string: that folder), or nil for none.
function M.dir(cache)
  if not cache then return nil end
  if type(cache) == "string" then return cache end
  return sys.cache_dir() or "/tmp/.cache/rlm"
end

--- The entry's path and key for one sub-call of model label.
function M.entry(dir, label, prompt)
  local key = json.encode{model = label, prompt = prompt}
  local h = sys.hash(key)
  return ("%s/subcalls/%s/%s.json"):format(dir, h:sub(1, 2), h), key
end

--- The cached answer {text, usage} of a sub-call, or nil (none, or torn).
function M.get(dir, label, prompt)
  local path, key = M.entry(dir, label, prompt)
  local data = sys.read_file(path)
  local entry = data and json.decode(data)
  if type(entry) == "table" and entry.key == key and type(entry.text) == "string" then return entry end
  return nil
end

--- Keeps an answer {text, usage}; true, or nil and why it could not be written.
function M.put(dir, label, prompt, res)
  local path, key = M.entry(dir, label, prompt)
  local ok, err = sys.mkdir_p(path:match("^(.*)/[^/]+$"))
  if ok then ok, err = sys.write_file(path, json.encode{key = key, text = res.text, usage = res.usage}) end
  if not ok then return nil, "cannot write the sub-call cache: " .. tostring(err) end
  return true
end

--- Every file under DIR/subcalls, sorted by path: {path, size, mtime, entry = false for a
-- leftover of a write a crash cut (a temporary file)}.
function M.files(dir)
  local out = {}
  local root = dir .. "/subcalls"
  for _, sub in ipairs(sys.list_dir(root) or {}) do
    local folder = root .. "/" .. sub
    local st = sys.stat(folder)
    if st and st.type == "dir" then
      for _, name in ipairs(sys.list_dir(folder) or {}) do
        local path = folder .. "/" .. name
        local f = sys.stat(path)
        if f and f.type == "file" then
          out[#out + 1] = {path = path, size = f.size, mtime = f.mtime,
                           entry = name:match("^%x+%.json$") ~= nil}
        end
      end
    end
  end
  table.sort(out, function(a, b) return a.path < b.path end)
  return out
end

--- Removes the files for which keep(file) is false, and the folders left empty; returns how
-- many files and bytes went.
function M.remove(dir, keep)
  local removed, bytes = 0, 0
  for _, f in ipairs(M.files(dir)) do
    if not keep(f) and sys.remove(f.path) then
      removed, bytes = removed + 1, bytes + f.size
    end
  end
  local root = dir .. "/subcalls"
  for _, sub in ipairs(sys.list_dir(root) or {}) do
    local folder = root .. "/" .. sub
    local names = sys.list_dir(folder)
    if names and #names == 0 then sys.remove(folder) end
  end
  return removed, bytes
end

return M
