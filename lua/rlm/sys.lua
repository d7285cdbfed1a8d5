--- System helpers: the C primitives of rlm.core.sys plus the waiting ones, built on
-- rlm.async so they never block other tasks.
--
--   sys.now(), sys.time(), sys.sleep(s), sys.getenv(n), sys.setenv(n, v), sys.environ()
--   sys.read_file(p), sys.write_file(p, data[, mode])  (atomic: temp file + rename)
--   sys.mkdir_p(p), sys.list_dir(p), sys.stat(p), sys.remove(p[, recursive]), sys.mkdtemp()
--   sys.spawn{argv=, env=, cwd=, stdin=, stdout=, stderr=} -> process
--   sys.read_line(proc[, timeout]) -> line | nil, "eof"|"timeout"
--   sys.wait(proc[, timeout]) -> "exit"|"signal", code | nil, "timeout"
--   sys.run(argv[, opts]) -> {status, code, stdout, stderr} | nil, err
local core = require "rlm.core.sys"
local async = require "rlm.async"

local M = setmetatable({}, {__index = core})

M.sleep = async.sleep

--- The next stdout line of a process, waiting for it; nil, "eof" when the pipe has closed.
function M.read_line(proc, timeout)
  local deadline = timeout and core.now() + timeout
  while true do
    local line = proc:line()
    if line then return line end
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

--- Runs a command to completion, collecting its output. opts: env, cwd, input, timeout.
function M.run(argv, opts)
  opts = opts or {}
  local proc, err = core.spawn{argv = argv, env = opts.env, cwd = opts.cwd,
                               stdin = opts.input and "pipe" or "null"}
  if not proc then return nil, err end
  if opts.input then
    proc:write(opts.input)
  end
  local out, errs = {}, {}
  local deadline = opts.timeout and core.now() + opts.timeout
  while not (proc:eof("stdout") and proc:eof("stderr")) do
    if opts.input and proc:pending_input() == 0 then proc:close_stdin() end
    local left = deadline and deadline - core.now()
    if left and left <= 0 then
      proc:kill("KILL")
      proc:close()
      return nil, "timed out after " .. opts.timeout .. " s: " .. argv[1]
    end
    async.await(proc:id(), left)
    out[#out + 1] = proc:read("stdout")
    errs[#errs + 1] = proc:read("stderr")
  end
  out[#out + 1] = proc:read("stdout")
  errs[#errs + 1] = proc:read("stderr")
  local how, code = M.wait(proc, deadline and math.max(0.1, deadline - core.now()))
  proc:close()
  return {status = how, code = code, stdout = table.concat(out), stderr = table.concat(errs)}
end

return M
