--- What every sandbox backend shares: the layout the code sees, where a sandbox path lies,
-- the driver's events, and base64 (the Daytona backend's requests, MCP's binary files).
--
--   /home/daytona             the code's home
--   /home/daytona/workspace   its working directory (relative paths are beneath it)
--   /home/daytona/memory      the volume
local base64 = require "rlm.core.base64"
local json = require "rlm.json"

local M = {}

M.HOME = "/home/daytona"
M.WORKSPACE = M.HOME .. "/workspace"
M.MEMORY = M.HOME .. "/memory"

--- Where a sandbox path lies: the root it is beneath (the workspace or M.MEMORY) and the path
-- relative to it ("." for the root itself); nil, err for a path outside both. A relative path
-- is beneath the workspace: M.WORKSPACE, or the folder of a driver beside another (workspace).
-- Raises for a path that is not a non-empty string (misuse).
function M.place(path, workspace)
  workspace = workspace or M.WORKSPACE
  if type(path) ~= "string" or path == "" then error("a sandbox path must be a non-empty string", 3) end
  if path:sub(1, 1) ~= "/" then path = workspace .. "/" .. path end
  for _, root in ipairs{workspace, M.MEMORY} do
    if path == root or path:sub(1, #root + 1) == root .. "/" then
      -- "." steps dropped: ./context/f must name what context/f names (the local backend's
      -- read-only context lies elsewhere than the workspace)
      local parts = {}
      for part in path:sub(#root + 2):gmatch("[^/]+") do
        if part ~= "." then parts[#parts + 1] = part end
      end
      return root, #parts > 0 and table.concat(parts, "/") or "."
    end
  end
  return nil, ("%s is outside %s and %s"):format(path, workspace, M.MEMORY)
end

--- The last component of a path.
function M.basename(path)
  return (path:gsub("/+$", ""):match("([^/]+)$")) or path
end

--- The driver's settings (its docstring): what every execute would otherwise carry, given once
-- on its command line. payload_min: for a backend whose requests carry raw payloads.
function M.driver_settings(opts, payload_min)
  local args = {"--max-output-chars", ("%d"):format(opts.max_output_chars or 10000)}
  local submit = opts.limits and opts.limits.submit
  if submit then
    args[#args + 1] = "--max-submit-bytes"
    args[#args + 1] = ("%d"):format(submit)
  end
  if payload_min then
    args[#args + 1] = "--payload-min"
    args[#args + 1] = ("%d"):format(payload_min)
  end
  return args
end

--- One event line of the driver, decoded; nil, why, "protocol" when it is not a JSON object.
function M.decode_event(line)
  local ev, why = json.decode(line)
  if type(ev) ~= "table" then
    return nil, ("the driver sent something that is not a JSON event (%s): %s"):format(
      tostring(why or type(ev)), line:sub(1, 200)), "protocol"
  end
  return ev
end

M.base64_encode = base64.encode

--- The bytes of base64 text (whitespace ignored); nil, err when it is not valid base64.
M.base64_decode = base64.decode

return M
