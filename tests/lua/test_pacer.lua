--- A batch's width adapts to the provider's 429s and comes back: rlm.pacer, under llm.batch.
local T = require "support"
local F = require "rlm_fixtures"
local async = require "rlm.async"
local http = require "rlm.http"
local llm = require "rlm.llm"
local pacer = require "rlm.pacer"
local sys = require "rlm.sys"

local tests = {}

tests["a 429 narrows the width to the calls still held; answers widen it again by one"] = function()
  local p = pacer.of("test/pacer-unit")
  for _ = 1, 10 do p:acquire() end
  T.eq(p.in_flight, 10)
  p:release(true)                    -- 9 still held: the provider takes 9
  T.eq(p.width, 9)
  local started = 0
  local waiter = async.spawn(function() p:acquire(); started = started + 1 end)
  async.sleep(0.01)
  T.eq(started, 0, "a call past the width waits")
  p:release(false)                   -- room for the waiter
  waiter:join(5)
  T.eq(started, 1)
  for _ = 1, 9 do p:release(false) end   -- 9 answers in a row at width 9
  T.eq(p.width, 10)
  T.eq(p.in_flight, 0)
end

-- 200 prompts to a model whose stand-in answers 429 past `most` at once: seconds, failures.
local function batch(server, model, cap)
  assert(http.request{url = server.url .. "/_reset", method = "POST"})
  local prompts = {}
  for i = 1, 200 do prompts[i] = "prompt " .. i end
  local t0 = sys.now()
  local results = llm.batch_prompts({model = model}, prompts, {concurrency = cap})
  local took, failed, answered = sys.now() - t0, 0, 0
  for i, r in ipairs(results) do
    if r.error then failed = failed + 1 elseif r.text == "echo: prompt " .. i then answered = answered + 1 end
  end
  return took, failed, answered, F.stats(server)
end

tests["a batch of 200 at width 64 against a limit of 16: no call fails, few 429s"] = function()
  local server = F.model({rules = require("rlm.json").array{}}, {"--latency-ms", "300", "--max-concurrent", "16"})
  local capped, capped_failed, capped_answered = batch(server, "openai/pacer-capped", 16)
  T.eq(capped_failed, 0)
  T.eq(capped_answered, 200)
  local wide, failed, answered, stats = batch(server, "openai/pacer-wide", 64)
  T.eq(failed, 0)
  T.eq(answered, 200)
  -- the first 64 meet the limit: 48 are refused; then a probe now and again. Retried in C at
  -- full width, 192 were.
  T.truthy(stats.throttled >= 48 and stats.throttled <= 100, "429s: " .. stats.throttled)
  T.truthy(stats.max_in_flight <= 16)
  -- a loose bound: make bench prints the figure (1.2x on a 2-core machine shared by others)
  T.truthy(wide < capped * 2, ("width 64 took %.2f s, capped at 16 %.2f s"):format(wide, capped))
end

return tests
