-- diagnostics: checks the machine and configuration, and says how to fix each failure.
-- Every check goes through rlm's public API, so what it reports is what a run would meet: the
-- backend's own start-up checks and messages, a sandbox that really runs, the provider table.
local rlm = require "rlm"
local llm = require "rlm.llm"
local sys = require "rlm.sys"

local params = ... or {}
local quick = false
for _, a in ipairs(params.positional) do
  if a == "quick" then quick = true else error("unknown argument '" .. a .. "' (valid: quick)", 0) end
end
local backend = params.backend or "local"

local failures = 0
local function report(status, what, detail, fix)
  if status == "FAIL" then failures = failures + 1 end
  print(("%-4s  %-28s %s"):format(status, what, detail or ""))
  if fix and status ~= "ok" then print(("      fix: %s"):format(fix)) end
end

-- The first line of an error, without a Lua source position.
local function message(err)
  return (tostring(err):gsub("^[^:\n]+:%d+: ", ""):match("^[^\n]*"))
end

-- The sandbox --------------------------------------------------------------------------------
-- rlm.interpreter{} runs the backend's checks (tools installed, credentials set) before it
-- creates anything; its message names what is missing and how to get it.
local made, err = pcall(rlm.interpreter, {backend = backend, timeout = 120})
report(made and "ok" or "FAIL", backend .. " backend", made and "its tools and settings are in place"
  or message(err), not made and (backend == "local" and "sudo apt-get install bubblewrap python3"
  or "set the variables the message names") or nil)

local function in_sandbox(opts, code, vars)
  opts.backend, opts.timeout = backend, 120
  local interp <close> = rlm.interpreter(opts)
  local out, run = interp:execute(code, vars)
  if not out then error(run.error or "no SUBMIT", 0) end
  return out
end

if made then
  local ok, out = pcall(in_sandbox, {}, "import platform\nSUBMIT(ok=True, python=platform.python_version())")
  report(ok and "ok" or "FAIL", backend .. " sandbox",
    ok and ("runs SUBMIT(ok=True) with Python " .. out.python) or message(out),
    backend == "local" and "allow unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1"
      or "run `rlm daytona-smoke` to see which step fails")
  if ok then
    -- A file written in one sandbox and read in the next: what volume_name promises.
    local token = ("diagnostics-%d-%d"):format(sys.getpid(), math.floor(sys.time() * 1000))
    local path = "/home/daytona/memory/.rlm-diagnostics"
    local vok, vout = pcall(function()
      in_sandbox({volume_name = "rlm-diagnostics"},
        "open(path, 'w').write(token)\nSUBMIT(ok=True)", {path = path, token = token})
      return in_sandbox({volume_name = "rlm-diagnostics"},
        "import os\nt = open(path).read()\nos.remove(path)\nSUBMIT(token=t)", {path = path})
    end)
    local same = vok and vout.token == token
    report(same and "ok" or "FAIL", "volume", same and "rlm-diagnostics keeps a file between sandboxes"
      or (vok and "the file did not come back" or message(vout)),
      "set XDG_DATA_HOME to a writable directory (local), or check the volume in Daytona")
  end
end

-- Keys and models -----------------------------------------------------------------------------
-- The providers rlm knows and the variable each reads its key from (only "set", never a value).
local names = {}
for name in pairs(llm.providers) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  local var = llm.providers[name].key_env
  if var and not llm.providers[name].key_optional then
    local set = (sys.getenv(var) or "") ~= ""
    report(set and "ok" or "warn", var, set and "set" or "not set",
      ("export %s=... if you use %s models"):format(var, name))
  end
end

local model = sys.getenv("RLM_MODEL")
report(model and "ok" or "warn", "RLM_MODEL", model or "not set",
  "export RLM_MODEL=openai/gpt-4o (or pass --model to rlm ask)")

if model then
  local ok, cerr = pcall(llm.check, model)
  if not ok then
    report("FAIL", "model", message(cerr), "see `rlm help ask` for the model names rlm knows")
  elseif not quick then
    -- One short call through the same path a run takes: the URL, the key and the model name are
    -- all checked by the provider (a few tokens, a tiny fraction of a cent).
    local res, e = llm.complete{model = model, prompt = "Reply with the word OK.", max_tokens = 16,
                                retries = 0, timeout = 30}
    report(res and "ok" or "FAIL", "model", res and (model .. " answers") or tostring(e),
      "check the key, the model name and the provider's base URL variable")
  end
end

print(failures == 0 and "all checks passed" or (failures .. " check(s) failed"))
return failures == 0 and 0 or 1
