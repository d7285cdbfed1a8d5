--- `rlm exec 'CODE'`: runs one block of Python in a fresh sandbox.
local args = require "rlm.args"
local json = require "rlm.json"

local M = {}

M.help = [[
usage: rlm exec CODE|- [--backend local|daytona] [--timeout S] [--volume NAME] [--network]
                      [--limit NAME=VALUE]... [--max-output N] [--stdin FILE|-] [--json]
                      [--venv DIR]

Runs one block of Python in a fresh sandbox (`-` reads the code from stdin). Prints the fields
the code SUBMITs as one JSON object; without a SUBMIT, prints what the code printed. With --json,
prints everything as one JSON object: out, stdout, stderr, error, exit, duration, timed_out.
The code's stderr (and its stdout when it submitted) goes to stderr. Exits 1 when the code raised.
Output past --max-output characters (default 10000) keeps its head and tail around a line
"... [N characters cut] ...".

  --timeout S     stop the code after S seconds (default 900)
  --max-output N  keep at most N characters of stdout and of stderr (default 10000)
  --stdin FILE    what the code reads from sys.stdin (`-`: rlm's own stdin; the code then
                  comes as an argument)
  --volume NAME   mount the durable volume NAME at /home/daytona/memory
  --network       allow network access (local backend: off by default)
  --venv DIR      the Python packages of a virtualenv, or of a folder of packages, read-only
                  (local backend; default RLM_VENV)
  --limit N=V     a resource limit of the sandbox, repeatable: memory, processes, open_files,
                  file_size, tmp, workspace, output, submit (sizes as 512M, 2G; see
                  "Isolation" in the README for the defaults)]]

local SPEC = {backend = "string", timeout = "number", volume = "string", json = "flag",
              network = "flag", limit = "assign", max_output = "number", stdin = "string",
              venv = "string"}

local STDIN_FILE = "/home/daytona/workspace/.rlm/stdin"

-- The bytes --stdin names.
local function stdin_data(name)
  if name == "-" then return io.stdin:read("a") end
  local data, err = require("rlm.sys").read_file(name)
  if not data then error("cannot read --stdin " .. name .. ": " .. tostring(err), 0) end
  return data
end

function M.main(argv)
  local opts, rest = args.parse(argv, SPEC)
  local code = rest[1]
  if not code or #rest > 1 then
    return args.usage("exec", "give the code as one argument, or - to read it from stdin", M.help)
  end
  if code == "-" and opts.stdin == "-" then
    args.fail("the code and --stdin cannot both come from stdin: give the code as an argument")
  end
  if code == "-" then code = io.stdin:read("a") end
  local data = opts.stdin and stdin_data(opts.stdin)
  local interp <close> = require("rlm").interpreter{
    -- --timeout is the code's; the sandbox lives a little longer, so the code gets all of it
    backend = opts.backend, execute_timeout = opts.timeout,
    timeout = opts.timeout and opts.timeout + 60, volume_name = opts.volume,
    network = opts.network or nil, limits = opts.limit, venv = opts.venv,
    max_output_chars = opts.max_output and math.tointeger(opts.max_output) or nil,
  }
  if data then
    -- The bytes become the code's sys.stdin (binary-safe: undecodable bytes as surrogates).
    local ok, err = interp:upload(STDIN_FILE, data)
    if not ok then error("cannot give the code its stdin: " .. err, 0) end
    local _, r = interp:execute(("__import__('sys').stdin = open(%q, encoding='utf-8', "
      .. "errors='surrogateescape')"):format(STDIN_FILE))
    if r.error then error("cannot give the code its stdin: " .. r.error, 0) end
  end
  local out, run = interp:execute(code)
  if opts.json then
    print(json.encode({out = out, stdout = run.stdout, stderr = run.stderr, error = run.error,
                       traceback = run.traceback, exit = run.exit, duration = run.duration,
                       timed_out = run.timed_out}))
    return run.error and 1 or 0
  end
  if out then
    io.stderr:write(run.stdout)
    print(json.encode(out))
  else
    io.stdout:write(run.stdout)
  end
  io.stderr:write(run.stderr)
  if run.error then
    local msg = run.traceback or run.error
    io.stderr:write(msg, msg:sub(-1) == "\n" and "" or "\n")
    return 1
  end
  return 0
end

return M
