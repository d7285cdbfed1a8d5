--- rlm bench's dataset tasks (oolong, oolong-pairs, codeqa, browsecomp-plus): each loader on
-- small hand-made files in the published formats, the gold of the pair queries worked out by
-- hand, the scorers' edge cases, and whole benches against a scripted model (judge included).
local T = require "support"
local F = require "rlm_fixtures"
local evals = require "rlm.evals"
local json = require "rlm.json"
local sys = require "rlm.sys"
local oolong = require "rlm.bench.oolong"
local pairs_task = require "rlm.bench.oolong_pairs"
local codeqa = require "rlm.bench.codeqa"
local bcp = require "rlm.bench.browsecomp_plus"

local tests = {}

local function write_jsonl(rows)
  local lines = {}
  for i, r in ipairs(rows) do lines[i] = json.encode(r) end
  local path = T.tmpdir() .. "/data.jsonl"
  assert(sys.write_file(path, table.concat(lines, "\n") .. "\n"))
  return path
end

-- A labelled trec_coarse window: {date, user, question, label} lines, as oolong-synth writes them.
local function window(records)
  local plain, labelled = {}, {}
  for i, r in ipairs(records) do
    local head = ("Date: %s || User: %d || Instance: %s"):format(r[1], r[2], r[3])
    plain[i], labelled[i] = head, head .. " || Label: " .. r[4]
  end
  return table.concat(plain, "\n"), table.concat(labelled, "\n")
end

local RECORDS = {
  {"Jan 05, 2023", 101, "How far is the moon ?", "numeric value"},
  {"Feb 10, 2023", 101, "Who wrote Hamlet ?", "human being"},
  {"Jan 02, 2023", 202, "Where is Paris ?", "location"},
  {"Mar 01, 2023", 202, "Who painted the Mona Lisa ?", "human being"},
  {"Apr 20, 2023", 303, "What is NATO ?", "abbreviation"},
  {"May 02, 2023", 303, "What is a car ?", "entity"},
  {"Jun 11, 2023", 404, "What is love ?", "description and abstract concept"},
  {"Jun 12, 2023", 404, "Where is Rome ?", "location"},
  {"Jun 13, 2023", 404, "Where is Oslo ?", "location"},
  {"Jul 01, 2023", 505, "What is a bus ?", "entity"},
}

local function synth_rows()
  local plain, labelled = window(RECORDS)
  local base = {dataset = "trec_coarse", context_len = 1024, context_window_id = 0,
                context_window_text = plain, context_window_text_with_labels = labelled}
  local function row(id, q, a, kind)
    local r = {}
    for k, v in pairs(base) do r[k] = v end
    r.id, r.question, r.answer, r.answer_type = id, q, a, kind
    return r
  end
  return {
    row("1", "How many data points are labelled location?", "[3]", "ANSWER_TYPE.NUMERIC"),
    row("2", "Which label is most common?", "['location']", "ANSWER_TYPE.LABEL"),
    row("3", "Is entity more common, less common or the same frequency as location?",
        "['less common than']", "ANSWER_TYPE.COMPARISON"),
    {id = "9", dataset = "spam", context_len = 1024, context_window_text = "x", question = "q",
     answer = "[1]", answer_type = "ANSWER_TYPE.NUMERIC"},
  }
end

