--- `rlm daytona-smoke`: the daytona-smoke skill as a command.
local args = require "rlm.args"
local skills = require "rlm.skills"

local M = {}

M.help = [[
usage: rlm daytona-smoke [--repo URL] [--ref REF] [--volume NAME]

Checks a Daytona setup end to end, without any model: the API and key, a volume (default
rlm-smoke), a sandbox with the volume, the repository cloned into the workspace (--repo, at
--ref), an execute, a write to the volume read back through the file API, and the deletion.
Prints each step with its time and a verdict; exits 0 when everything works, 1 otherwise.
Uses DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN + DAYTONA_ORGANIZATION_ID) and DAYTONA_API_URL.]]

function M.main(argv)
  local opts, rest = args.parse(argv, {repo = "string", ref = "string", volume = "string"})
  if #rest > 0 then
    return args.usage("daytona-smoke", ("unexpected argument '%s'"):format(rest[1]), M.help)
  end
  if opts.ref and not opts.repo then
    return args.usage("daytona-smoke", "--ref needs --repo")
  end
  return skills.run("daytona-smoke", {repo = opts.repo, ref = opts.ref, volume = opts.volume})
end

return M
