--- `rlm bench TASK`: the paper's evaluations with your own key, with cost and spread.
local args = require "rlm.args"
local async = require "rlm.async"
local budget = require "rlm.budget"
local evals = require "rlm.evals"
local json = require "rlm.json"
local llm = require "rlm.llm"
local preview = require "rlm.preview"
local sys = require "rlm.sys"

local M = {}

M.help = [[
usage: rlm bench TASK [--model M] [--sub-model M] [--n N] [--lengths L1,L2,...] [--depth D]
                      [--jobs J] [--backend local|daytona] [--baseline direct] [--max-cost USD]
                      [--seed S] [--out DIR] [--resume] [--dry-run]
                      [--data FILE] [--corpus FILE] [--documents N] [--judge-model M]

Runs an evaluation of the paper (arXiv 2512.24601) with the RLM loop, and with --baseline direct
also the model alone (the context cut to its window). Reports accuracy with a 95% interval,
mean and sd of the cost per query, tokens and latency, per length.

Tasks (docs/bench.md says where each dataset comes from and how to export it):
  s-niah           RULER-style single needle in generated filler (no download), lengths in
                   tokens (default 8192,16384,...,1048576), scored by string match
  oolong           oolong-synth trec_coarse, --data the exported validation split; lengths are
                   its context_len (default 131072); the reference's scorer
  oolong-pairs     the paper's 20 pair queries over the trec_coarse labels (--data as for
                   oolong; default 32768), F1 over pairs; --n takes the first N queries
  codeqa           LongBench-v2 Code Repository Understanding, --data its data.json; accuracy
  browsecomp-plus  BrowseComp-Plus, --data the decrypted queries, --corpus the corpus;
                   --documents per query (default 1000: gold and evidence ones included),
                   judged by --judge-model (default --model), its cost counted

--n is the queries per length (default: the paper's count: 5 for s-niah, 50 for oolong, 20 for
oolong-pairs, 50 for codeqa, 150 for browsecomp-plus).

Results go to --out (default rlm-bench/TASK): results.jsonl (one line per query and method),
trajectories/, report.md, report.html (a curve per length, inline SVG) and manifest.json
(version, seeds, lengths, hashes of the prompts and of the data). --resume skips the queries
results.jsonl already holds; --max-cost stops starting queries once that much is spent (every
model needs a price); --dry-run prints the estimated tokens and cost from the data sizes and the
price table, and sends nothing.]]

local SPEC = {model = "string", sub_model = "string", n = "number", lengths = "list",
              depth = "number", jobs = "number", backend = "string", baseline = "string",
              max_cost = "number", seed = "number", out = "string", resume = "flag",
              dry_run = "flag", data = "string", corpus = "string", documents = "number",
              judge_model = "string"}

local CHARS_PER_TOKEN = preview.CHARS_PER_TOKEN
local DIRECT_WINDOW = preview.DIRECT_WINDOW

-- The tasks, each a module of rlm.bench: queries(opts), score(answer, item, ctx), defaults.
local TASKS = {["s-niah"] = "rlm.bench.sniah", oolong = "rlm.bench.oolong",
               ["oolong-pairs"] = "rlm.bench.oolong_pairs", codeqa = "rlm.bench.codeqa",
               ["browsecomp-plus"] = "rlm.bench.browsecomp_plus"}

