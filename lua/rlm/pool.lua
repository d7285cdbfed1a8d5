--- A pool of sandboxes for stateless snippets, run concurrently from one Lua program.
--
--   local pool <close> = rlm.pool{size = 8, backend = "local"}   -- other options: rlm.interpreter's
--   for i, r in ipairs(pool:map{"SUBMIT(x=1)", "print(2)"}) do print(r[1], r[2].stdout) end
--   pool:shutdown()
--
-- Each snippet starts from a clean Python state (the sandbox is reset between snippets; files
-- in the workspace stay). A sandbox that breaks is replaced; its snippet reports the failure in
-- its run table and the others carry on.
local async = require "rlm.async"
local interpreter = require "rlm.interpreter"

local M = {}

local Pool = {}
Pool.__index = Pool

function M.new(opts)
  opts = opts or {}
  local size = opts.size or 8
  if math.type(size) ~= "integer" or size < 1 then error("pool size must be a positive integer", 2) end
  local interp_opts = {}
  for k, v in pairs(opts) do
    if k ~= "size" then interp_opts[k] = v end
  end
  interp_opts = require("rlm.subcalls").wire(interp_opts, 2)   -- one handler: one budget for all
  interpreter.new(interp_opts)      -- validates the options and the backend now, creating nothing
  return setmetatable({size = size, opts = interp_opts, slots = {}, dirty = {}, replaced = 0}, Pool)
end

-- The interpreter of slot i, started; a missing or shut-down one is replaced.
function Pool:slot(i)
  local interp = self.slots[i]
  if interp and not interp.closed then return interp end
  if interp then self.replaced = self.replaced + 1 end
  interp = interpreter.new(self.opts)
  self.slots[i] = interp
  self.dirty[i] = false
  interp:start()
  return interp
end

--- Starts every sandbox now (concurrently) instead of on first use.
function Pool:start()
  if self.closed then error("this pool has been shut down", 2) end
  local fns = {}
  for i = 1, self.size do fns[i] = function() self:slot(i) end end
  async.all(fns)
  return self
end

local function failed_run(err)
  return {stdout = "", stderr = "", error = "SandboxError: " .. tostring(err), exit = 1,
          duration = 0, timed_out = false, state_lost = true, stdout_chars = 0}
end

-- The snippets of map: {code, variables} by index, from its arguments.
local function snippets(codes, variables)
  local per_item = type(variables) == "table" and variables[1] ~= nil
  if type(codes) == "string" then
    if not per_item then
      error("pool:map with one code string takes a list of variable tables, one per run", 3)
    end
    local items = {}
    for i, v in ipairs(variables) do items[i] = {codes, v} end
    return items
  end
  if type(codes) ~= "table" then error("pool:map takes a list of code strings", 3) end
  if per_item and #variables ~= #codes then
    error(("pool:map: %d code strings but %d variable tables"):format(#codes, #variables), 3)
  end
  local items = {}
  for i, code in ipairs(codes) do items[i] = {code, per_item and variables[i] or variables} end
  return items
end

--- Runs each snippet in a fresh state; returns {out, run} pairs in input order. codes is a
-- list of code strings, with variables (optional) injected into every one, or a list of
-- tables, variables[i] into codes[i]; or codes is one code string, run once with each table
-- of the list variables.
function Pool:map(codes, variables)
  if self.closed then error("this pool has been shut down", 2) end
  local items = snippets(codes, variables)
  local results, next_index = {}, 1
  local function worker(i)
    while next_index <= #items do
      local index = next_index
      next_index = next_index + 1
      local ok, out, run = pcall(function()
        local interp = self:slot(i)
        if self.dirty[i] then interp:reset() end
        self.dirty[i] = true
        return interp:execute(items[index][1], items[index][2])
      end)
      if ok then
        results[index] = {out, run}
        if run.state_lost then self.replaced = self.replaced + 1 end
      else
        local broken = self.slots[i]
        if broken then broken:shutdown() end
        results[index] = {nil, failed_run(out)}
      end
    end
  end
  local workers = {}
  for i = 1, math.min(self.size, #items) do workers[i] = function() worker(i) end end
  async.all(workers)
  return results
end

--- Ends every sandbox of the pool; idempotent.
function Pool:shutdown()
  self.closed = true
  for i, interp in pairs(self.slots) do
    interp:shutdown()
    self.slots[i] = nil
  end
end

Pool.__close = Pool.shutdown
Pool.__gc = Pool.shutdown
Pool.__name = "rlm.pool"

return M
