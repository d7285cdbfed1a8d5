--- JSON figures: rlm.json against lua-cjson on a ~10 MB document of mixed content shaped like
-- API traffic (chat messages with escapes and non-ASCII text, ids, token counts, floats, nulls,
-- nested lists). Best of several runs; ./rlm run bench/json.lua
local sys = require "rlm.core.sys"
local json = require "rlm.json"
local cjson = require "cjson"

local function record(i)
  return {
    id = "chatcmpl-" .. string.format("%016x", i * 2654435761),
    created = 1700000000 + i,
    model = "gpt-4.1-mini",
    usage = {prompt_tokens = 1000 + i % 977, completion_tokens = i % 313, cost = i * 1.25e-6,
             ratio = (i % 100) / 7},
    messages = {
      {role = "system", content = "You are a careful assistant. Answer in JSON."},
      {role = "user", content = ("Summarise document %d: \"quoted\" text,\n\ttabs and "
        .. "caf\u{E9} \u{4E2D}\u{6587} \u{1F600} line %d\n"):format(i, i)},
      {role = "assistant", content = "```repl\nx = llm_query(context[:1000])\nprint(x)\n```",
       tool_calls = json.array()},
    },
    flags = {true, false, json.null, i % 2 == 0},
    scores = {i / 3, -i * 0.5, 1e-9 * i, i},
    meta = {},
  }
end

local items, size = {}, 0
local doc
repeat
  for i = #items + 1, #items + 2000 do items[i] = record(i) end
  doc = json.encode({data = items, count = #items})
  size = #doc
until size >= 10e6

local function best(fn, runs)
  local t = math.huge
  for _ = 1, runs do
    collectgarbage()
    local t0 = sys.now()
    fn()
    t = math.min(t, sys.now() - t0)
  end
  return t
end

local mb = size / 1e6
local function line(what, secs)
  print(("%-28s %7.1f ms  %7.1f MB/s"):format(what, secs * 1e3, mb / secs))
end

print(("document: %.1f MB, %d records"):format(mb, #items))
local ours = json.decode(doc)
assert(ours.count == #items and #ours.data == #items)
line("decode  rlm.json", best(function() json.decode(doc) end, 5))
line("decode  cjson", best(function() cjson.decode(doc) end, 5))
line("encode  rlm.json", best(function() json.encode(ours) end, 5))
line("encode  rlm.json table order", best(function() json.encode(ours, {sort_keys = false}) end, 5))
line("encode  cjson", best(function() cjson.encode(ours) end, 5))
