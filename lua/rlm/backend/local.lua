--- The local sandbox: one long-lived Python driver per sandbox, isolated with bubblewrap.
--
-- Inside, the code sees the same paths as on every backend:
--   /home/daytona/workspace   writable, transient (the code's cwd; repo/ is staged here, and
--                             context/, read-only)
--   /home/daytona/memory      writable; durable when volume_name is set
--                             (host: $XDG_DATA_HOME/rlm/volumes/NAME, default ~/.local/share/rlm/...,
--                             or /var/lib/rlm/volumes/NAME for root)
--   /tmp, /dev/shm            private tmpfs, limits.tmp each
-- and nothing else writable: /usr and a few /etc files are bound read-only, /proc and /dev are
-- read-only, the host's home and environment are absent, and there is no network unless
-- network = true.
--
-- The boundary, whoever runs rlm (README, "Isolation"):
--   * the code never runs as host root: when rlm runs as root, bwrap itself is started as an
--     unprivileged uid of the sandbox's own (or `uid` / RLM_SANDBOX_UID, shared by every
--     sandbox), so the user namespace maps the sandbox's uid 1000 to that uid, not to 0, and
--     its process limit counts that sandbox's processes only (see SANDBOX_UIDS);
--   * as root, the folders handed to a sandbox (TMPDIR's, the volume store) lie under parents
--     no other user can change: one another user could write is refused; every folder handed
--     over is made, handed over, bound and removed through descriptors (rlm.core.sandbox
--     open_folder), never by a path a link swapped in could turn elsewhere;
--   * no capabilities (--cap-drop ALL), no further user namespaces (--disable-userns), and a
--     seccomp filter (rlm.core.sandbox) against the kernel surface Python never needs;
--   * only fds 0-2 and the ones handed over reach bwrap (rlm.core.proc spawn), and bwrap runs
--     with a fixed environment: `env` reaches only the process inside, through --args;
--   * resource limits (rlm.limits) as rlimits and tmpfs sizes: the workspace and the transient
--     memory folder lie on a tmpfs of limits.workspace, mounted by rlm in a mount namespace of
--     its own (see mount_files); a volume, which must outlast the sandbox, stays on disk, and
--     the host measures it while code runs;
--   * host-side file operations resolve paths beneath the workspace without following
--     symbolic links (rlm.core.sandbox), so code swapping directories cannot redirect them.
--
-- RLM_BWRAP and RLM_PYTHON (or the bwrap/python options) name other executables; the Python
-- one must be visible inside the sandbox, i.e. live under /usr or be a virtualenv's link to it.
-- The venv option (or RLM_VENV) binds a user's packages read-only (rlm.venv).
-- The interface this implements is written down at the top of lua/rlm/interpreter.lua.
local json = require "rlm.json"
local common = require "rlm.backend.common"
local limits = require "rlm.limits"
local sandbox = require "rlm.core.sandbox"
local sys = require "rlm.sys"
local venv = require "rlm.venv"

local clock = sys.now   -- an upvalue on the path of every request

local M = {name = "local", options = {bwrap = true, python = true, uid = true, venv = true}}

local HOME, WORKSPACE, MEMORY = common.HOME, common.WORKSPACE, common.MEMORY
local INSTALL = "install them with `sudo apt-get install bubblewrap python3`"
local STDERR_KEEP = 4096
-- What the host buffers of the driver's real stderr (bwrap's and Python's own complaints).
local STDERR_BUFFER = 64 * 1024
-- ... and how fast it reads it at most: the code can write there too, and a flood read as fast
-- as it comes kept rlm at a full core for the whole block (the code blocks instead).
local STDERR_RATE = 10 * STDERR_BUFFER   -- a second
-- The capture files of stdout and stderr live here, on a tmpfs of their own (limits.output).
local CAPTURE_DIR = "/run/rlm"
-- The uids of root's sandboxes, as a subordinate-uid allocator hands out ranges: from
-- 0x70000000, above what systemd gives containers (up to 0x6FFFFFFF) and useradd's
-- subordinate ranges (up to 600100000), below 2^31. A sandbox without a volume takes one of
-- SANDBOX_UIDS for its life: a lock file per uid in UID_LOCKS (root's own folder, made 0700),
-- held while the sandbox lives, so two rlm processes never hand out the same uid, and a uid
-- that still has processes (a sandbox still ending) is passed over. A sandbox with a volume
-- runs as the volume's uid, one of VOLUME_UIDS chosen by the volume's name: the files it keeps
-- are that uid's, and the sandboxes of one volume share its process count.
local SANDBOX_UIDS = {first = 0x70000000, count = 65536}
local VOLUME_UIDS = {first = 0x70000000 + 65536, count = 65536}
local UID_LOCKS = "/run/rlm/uids"
-- The driver's pipes hold 1 MiB (the most an unprivileged user may ask for) instead of 64 KiB:
-- a 100 MB value crosses in a sixteenth of the wake-ups.
local PIPE_SIZE = 1024 * 1024
local PRIVATE = tonumber("700", 8)   -- the sandbox's own folders: nobody else on the host reads them
-- How often, at most, the host measures a volume while code runs; a walk that takes long
-- (a huge tree) is spaced out further, to at most this share of the host's time.
local WATCH_INTERVAL = 0.25
local WATCH_SHARE = 0.05
-- The descriptors bwrap is handed (spawn's `pass`): numbers are fixed, contents per sandbox.
-- The driver's bytecode goes through to Python; /etc files take the numbers from etc up.
-- The workspace, memory and context are bound from descriptors of the folders rlm made
-- (--bind-fd): bwrap finds them by their path, then checks that what it mounted is the folder
-- held.
local FD = {seccomp = 3, args = 4, passwd = 5, group = 6, driver = 7, workspace = 8, memory = 9,
            context = 10, etc = 11}
local PASSWD = "root:x:0:0:root:/root:/usr/sbin/nologin\ndaytona:x:1000:1000:daytona:/home/daytona:/bin/sh\n"
local GROUP = "root:x:0:\ndaytona:x:1000:\n"

-- The seccomp program is the same for every sandbox: built once, on first use.
local seccomp_program
-- Host /etc entries the sandbox may read: enough for Python, TLS and name resolution.
local ETC = {"alternatives", "ssl", "localtime", "timezone", "hosts", "resolv.conf",
             "nsswitch.conf", "gai.conf", "host.conf", "protocols", "services", "mime.types",
             "ld.so.cache", "python3.11", "os-release"}

local Sandbox = {}
Sandbox.__index = Sandbox

-- The uid every sandbox of root's runs as when one is named (`uid` or RLM_SANDBOX_UID), nil
-- when none is (each then gets one of its own), or false when rlm is not root (the sandbox
-- then runs as the user who runs rlm, mapped to 1000 inside).
local function sandbox_owner(opts)
  if sys.getuid() ~= 0 then return false end
  local v = opts.uid or sys.getenv("RLM_SANDBOX_UID")
  if v == nil then return nil end
  local uid = math.tointeger(tonumber(v))
  if not uid or uid <= 0 or uid >= 2^32 - 1 then
    error(("the sandbox's uid must be a positive number other than 0 (got %s): the code must " ..
           "never run as host root"):format(tostring(v)), 0)
  end
  return uid
end

-- The user's packages (rlm.venv): the venv option, else RLM_VENV, else the virtualenv
-- the python named belongs to; nil when none.
local function user_packages(opts, python)
  local given, what = opts.venv, "venv"
  if given == nil then given, what = sys.getenv("RLM_VENV"), "RLM_VENV" end
  if given == nil then
    given = venv.of_python(python)
    what = "the virtualenv of " .. python .. ","
  end
  -- A sandbox of its own uid (none named) owns none of the folders: any uid of the range
  -- reaches them as it would.
  local owner = sandbox_owner(opts)
  if owner == nil then owner = SANDBOX_UIDS.first end
  return given and venv.resolve(given, what, owner or nil)
end

--- The executables this backend runs and the user's packages; raises with install advice when
-- one is missing.
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
  -- A virtualenv brings its own python, a link to one under /usr, bound with the virtualenv.
  local packages = user_packages(opts, python)
  if packages and packages.python then python = packages.python end
  -- The sandbox sees only /usr of the host's disk (and the user's packages): a Python elsewhere
  -- is not there.
  local real = sys.realpath(sys.which(python)) or python
  if real:sub(1, 5) ~= "/usr/" then
    error(("RLM_PYTHON is %s (%s), outside /usr: the sandbox sees only /usr of this machine, so "
      .. "that Python cannot run inside. Use a Python under /usr (the default /usr/bin/python3), "
      .. "or a virtualenv made from it (RLM_VENV), and install packages for it with apt (e.g. "
      .. "python3-numpy python3-pandas)"):format(python, real), 0)
  end
  return bwrap_path, python, packages
end

-- Why folder `dir` (a folder rlm as root hands to sandboxes, or the parent of one; held by its
-- descriptor) is not safe: a folder on its way another user owns, or may write without the
-- sticky bit, could have a link planted in it that turns root's chown and bind onto another
-- folder. nil when safe. The folders are those above the one held, not those a path names.
local GROUP_OTHER_WRITE, STICKY = tonumber("022", 8), tonumber("1000", 8)

local function unsafe_folder(dir)
  local above, err = dir:ancestry()
  if not above then return err end
  for k = #above, 1, -1 do   -- from the root down: the first one that is not safe
    local at = above[k]
    if at.uid ~= 0 then return ("%s belongs to uid %d"):format(at.path, at.uid) end
    if at.mode & GROUP_OTHER_WRITE ~= 0 and at.mode & STICKY == 0 then
      return ("others may write %s (mode %o)"):format(at.path, at.mode)
    end
  end
end

-- Raises when rlm runs as root and the folder held is not safe (unsafe_folder).
local function refuse_unsafe(dir, path, what, fix)
  local why = sys.getuid() == 0 and unsafe_folder(dir)
  if why then
    dir:close()
    error(("refusing %s %s: %s, and rlm runs as root; %s"):format(what, path, why, fix), 0)
  end
end

-- Opens folder `path` by descriptor, making the folders it lacks (mode) each beneath its
-- parent's descriptor; the folder it starts from, the deepest that exists, is checked by
-- refuse_unsafe(dir, path, ...) before anything is made in it, and so is the folder opened.
local ENOENT = 2

local function open_made(path, mode, ...)
  local dir, err, code = sandbox.open_folder(path)
  if dir then
    refuse_unsafe(dir, path, ...)
    return dir
  end
  local parent, name = path:match("^(.*)/([^/]+)/*$")
  if code ~= ENOENT or not parent then error(err, 0) end
  local above <close> = open_made(parent ~= "" and parent or "/", mode, ...)
  dir, err = above:make(name, mode)
  if not dir then error(("cannot make %s: %s"):format(path, err), 0) end
  refuse_unsafe(dir, path, ...)
  return dir
end

-- A uid of SANDBOX_UIDS for one sandbox, and the lock that holds it.
local uid_cursor

local function take_uid()
  open_made(UID_LOCKS, PRIVATE, "the uid lock folder", "remove it, rlm makes it anew"):close()
  uid_cursor = uid_cursor or sys.getpid() * 7919 % SANDBOX_UIDS.count
  for _ = 1, SANDBOX_UIDS.count do
    local uid = SANDBOX_UIDS.first + uid_cursor
    uid_cursor = (uid_cursor + 1) % SANDBOX_UIDS.count
    local lock = sys.lock(("%s/%d"):format(UID_LOCKS, uid), true)
    if lock and sys.count_processes(uid) == 0 then return uid, lock end
    if lock then lock:release() end
  end
  error(("all %d sandbox uids are taken (%s)"):format(SANDBOX_UIDS.count, UID_LOCKS), 0)
end

-- The uid of volume `name`'s sandboxes.
local function volume_uid(name)
  return VOLUME_UIDS.first + tonumber(sys.hash(name):sub(1, 8), 16) % VOLUME_UIDS.count
end

-- The processors this process may run on (the machine's, or its cgroup's cpuset).
local function processors()
  local status = sys.read_file("/proc/self/status") or ""
  local list = status:match("Cpus_allowed_list:%s*([%d,%-]+)")
  local n = 0
  for a, b in (list or ""):gmatch("(%d+)%-?(%d*)") do
    n = n + (b ~= "" and tonumber(b) - tonumber(a) + 1 or 1)
  end
  return math.max(n, 1)
end

--- Sandboxes this process starts at once (the interpreter's start queue): twice the processors,
-- so that starting keeps the machine busy without making each start slower than its timeout.
M.start_width = 2 * processors()

--- Checks what create() needs without creating anything.
function M.check(opts)
  tools(opts)
  sandbox_owner(opts)
  if opts.volume_name ~= nil then M.volume_dir(opts.volume_name) end
end

--- The host directory that holds volume `name`. For root it is under /var/lib/rlm (unless
-- XDG_DATA_HOME says otherwise): root's home is closed to the unprivileged uid that bwrap runs
-- as, and bwrap must reach the folder by its path to mount it.
function M.volume_dir(name)
  if type(name) ~= "string" or not name:match("^[%w][%w._-]*$") or #name > 128 then
    error(("invalid volume_name %q: use letters, digits, '.', '_' and '-'"):format(tostring(name)), 0)
  end
  local data = sys.getenv("XDG_DATA_HOME")
  if (not data or data == "") and sys.getuid() == 0 then return "/var/lib/rlm/volumes/" .. name end
  if not data or data == "" then
    local home = sys.getenv("HOME")
    if not home or home == "" then error("cannot place the volume: neither XDG_DATA_HOME nor HOME is set", 0) end
    data = home .. "/.local/share"
  end
  return data .. "/rlm/volumes/" .. name
end

-- Runs a staging tool in folder `dir` (held by descriptor): the child enters it through its
-- own /proc/self/fd before it runs, so it reaches the folder held whatever is renamed or
-- swapped on the way meanwhile. (rlm's own /proc/PID/fd would be closed to the tool once rlm
-- holds capabilities in a user namespace of its own: rlm.core.sandbox private_mounts.)
local function run_checked(argv, what, dir, timeout)
  local r, err = sys.run(argv, {timeout = timeout or 300, cwd = ("/proc/self/fd/%d"):format(dir:fd())})
  if not r then error(what .. ": " .. err, 0) end
  if r.code ~= 0 or r.status ~= "exit" then
    local msg = (r.stderr ~= "" and r.stderr or r.stdout):gsub("%s+$", "")
    error(("%s: %s"):format(what, msg ~= "" and msg or (r.status .. " " .. r.code)), 0)
  end
  return r
end

local basename = common.basename

-- A host path as the staging tools are given it: absolute, since they run in another folder.
local function absolute(path)
  return sys.stat(path) and sys.realpath(path) or path
end

-- Stages the repository at workspace/repo: git clone (URL or local repository), or a copy of a
-- plain local folder; then checks out repo_ref.
local function stage_repo(workspace, url, ref)
  local st = sys.stat(url)
  if st and st.type == "dir" and not sys.stat(url .. "/.git") then
    run_checked({"cp", "-a", "--", absolute(url), "repo"}, "cannot copy repository " .. url, workspace)
  else
    -- --no-hardlinks: a local clone's objects would be the host repository's own inodes.
    run_checked({"git", "clone", "--quiet", "--no-hardlinks", "--", absolute(url), "repo"},
                "git clone " .. url .. " failed", workspace)
  end
  if ref then
    -- an option, not a ref: --pathspec-from-file=FILE would read any file of rlm's user
    if ref:sub(1, 1) == "-" then error(("repo_ref %q begins with '-': no ref does"):format(ref), 0) end
    run_checked({"git", "-C", "repo", "checkout", "--quiet", ref, "--"},
                ("git checkout %s in %s failed"):format(ref, url), workspace)
  end
end

local function stage_context(parent, paths)
  if type(paths) == "string" then paths = {paths} end
  -- PRIVATE: a file others may read, copied from a folder they may not enter, stays closed
  local dir <close> = assert(parent:make("context", PRIVATE))
  for _, p in ipairs(paths) do
    if not sys.stat(p) then error(("context_paths: %s does not exist"):format(p), 0) end
    -- named by the folder the path names: context/.. would lie beside context/
    local from = absolute(p)
    run_checked({"cp", "-a", "--", from, basename(from)}, "cannot copy " .. p, dir)
  end
end

-- bwrap, running as the sandbox's uid, mounts the volume by its path: every folder above it
-- must let that uid pass. Raises with the fix when one does not.
local function check_passable(uid, dir)
  local path = ""
  for part in dir:gmatch("[^/]+") do
    local st = sys.stat(path == "" and "/" or path)
    if st and st.type == "dir" and st.mode & 1 == 0 and st.uid ~= uid then
      error(("the volume %s cannot be mounted: the sandbox runs as uid %d, and %s lets only " ..
             "its owner through (chmod o+x it, or set XDG_DATA_HOME to a folder others can " ..
             "pass, such as the default /var/lib/rlm)"):format(dir, uid, path == "" and "/" or path), 0)
    end
    path = path .. "/" .. part
  end
end

-- Hands a sandbox's writable folder (held by descriptor) to its uid (as root; a no-op
-- otherwise). Done before any code runs inside, so nothing can race it; later uploads set
-- their owner themselves.
local function give_to(uid, dir, recursive)
  if not uid then return end
  local ok, err = dir:chown(uid, uid, recursive)
  if not ok then error(("cannot hand the sandbox's folders to uid %d: %s"):format(uid, err), 0) end
end

-- A sandbox's folder is locked (flock on the folder itself) while its rlm lives: a process
-- killed with SIGKILL cannot remove its folders, and the next rlm to make a sandbox finds them
-- unlocked and removes them. The lock is taken before the folder holds anything, so a folder
-- that can be locked and holds a workspace belongs to nobody alive; an empty one may be one
-- being made, and is left alone. (A lock file, made and renamed into place, cost three of the
-- dozen disk writes of a sandbox's life; folders of rlms from before it still have one.)
local OLD_LOCK = ".owner-lock"
local EWOULDBLOCK = 11
local swept = false

local function hold_folder(dir)
  for _ = 1, 1000 do   -- a sweeper may be looking in, for an instant
    local held, err, code = dir:lock()
    if held or code ~= EWOULDBLOCK then return held, err end
  end
  return nil, "the folder stays locked by another process"
end

-- Removes the sandbox folders in base (a folder held) whose rlm is gone (their lock can be
-- taken). Once a process.
local function sweep_orphans(base)
  if swept then return end
  swept = true
  for _, name in ipairs(base:list() or {}) do
    local dir = name:match("^rlm%-sandbox%.%w+$") and base:open(name)
    local path = dir and dir:path()
    if path then
      local old = sys.stat(path .. "/" .. OLD_LOCK)
      local lock = old and sys.lock(path .. "/" .. OLD_LOCK)
      if lock or (not old and dir:lock()) then
        if old or sys.stat(path .. "/files") or sys.stat(path .. "/workspace") then
          base:remove(name)
        end
      end
      if lock then lock:release() end
    end
    if dir then dir:close() end
  end
end

-- The sandbox's files (workspace and transient memory) on a file system of their own, at
-- root/files: a tmpfs of limits.workspace, counted in blocks by the kernel, which refuses a
-- write or an fallocate past it (ENOSPC) whenever it comes, from the block's code or from a
-- process it left behind. It is mounted in rlm's own mount namespace (rlm.core.sandbox
-- private_mounts; for an ordinary user, with a user namespace that maps the user to itself), so
-- the host's file operations and bwrap reach it by its path as before, it outlives a restarted
-- driver, and it goes with the last process of rlm and its sandboxes. tmpfs is memory, taken
-- only as files are written: an idle sandbox holds none, and a staged context stays on disk.
-- One file per FILE_BYTES of the limit: files beyond the bytes would cost the kernel memory.
local FILE_BYTES, MIN_FILES = 8192, 4096

-- Where no file system of its own can be had (root without CAP_SYS_ADMIN in a container, a
-- kernel that refuses the namespace), the workspace is measured while code runs instead, as a
-- volume is, and rlm says so once: a limit that holds less is better than no sandbox at all.
local unenforced_said = false

local function mount_files(self)
  local files = assert(self.folder:make("files", PRIVATE, true))
  local ok, why = sandbox.private_mounts()
  if ok then
    -- mounted on the folder held, through its descriptor: never on one a link leads to
    local bytes = self.limits.workspace
    ok, why = sandbox.mount_tmpfs("/proc/self/fd/" .. files:fd(), bytes,
                                  math.max(MIN_FILES, bytes // FILE_BYTES))
  end
  self.mounted = ok and true or false
  if ok then   -- the tmpfs's root now, not the folder beneath it
    files:close()
    files = assert(self.folder:open("files"))
  else         -- the sandbox's uid passes through, as it does through the tmpfs's root (0711)
    assert(files:chmod(tonumber("711", 8)))
  end
  self.files_dir = files
  if not ok and not unenforced_said then
    unenforced_said = true
    io.stderr:write(("rlm: limits.workspace is measured while code runs, not held by a file " ..
      "system of its own (%s)\n"):format(why))
  end
end

-- Detaches the sandbox's tmpfs (lazily: processes of the sandbox still ending keep it until
-- they are gone, and write nothing past it meanwhile).
function Sandbox:unmount_files()
  if self.mounted and sandbox.unmount(self.files) then self.mounted = false end
end

--- Creates a sandbox (directories staged; the driver is started by start_driver).
-- Raises on failure, leaving nothing behind.
function M.create(opts)
  local bwrap, python, packages = tools(opts)
  local volume = opts.volume_name and M.volume_dir(opts.volume_name)
  -- Every folder handed to the sandbox is made and held by descriptor beneath base, TMPDIR's
  -- folder as opened (and, as root, checked) once: its path (links resolved) names it after.
  local tmp = sys.getenv("TMPDIR")
  if tmp == "" then tmp = nil end
  -- rlm's own mount namespace first (mount_files): a tmpfs can be mounted only on a folder
  -- opened in the namespace it is mounted in.
  sandbox.private_mounts()
  local base, why = sandbox.open_folder(tmp or "/tmp")
  if not base then
    error(tmp and ("TMPDIR is %s, where no folder can be made: %s"):format(tmp, why:sub(#tmp + 3))
          or why, 0)
  end
  refuse_unsafe(base, tmp or "/tmp", "the sandbox folder's parent",
                "set TMPDIR to a folder only root can change, or unset it (/tmp)")
  local store = volume and open_made(volume:match("^(.*)/[^/]+$"), tonumber("755", 8),
    "the volume store", "set XDG_DATA_HOME to a folder only root can change, or unset it")
  -- bwrap, as the sandbox's uid, mounts the folders by path: it must pass through; it cannot list.
  local folder, name = base:make_temp("rlm-sandbox", tonumber("711", 8))
  if not folder then
    if store then store:close() end
    base:close()
    error(tmp and ("TMPDIR is %s, where no folder can be made: %s"):format(tmp, name) or name, 0)
  end
  local root = base:path() .. "/" .. name
  local held
  held, why = hold_folder(folder)
  local owner = sandbox_owner(opts)
  local self = setmetatable({root = root, name = name, base = base, folder = folder,
                             bwrap = bwrap, python = python, packages = packages, opts = opts,
                             env = opts.env or {}, network = opts.network and true or false,
                             limits = limits.resolve(opts.limits), uid = owner or nil,
                             volume = volume ~= nil, stderr_tail = "", dying = {}}, Sandbox)
  local function abandon(err)   -- leaves nothing behind
    base:remove(name)
    self:close_folders()
    if store then store:close() end
    sweep_orphans(base)         -- orphans filling the disk must not fail every start
    base:close()
    error(err, 0)
  end
  if not held then abandon("cannot prepare the sandbox folder: " .. tostring(why)) end
  -- Staging takes disk: orphans go first. (Otherwise after the spawn, while bwrap starts.)
  if opts.repo_url or opts.context_paths then sweep_orphans(base) end
  local ok, err = pcall(function()
    if owner == nil then
      if volume then self.uid = volume_uid(opts.volume_name)
      else self.uid, self.uid_lock = take_uid() end
    end
    self.files = root .. "/files"
    mount_files(self)
    self.workspace = self.files .. "/workspace"
    self.memory = volume or (self.files .. "/memory")
    self.workspace_dir = assert(self.files_dir:make("workspace", PRIVATE, true))
    local made, why
    if volume then made, why = store:make(opts.volume_name, PRIVATE)
    else made, why = self.files_dir:make("memory", PRIVATE, true) end
    if not made then error("cannot create the volume directory: " .. why, 0) end
    self.memory_dir = made
    if volume and self.uid then check_passable(self.uid, volume) end
    if opts.repo_url then
      local staged, why = pcall(stage_repo, self.workspace_dir, opts.repo_url, opts.repo_ref)
      if not staged and tostring(why):find("No space left on device", 1, true) then
        why = ("%s (the repository is staged in the workspace, which holds %s: limits.workspace)")
              :format(why, limits.human(self.limits.workspace))
      end
      if not staged then error(why, 0) end
    end
    -- The context on disk, bound read-only at workspace/context: a large one costs no memory
    -- and none of limits.workspace.
    if opts.context_paths then
      stage_context(folder, opts.context_paths)
      self.context = root .. "/context"
      self.context_dir = assert(folder:open("context"))
    end
    -- A volume keeps what earlier sandboxes wrote, already its uid's: only its top is handed
    -- over, unless it belongs to another uid (made before volumes had uids of their own).
    give_to(self.uid, self.workspace_dir, true)
    give_to(self.uid, self.memory_dir, not volume or made:stat().uid ~= self.uid)
    -- closed to other host users, as the workspace is (volumes made before were 0755)
    if volume then assert(made:chmod(PRIVATE)) end
    if self.context_dir then give_to(self.uid, self.context_dir, true) end
  end)
  if store then store:close() end
  if not ok then
    self:unmount_files()
    if self.uid_lock then self.uid_lock:release() end
    abandon(err)
  end
  self.allowance = math.max(self.limits.workspace,
                            (volume or not self.mounted) and self:disk_usage() or 0)
  self.id = "local-" .. name:gsub("^rlm%-sandbox%.", "")
  return self
end

-- Lets go of the folders held (the sandbox's own, its workspace and memory) and its lock.
function Sandbox:close_folders()
  for _, key in ipairs{"workspace_dir", "memory_dir", "context_dir", "files_dir", "folder"} do
    if self[key] then self[key]:close() end
    self[key] = nil
  end
end

-- The environment inside: only what we set, never the host's.
function Sandbox:environment()
  local env = {PATH = "/usr/local/bin:/usr/bin:/bin", HOME = HOME, LANG = "C.UTF-8",
               PYTHONDONTWRITEBYTECODE = "1", PYTHONUNBUFFERED = "1",
               -- glibc reserves 64 MiB of address space per malloc arena and thread; under an
               -- address-space limit that would count against the code for nothing.
               MALLOC_ARENA_MAX = "2"}
  for k, v in pairs(self.env) do env[k] = tostring(v) end
  return env
end

-- bwrap's own environment: fixed, so nothing of `env` (an LD_PRELOAD, say) acts on the host
-- side of the boundary; the inside gets its environment through --clearenv and --setenv.
local BWRAP_ENV = {PATH = "/usr/bin:/bin", LANG = "C.UTF-8"}

-- The arguments that carry secrets-to-be or user data go through a descriptor (--args), so they
-- never show in the host's process list.
function Sandbox:hidden_args()
  local a = {"--clearenv"}
  for k, v in pairs(self:environment()) do
    if k:find("[=%z]") or tostring(v):find("%z") then
      error(("env: %q cannot be passed (names must not contain '=' or NUL)"):format(k), 0)
    end
    a[#a + 1] = "--setenv"; a[#a + 1] = k; a[#a + 1] = v
  end
  return table.concat(a, "\0") .. "\0"
end

-- Adds the ETC entries that exist: a file copied in (--file; the root is made read-only after),
-- a link into /usr made again, a directory bound read-only. Mounts are what bwrap spends its
-- time on, so there is no bind for every entry. A file
-- is handed over opened, not read (bwrap copies it): at every start, so a changed resolv.conf
-- reaches the next sandbox, and without a copy in rlm.
local function etc_entries(add, pass)
  local fd = FD.etc
  local root = sys.getuid() == 0
  for _, e in ipairs(ETC) do
    local path = "/etc/" .. e
    local st = sys.stat(path)
    local target = st and st.type == "link" and sys.realpath(path)
    local real = st and (target and sys.stat(target) or st)
    if target and target:sub(1, 5) == "/usr/" then
      add("--symlink", target, path)
    elseif real and real.type == "dir" then
      add("--ro-bind", path, path)
    elseif real and real.type == "file" and (root or real.mode & 4 ~= 0) then
      pass[fd] = {file = path, optional = true}   -- gone or unreadable by then: empty
      add("--perms", "0444", "--file", fd, path)
      fd = fd + 1
    end
  end
end

-- The bwrap command line that runs argv inside this sandbox, and the descriptors it reads.
function Sandbox:command(argv)
  local l = self.limits
  local a = {self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
             "--die-with-parent", "--new-session", "--seccomp", FD.seccomp, "--args", FD.args,
             "--ro-bind", "/usr", "/usr"}
  local function add(...) for _, v in ipairs{...} do a[#a + 1] = v end end
  if self.network then add("--share-net") end
  for _, d in ipairs{"bin", "lib", "lib32", "lib64", "sbin"} do
    local st = sys.stat("/" .. d)
    if st and st.type == "link" then add("--symlink", "usr/" .. d, "/" .. d)
    elseif st and st.type == "dir" then add("--ro-bind", "/" .. d, "/" .. d) end
  end
  local pass = {[FD.seccomp] = true, [FD.args] = self:hidden_args(), [FD.passwd] = PASSWD,
                [FD.group] = GROUP, [FD.workspace] = {fd = self.workspace_dir:fd()},
                [FD.memory] = {fd = self.memory_dir:fd()}}
  add("--perms", "0444", "--file", FD.passwd, "/etc/passwd",
      "--perms", "0444", "--file", FD.group, "/etc/group")
  etc_entries(add, pass)
  add(
      -- /proc read-only: its sysctl files above all (bwrap leaves /proc/sys writable as root).
      "--proc", "/proc", "--remount-ro", "/proc",
      "--dev", "/dev", "--size", l.tmp, "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
      "--size", l.tmp, "--tmpfs", "/tmp",
      "--size", 2 * l.output, "--tmpfs", CAPTURE_DIR,
      "--dir", HOME, "--bind-fd", FD.workspace, WORKSPACE, "--bind-fd", FD.memory, MEMORY)
  if self.context_dir then
    pass[FD.context] = {fd = self.context_dir:fd()}
    add("--ro-bind-fd", FD.context, WORKSPACE .. "/context")
  end
  add("--chdir", WORKSPACE, "--uid", "1000", "--gid", "1000", "--hostname", "sandbox")
  if self.packages then add(table.unpack(venv.mount_args(self.packages))) end
  add("--remount-ro", "/", "--")
  table.move(argv, 1, #argv, #a + 1, a)
  if not seccomp_program then seccomp_program = sandbox.seccomp_filter() end
  pass[FD.seccomp] = seccomp_program
  return a, pass
end

-- The processes of this rlm and all it started (its sandboxes' included): those of the user
-- namespace an ordinary user's rlm runs in (mount_files), whatever left it being rare.
local function own_processes()
  local parent = {}
  for _, name in ipairs(sys.list_dir("/proc") or {}) do
    local status = name:match("^%d+$") and sys.read_file("/proc/" .. name .. "/status")
    local ppid = status and status:match("\nPPid:%s*(%d+)")
    if ppid then parent[tonumber(name)] = tonumber(ppid) end
  end
  local me, n = sys.getpid(), 0
  for pid in pairs(parent) do
    local at, hops = pid, 0
    while at and at ~= me and at > 1 and hops < 64 do at, hops = parent[at], hops + 1 end
    if at == me then n = n + 1 end
  end
  return n
end

-- RLIMIT_NPROC counts a user's processes in each user namespace, and in every one above it up
-- to the host's, each level against the limit its namespace was made with. A sandbox of root's
-- runs as its own uid. One of an ordinary user's runs in the user namespace rlm made
-- (mount_files), where the count is this rlm's processes: the limit comes on top of them.
function Sandbox:process_limit()
  local n = self.limits.processes
  if self.uid then return n end
  return n + own_processes()
end

-- The spawn table for argv inside the sandbox (also used by shell()).
function Sandbox:spawn_options(argv)
  local l = self.limits
  local cmd, pass = self:command(argv)
  return {argv = cmd, env = BWRAP_ENV, pass = pass, uid = self.uid, gid = self.uid,
          rlimits = {as = l.memory, nproc = self:process_limit(), nofile = l.open_files,
                     fsize = l.file_size, core = 0}}
end

-- The driver reaches each sandbox compiled: Python would otherwise compile its 900 lines at
-- every start, about a third of a sandbox's start here. The sandbox's own Python, run on the
-- host over the driver's source (ours, never user code), compiles it once per machine; the
-- result is kept in the user's cache folder under a name that changes with the source (by its
-- digest, made when rlm is built) and the interpreter, checked by a hash of its bytes, and
-- handed in through a descriptor that the loader reads and closes before the driver runs.
local LOADER = ("import marshal,posix;c=marshal.loads(posix.read(%d,posix.fstat(%d).st_size));"
  .. "posix.close(%d);del marshal;exec(c)"):format(FD.driver, FD.driver, FD.driver)
local COMPILER = "import marshal,sys;sys.stdout.buffer.write(marshal.dumps(compile("
  .. "sys.stdin.buffer.read(),'<rlm-driver>','exec')))"
local compiled = {}       -- python executable -> the driver's bytecode, once per process

-- Whether path (not followed) belongs to rlm's user and no one else may write it: bytecode
-- from a folder others can write (a shared XDG_CACHE_HOME, a user's home under sudo -E) would
-- let them run code as the driver of every later sandbox. The hash only catches damage.
local function private(path)
  local st = sys.stat(path)
  return st ~= nil and st.type ~= "link" and st.uid == sys.getuid()
         and st.mode & tonumber("022", 8) == 0
end

-- The driver's bytecode for `python`, or nil when it cannot be had (the source is used then).
local function driver_bytecode(python, source, digest)
  if compiled[python] then return compiled[python] end
  local real = sys.realpath(sys.which(python) or python)
  local st = real and sys.stat(real)
  local folder = sys.cache_dir()
  if not st or not folder then return nil end
  local path = ("%s/driver-%s.pyc"):format(folder,
    sys.hash(table.concat({digest, real, st.size, st.mtime}, "\0")))
  -- Without a cache of its own the compile would be paid again by every process: the source.
  if not sys.mkdir_p(folder) or not private(folder) then return nil end
  local file = private(path) and sys.read_file(path)
  -- "<hash>\n<bytecode>", split by find: a pattern's (.*) would cost more than the hash
  local head = file and file:find("\n", 1, true)
  local code = head and file:sub(head + 1)
  if not code or sys.hash(code) ~= file:sub(1, head - 1) then
    local r = sys.run({python, "-I", "-S", "-c", COMPILER}, {input = source, timeout = 60})
    if not r or r.status ~= "exit" or r.code ~= 0 or r.stdout == "" then return nil end
    code = r.stdout
    if not sys.write_file(path, sys.hash(code) .. "\n" .. code) then return nil end
  end
  compiled[python] = code
  return code
end

function Sandbox:start_driver()
  if self.proc then return true end
  self:settle_dying()
  local host = require "rlm.core.host"
  local source = host.resource("lua/rlm/driver.py")
  if not source then error("the driver (lua/rlm/driver.py) is missing from this build", 0) end
  -- The digest of the bytes in hand: an override file (RLM_LUA_PATH) may change between reads.
  local digest = sys.getenv("RLM_LUA_PATH") and sys.hash(source) or host.digest("lua/rlm/driver.py")
  local code = driver_bytecode(self.python, source, digest)
  local argv = {self.python, "-u", "-S", "-c", code and LOADER or source, "--stdio",
                "--capture-dir", CAPTURE_DIR}
  for _, arg in ipairs(common.driver_settings(self.opts, M.payload_min)) do argv[#argv + 1] = arg end
  if self.packages then table.move(venv.driver_args(self.packages), 1, 2, #argv + 1, argv) end
  local o = self:spawn_options(argv)
  o.pass[FD.driver] = code
  o.stdin, o.stdout, o.stderr = "pipe", "pipe", "pipe"
  o.pipe_size = PIPE_SIZE
  self.max_line = limits.event_bytes(self.limits, self.opts.max_output_chars or 10000)
  o.max_line, o.max_stderr, o.stderr_rate = self.max_line, STDERR_BUFFER, STDERR_RATE
  local proc, err = sys.spawn(o)
  if not proc then error("cannot start the sandbox: " .. err, 0) end
  self.proc = proc
  self.stderr_tail = ""   -- what an earlier driver said is not this one's
  -- Here, unless create did it: the walk then runs while bubblewrap and Python start.
  sweep_orphans(self.base)
  return true
end

-- A killed driver's processes may still be ending, and writing into the workspace: what they
-- leave belongs to the level at which the code was stopped, not to the next driver's growth.
-- They end within moments of SIGKILL; the wait is bounded all the same.
local DYING_WAIT = 5

function Sandbox:settle_dying()
  if #self.dying == 0 then return end
  for _, init in ipairs(self.dying) do init:ended(DYING_WAIT) end
  self.allowance = math.max(self.allowance, self:disk_usage())
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

-- What the workspace and the volume hold together: with a volume, limits.workspace bounds the
-- two by this measure while code runs (the workspace alone is bounded by its tmpfs).
function Sandbox:disk_usage()
  local total = 0
  for _, dir in ipairs{self.workspace, self.memory} do
    total = total + (sandbox.usage(dir) or 0)
  end
  return total
end

-- Whether the workspace has grown past what it may hold; the usage, and a message when it has.
-- What it may hold is limits.workspace, or more while it is over for reasons other than the
-- code's growth (a repository bigger than the limit, or the level at which code was last
-- stopped, so that the next block can still read and clean up).
function Sandbox:check_workspace()
  local used, limit = self:disk_usage(), self.limits.workspace
  if used <= limit then
    self.allowance = limit
  elseif used > self.allowance then
    self.allowance = used
    return ("the code wrote %s to the workspace, past its limit of %s (limits.workspace)")
           :format(limits.human(used), limits.human(limit))
  end
end

-- Waits for the driver's next line; with a volume (or a workspace without a tmpfs of its own),
-- keeping it under the limit: the host measures it every WATCH_INTERVAL while code runs and
-- stops code that grows it too far.
-- deadline: a sys.now() time.
function Sandbox:watched_line(deadline)
  if self.mounted and not self.volume then
    return sys.read_line(self.proc, math.max(0, deadline - clock()))
  end
  local interval = WATCH_INTERVAL
  while true do
    local left = deadline - clock()
    local line, why = sys.read_line(self.proc, math.max(0, math.min(left, interval)))
    if line or why ~= "timeout" or left <= interval then return line, why end
    local t0 = clock()
    local over = self:check_workspace()
    if over then return nil, over, "limit" end
    interval = math.max(WATCH_INTERVAL, (clock() - t0) / WATCH_SHARE)
  end
end

-- Less room than this left on the workspace's tmpfs is full: a writer stopped there was refused.
local FULL_ROOM = 1024 * 1024

-- Tells the code, at the end of its block's stderr, when its workspace is full: what stopped a
-- write may have been a process of an earlier block, whose own error nobody sees.
function Sandbox:note_full(ev)
  local used, size = sandbox.space(self.files)
  if not self.mounted or not used or size - used >= FULL_ROOM or type(ev.stderr or "") ~= "string" then return end
  ev.stderr = (ev.stderr or "") .. ("[rlm: the workspace is full: it holds %s of %s " ..
    "(limits.workspace); writes there fail with \"No space left on device\"]\n")
    :format(limits.human(used), limits.human(size))
end

-- Raw bytes after a line (the driver's docstring): this backend carries strings of this many
-- bytes or more that way, both ways (a variable into the sandbox, a SUBMIT field back): no
-- JSON escaping or parsing, and no copy of a 100 MB value on the host.
M.payload_min = 64 * 1024

-- Reads the payloads an event announces into payload.data, by `deadline` (a sys.now() time);
-- nil, err, kind when they cannot be. The announcement is the code's to forge: each size is
-- checked against what is left of limits.submit before it is added (a sum could wrap).
function Sandbox:read_payloads(ev, deadline)
  if type(ev.payloads) ~= "table" then return nil, "the driver sent malformed payloads", "protocol" end
  local left = self.limits.submit
  for _, p in ipairs(ev.payloads) do
    if type(p) ~= "table" or type(p.name) ~= "string" or math.type(p.bytes) ~= "integer"
        or p.bytes < 0 then
      return nil, "the driver announced a malformed payload", "protocol"
    end
    if p.bytes > left then
      return nil, ("the driver announced payloads past limits.submit (%s)"):format(
        limits.human(self.limits.submit)), "protocol"
    end
    left = left - p.bytes
  end
  for _, p in ipairs(ev.payloads) do
    local data, why = sys.read_payload(self.proc, p.bytes, math.max(0, deadline - sys.now()))
    if not data then
      return nil, why == "timeout" and "no answer from the sandbox in time" or self:died_message(),
             why == "timeout" and "timeout" or "dead"
    end
    p.data = data
  end
  return ev
end

--- Sends one request line (and the payloads it announces, raw, after it) and returns the next
-- event, with the data of the payloads it announces; nil, err, kind ("timeout"|"dead"|
-- "protocol"|"limit").
function Sandbox:request(req, timeout, payloads)
  if not self.proc then return nil, "the sandbox's driver is not running", "dead" end
  if req then
    local line = type(req) == "string" and req or json.encode(req)
    local ok
    if payloads then ok = self.proc:write(line, "\n", table.unpack(payloads))
    else ok = self.proc:write(line, "\n") end
    if not ok then return nil, self:died_message(), "dead" end
  end
  local deadline = clock() + timeout    -- the event and its payloads together
  -- (stderr is not drained here: the process keeps its last STDERR_BUFFER bytes, and
  -- died_message takes them when they are wanted)
  local line, why, kind = self:watched_line(deadline)
  if not line then
    if kind then return nil, why, kind end
    if why == "timeout" then return nil, "no answer from the sandbox in time", "timeout" end
    if why == "overflow" then
      return nil, ("the driver sent a line longer than %s, past what limits.submit allows"):format(
        limits.human(self.max_line)), "protocol"
    end
    return nil, self:died_message(), "dead"
  end
  local ev, why, kind = common.decode_event(line)
  if ev and ev.ev == "done" then self:note_full(ev) end
  if ev and ev.payloads ~= nil then return self:read_payloads(ev, deadline) end
  return ev, why, kind
end

--- Sends one request line without waiting for an event: the reply to one of several open calls.
function Sandbox:send(req)
  if not (self.proc and self.proc:write(json.encode(req), "\n")) then
    return nil, self.proc and self:died_message() or "the sandbox's driver is not running"
  end
  return true
end

-- The first child of host process pid, or nil.
local function first_child(pid)
  local kids = sys.read_file(("/proc/%d/task/%d/children"):format(pid, pid))
  return kids and tonumber(kids:match("%d+"))
end

-- bwrap's child is pid 1 of the sandbox's pid namespace, and the kernel ends every process of
-- a namespace before its pid 1 ends: once it has, none of the code runs any more. Followed by
-- its pidfd, taken while bwrap (its parent) lives, so the pid cannot be another's meanwhile.
local function namespace_init(proc)
  local child = proc:pid() and first_child(proc:pid())
  return child and sys.pidfd(child) or nil
end

-- Kills the driver without waiting for its end; the namespaces still ending are kept (dying)
-- for destroy, which may need to wait for them.
function Sandbox:kill_driver()
  local proc = self.proc
  if not proc then return end
  self.proc = nil
  local init = namespace_init(proc)
  proc:kill("KILL")
  proc:close()
  local dying = {init}
  for _, d in ipairs(self.dying) do
    if d:ended() then d:close() else dying[#dying + 1] = d end
  end
  self.dying = dying
end

--- The host pid of the Python driver (the innermost process under bwrap), for diagnostics and tests.
function Sandbox:driver_pid()
  if not self.proc then return nil end
  local pid = self.proc:pid()
  for _ = 1, 4 do
    local child = first_child(pid)
    if not child then break end
    pid = child
  end
  return pid
end

-- Splits a sandbox path into the host directory it lies beneath (the workspace or the volume)
-- and the path relative to it; nil, err for anything else. The relative part is resolved later
-- by rlm.core.sandbox without following symbolic links, so code inside cannot redirect it.
-- The staged context lies on disk, outside the workspace's tmpfs: its paths lead there.
function Sandbox:beneath(path)
  local root, rel = common.place(path)
  if not root then return nil, rel end
  if self.context and root == WORKSPACE and (rel == "context" or rel:sub(1, 8) == "context/") then
    return self.context, rel == "context" and "." or rel:sub(9), WORKSPACE .. "/context", true
  end
  return root == WORKSPACE and self.workspace or self.memory, rel, root
end

function Sandbox:upload(path, data)
  local dir, rel, _, context = self:beneath(path)
  if not dir then return nil, rel end
  if context then return nil, "the context is read-only (context_paths)" end
  return sandbox.write_beneath(dir, rel, data, {mkdirs = true, uid = self.uid, gid = self.uid})
end

function Sandbox:download(path, offset, length)
  local dir, rel = self:beneath(path)
  if not dir then return nil, rel end
  return sandbox.read_beneath(dir, rel, offset, length)
end

--- Entries under dir, recursively: {path=, type="file"|"dir"|"link"|"other", size=}, sorted.
function Sandbox:list(dir)
  dir = dir or WORKSPACE
  local host, rel, prefix = self:beneath(dir)
  if not host then return nil, rel end
  local entries, err = sandbox.list_beneath(host, rel)
  if not entries then return nil, err end
  for _, e in ipairs(entries) do e.path = prefix .. "/" .. e.path end
  -- The whole workspace holds the context too, which its own file system does not.
  if self.context and host == self.workspace and rel == "." then
    local at = #entries + 1
    for k, e in ipairs(entries) do
      if e.path == WORKSPACE .. "/context" then at = k + 1 end
    end
    for _, e in ipairs(sandbox.list_beneath(self.context, ".") or {}) do
      e.path = WORKSPACE .. "/context/" .. e.path
      table.insert(entries, at, e)
      at = at + 1
    end
  end
  return entries
end

--- Runs a shell command in a fresh process inside the same file system view. Its output is
-- held to limits.output: a command that prints more is stopped.
function Sandbox:shell(cmd, timeout)
  local o = self:spawn_options{"/bin/sh", "-c", cmd}
  o.timeout, o.max_output = timeout or 60, self.limits.output
  local r, err = sys.run(o.argv, o)
  if not r then return nil, err end
  local output = r.stdout .. r.stderr
  if r.cut then
    output = output .. ("\n[stopped: the command printed more than %s (limits.output)]\n")
                       :format(limits.human(self.limits.output))
  end
  return {exit = r.status == "exit" and r.code or 128 + r.code, output = output}
end

-- Removes the sandbox's folder, its files' tmpfs first: a folder this could not empty keeps
-- it, and stays one that a later rlm finds unlocked and removes. By descriptor: nothing renamed
-- or swapped for a link on the way turns the removal elsewhere.
function Sandbox:remove_folder()
  self:unmount_files()
  if self.mounted then return false end
  local ok = self.folder:remove("files")
  if self.context then ok = self.folder:remove("context") and ok end
  return ok and self.base:remove(self.name)
end

--- Kills the driver and removes the transient directories; the volume stays. Idempotent, and
-- never yields (it may run from a finaliser).
function Sandbox:destroy()
  self:kill_driver()
  if self.root then
    -- The folder goes while the code dies (removal never follows a link the code put there).
    -- Should the code's last moments have written into it, it goes again once every process
    -- of the sandbox has ended.
    if not self:remove_folder() then
      for _, init in ipairs(self.dying) do init:ended(5) end
      self:remove_folder()
    end
    self:close_folders()
    self.base:close()
    self.root = nil
  end
  if self.uid_lock then   -- the uid is free again once its last process has ended
    self.uid_lock:release()
    self.uid_lock = nil
  end
  for _, init in ipairs(self.dying) do init:close() end
  self.dying = {}
end

return M
