-- daytona-smoke: checks a Daytona setup without any model, one timed step at a time.
-- params: {repo = URL, ref = REF, volume = NAME, args = {"repo=URL", ...}}; returns 0 or 1.
local rlm = require "rlm"
local daytona = require "rlm.daytona"
local sys = require "rlm.sys"

local params = ... or {}
for _, a in ipairs(params.args or {}) do
  local k, v = a:match("^(%w+)=(.*)$")
  if k == "repo" or k == "ref" or k == "volume" then
    params[k] = v
  else
    error(("unknown argument '%s' (have: repo=URL, ref=REF, volume=NAME)"):format(a), 0)
  end
end
local VOLUME = params.volume or "rlm-smoke"

local started = sys.now()
local count = 0
local FAILED = {}

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
  count = count + 1
  line(name, sys.now() - t0, detail or "ok")
end

local function check(cond, message)
  if not cond then error(message, 0) end
end

local function smoke()
  local client
  step("credentials", function()
    client = daytona.client{}
    local ours = assert(client:list_sandboxes{labels = {rlm = "1"}})
    return ("%s accepts the key (%d sandboxes labelled rlm=1)"):format(client.api_url, #ours)
  end)
  step("volume", function()
    local vol = assert(client:volume(VOLUME, {create = true, wait = true}))
    return ("%s is %s"):format(VOLUME, vol.state)
  end)

  local interp <close> = rlm.interpreter{backend = "daytona", volume_name = VOLUME, timeout = 600,
                                        repo_url = params.repo, repo_ref = params.ref}
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
  if params.repo then
    step("repo", function()
      local out, run = interp:execute([[
import os
names = sorted(os.listdir("/home/daytona/workspace/repo"))
SUBMIT(n=len(names), first=names[:5])
]])
      check(out, "cannot see the repository: " .. tostring(run.error))
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
  step("delete", function()
    interp:shutdown()
    local sb, err = client:get_sandbox(id)
    check(not sb and err.status == 404 or sb and (sb.state == "destroyed" or sb.state == "destroying"),
          "the sandbox is still there: " .. tostring(sb and sb.state or err))
    return sb and ("sandbox is " .. sb.state) or "sandbox is gone"
  end)
end

print("daytona-smoke" .. (params.repo and (" (repo " .. params.repo .. ")") or ""))
local ok, err = pcall(smoke)
if ok then
  print(("daytona-smoke: PASS (%d steps in %.1f s)"):format(count, sys.now() - started))
  return 0
end
if getmetatable(err) ~= FAILED then error(err, 0) end   -- an interrupt, or a bug of ours
print(("daytona-smoke: FAIL at %s: %s"):format(err.step, err.message))
return 1