local function read_results(path)
  local done, list = {}, {}
  local data = sys.read_file(path)
  for line in (data or ""):gmatch("[^\n]+") do
    local r = json.decode(line)
    if type(r) == "table" and r.key and r.method then
      done[r.method .. " " .. r.key] = true
      list[#list + 1] = r
    end
  end
  return done, list
end

-- One query by one method; returns the result line, or nil when the bench's budget could not
-- afford even its first model call (the query is left for --resume).
local function run_query(opts, task, q, method, remaining)
  local item = q.make()
  local t0 = sys.now()
  local answer, usage, reason
  if method == "rlm" then
    local res = require("rlm").run{
      task = item.question, context = item.context, model = opts.model, sub_model = opts.sub_model,
      max_depth = opts.depth, backend = opts.backend, max_cost = remaining,
      trace = ("%s/trajectories/%s.jsonl"):format(opts.out, q.key)}
    if res.reason:match("^budget:") and res.iterations == 0 then return nil end
    answer, usage, reason = res.answer, res.usage, res.reason
  else
    local window = llm.context_window(llm.label(opts.model)) or DIRECT_WINDOW
    local keep = (window - 1000) * 3                     -- characters that surely fit
    local ctx = #item.context > keep and item.context:sub(1, keep) or item.context
    local res, err = llm.complete{model = opts.model, messages = {{role = "user",
      content = ctx .. "\n\n" .. item.question .. (task.direct_suffix or "")}}}
    answer, reason = res and res.text, res and "answered" or ("model_error: " .. tostring(err))
    usage = res and {input_tokens = res.usage.input_tokens, output_tokens = res.usage.output_tokens,
                     cache_read_tokens = res.usage.cache_read_tokens,
                     cache_write_tokens = res.usage.cache_write_tokens,
                     cost = opts.cost(opts.model, res.usage),
                     prompt_cache_saved = budget.cache_saved(llm.price(llm.label(opts.model),
                                                                        opts.prices), res.usage)} or {}
  end
  local scoring = {judge_model = opts.judge_model, cost_of = opts.cost}
  local score = task.score(answer, item, scoring)
  local expected = item.answer
  return {task = opts.task, method = method, key = q.key, length = q.length, seed = q.seed,
          expected = expected, answer = answer, score = score,
          cost = (usage.cost or 0) + (scoring.cost or 0), judge_cost = scoring.cost, note = scoring.note,
          tokens = (usage.input_tokens or 0) + (usage.output_tokens or 0),
          input_tokens = usage.input_tokens or 0, cache_read_tokens = usage.cache_read_tokens or 0,
          cache_write_tokens = usage.cache_write_tokens or 0,
          prompt_cache_saved = usage.prompt_cache_saved or 0,
          latency = sys.now() - t0, reason = reason, data_hash = sys.hash(item.context)}
end

-- Per method and length: accuracy (95% interval), cost mean and sd, tokens, the share of input
-- read from prompt caches and what they saved a query, latency.
local function aggregate(results)
  local groups, order = {}, {}
  for _, r in ipairs(results) do
    local k = r.method .. " " .. r.length
    if not groups[k] then
      groups[k] = {method = r.method, length = r.length, scores = {}, costs = {}, tokens = {},
                   latency = {}, saved = {}, input = 0, cached = 0}
      order[#order + 1] = k
    end
    local g = groups[k]
    table.insert(g.scores, r.score)
    table.insert(g.costs, r.cost)
    table.insert(g.tokens, r.tokens)
    table.insert(g.latency, r.latency)
    table.insert(g.saved, r.prompt_cache_saved or 0)
    g.input, g.cached = g.input + (r.input_tokens or 0), g.cached + (r.cache_read_tokens or 0)
  end
  table.sort(order, function(a, b)
    local ga, gb = groups[a], groups[b]
    if ga.method ~= gb.method then return ga.method > gb.method end
    if type(ga.length) ~= type(gb.length) then return type(ga.length) == "number" end
    return ga.length < gb.length
  end)
  local rows = {}
  for _, k in ipairs(order) do
    local g = groups[k]
    local acc = evals.summary(g.scores)
    local cost, cost_sd = evals.mean_sd(g.costs)
    rows[#rows + 1] = {method = g.method, length = g.length, acc = acc, cost = cost, cost_sd = cost_sd,
                       tokens = (evals.mean_sd(g.tokens)), latency = (evals.mean_sd(g.latency)),
                       cached = g.input > 0 and g.cached / g.input or 0,
                       saved = (evals.mean_sd(g.saved))}
  end
  return rows
end

local function markdown(opts, rows)
  local out = {("# rlm bench %s\n\nmodel %s, sub-model %s, depth %d, up to %d queries per length%s\n")
    :format(opts.task, opts.model, opts.sub_model, opts.depth, opts.n,
            opts.judged and (", judged by " .. opts.judge_model) or ""),
    "| method | length | accuracy | 95% interval | cost per query (mean ± sd) | tokens | input from cache "
      .. "| saved by caching per query | latency |",
    "|---|---|---|---|---|---|---|---|---|"}
  for _, r in ipairs(rows) do
    out[#out + 1] = ("| %s | %s | %.1f%% | %.1f–%.1f%% | $%.4f ± %.4f | %.0f | %.1f%% | $%.4f | %.1f s |")
      :format(r.method, r.length, r.acc.mean * 100, r.acc.low * 100, r.acc.high * 100, r.cost,
              r.cost_sd, r.tokens, r.cached * 100, r.saved, r.latency)
  end
  return table.concat(out, "\n") .. "\n"
end

-- Accuracy against length (log scale), one polyline per method, as inline SVG.
local function svg(rows)
  local W, H, pad = 560, 260, 40
  local lengths, by_method = {}, {}
  for _, r in ipairs(rows) do
    lengths[#lengths + 1] = r.length
    by_method[r.method] = by_method[r.method] or {}
    table.insert(by_method[r.method], r)
  end
  local lo, hi = math.log(math.min(table.unpack(lengths))), math.log(math.max(table.unpack(lengths)))
  local function x(len) return pad + (hi > lo and (math.log(len) - lo) / (hi - lo) or 0.5) * (W - 2 * pad) end
  local function y(acc) return H - pad - acc * (H - 2 * pad) end
  local out = {('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d">'):format(W, H),
               ('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>'):format(pad, H - pad, W - pad, H - pad),
               ('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#999"/>'):format(pad, pad, pad, H - pad)}
  local colours, i = {rlm = "#0b57a4", direct = "#c0392b"}, 0
  for method, list in pairs(by_method) do
    i = i + 1
    local pts = {}
    for _, r in ipairs(list) do pts[#pts + 1] = ("%.1f,%.1f"):format(x(r.length), y(r.acc.mean)) end
    out[#out + 1] = ('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'):format(
      colours[method] or "#555", table.concat(pts, " "))
    out[#out + 1] = ('<text x="%d" y="%d" fill="%s">%s</text>'):format(W - pad - 60, pad + 14 * i,
      colours[method] or "#555", method)
  end
  out[#out + 1] = ('<text x="%d" y="%d">tokens (log)</text><text x="4" y="%d">accuracy</text></svg>')
    :format(W // 2 - 30, H - 8, pad - 8)
  return table.concat(out)
end

local function write_report(opts, task, results)
  local rows = aggregate(results)
  local curve = {}
  for _, r in ipairs(rows) do
    if type(r.length) == "number" then curve[#curve + 1] = r end
  end
  local md = markdown(opts, rows)
  assert(sys.write_file(opts.out .. "/report.md", md))
  local html = ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>rlm bench %s</title>'
    .. '<style>body{font:14px system-ui,sans-serif;margin:2em}table{border-collapse:collapse}'
    .. 'td,th{border:1px solid #ccc;padding:.2em .6em}</style></head><body><pre>%s</pre>%s</body></html>\n')
    :format(opts.task, (md:gsub("&", "&amp;"):gsub("<", "&lt;")),
            task.curve and #curve > 0 and svg(curve) or "")
  assert(sys.write_file(opts.out .. "/report.html", html))
  return md
end

-- A fingerprint of a data file that is cheap even for a corpus of gigabytes: its size and the
-- hash of its first and last MiB.
local function fingerprint(path)
  local f = path and io.open(path, "rb")
  if not f then return nil end
  local size = f:seek("end")
  f:seek("set", 0)
  local head = f:read(1 << 20) or ""
  f:seek("set", math.max(0, size - (1 << 20)))
  local tail = f:read(1 << 20) or ""
  f:close()
  local hash = sys.hash
  return {path = path, bytes = size, head_hash = hash(head), tail_hash = hash(tail)}
end

local function manifest(opts, task, queries)
  local prompts = require "rlm.prompts"
  local hash = sys.hash
  local hashes = {}
  for _, name in ipairs{"system", "first", "turn", "extract", "compact", "summary"} do
    hashes[name] = hash(prompts[name])
  end
  if task.JUDGE_PROMPT then hashes.judge = hash(task.JUDGE_PROMPT) end
  local seeds, keys = {}, {}
  for i, q in ipairs(queries) do seeds[i], keys[i] = q.seed, q.key end
  return {rlm = require("rlm.core.host").version, lua = _VERSION, task = opts.task,
          model = opts.model, sub_model = opts.sub_model, judge_model = opts.judged and opts.judge_model,
          depth = opts.depth, n = opts.n, lengths = opts.lengths, documents = opts.documents,
          seeds = seeds, queries = keys, base_seed = opts.seed, prompts = hashes,
          baseline = opts.baseline, data = fingerprint(opts.data), corpus = fingerprint(opts.corpus)}
end

local function dry_run(opts, task, queries, methods)
  print(("%s: %d queries x %d method(s); estimates from the data sizes and the price table"):format(
    opts.task, #queries, #methods))
  local by_length, order = {}, {}
  for _, q in ipairs(queries) do
    -- generated tasks know their size; a dataset's query is measured on its own context
    local tokens = type(q.length) == "number" and not task.data and q.length
                   or #q.make().context // CHARS_PER_TOKEN
    local key = tostring(q.length)
    if not by_length[key] then by_length[key] = {n = 0, tokens = 0}; order[#order + 1] = key end
    by_length[key].n = by_length[key].n + 1
    by_length[key].tokens = by_length[key].tokens + tokens
  end
  local total = 0
  for _, key in ipairs(order) do
    local g = by_length[key]
    local e = preview.estimate(opts, g.tokens // g.n)
    for _, m in ipairs(methods) do
      local cost = e[m].cost
      total = total + (cost or 0) * g.n
      print(("  %-6s %8s: %d queries of ~%d tokens: ~%d tokens, ~%s a query"):format(m, key, g.n,
        g.tokens // g.n, e[m].tokens, cost and ("$%.4f"):format(cost) or "(no price)"))
    end
  end
  print(("  about $%.2f in all; nothing was sent"):format(total))
end

function M.main(argv)
  local o, rest = args.parse(argv, SPEC)
  local name = rest[1]
  if not name or #rest > 1 then return args.usage("bench", "give one TASK", M.help) end
  if not TASKS[name] then
    local names = {}
    for k in pairs(TASKS) do names[#names + 1] = k end
    table.sort(names)
    args.fail(args.unknown("bench task", name, names) .. " (have: " .. table.concat(names, ", ") .. ")")
  end
  local task = require(TASKS[name])
  if o.baseline and o.baseline ~= "direct" then args.fail("--baseline takes only direct") end
  if task.data and not o.data then args.fail(("%s needs --data FILE (see docs/bench.md)"):format(name)) end
  if task.corpus and not o.corpus then args.fail(("%s needs --corpus FILE (see docs/bench.md)"):format(name)) end
  local opts = {task = name, model = o.model or sys.getenv("RLM_MODEL"),
                n = math.tointeger(o.n) or task.default_n,
                depth = math.tointeger(o.depth) or 1, jobs = math.tointeger(o.jobs) or 4,
                backend = o.backend, baseline = o.baseline, max_cost = o.max_cost,
                seed = math.tointeger(o.seed) or 1, out = o.out or ("rlm-bench/" .. name),
                data = o.data, corpus = o.corpus, documents = math.tointeger(o.documents),
                judged = task.judged}
  if not opts.model then error("no model: pass --model provider/name or set RLM_MODEL", 0) end
  opts.sub_model = o.sub_model or opts.model
  opts.judge_model = o.judge_model or opts.model
  -- The prices the runs use (RLM_PRICES over the built-in table) price the calls the bench
  -- makes itself too: the direct baseline and the judge.
  local file = sys.getenv("RLM_PRICES")
  opts.prices = file and file ~= "" and llm.load_prices(file) or nil
  function opts.cost(model, usage)
    return (budget.cost(llm.price(llm.label(model), opts.prices), usage))
  end
  opts.lengths = {}
  for i, l in ipairs(o.lengths or {}) do
    opts.lengths[i] = math.tointeger(tonumber(l)) or args.fail("--lengths takes whole numbers: " .. l)
  end
  if #opts.lengths == 0 then opts.lengths = task.default_lengths or {} end
  local queries = task.queries(opts)
  local methods = opts.baseline and {"rlm", "direct"} or {"rlm"}

  if o.dry_run then
    dry_run(opts, task, queries, methods)
    return 0
  end

  assert(sys.mkdir_p(opts.out .. "/trajectories"))
  local path = opts.out .. "/results.jsonl"
  local done, results = {}, {}
  if o.resume then done, results = read_results(path) else assert(sys.write_file(path, "")) end
  assert(sys.write_file(opts.out .. "/manifest.json", json.encode(manifest(opts, task, queries), {indent = 2})))
  local spent = 0
  for _, r in ipairs(results) do spent = spent + (r.cost or 0) end
  local jobs = {}
  for _, q in ipairs(queries) do
    for _, m in ipairs(methods) do
      if not done[m .. " " .. q.key] then jobs[#jobs + 1] = {q = q, method = m} end
    end
  end
  local file = assert(io.open(path, "a"))
  local skipped = 0
  local slots = async.map(jobs, function(j)
    if opts.max_cost and spent >= opts.max_cost then skipped = skipped + 1 return end
    local r = run_query(opts, task, j.q, j.method, opts.max_cost and (opts.max_cost - spent))
    if not r then skipped = skipped + 1 return end
    spent = spent + r.cost
    results[#results + 1] = r
    file:write(json.encode(r), "\n")
    file:flush()
    io.stderr:write(("%s %s: score %.2f, $%.4f, %.1f s\n"):format(j.method, j.q.key, r.score, r.cost, r.latency))
  end, opts.jobs)
  file:close()
  async.check_interrupt()
  for _, s in ipairs(slots) do
    if not s.ok then error(s.error, 0) end      -- misuse (a model without a price ...) is not data
  end
  io.write(write_report(opts, task, results))
  if skipped > 0 then
    io.stderr:write(("rlm bench: --max-cost reached ($%.4f spent): %d queries not run; --resume "
      .. "goes on from here\n"):format(spent, skipped))
  end
  return 0
end

return M
