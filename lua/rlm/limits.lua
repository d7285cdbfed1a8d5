--- Resource limits of a sandbox: what the code inside may use, and what the host accepts from it.
--
--   limits.resolve{memory = "512M", processes = 64} -> a full table, every value a number
--   limits.size("2G") -> 2147483648
--
-- Sizes are bytes, given as integers or as strings with a K, M or G suffix (powers of 1024);
-- counts are integers. The defaults protect a laptop and leave room for ordinary data work.
-- How each one is enforced (README, "Isolation"):
--   memory      address space of each process (RLIMIT_AS): past it Python raises MemoryError
--   processes   processes and threads (RLIMIT_NPROC): fork fails with "Resource temporarily
--               unavailable"
--   open_files  descriptors per process (RLIMIT_NOFILE): "Too many open files"
--   file_size   the largest file the code may write (RLIMIT_FSIZE): "File too large"
--   tmp         size of /tmp and of /dev/shm, each (tmpfs): "No space left on device"
--   workspace   size of the tmpfs that holds /home/daytona/workspace and a transient
--               /home/daytona/memory (local backend): "No space left on device"; a volume
--               is measured with the workspace while code runs, and code that grows it past
--               the limit is stopped
--   output      what the code prints, stdout and stderr each, per execute: past it printing
--               fails with "No space left on device"
--   submit      the JSON size of what one SUBMIT hands back: past it SUBMIT raises ValueError
local M = {}

local K, MB, GB = 1024, 1024 * 1024, 1024 * 1024 * 1024

M.defaults = {memory = 2 * GB, processes = 256, open_files = 1024, file_size = GB,
              tmp = 256 * MB, workspace = 2 * GB, output = 64 * MB, submit = 32 * MB}

local COUNTS = {processes = true, open_files = true}
-- Below these the driver itself cannot run, so the limit would only produce confusing errors.
local FLOORS = {memory = 64 * MB, processes = 8, open_files = 32, file_size = MB, tmp = MB,
                workspace = MB, output = 64 * K, submit = 1 * K}

local SUFFIX = {[""] = 1, K = K, M = MB, G = GB}

--- Bytes from 123, "123", "64K", "512M", "2G" (also "2GB", "2GiB"); nil, err otherwise.
function M.size(v)
  if math.type(v) == "integer" then return v end
  if type(v) == "number" and v == math.floor(v) then return math.tointeger(v) end
  if type(v) ~= "string" then return nil, "expected a size such as 512M or 2G" end
  local num, unit = v:upper():match("^%s*(%d+%.?%d*)%s*([KMG]?)I?B?%s*$")
  if not num then return nil, ("%q is not a size (use a number of bytes, or 64K, 512M, 2G)"):format(v) end
  return math.floor(tonumber(num) * SUFFIX[unit])
end

--- A size for people: 2147483648 -> "2 GiB", 1536 -> "1.5 KiB".
function M.human(n)
  for _, u in ipairs{{GB, "GiB"}, {MB, "MiB"}, {K, "KiB"}} do
    if n >= u[1] then return (("%.1f"):format(n / u[1]):gsub("%.0$", "")) .. " " .. u[2] end
  end
  return n .. " bytes"
end

local function names()
  local list = {}
  for k in pairs(M.defaults) do list[#list + 1] = k end
  table.sort(list)
  return table.concat(list, ", ")
end

--- The defaults overlaid with `given` (nil or a table), every value checked and a number.
-- Raises a one-line message on misuse (level as for error()).
function M.resolve(given, level)
  level = (level or 1) + 1
  if given ~= nil and type(given) ~= "table" then
    error("limits must be a table such as {memory = \"1G\", processes = 64}", level)
  end
  local out = {}
  for k, v in pairs(M.defaults) do out[k] = v end
  for k, v in pairs(given or {}) do
    if M.defaults[k] == nil then
      error(("unknown limit %q (known: %s)"):format(tostring(k), names()), level)
    end
    local n, err
    if COUNTS[k] then
      n = math.tointeger(type(v) == "string" and tonumber(v) or v)
      err = n == nil and ("limits.%s must be a whole number"):format(k)
    else
      n, err = M.size(v)
      err = err and ("limits.%s: %s"):format(k, err)
    end
    if err then error(err, level) end
    if n < FLOORS[k] then
      error(("limits.%s = %s is too small to run Python (at least %s)"):format(
        k, tostring(v), COUNTS[k] and FLOORS[k] or M.human(FLOORS[k])), level)
    end
    out[k] = n
  end
  return out
end

--- The longest protocol line the host accepts from a driver with these limits: a SUBMIT at its
-- cap plus two outputs at max_output_chars (a character escapes to at most 12 bytes of JSON),
-- plus the variables summary (at most 1,000 entries of about 300 bytes).
function M.event_bytes(l, max_output_chars)
  return l.submit + 2 * 12 * max_output_chars + 2 * MB
end

return M
