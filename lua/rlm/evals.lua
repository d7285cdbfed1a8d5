--- Evaluations of RLM runs, as in the paper (arXiv 2512.24601): generated tasks, the
-- reference scorers, and the statistics a report needs. `rlm bench` drives them.
--
--   local evals = require "rlm.evals"
--   local item = evals.sniah(65536, 7)        -- {context, question, answer, length, seed}
--   evals.score.sniah("The number is 1234567.", "1234567")   --> 1
--   evals.score.oolong("12", 14)              --> 0.5625 (0.75 ^ |12 - 14|)
--   evals.score.pairs_f1({{1, 2}}, {{2, 1}, {3, 4}})  --> 0.667
--   evals.summary({1, 0, 1})                  --> {mean, low, high, n} (95% Wilson interval)
local M = {}

-- ---------- a seeded generator (the same data on every machine) ----------

-- xorshift64*: small, fast, and the same sequence everywhere for a seed.
local function rng(seed)
  local s = (seed * 0x9E3779B97F4A7C15 + 0x2545F4914F6CDD1D) | 1
  return function(n)
    s = s ~ (s >> 12)
    s = s ~ (s << 25)
    s = s ~ (s >> 27)
    local v = (s * 0x2545F4914F6CDD1D) >> 11       -- 53 bits, non-negative
    return n and (v % n) + 1 or v
  end
end
M.rng = rng

local WORDS = {}
for w in ([[the a of and to in is was for on that with as by at from it an be this which or
  are have had not but were their one all we there been has more when will who would so no
  its other time first into may these some only new could two like over people also many
  after most made than then them between each where during under before while those both
  river garden winter harbour lantern orchard meadow valley signal letter market station
  engine copper window bridge forest canvas ledger pocket thunder marble violet compass
  quietly slowly across beyond nearly always often perhaps seldom around against toward
  remember carry gather follow answer wonder travel borrow measure whisper settle wander]])
  :gmatch("%S+") do WORDS[#WORDS + 1] = w end

local CHARS_PER_TOKEN = 4     -- how lengths in tokens become characters of filler

-- Filler text of about `chars` characters: sentences of common words, from r.
local function filler(r, chars)
  local out, n = {}, 0
  while n < chars do
    local len = 8 + r(10)
    local words = {}
    for i = 1, len do words[i] = WORDS[r(#WORDS)] end
    local s = words[1]:sub(1, 1):upper() .. table.concat(words, " "):sub(2) .. ". "
    out[#out + 1] = s
    n = n + #s
  end
  return table.concat(out):sub(1, chars)
end

--- A RULER-style single needle: about `tokens` tokens of filler with one "special magic
-- number" sentence at a random depth. Returns {context, question, answer, length, seed, depth}.
function M.sniah(tokens, seed)
  local r = rng(seed * 1000003 + tokens)
  local key = WORDS[r(#WORDS)] .. "-" .. WORDS[r(#WORDS)]
  local number = tostring(1000000 + r(8999999))
  local needle = ("The special magic number for %s is: %s. "):format(key, number)
  local body = filler(r, tokens * CHARS_PER_TOKEN - #needle)
  local depth = r(100) - 1                              -- percent of the way in
  local at = #body * depth // 100
  at = (body:find(". ", at + 1, true) or at) + 1         -- at a sentence boundary
  return {context = body:sub(1, at) .. " " .. needle .. body:sub(at + 1),
          question = ("What is the special magic number for %s mentioned in the provided text?")
            :format(key),
          answer = number, length = tokens, seed = seed, depth = depth}
end

-- ---------- scorers ----------

M.score = {}

local function norm(s)
  return (tostring(s or ""):lower():gsub("%s+", " "):gsub("^%s+", ""):gsub("[%s%.]+$", ""))
end

--- RULER's string match: 1 when the expected value appears in the prediction.
function M.score.sniah(pred, gold)
  return tostring(pred or ""):find(tostring(gold), 1, true) and 1 or 0
end

--- OOLONG's scorer: a number scores 0.75 ^ |y - y_hat| (the first number in the prediction);
-- anything else (labels, dates, comparison phrases such as "more common than") an exact,
-- case-insensitive match after trimming.
function M.score.oolong(pred, gold)
  local g = tonumber(gold)
  if g then
    local p = tonumber(tostring(pred or ""):match("%-?%d+%.?%d*"))
    if not p then return 0 end
    if p == g then return 1 end
    return 0.75 ^ math.abs(p - g)
  end
  return norm(pred) == norm(gold) and 1 or 0
end

-- A pair as an order-free key.
local function pair_key(p)
  local a, b = tostring(p[1]), tostring(p[2])
  if a > b then a, b = b, a end
  return a .. "\0" .. b
end

--- OOLONG-Pairs: F1 over the set of unordered pairs (an empty gold and an empty prediction
-- score 1).
function M.score.pairs_f1(pred, gold)
  local want, got = {}, {}
  for _, p in ipairs(gold or {}) do want[pair_key(p)] = true end
  for _, p in ipairs(pred or {}) do got[pair_key(p)] = true end
  local tp, np, ng = 0, 0, 0
  for k in pairs(got) do np = np + 1; if want[k] then tp = tp + 1 end end
  for _ in pairs(want) do ng = ng + 1 end
  if np == 0 and ng == 0 then return 1 end
  if tp == 0 then return 0 end
  if tp == np and tp == ng then return 1 end
  local precision, recall = tp / np, tp / ng
  return 2 * precision * recall / (precision + recall)
end

--- Multiple choice (LongBench-v2 CodeQA): the first standalone letter A-D in the prediction.
function M.score.choice(pred, gold)
  local letter = tostring(pred or ""):match("%f[%w]([A-D])%f[%W]")
  return letter == tostring(gold):upper() and 1 or 0
end

-- ---------- statistics ----------

--- mean, sd and n of xs.
function M.mean_sd(xs)
  local n, sum = #xs, 0
  for _, x in ipairs(xs) do sum = sum + x end
  local mean = n > 0 and sum / n or 0
  local sq = 0
  for _, x in ipairs(xs) do sq = sq + (x - mean) ^ 2 end
  return mean, n > 1 and math.sqrt(sq / (n - 1)) or 0, n
end

--- Accuracy with its 95% interval (Wilson's, which stays inside [0, 1] for small n).
function M.summary(scores)
  local mean, _, n = M.mean_sd(scores)
  if n == 0 then return {mean = 0, low = 0, high = 0, n = 0} end
  local z = 1.96
  local d = 1 + z * z / n
  local centre = (mean + z * z / (2 * n)) / d
  local half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / d
  return {mean = mean, low = math.max(0, centre - half), high = math.min(1, centre + half), n = n}
end

return M
