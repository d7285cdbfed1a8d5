--- A user's Python packages in the local sandbox: a virtualenv, or a folder of packages (a
-- site-packages), bound read-only at its own path.
--
-- A virtualenv runs as Python runs it: its bin/python (a link to /usr/bin/python3, which the
-- sandbox has) finds pyvenv.cfg beside it and takes the virtualenv's site-packages (and the
-- system's too when it was made with --system-site-packages). A plain folder is added by the
-- driver as a site folder after the system's (.pth files in it are read).
local sys = require "rlm.sys"

local M = {}

local function dirname(path) return path:match("^(.*)/[^/]*$") or "." end

--- The virtualenv a python executable belongs to (DIR/bin/python with DIR/pyvenv.cfg), or nil.
function M.of_python(python)
  local path = sys.which(python)
  if not path or not path:find("/", 1, true) then return nil end
  local dir = dirname(dirname(path))
  if dir == "" or not sys.stat(dir .. "/pyvenv.cfg") then return nil end
  return dir
end

-- The sandbox's uid binds the folder by its path: every folder above must let it through, and
-- the folder itself must be readable to it. Nil, or why not.
local function unreachable(uid, dir)
  local path = ""
  for part in dir:gmatch("[^/]+") do
    local st = sys.stat(path == "" and "/" or path)
    if st and st.uid ~= uid and st.mode & 1 == 0 then
      return ("the sandbox runs as uid %d, and %s lets only its owner through (chmod o+x it)")
        :format(uid, path == "" and "/" or path)
    end
    path = path .. "/" .. part
  end
  local st = sys.stat(dir)
  if st.uid ~= uid and st.mode & 5 ~= 5 then
    return ("the sandbox runs as uid %d, and cannot read it (chmod o+rx it)"):format(uid)
  end
  return nil
end

--- What folder `given` (the venv option or RLM_VENV, named `what` in messages) brings into the
-- sandbox of host uid `uid` (nil: rlm's own): {dir =, python =} for a virtualenv, {dir =,
-- site_dir =} for a folder of packages. Raises one line saying why when it cannot be used.
function M.resolve(given, what, uid)
  local function unusable(why) error(("%s %s cannot be used: %s"):format(what, given, why), 0) end
  if type(given) ~= "string" or given == "" then unusable("give the folder of a virtualenv or of packages") end
  local dir = sys.realpath(given)
  local st = dir and sys.stat(dir)
  if not st then unusable("no such folder") end
  if st.type ~= "dir" then unusable("it is not a folder") end
  if dir == "/" or dir:match("^/proc/?") or dir:match("^/dev/?") or dir:match("^/home/daytona/?") then
    unusable("the sandbox has a folder of its own there")
  end
  local why = uid and unreachable(uid, dir)
  if why then unusable(why) end
  if not sys.stat(dir .. "/pyvenv.cfg") then return {dir = dir, site_dir = dir} end
  local python = dir .. "/bin/python3"
  if not sys.stat(python) then python = dir .. "/bin/python" end
  local real = sys.stat(python) and sys.realpath(python)
  if not real then unusable("a virtualenv without bin/python3") end
  if real:sub(1, 5) ~= "/usr/" then
    unusable(("its python is %s, outside /usr, which the sandbox does not have: make the " ..
              "virtualenv with /usr/bin/python3 -m venv"):format(real))
  end
  return {dir = dir, python = python}
end

--- The bwrap arguments that bind the folder read-only (none for a folder under /usr, there
-- already), and the driver's arguments.
function M.mount_args(packages)
  if packages.dir:sub(1, 5) == "/usr/" then return {} end
  return {"--ro-bind", packages.dir, packages.dir}
end

function M.driver_args(packages)
  return packages.site_dir and {"--site-dir", packages.site_dir} or {}
end

return M
