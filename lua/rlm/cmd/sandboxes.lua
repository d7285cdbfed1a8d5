--- `rlm sandboxes`: the Daytona sandboxes rlm made, and the deletion of leftovers.
local args = require "rlm.args"
local async = require "rlm.async"
local daytona = require "rlm.daytona"
local backend = require "rlm.backend.daytona"
local sys = require "rlm.sys"

local M = {}

M.help = [[
usage: rlm sandboxes [--prune] [--all]

Lists the Daytona sandboxes labelled as rlm's (rlm=1): id, state, owner (user@host:pid of the
rlm process that made it), creation time, and whether the owner still runs.
  --prune   delete leftovers: sandboxes whose owner process on this host is gone
  --prune --all   delete every sandbox labelled as rlm's, whoever made it (other hosts too)
Sandboxes without the rlm=1 label are never touched. Uses DAYTONA_API_KEY and DAYTONA_API_URL.]]

--- "alive", "gone" or "elsewhere" (another host: cannot tell) for an owner label.
function M.owner_status(owner, hostname)
  local host, pid = tostring(owner or ""):match("@(.+):(%d+)$")
  if not host then return "unknown" end
  if host ~= hostname then return "elsewhere" end
  return sys.stat("/proc/" .. pid) and "alive" or "gone"
end

function M.main(argv)
  local opts, rest = args.parse(argv, {prune = "flag", all = "flag"})
  if #rest > 0 then
    return args.usage("sandboxes", ("unexpected argument '%s'"):format(rest[1]), M.help)
  end
  if opts.all and not opts.prune then
    return args.usage("sandboxes", "--all goes with --prune")
  end
  local client = daytona.client{}
  local items, err = client:list_sandboxes{labels = {[backend.LABEL] = "1"}}
  if not items then error("cannot list the Daytona sandboxes: " .. tostring(err), 0) end
  table.sort(items, function(a, b) return tostring(a.createdAt) < tostring(b.createdAt) end)
  local hostname = backend.hostname()
  local doomed = {}
  print(("%-36s  %-10s  %-30s  %-24s  %s"):format("ID", "STATE", "OWNER", "CREATED", "OWNER IS"))
  for _, sb in ipairs(items) do
    local owner = (sb.labels or {})[backend.OWNER_LABEL]
    -- A deleted sandbox stays listed while Daytona destroys it; it needs nothing more.
    local going = sb.desiredState == "destroyed"
    local status = going and "being deleted" or M.owner_status(owner, hostname)
    print(("%-36s  %-10s  %-30s  %-24s  %s"):format(sb.id, tostring(sb.state), tostring(owner or "-"),
      tostring(sb.createdAt or "-"), status))
    if opts.prune and not going and (opts.all or status == "gone") then doomed[#doomed + 1] = sb.id end
  end
  if not opts.prune then
    print(("%d sandboxes labelled rlm=1"):format(#items))
    return 0
  end
  local failures = 0
  local jobs = {}
  for k, id in ipairs(doomed) do
    jobs[k] = function()
      local ok, why = client:delete_sandbox(id)
      if ok then
        print("deleted " .. id)
      else
        failures = failures + 1
        io.stderr:write(("rlm sandboxes: cannot delete %s: %s\n"):format(id, tostring(why)))
      end
    end
  end
  async.all(jobs)
  print(("%d sandboxes labelled rlm=1, %d deleted"):format(#items, #doomed - failures))
  return failures == 0 and 0 or 1
end

return M
