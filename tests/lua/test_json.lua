local T = require "support"
local json = require "rlm.json"
local cjson = require "cjson"
local sys = require "rlm.sys"

local tests = {}

tests["null is cjson.null and mixes both ways"] = function()
  T.truthy(json.null == cjson.null, "json.null == cjson.null")
  T.eq(json.decode("[null]")[1] == cjson.null, true)
  T.eq(json.encode({a = cjson.null}), '{"a":null}')
  T.eq(cjson.encode(json.decode('{"a":null}')), '{"a":null}')
  T.eq(json.encode(nil), "null")
end

tests["factorial(20) and int64 limits stay exact"] = function()
  local f = 1
  for i = 2, 20 do f = f * i end
  T.eq(json.encode(f), "2432902008176640000")
  T.eq(json.decode("2432902008176640000"), 2432902008176640000)
  T.eq(json.decode("[-9223372036854775808]")[1], math.mininteger)
  T.eq(json.decode('{"n":42}').n, 42)                 -- an integer, where cjson gives 42.0
  T.eq(math.type(cjson.decode('{"n":42}').n), "float")
  T.eq(math.type(json.decode("9223372036854775808")), "float")
  T.eq(json.encode(42.0), "42.0")
  T.eq(json.decode("42.0"), 42.0)
  T.eq(json.encode({2^53, 0.1, 1e300}), "[9007199254740992.0,0.1,1e+300]")
end

tests["a number no double holds is a parse error, never inf"] = function()
  for _, text in ipairs{"1e999", "-1e999", '{"id":1e400}', "[" .. string.rep("9", 400) .. "]"} do
    local v, err = json.decode(text)
    T.eq(v, nil, text)
    T.contains(err, "number out of range")
  end
  T.eq(json.decode("1e308"), 1e308)
  T.eq(json.decode("1e-999"), 0.0, "underflow is a zero, which JSON can carry")
end

tests["empty arrays and objects round-trip"] = function()
  T.eq(json.encode(json.decode("[]")), "[]")
  T.eq(json.encode(json.decode("{}")), "{}")
  T.eq(json.encode(json.decode('{"messages":[],"meta":{}}'), {sort_keys = true}),
    '{"messages":[],"meta":{}}')
  T.eq(json.encode({tools = json.array()}), '{"tools":[]}')
  T.eq(json.encode({argv = json.array({})}), '{"argv":[]}')
  T.eq(json.encode(json.object()), "{}")
  T.eq(json.encode({}), "{}")
  local t = {}
  T.truthy(json.array(t) == t, "array() returns its argument")
  T.truthy(getmetatable(t) == json.array_mt)
  T.truthy(getmetatable(json.decode("{}")) == json.object_mt)
  T.truthy(getmetatable(json.decode("[1]")) == json.array_mt)
end

