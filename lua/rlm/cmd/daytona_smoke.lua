--- `rlm daytona-smoke`: checks a Daytona setup without any model, one timed step at a time.
-- It looks inside the Daytona backend (the sandbox's create steps, its toolbox and session)
-- on purpose: it is the command that says which part of a setup is at fault.
local args = require "rlm.args"
local daytona = require "rlm.daytona"
local rlm = require "rlm"
local sys = require "rlm.sys"

local M = {}

M.help = [[
usage: rlm daytona-smoke [--repo URL] [--ref REF] [--volume NAME]

Checks a Daytona setup end to end, without any model: the API and key, the API and daemon
versions, a volume (default rlm-smoke), a sandbox with the volume, a repository in the workspace
(--repo at --ref; without it, a small local repository staged at a tag), an execute, a write to
the volume read back through the file API, and a stop from outside, which deletes the sandbox
(rlm's sandboxes are ephemeral: a stopped one is deleted, by Daytona, at once).
Prints each step with its time and a verdict; exits 0 when everything works, 1 otherwise.
Uses DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN + DAYTONA_ORGANIZATION_ID) and DAYTONA_API_URL.]]

local FAILED = {}
local counted = 0

local function line(name, seconds, detail)
  print(("  %-16s %8.0f ms  %s"):format(name, seconds * 1e3, detail))
end

-- Runs one step; a failure prints it and ends the recipe with FAILED.
local function step(name, fn)
  local t0 = sys.now()
  local ok, detail = pcall(fn)
  if not ok then
    line(name, sys.now() - t0, "FAILED")
    error(setmetatable({step = name, message = tostring(detail)}, FAILED), 0)
  end
  counted = counted + 1
  line(name, sys.now() - t0, detail or "ok")
end

local function check(cond, message)
  if not cond then error(message, 0) end
end

-- Runs git on this machine; its stdout, or raises.
local function git(dir, ...)
  local r = assert(sys.run({"git", "-C", dir, "-c", "user.name=rlm", "-c", "user.email=rlm@localhost",
                            "-c", "commit.gpgsign=false", ...}, {timeout = 60}))
  check(r.status == "exit" and r.code == 0, "git " .. table.concat({...}, " ") .. ": " .. r.stderr)
  return r.stdout
end

-- Without --repo: a two-commit repository made here, staged at its first tag, which exercises
-- what a cloud sandbox cannot do by itself (see a path on this machine) and the ref.
local function local_repo()
  local dir = assert(sys.mkdtemp("rlm-smoke-repo"))
  local ok, err = pcall(function()
    git(dir, "init", "--quiet")
    for _, v in ipairs{"v1", "v2"} do
      assert(sys.write_file(dir .. "/VERSION", v .. "\n"))
      git(dir, "add", "VERSION")
      git(dir, "commit", "--quiet", "-m", v)
      git(dir, "tag", v)
    end
  end)
  if not ok then
    sys.remove(dir, true)
    return nil, err
  end
  return dir
end

local function smoke(opt)
  local client
  step("credentials", function()
    client = daytona.client{}
    local ours = assert(client:list_sandboxes{labels = {rlm = "1"}})
    return ("%s accepts the key (%d sandboxes labelled rlm=1)"):format(client.api_url, #ours)
  end)
  step("api version", function()
    local cfg = assert(client:config())
    return ("Daytona %s; rlm speaks the wire format of SDK %s"):format(
      tostring(cfg.version or "(not given)"), daytona.SDK_VERSION)
  end)
  step("volume", function()
    local vol = assert(client:volume(opt.volume, {create = true, wait = true}))
    return ("%s is %s"):format(opt.volume, vol.state)
  end)

  local repo, ref, made = opt.repo, opt.ref, nil
  if not repo then
    made = local_repo()
    repo, ref = made, made and "v1"
  end
  local cleanup <close> = setmetatable({}, {__close = function()
    if made then sys.remove(made, true) end
  end})
  local interp <close> = rlm.interpreter{backend = "daytona", volume_name = opt.volume, timeout = 600,
                                        repo_url = repo, repo_ref = ref}
  local id
  step("sandbox", function()
    interp:start()
    local sb = interp.sandbox
    id = sb.id
    local parts = {}
    for _, s in ipairs(sb.steps or {}) do
      if s.name ~= "volume" then parts[#parts + 1] = ("%s %.0f ms"):format(s.name, s.seconds * 1e3) end
    end
    return ("%s (%s, then the driver)"):format(id, table.concat(parts, ", "))
  end)
  step("daemon", function()
    local sb = interp.sandbox
    local v = assert(sb.toolbox:version())
    -- The daemon shapes command logs by the SDK version we send: JSON with stdout and stderr
    -- apart, or plain text from an older daemon (both are read).
    local logs = assert(sb.toolbox:logs(sb.session, sb.command_id))
    return ("daemon %s; command logs as %s"):format(tostring(v.version),
      type(logs) == "table" and "JSON (stdout and stderr apart)" or "plain text (an older daemon)")
  end)
  if repo then
    step("repo", function()
      local out, run = interp:execute([[
import os
root = "/home/daytona/workspace/repo"
names = sorted(os.listdir(root))
version = open(os.path.join(root, "VERSION")).read().strip() if "VERSION" in names else None
SUBMIT(n=len(names), first=names[:5], version=version)
]])
      check(out, "cannot see the repository: " .. tostring(run.error))
      if made then
        check(out.version == "v1", "the repository is not at ref v1: VERSION is " .. tostring(out.version))
        return "a repository on this machine, staged at ref v1"
      end
      return ("%d entries in workspace/repo (%s)"):format(out.n, table.concat(out.first, ", "))
    end)
  end
  step("execute", function()
    local out, run = interp:execute("import platform\nSUBMIT(answer=6*7, python=platform.python_version())")
    check(out and out.answer == 42, "expected answer 42, got " .. tostring(out and out.answer or run.error))
    return ("SUBMIT(answer=6*7) -> 42 (Python %s)"):format(out.python)
  end)
  local token = ("smoke-%d-%d"):format(sys.getpid(), math.floor(sys.time() * 1000))
  local path = "/home/daytona/memory/rlm-smoke/" .. token .. ".txt"
  step("volume write", function()
    local _, run = interp:execute([[
import os
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    f.write(token)
]], {path = path, token = token})
    check(not run.error, tostring(run.error))
    return path
  end)
  step("volume read", function()
    local data, err = interp:download(path)
    check(data == token, "read back " .. tostring(data or err) .. " instead of " .. token)
    return "the token came back through the file API"
  end)
  step("stop deletes", function()
    -- rlm's sandboxes are ephemeral (autoDeleteInterval 0): stopping one, from outside or by
    -- auto-stop, deletes it (apps/api/src/sandbox/services/sandbox.service.ts, stop), so a
    -- lost one costs nothing once idle. The interpreter then says its sandbox is gone.
    assert(client:stop_sandbox(id, {wait = false}))
    local sb, err = client:wait_sandbox(id, {"destroyed"}, 120)
    check(sb, "the stopped sandbox was not deleted: " .. tostring(err))
    local ok, why = pcall(interp.execute, interp, "SUBMIT(answer=6*7)")
    check(not ok and tostring(why):find("is gone", 1, true),
          "the interpreter did not say its sandbox is gone: " .. tostring(why))
    return "stopped, hence deleted (ephemeral); the interpreter says so"
  end)
  step("delete", function()
    interp:shutdown()
    local sb, err = client:get_sandbox(id)
    check(not sb and err.status == 404 or sb and (sb.state == "destroyed" or sb.state == "destroying"),
          "the sandbox is still there: " .. tostring(sb and sb.state or err))
    return sb and ("sandbox is " .. sb.state) or "sandbox is gone"
  end)
end

--- Runs the steps; returns the exit code (0 when every step passed).
function M.run(opt)
  opt.volume = opt.volume or "rlm-smoke"
  local started = sys.now()
  counted = 0
  print("daytona-smoke" .. (opt.repo and (" (repo " .. opt.repo .. ")") or ""))
  local ok, err = pcall(smoke, opt)
  if ok then
    print(("daytona-smoke: PASS (%d steps in %.1f s)"):format(counted, sys.now() - started))
    return 0
  end
  if getmetatable(err) ~= FAILED then error(err, 0) end   -- an interrupt, or a bug of ours
  print(("daytona-smoke: FAIL at %s: %s"):format(err.step, err.message))
  return 1
end

function M.main(argv)
  local opts, rest = args.parse(argv, {repo = "string", ref = "string", volume = "string"})
  if #rest > 0 then
    return args.usage("daytona-smoke", ("unexpected argument '%s'"):format(rest[1]), M.help)
  end
  if opts.ref and not opts.repo then
    return args.usage("daytona-smoke", "--ref needs --repo")
  end
  return M.run{repo = opts.repo, ref = opts.ref, volume = opts.volume}
end

return M
