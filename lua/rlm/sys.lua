--- System helpers: the C primitives of rlm.core.sys (the OS) and rlm.core.proc (processes),
-- in one table, plus the waiting ones, built on rlm.async so they never block other tasks.
--
--   sys.now(), sys.time(), sys.sleep(s), sys.getenv(n), sys.setenv(n, v), sys.environ()
--   sys.cpu_time() -> seconds of CPU this process has used (all threads), for benchmarks
--   sys.read_file(p), sys.write_file(p, data[, mode])  (atomic: temp file + rename)
--   sys.mkdir_p(p), sys.list_dir(p), sys.stat(p), sys.remove(p[, recursive]), sys.mkdtemp()
--   sys.spawn{argv=, env=, cwd=, stdin=, stdout=, stderr=} -> process
--   sys.read_line(proc[, timeout]) -> line | nil, "eof"|"timeout"|"overflow"
--   sys.read_payload(proc, n[, timeout]) -> n raw bytes | nil, "eof"|"timeout"
--   sys.wait(proc[, timeout]) -> "exit"|"signal", code | nil, "timeout"
--   sys.run(argv[, opts]) -> {status, code, stdout, stderr} | nil, err
--   sys.count_processes(uid) -> how many processes the host user uid runs
--   sys.random_hex(bytes) -> that many random bytes from the kernel, in hex (ids, tokens)
--   sys.hash(s) -> 64-bit FNV-1a of s in hex (cache keys, manifests)
--   sys.lock(p[, create]) -> lock (lock:release()) | nil, msg, errno: an exclusive flock on
--     file p, which the kernel lets go when this process ends in any way
--   sys.cache_dir() -> rlm's cache folder ($XDG_CACHE_HOME/rlm or ~/.cache/rlm) | nil
--   sys.pidfd(pid) -> h | nil, msg: a process that is not our child, followed to its end
--     (h:ended([timeout]), blocking); spawn's pass also takes {file = path[, optional = true]}
local core = require "rlm.core.sys"
local processes = require "rlm.core.proc"
local async = require "rlm.async"

local M = setmetatable({}, {__index = core})
M.spawn, M.kill = processes.spawn, processes.kill

M.sleep = async.sleep

--- `bytes` random bytes from /dev/urandom, as hex: session ids and tokens.
function M.random_hex(bytes)
  local f = assert(io.open("/dev/urandom", "rb"))
  local data = f:read(bytes)
  f:close()
  return (data:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

--- rlm's cache folder: $XDG_CACHE_HOME/rlm, else $HOME/.cache/rlm; nil when neither is set.
function M.cache_dir()
  local base = core.getenv("XDG_CACHE_HOME")
  if not base or base == "" then
    local home = core.getenv("HOME")
    if not home or home == "" then return nil end
    base = home .. "/.cache"
  end
  return base .. "/rlm"
end

--- The next stdout line of a process, waiting for it; nil, "eof" when the pipe has closed,
-- nil, "overflow" when the process sent a line longer than spawn's max_line.
function M.read_line(proc, timeout)
  local deadline = timeout and core.now() + timeout
  while true do
    local line = proc:line()
    if line then return line end
    if proc:overflowed() then return nil, "overflow" end
    if proc:eof("stdout") then
      local rest = proc:read("stdout")
      if #rest > 0 then return rest end
      return nil, "eof"
    end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then return nil, "timeout" end
    local ok, why = async.await(proc:id(), left)
    if not ok then return nil, why end
  end
end

--- The next n raw bytes of a process's stdout (announced by the line before them), as one
-- string read in place; nil, "eof" | "timeout".
function M.read_payload(proc, n, timeout)
  local deadline = timeout and core.now() + timeout
  proc:expect(n)
  while true do
    local data = proc:payload()
    if data then return data end
    if proc:eof("stdout") then return nil, "eof" end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then return nil, "timeout" end
    local ok, why = async.await(proc:id(), left)
    if not ok then return nil, why end
  end
end

--- Waits for a process to end; returns how it ended ("exit", code or "signal", number).
function M.wait(proc, timeout)
  local deadline = timeout and core.now() + timeout
  while true do
    local how, code = proc:status()
    if how then return how, code end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then return nil, "timeout" end
    local ok, why = async.await(proc:id(), left and math.min(left, 0.05) or 0.05)
    if not ok and why ~= "timeout" then return nil, why end
  end
end

--- Runs a command to completion, collecting its output. opts: env, cwd, input, timeout,
-- max_output (bytes of stdout and of stderr kept; past it the command is killed and the result
-- says cut = true), and spawn's pass, uid, gid and rlimits.
function M.run(argv, opts)
  opts = opts or {}
  local proc, err = processes.spawn{argv = argv, env = opts.env, cwd = opts.cwd,
                               stdin = opts.input and "pipe" or "null", pass = opts.pass,
                               uid = opts.uid, gid = opts.gid, rlimits = opts.rlimits}
  if not proc then return nil, err end
  -- Closed however this ends: a cancelled task (an MCP call closed mid-run) kills the command.
  local _ <close> = proc
  if opts.input then
    proc:write(opts.input)
  end
  local out, errs = {}, {}
  local sizes = {0, 0}
  local deadline = opts.timeout and core.now() + opts.timeout
  local function collect()
    for k, list in ipairs{out, errs} do
      local more = proc:read(k == 1 and "stdout" or "stderr")
      sizes[k] = sizes[k] + #more
      list[#list + 1] = more
    end
    return opts.max_output and (sizes[1] > opts.max_output or sizes[2] > opts.max_output)
  end
  local cut = false
  while not (proc:eof("stdout") and proc:eof("stderr")) do
    if opts.input and proc:pending_input() == 0 then proc:close_stdin() end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then
      proc:kill("KILL")
      proc:close()
      return nil, "timed out after " .. opts.timeout .. " s: " .. argv[1]
    end
    async.await(proc:id(), left)
    if collect() then
      cut = true
      proc:kill("KILL")
      break
    end
  end
  cut = collect() or cut
  local how, code = M.wait(proc, deadline and math.max(0.1, deadline - core.now()))
  proc:close()
  local stdout, stderr = table.concat(out), table.concat(errs)
  if cut then
    stdout, stderr = stdout:sub(1, opts.max_output), stderr:sub(1, opts.max_output)
  end
  return {status = how, code = code, stdout = stdout, stderr = stderr, cut = cut}
end

--- How many processes the host user uid runs now (from /proc).
function M.count_processes(uid)
  local n = 0
  for _, name in ipairs(core.list_dir("/proc") or {}) do
    if name:match("^%d+$") then
      local status = core.read_file("/proc/" .. name .. "/status")
      local real = status and status:match("\nUid:%s*(%d+)")
      if real and tonumber(real) == uid then n = n + 1 end
    end
  end
  return n
end

return M