tests["oolong: the loader keeps trec_coarse at the asked length, in any published layout"] = function()
  local rows = synth_rows()
  local path = write_jsonl(rows)
  local qs = oolong.queries{data = path, lengths = {1024}, n = 10}
  T.eq(#qs, 3, "the spam row is left out")
  local item = qs[1].make()
  T.eq(item.answer, "[3]")
  T.eq(item.context:find("Label:", 1, true), nil, "the labels never reach the model")
  T.eq(#oolong.queries{data = path, lengths = {1024}, n = 2}, 2, "--n caps the queries")
  -- a JSON array, and the datasets-server answer
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/a.json", json.encode(rows)))
  T.eq(#oolong.queries{data = dir .. "/a.json", lengths = {1024}, n = 10}, 3)
  local wrapped = {rows = {}}
  for i, r in ipairs(rows) do wrapped.rows[i] = {row_idx = i - 1, row = r} end
  assert(sys.write_file(dir .. "/rows.json", json.encode(wrapped)))
  T.eq(#oolong.queries{data = dir .. "/rows.json", lengths = {1024}, n = 10}, 3)
  T.raises(function() oolong.queries{data = path, lengths = {131072}, n = 1} end,
           "the file has lengths 1024")
  assert(sys.write_file(dir .. "/bad.jsonl", json.encode(rows[1]) .. "\n{not json\n"))
  T.raises(function() oolong.queries{data = dir .. "/bad.jsonl", lengths = {1024}, n = 1} end, "line 2")
  T.raises(function() oolong.queries{data = dir .. "/missing.jsonl", lengths = {1024}, n = 1} end,
           "cannot read")
end

tests["oolong: the reference's scorer on each answer type"] = function()
  local s = evals.score.oolong
  T.eq(s("Answer: 3", "[3]", "ANSWER_TYPE.NUMERIC"), 1)
  T.eq(s("Answer: 5", "[3]", "ANSWER_TYPE.NUMERIC"), 0.75 ^ 2)
  T.eq(s("I count them.\nAnswer: **4**", "[3]", "ANSWER_TYPE.NUMERIC"), 0.75)
  T.eq(s("no idea", "[3]", "ANSWER_TYPE.NUMERIC"), 0)
  T.eq(s("Label: Location", "['location']", "ANSWER_TYPE.LABEL"), 1, "case does not matter")
  T.eq(s("Label: entity", "['location']", "ANSWER_TYPE.LABEL"), 0)
  T.eq(s("Answer: entity is less common than location", "['less common than']", "ANSWER_TYPE.COMPARISON"), 1)
  T.eq(s("Answer: more common than", "['less common than']", "ANSWER_TYPE.COMPARISON"), 0)
  T.eq(s("Answer: same frequency as", "['same frequency as']", "ANSWER_TYPE.COMPARISON"), 1)
  T.eq(s("Answer: January 5, 2023", "[datetime.date(2023, 1, 5)]", "ANSWER_TYPE.DATE"), 1)
  T.eq(s("Answer: 2023-01-05", "[datetime.date(2023, 1, 5)]", "ANSWER_TYPE.DATE"), 1)
  T.eq(s("Answer: Jan 06, 2023", "[datetime.date(2023, 1, 5)]", "ANSWER_TYPE.DATE"), 0)
  T.eq(s("Answer: sometime", "[datetime.date(2023, 1, 5)]", "ANSWER_TYPE.DATE"), 0)
  T.eq(evals.oolong_gold("['numeric value']"), "numeric value")
  T.eq(evals.oolong_gold("[12]"), 12)
  T.eq(evals.oolong_gold("plain"), "plain")
end

tests["oolong-pairs: the paper's wording, and the gold worked out by hand"] = function()
  T.eq(#pairs_task.TASKS, 20)
  local q1 = pairs_task.question(1)
  T.truthy(q1:find("^In the above data, list all pairs of user IDs %(no duplicate pairs, list lower ID first%) " ..
                   "where both users have at least one instance with a numeric value or location%. Each of"), q1)
  T.truthy(q1:find("In your answer, list all pairs in the format %(user_id_1, user_id_2%), separated by newlines%.$"))
  local _, labelled = window(RECORDS)
  local users = pairs_task.users(labelled)
  T.eq(#users[404], 3)
  T.eq(users[101][1].date, "2023-01-05")
  -- 1: numeric value or location: 101 (numeric), 202 and 404 (location)
  T.eq(pairs_task.gold(1, users), {{101, 202}, {101, 404}, {202, 404}})
  -- 4: human being or location, every human being after Jan 6, 2023: 101's is Feb 10, 202's
  -- Mar 1; 404 has no human being at all (vacuously fine) and a location
  T.eq(pairs_task.gold(4, users), {{101, 202}, {101, 404}, {202, 404}})
  -- 5: entity or numeric value, every entity before Mar 15, 2023: 303 and 505 have entities
  -- after it; only 101 qualifies, so no pair
  T.eq(pairs_task.gold(5, users), {})
  -- 11: one has entity and abbreviation (303), the other exactly one entity (303 itself, 505)
  T.eq(pairs_task.gold(11, users), {{303, 505}})
  -- 14: one has human being and numeric value (101), the other exactly two locations (404)
  T.eq(pairs_task.gold(14, users), {{101, 404}})
  T.eq(evals.pairs_in("(202, 101)\n(404,101) and (5, 5)"), {{202, 101}, {404, 101}})
  T.eq(evals.score.pairs_f1(evals.pairs_in("(202, 101)\n(101, 404)"), pairs_task.gold(1, users)), 0.8)
end

tests["codeqa: LongBench-v2 rows of the code domain, a letter each; the choice parser"] = function()
  local function row(id, domain, answer)
    return {_id = id, domain = domain, sub_domain = "Code repo QA", difficulty = "hard", length = "short",
            question = "What does f do?", choice_A = "adds", choice_B = "subtracts", choice_C = "nothing",
            choice_D = "crashes", answer = answer, context = "def f(a, b): return a + b"}
  end
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/data.json", json.encode{row("a1", "Code Repository Understanding", "A"),
    row("b2", "Single-Document QA", "B"), row("c3", "Code Repository Understanding", "C")}))
  local qs = codeqa.queries{data = dir .. "/data.json", n = 50}
  T.eq(#qs, 2)
  T.eq(qs[1].length, "short")
  local item = qs[1].make()
  T.contains(item.question, "(D) crashes")
  T.contains(item.question, "The correct answer is (X)")
  assert(sys.write_file(dir .. "/bad.json", json.encode{row("x", "Code Repository Understanding", "E")}))
  T.raises(function() codeqa.queries{data = dir .. "/bad.json", n = 5} end, "not a letter A-D")
  T.eq(evals.score.choice("A is tempting, but the correct answer is (C).", "C"), 1)
  T.eq(evals.score.choice("Answer: B", "B"), 1)
  T.eq(evals.score.choice("I cannot tell.", "A"), 0)
end

-- A corpus of n documents d1..dn as JSON Lines, and queries whose gold/evidence name some.
local function corpus(n)
  local rows = {}
  for i = 1, n do rows[i] = {docid = "d" .. i, text = "text of document " .. i, url = "https://x/" .. i} end
  return write_jsonl(rows)
end

tests["browsecomp-plus: each query's documents hold its gold and evidence, drawn the same each time"] = function()
  local path = corpus(300)
  local row = {query_id = "7", query = "Who?", answer = "Ada",
               gold_docs = {{docid = "d250", text = "ignored"}}, evidence_docs = {"d3", "d250"}}
  local docs = bcp.documents(row, path, 40, 11)
  T.eq(#docs, 40)
  local seen = {}
  for _, d in ipairs(docs) do
    T.eq(seen[d.docid], nil, "a document twice")
    seen[d.docid] = true
  end
  T.truthy(seen.d250 and seen.d3, "gold and evidence are in")
  local again = bcp.documents(row, path, 40, 11)
  for i = 1, 40 do T.eq(again[i].docid, docs[i].docid) end
  local other = bcp.documents(row, path, 40, 12)
  local same = 0
  for i = 1, 40 do if other[i].docid == docs[i].docid then same = same + 1 end end
  T.truthy(same < 40, "another seed, other documents")
  T.raises(function() bcp.documents({query_id = "8", gold_docs = {"nope"}}, path, 10, 1) end,
           "document nope of query 8 is not in")
  T.eq(evals.verdict("The response names Ada.\ncorrect: yes"), 1)
  T.eq(evals.verdict("correct: **no**"), 0)
  T.eq(evals.verdict("I think so"), nil)
end

-- A model that answers every dataset task from the text it is given: oolong counts the
-- location lines in code, the pairs task submits two pairs, the judge says yes when the
-- response names Ada.
local function dataset_model()
  return F.model{rules = {
    {match = "You grade answers", reply_expr = "'Same person.\\ncorrect: yes' if 'Response: Ada' in prompt else 'No.\\ncorrect: no'"},
    {match = "list all pairs of user IDs", reply = F.code("SUBMIT(answer='(101, 202)\\n(202, 404)')")},
    {match = "labelled location", reply = F.code("SUBMIT(answer='Answer: ' + str(sum(1 for l in context.splitlines() if 'Where is' in l)))")},
    {match = "Who", reply = F.code("SUBMIT(answer='Ada')")},
    {match = ".", reply = F.code("SUBMIT(answer='Answer: unknown')")},
  }}
end

tests["rlm bench oolong and oolong-pairs against a scripted model: scores, report, manifest"] = function()
  local server = dataset_model()
  local data = write_jsonl(synth_rows())
  local out = T.tmpdir() .. "/o"
  local r = T.run_rlm({"bench", "oolong", "--data", data, "--lengths", "1024", "--out", out, "--jobs", "2"},
                      {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  local scores = {}
  for line in assert(sys.read_file(out .. "/results.jsonl")):gmatch("[^\n]+") do
    local rec = json.decode(line)
    scores[rec.key] = rec.score
  end
  T.eq(scores["1024-1"], 1, "3 locations counted")
  T.eq(scores["1024-2"], 0)
  T.contains(r.stdout, "| rlm | 1024 | 33.3% |")
  local manifest = json.decode(assert(sys.read_file(out .. "/manifest.json")))
  T.eq(manifest.data.path, data)
  T.truthy(manifest.data.head_hash:match("^%x+$"))
  -- --resume asks the model nothing again and reports the same
  local before = F.stats(server).requests
  r = T.run_rlm({"bench", "oolong", "--data", data, "--lengths", "1024", "--out", out, "--resume"},
                {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  T.eq(F.stats(server).requests, before)
  T.contains(r.stdout, "| rlm | 1024 | 33.3% |")

  out = T.tmpdir() .. "/p"
  r = T.run_rlm({"bench", "oolong-pairs", "--data", data, "--lengths", "1024", "--n", "2", "--out", out},
                {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  for line in assert(sys.read_file(out .. "/results.jsonl")):gmatch("[^\n]+") do
    local rec = json.decode(line)
    -- task 1's gold is 3 pairs, both given ones among them: F1 0.8; task 2 (entity or human
    -- being: 101, 202, 303, 505) has 6 pairs, one of the two given: precision 1/2, recall
    -- 1/6, F1 0.25
    local want = rec.key == "1024-t01" and 0.8 or 0.25
    T.truthy(math.abs(rec.score - want) < 1e-9, rec.key .. " scored " .. rec.score)
  end
  T.contains(assert(sys.read_file(out .. "/report.html")), "<svg")
end

tests["rlm bench browsecomp-plus: the judge decides, its cost counts under --max-cost; --dry-run sends nothing"] = function()
  local server = dataset_model()
  local path = corpus(50)
  local queries = write_jsonl{
    {query_id = "1", query = "Who wrote the first program?", answer = "Ada Lovelace", gold_docs = {"d5"}, evidence_docs = {"d6"}},
    {query_id = "2", query = "Which year?", answer = "1843", gold_docs = {"d7"}, evidence_docs = {}},
  }
  local dir = T.tmpdir()
  assert(sys.write_file(dir .. "/prices.json", json.encode{
    ["openai/root-model"] = {input = 1, output = 1}, ["openai/judge"] = {input = 1000, output = 1000}}))
  local env = F.env(server, {RLM_PRICES = dir .. "/prices.json"})
  local function bench(...)
    local argv = {"bench", "browsecomp-plus", "--data", queries, "--corpus", path, "--documents", "20",
                  "--judge-model", "openai/judge", "--jobs", "1", ...}
    return T.run_rlm(argv, {env = env, timeout = 120})
  end

  local before = F.stats(server).requests
  local r = bench("--dry-run")
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stdout, "nothing was sent")
  T.contains(r.stdout, "2 queries of ~")
  T.eq(F.stats(server).requests, before)

  r = bench("--out", dir .. "/b")
  T.eq(r.code, 0, r.stderr)
  local recs = {}
  for line in assert(sys.read_file(dir .. "/b/results.jsonl")):gmatch("[^\n]+") do
    local rec = json.decode(line)
    recs[rec.key] = rec
  end
  T.eq(recs["1"].score, 1, "the judge accepted Ada")
  T.eq(recs["2"].score, 0)
  T.truthy(recs["1"].judge_cost > 0, "the judge's cost is counted")
  T.truthy(recs["1"].cost >= recs["1"].judge_cost)
  T.eq(json.decode(assert(sys.read_file(dir .. "/b/manifest.json"))).prompts.judge,
       require("rlm.sys").hash(bcp.JUDGE_PROMPT))

  -- the first query's run fits the budget, its judge's call overspends it: the second query
  -- is not started, and the bench says how to go on
  r = bench("--out", dir .. "/c", "--max-cost", "0.05")
  T.eq(r.code, 0, r.stderr)
  T.contains(r.stderr, "--max-cost reached")
  local n = 0
  for _ in assert(sys.read_file(dir .. "/c/results.jsonl")):gmatch("[^\n]+") do n = n + 1 end
  T.eq(n, 1, "one query ran before the budget was spent")
end

tests["rlm bench: dataset tasks say which files they need"] = function()
  local r = T.run_rlm({"bench", "oolong", "--model", "openai/x"})
  T.eq(r.code, 2)
  T.contains(r.stderr, "oolong needs --data FILE")
  r = T.run_rlm({"bench", "browsecomp-plus", "--model", "openai/x", "--data", "q.jsonl"})
  T.eq(r.code, 2)
  T.contains(r.stderr, "browsecomp-plus needs --corpus FILE")
end

return tests
