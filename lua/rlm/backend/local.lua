--- The local sandbox: one long-lived Python driver per sandbox, isolated with bubblewrap.
--
-- Inside, the code sees the same paths as on every backend:
--   /home/daytona/workspace   writable, transient (the code's cwd; repo/ and context/ are staged here)
--   /home/daytona/memory      writable; durable when volume_name is set
--                             (host: $XDG_DATA_HOME/rlm/volumes/NAME, default ~/.local/share/rlm/...)
--   /tmp                      a private tmpfs
-- and nothing else writable: /usr and a few /etc files are bound read-only, the host's home and
-- environment are absent, and there is no network unless network = true.
--
-- RLM_BWRAP and RLM_PYTHON (or the bwrap/python options) name other executables; the Python
-- one must be visible inside the sandbox, i.e. live under /usr.
-- The interface this implements is written down at the top of lua/rlm/interpreter.lua.
local json = require "rlm.json"
local sys = require "rlm.sys"

local M = {name = "local", options = {bwrap = true, python = true}}

local HOME = "/home/daytona"
local WORKSPACE = HOME .. "/workspace"
local MEMORY = HOME .. "/memory"
local INSTALL = "install them with `sudo apt-get install bubblewrap python3`"
local STDERR_KEEP = 4096

-- Host /etc entries the sandbox may read: enough for Python, TLS and name resolution.
local ETC = {"alternatives", "ssl", "ca-certificates", "ca-certificates.conf", "localtime",
             "timezone", "hosts", "resolv.conf", "nsswitch.conf", "gai.conf", "host.conf",
             "protocols", "services", "mime.types", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
             "python3", "python3.11", "os-release"}

local Sandbox = {}
Sandbox.__index = Sandbox

--- The executables this backend runs; raises with install advice when one is missing.
local function tools(opts)
  local bwrap = opts.bwrap or sys.getenv("RLM_BWRAP") or "bwrap"
  local python = opts.python or sys.getenv("RLM_PYTHON") or "/usr/bin/python3"
  local missing = {}
  local bwrap_path = sys.which(bwrap)
  if not bwrap_path then missing[#missing + 1] = ("bubblewrap (%s)"):format(bwrap) end
  if not sys.which(python) then missing[#missing + 1] = ("python3 (%s)"):format(python) end
  if #missing > 0 then
    error(("the local sandbox needs bubblewrap and python3, but %s not found: %s " ..
           "(or point RLM_BWRAP / RLM_PYTHON at them)"):format(
           table.concat(missing, " and ") .. (#missing > 1 and " were" or " was"), INSTALL), 0)
  end
  return bwrap_path, python
end

--- Checks what create() needs without creating anything.
function M.check(opts)
  tools(opts)
  if opts.volume_name ~= nil then M.volume_dir(opts.volume_name) end
end

--- The host directory that holds volume `name`.
function M.volume_dir(name)
  if type(name) ~= "string" or not name:match("^[%w][%w._-]*$") or #name > 128 then
    error(("invalid volume_name %q: use letters, digits, '.', '_' and '-'"):format(tostring(name)), 0)
  end
  local data = sys.getenv("XDG_DATA_HOME")
  if not data or data == "" then
    local home = sys.getenv("HOME")
    if not home or home == "" then error("cannot place the volume: neither XDG_DATA_HOME nor HOME is set", 0) end
    data = home .. "/.local/share"
  end
  return data .. "/rlm/volumes/" .. name
end

local function run_checked(argv, what, timeout)
  local r, err = sys.run(argv, {timeout = timeout or 300})
  if not r then error(what .. ": " .. err, 0) end
  if r.code ~= 0 or r.status ~= "exit" then
    local msg = (r.stderr ~= "" and r.stderr or r.stdout):gsub("%s+$", "")
    error(("%s: %s"):format(what, msg ~= "" and msg or (r.status .. " " .. r.code)), 0)
  end
  return r
end

local function basename(path)
  return (path:gsub("/+$", ""):match("([^/]+)$")) or path
end

-- Stages the repository at workspace/repo: git clone (URL or local repository), or a copy of a
-- plain local folder; then checks out repo_ref.
local function stage_repo(dest, url, ref)
  local st = sys.stat(url)
  if st and st.type == "dir" and not sys.stat(url .. "/.git") then
    run_checked({"cp", "-a", "--", url, dest}, "cannot copy repository " .. url)
  else
    run_checked({"git", "clone", "--quiet", "--", url, dest}, "git clone " .. url .. " failed")
  end
  if ref then
    run_checked({"git", "-C", dest, "checkout", "--quiet", ref, "--"},
                ("git checkout %s in %s failed"):format(ref, url))
  end
end

local function stage_context(dir, paths)
  if type(paths) == "string" then paths = {paths} end
  assert(sys.mkdir_p(dir))
  for _, p in ipairs(paths) do
    if not sys.stat(p) then error(("context_paths: %s does not exist"):format(p), 0) end
    run_checked({"cp", "-a", "--", p, dir .. "/" .. basename(p)}, "cannot copy " .. p)
  end
end

local function write_identity(root)
  assert(sys.mkdir_p(root .. "/etc"))
  assert(sys.write_file(root .. "/etc/passwd",
    "root:x:0:0:root:/root:/usr/sbin/nologin\ndaytona:x:1000:1000:daytona:/home/daytona:/bin/sh\n"))
  assert(sys.write_file(root .. "/etc/group", "root:x:0:\ndaytona:x:1000:\n"))
end

--- Creates a sandbox (directories staged; the driver is started by start_driver).
-- Raises on failure, leaving nothing behind.
function M.create(opts)
  local bwrap, python = tools(opts)
  local volume = opts.volume_name and M.volume_dir(opts.volume_name)
  local root = assert(sys.mkdtemp("rlm-sandbox"))
  local self = setmetatable({root = root, bwrap = bwrap, python = python, opts = opts,
                             env = opts.env or {}, network = opts.network and true or false,
                             stderr_tail = ""}, Sandbox)
  local ok, err = pcall(function()
    self.workspace = root .. "/workspace"
    self.memory = volume or (root .. "/memory")
    assert(sys.mkdir_p(self.workspace))
    local made, why = sys.mkdir_p(self.memory)
    if not made then error("cannot create the volume directory: " .. why, 0) end
    write_identity(root)
    if opts.repo_url then stage_repo(self.workspace .. "/repo", opts.repo_url, opts.repo_ref) end
    if opts.context_paths then stage_context(self.workspace .. "/context", opts.context_paths) end
  end)
  if not ok then
    sys.remove(root, true)
    error(err, 0)
  end
  self.id = "local-" .. basename(root):gsub("^rlm%-sandbox%.", "")
  return self
end

-- The environment inside: only what we set, never the host's.
function Sandbox:environment()
  local env = {PATH = "/usr/local/bin:/usr/bin:/bin", HOME = HOME, LANG = "C.UTF-8",
               PYTHONDONTWRITEBYTECODE = "1", PYTHONUNBUFFERED = "1"}
  for k, v in pairs(self.env) do env[k] = tostring(v) end
  return env
end

-- The bwrap command line that runs argv inside this sandbox.
function Sandbox:argv(argv)
  local a = {self.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
             "--ro-bind", "/usr", "/usr"}
  local function add(...) for _, v in ipairs{...} do a[#a + 1] = v end end
  if self.network then add("--share-net") end
  for _, l in ipairs{"bin", "lib", "lib32", "lib64", "sbin"} do
    local st = sys.stat("/" .. l)
    if st and st.type == "link" then add("--symlink", "usr/" .. l, "/" .. l)
    elseif st and st.type == "dir" then add("--ro-bind", "/" .. l, "/" .. l) end
  end
  for _, e in ipairs(ETC) do add("--ro-bind-try", "/etc/" .. e, "/etc/" .. e) end
  add("--ro-bind", self.root .. "/etc/passwd", "/etc/passwd",
      "--ro-bind", self.root .. "/etc/group", "/etc/group",
      "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", HOME,
      "--bind", self.workspace, WORKSPACE, "--bind", self.memory, MEMORY,
      "--chdir", WORKSPACE, "--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
      "--remount-ro", "/", "--")
  table.move(argv, 1, #argv, #a + 1, a)
  return a
end

function Sandbox:start_driver()
  if self.proc then return true end
  local source = require("rlm.core.host").resource("lua/rlm/driver.py")
  if not source then error("the driver (lua/rlm/driver.py) is missing from this build", 0) end
  local proc, err = sys.spawn{argv = self:argv{self.python, "-u", "-c", source, "--stdio"},
                              env = self:environment(), stdin = "pipe", stdout = "pipe",
                              stderr = "pipe"}
  if not proc then error("cannot start the sandbox: " .. err, 0) end
  self.proc = proc
  return true
end

-- Keeps the end of the driver's stderr (bwrap's and Python's own complaints) for error messages.
function Sandbox:drain_stderr()
  if not self.proc then return end
  local more = self.proc:read("stderr")
  if #more > 0 then
    self.stderr_tail = (self.stderr_tail .. more):sub(-STDERR_KEEP)
  end
end

function Sandbox:died_message()
  self:drain_stderr()
  local how, code = self.proc:status()
  local msg = "the sandbox's driver exited"
  if how then msg = msg .. (" (%s %s)"):format(how, code) end
  local tail = self.stderr_tail:gsub("%s+$", "")
  if tail ~= "" then msg = msg .. ": " .. tail:sub(-600) end
  return msg
end

--- Sends one request line and returns the next event; nil, err, kind ("timeout"|"dead"|"protocol").
function Sandbox:request(req, timeout)
  if not self.proc then return nil, "the sandbox's driver is not running", "dead" end
  if req then
    local ok = self.proc:write(json.encode(req) .. "\n")
    if not ok then return nil, self:died_message(), "dead" end
  end
  local line, why = sys.read_line(self.proc, timeout)
  self:drain_stderr()
  if not line then
    if why == "timeout" then return nil, "no answer from the sandbox in time", "timeout" end
    return nil, self:died_message(), "dead"
  end
  local ev, err = json.decode(line)
  if type(ev) ~= "table" then
    return nil, ("the driver sent something that is not a JSON event (%s): %s"):format(
      tostring(err or type(ev)), line:sub(1, 200)), "protocol"
  end
  return ev
end

function Sandbox:kill_driver()
  local proc = self.proc
  if not proc then return end
  self.proc = nil
  proc:kill("KILL")
  proc:close()
end

--- The host pid of the Python driver (the innermost process under bwrap), for diagnostics and tests.
function Sandbox:driver_pid()
  if not self.proc then return nil end
  local pid = self.proc:pid()
  for _ = 1, 4 do
    local kids = sys.read_file(("/proc/%d/task/%d/children"):format(pid, pid))
    local child = kids and kids:match("%d+")
    if not child then break end
    pid = tonumber(child)
  end
  return pid
end

-- Maps a sandbox path to the host path under the workspace or the volume, refusing anything that
-- leaves them, and any symbolic link on the way (code inside could point one at the host's files).
function Sandbox:host_path(path, create_dirs)
  if type(path) ~= "string" or path == "" then error("a sandbox path must be a non-empty string", 3) end
  if path:sub(1, 1) ~= "/" then path = WORKSPACE .. "/" .. path end
  local base, rel
  for prefix, dir in pairs{[WORKSPACE] = self.workspace, [MEMORY] = self.memory} do
    if path == prefix or path:sub(1, #prefix + 1) == prefix .. "/" then
      base, rel = dir, path:sub(#prefix + 2)
    end
  end
  if not base then
    return nil, ("%s is outside %s and %s"):format(path, WORKSPACE, MEMORY)
  end
  local host = base
  local parts = {}
  for part in rel:gmatch("[^/]+") do
    if part == ".." then return nil, path .. ": '..' is not allowed" end
    if part ~= "." then parts[#parts + 1] = part end
  end
  for i, part in ipairs(parts) do
    host = host .. "/" .. part
    local st = sys.stat(host)
    if st and st.type == "link" then
      return nil, path .. ": refusing to follow a symbolic link"
    end
    if not st and create_dirs and i < #parts then
      local ok, err = sys.mkdir_p(host)
      if not ok then return nil, err end
    end
  end
  return host
end

function Sandbox:upload(path, data)
  local host, err = self:host_path(path, true)
  if not host then return nil, err end
  return sys.write_file(host, data)
end

function Sandbox:download(path)
  local host, err = self:host_path(path)
  if not host then return nil, err end
  return sys.read_file(host)
end

--- Entries under dir, recursively: {path=, type="file"|"dir"|"link"|"other", size=}, sorted.
function Sandbox:list(dir)
  dir = (dir or WORKSPACE):gsub("/+$", "")
  local host, err = self:host_path(dir)
  if not host then return nil, err end
  local st = sys.stat(host)
  if not st or st.type ~= "dir" then return nil, dir .. ": not a directory" end
  local out = {}
  local function walk(h, p)
    local names = sys.list_dir(h) or {}
    table.sort(names)
    for _, name in ipairs(names) do
      local s = sys.stat(h .. "/" .. name)
      if s then
        out[#out + 1] = {path = p .. "/" .. name, type = s.type, size = s.size}
        if s.type == "dir" then walk(h .. "/" .. name, p .. "/" .. name) end
      end
    end
  end
  walk(host, dir:sub(1, 1) == "/" and dir or WORKSPACE .. "/" .. dir)
  return out
end

--- Runs a shell command in a fresh process inside the same file system view.
function Sandbox:shell(cmd, timeout)
  local r, err = sys.run(self:argv{"/bin/sh", "-c", cmd}, {env = self:environment(),
                                                           timeout = timeout or 60})
  if not r then return nil, err end
  return {exit = r.status == "exit" and r.code or 128 + r.code, output = r.stdout .. r.stderr}
end

--- Kills the driver and removes the transient directories; the volume stays. Idempotent, and
-- never yields (it may run from a finaliser).
function Sandbox:destroy()
  self:kill_driver()
  if self.root then
    sys.remove(self.root, true)
    self.root = nil
  end
end

return M