tests["containers of every size decode whole and in order, a repeated key keeps its last value"] = function()
  -- Items wait on the stack in batches before their table is made (host/json.c): sizes on
  -- both sides of the batch, nested, and repeats inside and across it.
  for _, n in ipairs{0, 1, 31, 32, 33, 64, 65, 1000} do
    local items, members = {}, {}
    for i = 1, n do
      items[i] = ("[%d,{\"i\":%d}]"):format(i, i)
      members[i] = ('"k%d":[%d]'):format(i, i)
    end
    local arr = assert(json.decode("[" .. table.concat(items, ",") .. "]"))
    local obj = assert(json.decode("{" .. table.concat(members, ",") .. "}"))
    T.eq(#arr, n, "array of " .. n)
    local count = 0
    for _ in pairs(obj) do count = count + 1 end
    T.eq(count, n, "object of " .. n)
    for i = 1, n do
      T.eq(arr[i][1], i)
      T.eq(arr[i][2].i, i)
      T.eq(obj["k" .. i][1], i)
    end
    T.eq(json.is_array(arr), true)
    T.eq(json.encode(json.decode(json.encode(obj, {sort_keys = true})), {sort_keys = true}),
         json.encode(obj, {sort_keys = true}))
  end
  for _, at in ipairs{2, 31, 32, 33, 40} do
    local members = {'"dup":"first"'}
    for i = 2, at - 1 do members[#members + 1] = ('"m%d":%d'):format(i, i) end
    members[#members + 1] = '"dup":"last"'
    T.eq(json.decode("{" .. table.concat(members, ",") .. "}").dup, "last", "repeat at " .. at)
  end
  local deep = string.rep("[", 1000) .. string.rep("]", 1000)
  T.truthy(json.decode(deep), "1000 levels decode")
end

tests["an encode inside a finalizer that runs during another encode spoils neither"] = function()
  -- json.encode keeps one output buffer between calls (host/json.c); a GC step inside an
  -- encode (sort_keys makes a table) can run finalizers, and a finalizer may encode too.
  local doc = {}
  for i = 1, 200 do doc["k" .. i] = {i, "v" .. i, {nested = i}} end
  local want = json.encode(doc, {sort_keys = true})
  local seen, bad = 0, 0
  collectgarbage("incremental", 0, 1000)   -- a step at nearly every allocation
  for _ = 1, 200 do
    for _ = 1, 20 do
      setmetatable({}, {__gc = function()
        seen = seen + 1
        if json.encode({inner = string.rep("z", 300)}) ~= '{"inner":"' .. string.rep("z", 300) .. '"}' then
          bad = bad + 1
        end
      end})
    end
    T.eq(json.encode(doc, {sort_keys = true}), want)
  end
  collectgarbage("incremental", 200, 100)
  collectgarbage()
  T.truthy(seen > 0, "finalizers ran")
  T.eq(bad, 0, "finalizers' own encodes")
end

tests["is_array tells how a table would encode"] = function()
  T.eq(json.is_array({1, 2}), true)
  T.eq(json.is_array(json.decode("[]")), true)
  T.eq(json.is_array(json.decode("{}")), false)
  T.eq(json.is_array({}), false)
  T.eq(json.is_array({a = 1}), false)
  T.eq(json.is_array({1, a = 1}), false)
  T.eq(json.is_array("x"), false)
end

-- Lua seeds its string hashes per process, so table order differs between processes: encode
-- writes object keys in byte order unless told otherwise, and the same value gives the same
-- bytes in every process (cache keys, trajectories, schemas, request bodies depend on it).
tests["the same value encodes to the same bytes in every process"] = function()
  local script = T.lua_script([[
    local json = require "rlm.json"
    local t = {}
    for i = 1, 40 do t["key" .. i] = {["n" .. i] = i, model = "m", prompt = "p"} end
    io.write(json.encode(t))]])
  local first
  for _ = 1, 8 do
    local res = T.run_rlm({"run", script})
    T.eq(res.code, 0, res.stderr)
    T.truthy(#res.stdout > 40 * 20, "the whole document is written")
    first = first or res.stdout
    T.eq(res.stdout, first, "bytes of another process")
  end
  T.truthy(first:find('^{"key1":{"model":"m","n1":1,"prompt":"p"},"key10":'), first:sub(1, 80))
end

tests["sort_keys and indent"] = function()
  local v = {b = 1, a = {1, 2}, c = {}}
  T.eq(json.encode(v, {sort_keys = true}), '{"a":[1,2],"b":1,"c":{}}')
  T.eq(json.encode(v, {sort_keys = true, indent = 2}),
    '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1,\n  "c": {}\n}')
  T.eq(json.encode({x = 1}, {indent = 0}), '{"x":1}')
  T.raises(function() json.encode({}, {indnet = 2}) end, "unknown option 'indnet'")
  T.raises(function() json.encode({}, {indent = -1}) end, "indent must be")
  T.raises(function() json.encode({}, {indent = 1.5}) end, "indent must be")
end

tests["malformed input gives nil and a message with the byte offset"] = function()
  local v, err = json.decode('{"a": 1,, "b": 2}')
  T.eq(v, nil)
  T.eq(err, "invalid JSON at byte 8: expected a string key")
  v, err = json.decode("[1, 2")
  T.eq(v, nil)
  T.contains(err, "unexpected end of input")
  v, err = json.decode('{"a":1} trailing')
  T.eq(v, nil)
  T.eq(err, "invalid JSON at byte 8: unexpected data after the value")
  v, err = json.decode("")
  T.eq(v, nil)
  T.contains(err, "byte 0")
  T.raises(function() json.decode({}) end, "bad argument #1")
end

tests["unencodable values raise with their path"] = function()
  T.raises(function() json.encode({tools = {{}, {}, print}}) end,
    "cannot encode a function at $.tools[3]")
  T.raises(function() json.encode({x = {1, y = 2}}) end, "table with mixed keys at $.x")
  T.raises(function() json.encode(0/0) end, "cannot encode NaN")
  local t = {}
  t[1] = t
  T.raises(function() json.encode(t) end, "nesting deeper than 1000 levels")
end

tests["strings: escapes, UTF-8 and raw bytes"] = function()
  T.eq(json.encode('a/b"c\\\n\0'), '"a/b\\"c\\\\\\n\\u0000"')
  T.eq(json.encode("h\u{E9}\u{1F600}"), '"h\u{E9}\u{1F600}"')
  T.eq(json.encode("\xff"), '"\\udcff"')
  T.eq(json.decode('"\\udcff\\ud83d\\ude00"'), "\xff\u{1F600}")
  local all = {}
  for i = 0, 255 do all[#all + 1] = string.char(i) end
  all = table.concat(all)
  T.eq(json.decode(json.encode(all)), all)
end

-- Python is the other end of the sandbox protocol: bytes, integers and floats must survive it.
tests["floats: every double reads back as itself, in the fewest digits"] = function()
  local state = 88172645463325252
  local function bits()          -- xorshift64: doubles from their bits, all magnitudes
    state = state ~ (state << 13); state = state ~ (state >> 7); state = state ~ (state << 17)
    return state
  end
  local cases = {0.1, -0.25, 1 / 3, 2 / 3, 1e-7, 9.99e-8, 1.5e-7, 123.456, 1e14 + 0.5,
                 0.30000000000000004, 5e-324, 1.7976931348623157e308, -1e-9 * 17, 1.25e-6 * 7}
  for i = 1, 20000 do
    local v = string.unpack("d", string.pack("i8", bits()))
    if v == v and v ~= math.huge and v ~= -math.huge then cases[#cases + 1] = v end
    cases[#cases + 1] = (bits() % 1000000) / 10 ^ (i % 12)      -- short decimals
    cases[#cases + 1] = (bits() % 1000) / ((bits() % 997) + 1)   -- long ones
  end
  for _, v in ipairs(cases) do
    local text = json.encode(v)
    T.eq(json.decode(text), v, text)
    if math.type(v) == "float" and not text:find("e") and v ~= math.floor(v) then
      local shortest
      for p = 1, 17 do
        shortest = ("%." .. p .. "g"):format(v)
        if tonumber(shortest) == v then break end
      end
      local digits = text:gsub("^%-?0%.0*", ""):gsub("[%-.]", "")
      local want = shortest:gsub("e.*$", ""):gsub("^%-?0%.0*", ""):gsub("[%-.]", "")
      T.truthy(#digits <= #want, ("%s has more digits than %s"):format(text, shortest))
    end
  end
end

tests["values round-trip through Python exactly"] = function()
  if not sys.stat("/usr/bin/python3") then T.skip("no /usr/bin/python3") end
  local bytes = {}
  for i = 0, 255 do bytes[#bytes + 1] = string.char(i) end
  local value = {
    s = table.concat(bytes) .. "\xe2\x82\xac\xed\xa0\x80\u{1F600}",
    n = {42, 42.0, math.maxinteger, math.mininteger, 0.1, -0.0, 1e-300, 2^53},
    e = json.array(), o = json.object(), z = json.null,
  }
  local py = [==[
import json, sys
v = json.loads(sys.stdin.read())
raw = v["s"].encode("utf-8", "surrogateescape")
assert raw == bytes(range(256)) + b"\xe2\x82\xac\xed\xa0\x80\xf0\x9f\x98\x80", raw
assert [type(x).__name__ for x in v["n"]] == ["int", "float", "int", "int", "float", "float", "float", "float"]
sys.stdout.write(json.dumps(v))
]==]
  local r = assert(sys.run({"/usr/bin/python3", "-c", py}, {input = json.encode(value), timeout = 20}))
  T.eq(r.stderr, "")
  T.eq(r.code, 0)
  local back = assert(json.decode(r.stdout))
  T.eq(back, value)
  T.eq(json.encode(back, {sort_keys = true}), json.encode(value, {sort_keys = true}))
end

tests["utf8_count counts as utf8.len does, and refuses what it refuses"] = function()
  local cases = {"", "plain ascii text", "caf\u{e9} \u{20ac} \u{1F600}", ("a"):rep(7) .. "\u{e9}",
                 ("\u{e9}"):rep(9) .. ("b"):rep(17), "\xff", "ab\xc3", "\xc0\xaf", "\xed\xa0\x80",
                 "\xf4\x90\x80\x80", ("x"):rep(16) .. "\x80" .. ("y"):rep(16), "\xe2\x82"}
  local valid = 0
  for _, s in ipairs(cases) do
    T.eq(json.utf8_count(s), utf8.len(s) or nil, ("%q"):format(s))
    if utf8.len(s) then valid = valid + 1 end
  end
  T.eq(valid, 5)
end

return tests
