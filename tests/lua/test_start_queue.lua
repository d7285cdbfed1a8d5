-- Sandboxes started at once wait their turn in a start queue sized to the machine, and a start
-- the machine refuses for now (EAGAIN) waits and tries again, instead of failing.
local T = require "support"
local async = require "rlm.async"
local interpreter = require "rlm.interpreter"
local rlm = require "rlm"

local tests = {}

-- A backend whose sandboxes take a moment to start and count how many start at once; the
-- first `refusals` starts fail as a busy machine's do.
local function fake_backend(width, refusals)
  local b = {starting = 0, peak = 0, refusals = refusals or 0, start_width = width}
  local Sandbox = {}
  Sandbox.__index = Sandbox
  function b.create() return setmetatable({id = "fake"}, Sandbox) end
  function Sandbox:start_driver()
    if b.refusals > 0 then
      b.refusals = b.refusals - 1
      error("cannot start the sandbox: bwrap: Creating new namespace failed: Resource temporarily unavailable", 0)
    end
    b.starting = b.starting + 1
    b.peak = math.max(b.peak, b.starting)
  end
  function Sandbox:request()
    async.sleep(0.05)
    b.starting = b.starting - 1
    return {ev = "ready"}
  end
  function Sandbox:kill_driver() end
  function Sandbox:destroy() end
  package.preload["test.fake_backend"] = function() return b end
  package.loaded["test.fake_backend"] = nil
  interpreter.backends.fake = "test.fake_backend"
  T.defer(function()
    interpreter.backends.fake = nil
    package.loaded["test.fake_backend"] = nil
  end)
  return b
end

tests["sandboxes started at once start start_width at a time, and all start"] = function()
  local b = fake_backend(3)
  local slots = async.map({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, function()
    local i = interpreter.new{backend = "fake"}
    i:start()
    return i.start_wait
  end)
  local waited = 0
  for _, s in ipairs(slots) do
    T.truthy(s.ok, tostring(s.error))
    if s[1] > 0 then waited = waited + 1 end
  end
  T.eq(b.peak, 3, "starting at once")
  T.truthy(waited >= 7, "starts that waited their turn: " .. waited)
end

tests["a start the machine refuses for now waits and tries again"] = function()
  local b = fake_backend(nil, 2)
  local i = interpreter.new{backend = "fake", start_timeout = 60}
  i:start()
  T.eq(b.refusals, 0, "both refusals were met")
  T.truthy(i.sandbox, "started")
  b.refusals = 1000
  local j = interpreter.new{backend = "fake", start_timeout = 1}
  local ok, err = pcall(j.start, j)
  T.eq(ok, false)
  T.contains(err, "the machine stayed busy for 1 s")
end

tests["150 local sandboxes started at once all run"] = function()
  local n = {}
  for k = 1, 150 do n[k] = k end
  local slots = async.map(n, function(k)
    local i <close> = rlm.interpreter{limits = {processes = 32}}
    local out = i:execute(("SUBMIT(answer=%d)"):format(k))
    return out and out.answer
  end)
  local failed = {}
  for k, s in ipairs(slots) do
    if not (s.ok and s[1] == k) then failed[#failed + 1] = k .. ": " .. tostring(s.error) end
  end
  T.eq(failed, {}, "sandboxes that failed")
end

return tests
