--- Helpers for the Lua tests: assertions, stand-in servers, temporary directories.
local sys = require "rlm.sys"

local T = {}

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  if math.type(v) == "float" then return string.format("%.17g (float)", v) end
  return tostring(v)
end

--- Deep equality; on failure the message names the first differing path.
local function diff(a, b, path)
  if type(a) ~= "table" or type(b) ~= "table" then
    if a == b and math.type(a) == math.type(b) then return nil end
    return string.format("%s: expected %s, got %s", path, show(b), show(a))
  end
  for k, v in pairs(b) do
    local d = diff(a[k], v, path .. "." .. tostring(k))
    if d then return d end
  end
  for k, v in pairs(a) do
    if b[k] == nil then return string.format("%s.%s: unexpected %s", path, tostring(k), show(v)) end
  end
  return nil
end

--- eq(actual, expected[, what]): integers and floats are told apart.
function T.eq(actual, expected, what)
  local d = diff(actual, expected, what or "value")
  if d then error(d, 2) end
end

function T.truthy(v, what)
  if not v then error((what or "value") .. " should be true, got " .. show(v), 2) end
  return v
end

--- Asserts that s contains the plain text needle.
function T.contains(s, needle, what)
  if type(s) ~= "string" or not s:find(needle, 1, true) then
    error(string.format("%s: %s does not contain %q", what or "text", show(s), needle), 2)
  end
end

--- Asserts fn raises an error containing needle; returns the message.
function T.raises(fn, needle)
  local ok, err = pcall(fn)
  if ok then error("expected an error containing " .. show(needle), 2) end
  if needle and not tostring(err):find(needle, 1, true) then
    error(string.format("error %s does not contain %q", show(tostring(err)), needle), 2)
  end
  return err
end

local SKIP = {}
function T.skip(reason) error(setmetatable({reason = reason}, SKIP), 0) end
function T.is_skip(e) return getmetatable(e) == SKIP end

local cleanups = {}
--- Registers fn to run after the current test, pass or fail.
function T.defer(fn) cleanups[#cleanups + 1] = fn end
function T.cleanup()
  for i = #cleanups, 1, -1 do pcall(cleanups[i]) end
  cleanups = {}
end

--- A temporary directory removed after the test. Others may pass through it (not list it), as
-- the sandbox's uid must when a volume lives in it and rlm runs as root.
function T.tmpdir()
  local dir = assert(sys.mkdtemp("rlm-test"))
  assert(sys.chmod(dir, tonumber("711", 8)))
  T.defer(function() sys.remove(dir, true) end)
  return dir
end

--- Writes a Lua script (src) into a temporary directory; returns its path, for `rlm run`.
function T.lua_script(src)
  local path = T.tmpdir() .. "/script.lua"
  assert(sys.write_file(path, src))
  return path
end

--- Starts a stand-in server (argv without --port) and waits for its READY line.
-- Returns {url = "http://127.0.0.1:P", proc = process}; it is stopped after the test.
function T.server(argv, timeout)
  local full = table.move(argv, 1, #argv, 1, {})
  full[#full + 1] = "--port"
  full[#full + 1] = "0"
  local proc = assert(sys.spawn{argv = full, stdin = "null", stderr = "inherit"})
  T.defer(function() proc:kill("TERM"); sys.wait(proc, 10); proc:close() end)
  local line, err = sys.read_line(proc, timeout or 60)
  if not line then error("server " .. argv[1] .. " did not start: " .. tostring(err), 2) end
  local url = line:match("^READY (http://127%.0%.0%.1:%d+)$")
  if not url then error("server " .. argv[1] .. " printed " .. show(line) .. " instead of READY", 2) end
  return {url = url, proc = proc}
end

--- Starts the Daytona stand-in (T.server) with its state in a folder of the test's own, removed
-- after the test whatever became of the stand-in: a folder of its own making it removes only
-- when it ends by SIGTERM or SIGINT, and some tests kill it.
function T.daytona_standin(key, ...)
  return T.server{"tests/standins/daytona", "--api-key", key, "--root", T.tmpdir(), ...}
end

--- The processes below pid (its children, theirs, ...), each {pid = n, cmdline = "a\0b\0"}:
-- a test looks only at what it started, never at the other processes of the machine (another
-- test run's among them).
function T.descendants(pid)
  local parent, cmdline = {}, {}
  for _, name in ipairs(assert(sys.list_dir("/proc"))) do
    local stat = name:match("^%d+$") and sys.read_file("/proc/" .. name .. "/stat")
    local ppid = stat and stat:match("^%d+ %b() %S+ (%d+)")
    if ppid then
      parent[tonumber(name)] = tonumber(ppid)
      cmdline[tonumber(name)] = sys.read_file("/proc/" .. name .. "/cmdline") or ""
    end
  end
  local function below(p)
    local q = parent[p]
    while q and q ~= pid do q = parent[q] end
    return q == pid
  end
  local out = {}
  for p in pairs(parent) do
    if p ~= pid and below(p) then out[#out + 1] = {pid = p, cmdline = cmdline[p]} end
  end
  table.sort(out, function(a, b) return a.pid < b.pid end)
  return out
end

--- Serves each request with handler(req) in a task of its own, on this process's event loop,
-- until the test ends (rlm.core.httpd). Returns "http://127.0.0.1:P" and the server.
function T.serve(handler, opts)
  local async, httpd = require "rlm.async", require "rlm.core.httpd"
  local server = assert(httpd.listen(opts or {host = "127.0.0.1", port = 0}))
  local stop = false
  local loop_task = async.spawn(function()
    while not stop do
      async.await(server:id(), 0.05)
      while true do
        local req = server:next()
        if not req then break end
        async.spawn(handler, req)
      end
    end
  end)
  T.defer(function() stop = true; loop_task:join(5); server:close() end)
  return ("http://127.0.0.1:%d"):format(server:port()), server
end

--- The rlm binary under test.
T.rlm = assert(sys.realpath("/proc/self/exe"))

--- Runs the rlm binary with args; returns {code, stdout, stderr}.
function T.run_rlm(args, opts)
  opts = opts or {}
  local argv = {T.rlm, table.unpack(args)}
  local res = assert(sys.run(argv, {env = opts.env, cwd = opts.cwd, input = opts.input,
                                    timeout = opts.timeout or 60}))
  return res
end

return T
