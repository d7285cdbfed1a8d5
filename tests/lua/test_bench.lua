--- rlm bench and rlm.evals: generators and scorers on hand-made cases, and whole benches against
-- a scripted model (reports, --resume, --max-cost, --dry-run).
local T = require "support"
local F = require "rlm_fixtures"
local evals = require "rlm.evals"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

tests["s-niah: the same seed gives the same text; one needle, at the asked length"] = function()
  local a, b = evals.sniah(2048, 3), evals.sniah(2048, 3)
  T.eq(a.context, b.context)
  T.truthy(evals.sniah(2048, 4).context ~= a.context, "another seed, another text")
  T.truthy(math.abs(#a.context - 2048 * 4) < 64, "about 4 characters a token: " .. #a.context)
  local _, needles = a.context:gsub("special magic number", "")
  T.eq(needles, 1)
  T.contains(a.context, "is: " .. a.answer .. ".")
  T.truthy(a.answer:match("^%d%d%d%d%d%d%d$"), "a 7-digit number")
  T.contains(a.question, "special magic number for")
end

tests["scorers on hand-made cases, edge cases included"] = function()
  T.eq(evals.score.sniah("It is 1234567.", "1234567"), 1)
  T.eq(evals.score.sniah("It is 123456.", "1234567"), 0)
  T.eq(evals.score.sniah(nil, "1"), 0)
  T.eq(evals.score.oolong("14", 14), 1)
  T.eq(evals.score.oolong("The answer is 12", 14), 0.75 ^ 2)
  T.eq(evals.score.oolong("no number", 3), 0)
  T.eq(evals.score.oolong(" Numeric Value. ", "numeric value"), 1, "labels: case and trim")
  T.eq(evals.score.oolong("more common than", "less common than"), 0)
  T.eq(evals.score.oolong("More common than", "more common than"), 1)
  T.eq(evals.score.pairs_f1({{1, 2}}, {{2, 1}}), 1, "pairs are unordered")
  T.eq(evals.score.pairs_f1({}, {}), 1)
  T.eq(evals.score.pairs_f1({}, {{1, 2}}), 0)
  T.truthy(math.abs(evals.score.pairs_f1({{1, 2}}, {{2, 1}, {3, 4}}) - 2 / 3) < 1e-9)
  T.eq(evals.score.pairs_f1({{1, 2}, {1, 2}}, {{1, 2}}), 1, "duplicates count once")
  T.eq(evals.score.choice("The answer is (B).", "B"), 1)
  T.eq(evals.score.choice("Answer: C", "b"), 0)
  T.eq(evals.score.choice("BECAUSE", "B"), 0, "a letter inside a word is not a choice")
  local s = evals.summary{1, 1, 1, 1}
  T.eq(s.mean, 1.0)
  T.truthy(s.low > 0.4 and s.low < 0.6 and s.high == 1, "Wilson interval for 4 of 4")
  T.eq(evals.summary{}.n, 0)
  local mean, sd = evals.mean_sd{1, 3}
  T.eq(mean, 2.0)
  T.truthy(math.abs(sd - math.sqrt(2)) < 1e-9)
end

-- A model that finds the needle with a regex (RLM) or reads it off the prompt (direct).
local function needle_model()
  return F.model{rules = {
    {match = "Answer with the value only", reply_expr = "re.search(r'is: (\\d+)\\.', prompt).group(1)"},
    {match = ".", reply = F.code("import re\nm = re.search(r'special magic number for \\S+ is: (\\d+)', context)\n"
                                  .. "SUBMIT(answer=m.group(1))")},
  }}
end

tests["rlm bench s-niah with the direct baseline: results, report, manifest; --resume"] = function()
  local server = needle_model()
  local out = T.tmpdir() .. "/b"
  local argv = {"bench", "s-niah", "--lengths", "512,1024", "--n", "2", "--baseline", "direct",
                "--sub-model", "openai/sub-model", "--out", out, "--jobs", "2"}
  local r = T.run_rlm(argv, {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  local lines = 0
  for line in assert(sys.read_file(out .. "/results.jsonl")):gmatch("[^\n]+") do
    local rec = assert(json.decode(line))
    T.eq(rec.score, 1, line:sub(1, 200))
    T.truthy(rec.cache_read_tokens >= 0 and rec.cache_read_tokens <= rec.input_tokens,
             "what was read from a prompt cache")
    lines = lines + 1
  end
  T.eq(lines, 8, "2 lengths x 2 queries x 2 methods")
  local md = assert(sys.read_file(out .. "/report.md"))
  T.contains(md, "| rlm | 512 | 100.0% |")
  T.contains(md, "| direct | 1024 | 100.0% |")
  T.contains(md, "| input from cache | saved by caching per query |")
  T.contains(assert(sys.read_file(out .. "/report.html")), "<svg")
  local manifest = assert(json.decode(assert(sys.read_file(out .. "/manifest.json"))))
  T.eq(manifest.lengths, {512, 1024})
  T.eq(#manifest.seeds, 4)
  T.truthy(manifest.prompts.system:match("^%x+$"), "the prompts' hashes")
  T.truthy(sys.stat(out .. "/trajectories/512-2.jsonl"), "each run's trajectory")
  -- --resume asks nothing again
  local before = F.stats(server).requests
  table.insert(argv, "--resume")
  r = T.run_rlm(argv, {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  T.eq(F.stats(server).requests, before)
  T.contains(r.stdout, "| rlm | 1024 | 100.0% |")
end

tests["rlm bench: --dry-run sends nothing; --max-cost holds across the bench"] = function()
  local server = needle_model()
  local r = T.run_rlm({"bench", "s-niah", "--model", "openai/gpt-4o", "--sub-model", "openai/gpt-4o-mini",
                       "--dry-run", "--n", "3"}, {env = F.env(server)})
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "nothing was sent")
  T.contains(r.stdout, "1048576 tokens")
  T.eq(F.stats(server).requests, 0)

  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/prices.json", json.encode{
    ["openai/root-model"] = {input = 100, output = 100}, ["openai/sub-model"] = {input = 100, output = 100}}))
  r = T.run_rlm({"bench", "s-niah", "--lengths", "512", "--n", "6", "--jobs", "1", "--max-cost", "0.5",
                 "--sub-model", "openai/sub-model", "--out", dir .. "/b"},
                {env = F.env(server, {RLM_PRICES = dir .. "/prices.json"}), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  local spent = 0
  for line in assert(sys.read_file(dir .. "/b/results.jsonl")):gmatch("[^\n]+") do
    spent = spent + json.decode(line).cost
  end
  T.truthy(spent <= 0.5, ("spent $%.4f under --max-cost 0.5"):format(spent))
  T.contains(r.stderr, "--max-cost reached")
end

tests["rlm bench: an unknown task is a usage error naming the known ones"] = function()
  local r = T.run_rlm({"bench", "s-nia"})
  T.eq(r.code, 2)
  T.contains(r.stderr, 'did you mean "s-niah"?')
end

return tests
