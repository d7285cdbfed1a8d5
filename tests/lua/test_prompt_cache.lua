--- What a run costs is what the provider bills: prompt caching asked for on both wires,
-- cached and written input read from the usage and priced at their rates, against the LLM
-- stand-in, which caches and bills as each provider does (tests/standins/llm, PromptCache).
local T = require "support"
local F = require "rlm_fixtures"
local rlm = require "rlm"
local sys = require "rlm.sys"
local json = require "rlm.json"

local tests = {}

local SCRIPT = {rules = {
  {match = "Turn 20 of", reply = F.code("SUBMIT(answer=str(turns))")},
  {match = "Task: bill", reply = F.code("turns = 1\nprint(len(context), 'y' * 2000)")},
  {match = ".", reply = F.code("turns += 1\nprint('y' * 2000)")},
}}

-- Points the anthropic provider at the stand-in for this test.
local function anthropic_at(server)
  sys.setenv("ANTHROPIC_BASE_URL", server.url)
  sys.setenv("ANTHROPIC_API_KEY", "sk-test-key-0123456789")
  T.defer(function() sys.setenv("ANTHROPIC_BASE_URL", nil); sys.setenv("ANTHROPIC_API_KEY", nil) end)
end

local function bill(billed, price)
  return (billed.input * price.input + billed.cache_read * (price.cached_input or price.input)
    + billed.cache_write * (price.cache_write or price.input) + billed.output * price.output) / 1e6
end

-- A 20-turn run over a 240 KB context on model; returns the result and the stand-in's stats.
local function twenty_turns(server, model, prices)
  local res = rlm.run{task = "bill", context = ("c"):rep(240 * 1024), model = model,
                      max_iterations = 20, prices = prices, prompt_cache = true}
  T.eq(res.reason, "submitted", tostring(res.detail))
  T.eq(res.answer, "19")
  return res, F.stats(server)
end

tests["Anthropic: 20 turns read their prefix from the cache; the cost is the bill"] = function()
  local server = F.model(SCRIPT)
  anthropic_at(server)
  local price = {input = 3, output = 15, cached_input = 0.3, cache_write = 3.75}
  local res, stats = twenty_turns(server, "anthropic/claude-standin",
                                  {["anthropic/claude-standin"] = price})
  local billed = stats.billed["claude-standin"]
  local used = res.usage.by_model["anthropic/claude-standin"]
  T.eq(used.input_tokens, billed.input + billed.cache_read + billed.cache_write, "all input counted")
  T.eq(used.cache_read_tokens, billed.cache_read)
  T.eq(used.cache_write_tokens, billed.cache_write)
  local want = bill(billed, price)
  T.truthy(math.abs(used.cost - want) <= want * 0.01,
           ("reported $%.6f, billed $%.6f"):format(used.cost, want))
  local after_first = used.input_tokens - stats.prompt_sizes[1]
  T.truthy(billed.cache_read >= 0.7 * after_first,
           ("%d of %d input tokens after turn 1 read from the cache"):format(billed.cache_read,
             after_first))
  T.eq(stats.last_body.cache_control, {type = "ephemeral"}, "a breakpoint is asked for")
end

tests["OpenAI: the cached part is priced at the cached rate; the cost is the bill"] = function()
  local server = F.model(SCRIPT)
  local res, stats = twenty_turns(server, "openai/gpt-4.1-mini")
  local billed = stats.billed["gpt-4.1-mini"]
  local used = res.usage.by_model["openai/gpt-4.1-mini"]
  T.truthy(billed.cache_read > 0, "the stand-in cached a prefix")
  T.eq(used.cache_read_tokens, billed.cache_read)
  local want = bill(billed, require("rlm.prices")["openai/gpt-4.1-mini"])
  T.truthy(math.abs(used.cost - want) <= want * 0.01,
           ("reported $%.6f, billed $%.6f"):format(used.cost, want))
  T.truthy(type(stats.last_body.prompt_cache_key) == "string", "a run's requests share a key")
end

tests["prompt_cache = false, or auto behind another base URL, asks for no caching"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  anthropic_at(server)
  for _, mode in ipairs{false, "auto"} do
    rlm.run{task = "t", context = "c", model = "anthropic/claude-standin", prompt_cache = mode}
    T.eq(F.stats(server).last_body.cache_control, nil, tostring(mode))
    rlm.run{task = "t", context = "c", model = "openai/gpt-4.1-mini", prompt_cache = mode}
    T.eq(F.stats(server).last_body.prompt_cache_key, nil, tostring(mode))
  end
end

-- A first turn writes its whole prompt to Anthropic's cache at 1.25x input: a run's cost limit
-- holds with the reservation priced so.
tests["with caching asked, a turn is reserved at the cache-write rate"] = function()
  local server = F.model{rules = {{match = ".", reply = F.code("SUBMIT(answer='x')")}}}
  anthropic_at(server)
  local price = {input = 3, output = 15}   -- no cache_write given: 1.25x input
  local budget = require "rlm.budget"
  T.eq(budget.write_rate(price), 3.75)
  local cost = budget.cost(price, {input_tokens = 100, output_tokens = 0, cache_read_tokens = 1000})
  T.truthy(math.abs(cost - 100 * 3 / 1e6) < 1e-12,
           "cached parts never exceed the input: no negative cost (" .. cost .. ")")
  local res = rlm.run{task = "t", context = "c", model = "anthropic/claude-standin",
                      prompt_cache = true, max_cost = 1,
                      prices = {["anthropic/claude-standin"] = price}}
  T.eq(res.reason, "submitted")
  T.truthy(res.usage.cost > 0 and res.usage.cost <= 1)
end

tests["cache usage is shown: progress line, --json, trajectory, rlm trace"] = function()
  local server = F.model{rules = {
    {match = "Turn 3 of", reply = F.code("SUBMIT(answer='ok')")},
    {match = ".", reply = F.code("print('y' * 5000)")},
  }}
  local path = T.tmpdir() .. "/run.jsonl"
  local r = T.run_rlm({"ask", "show", "--model", "openai/gpt-4.1-mini", "--json", "--trace", path},
                      {env = F.env(server)})
  T.eq(r.code, 0, r.stderr)
  local billed = F.stats(server).billed["gpt-4.1-mini"]
  T.truthy(billed.cache_read > 0, "the stand-in cached a prefix")
  local usage = json.decode(r.stdout).usage
  T.eq(usage.cache_read_tokens, billed.cache_read)
  local p = require("rlm.prices")["openai/gpt-4.1-mini"]
  local saved = billed.cache_read * (p.input - p.cached_input) / 1e6
  T.truthy(math.abs(usage.prompt_cache_saved - saved) < 1e-12,
           ("saved $%.8f, want $%.8f"):format(usage.prompt_cache_saved, saved))
  T.contains(r.stderr, ("cache %d read, 0 written, saved $"):format(billed.cache_read))
  local steps, final = 0, nil
  for line in assert(sys.read_file(path)):gmatch("[^\n]+") do
    local rec = json.decode(line)
    if rec.type == "step" and rec.usage.cache_read_tokens > 0 then steps = steps + 1 end
    if rec.type == "final" then final = rec end
  end
  T.eq(steps, 1, "turn 3 read turn 2's prefix (turn 1's was under 1,024 tokens)")
  T.eq(final.usage.cache_read_tokens, billed.cache_read)
  local shown = T.run_rlm({"trace", path})
  T.eq(shown.code, 0, shown.stderr)
  T.contains(shown.stdout, ("result: submitted  cache %d read"):format(billed.cache_read))
end

return tests
