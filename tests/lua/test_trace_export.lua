--- `rlm trace export`: a trajectory read back as the exact conversation the model was sent,
-- checked against the requests the stand-in model received.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

local function export(args)
  local r = T.run_rlm({"trace", "export", table.unpack(args)})
  T.eq(r.code, 0, r.stderr)
  local lines = {}
  for line in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = assert(json.decode(line)) end
  return lines, r.stderr
end

-- The last request the stand-in got, as one message list (the system prompt first).
local function last_request(server)
  local body = F.stats(server).last_body
  local out = {{role = "system", content = body.messages[1].content}}
  for i = 2, #body.messages do out[#out + 1] = body.messages[i] end
  T.eq(body.messages[1].role, "system")
  return out
end

local function same_messages(got, want, what)
  T.eq(#got, #want, what .. ": messages")
  for i = 1, #want do
    T.eq(got[i].role, want[i].role, what .. ": role of message " .. i)
    T.eq(got[i].content, want[i].content, what .. ": content of message " .. i)
  end
end

tests["a run exports as the messages the model was sent, then its last reply"] = function()
  local server = F.model{rules = {
    {match = "^[ab]$", reply_expr = "'sub ' + prompt"},
    {match = "Task: export", reply = F.code("r = llm_query_batched(['a', 'b'])\nprint(r)")},
    {match = "Turn 2 of", reply = F.code("print(len(r))")},
    {match = ".", reply = F.code("SUBMIT(answer=str(len(r)))")},
  }}
  local path = T.tmpdir() .. "/t.jsonl"
  local res = rlm.run{task = "export", context = "abc", trace = path, sub_model = "openai/sub-model"}
  T.eq(res.answer, "2")
  local want = last_request(server)
  local lines, err = export{path}
  T.eq(#lines, 1, "one conversation without --subcalls")
  local got = lines[1].messages
  T.eq(#got, 7, "system, first message, three replies and two outputs")
  same_messages({table.unpack(got, 1, #got - 1)}, want, "the conversation")
  T.eq(got[#got].role, "assistant")
  T.contains(got[#got].content, "SUBMIT(answer=str(len(r)))")
  T.contains(err, "exported 1 conversations from 1 runs")

  lines = export{path, "--subcalls"}
  T.eq(#lines, 3, "the conversation and the two sub-calls")
  same_messages(lines[2].messages, {{role = "user", content = "a"}, {role = "assistant", content = "sub a"}},
                "sub-call a")
  same_messages(lines[3].messages, {{role = "user", content = "b"}, {role = "assistant", content = "sub b"}},
                "sub-call b")
end

tests["after a compaction a new conversation starts from the history the model saw"] = function()
  local server = F.model{rules = {
    {match = "^Your conversation for the task below has grown too long", reply = "Printed y lines."},
    {match = "Turn 12 of", reply = F.code("SUBMIT(answer=str(turns))")},
    {match = "Task: long", reply = F.code("turns = 1\nprint('y' * 6000)")},
    {match = ".", reply = F.code("turns += 1\nprint('y' * 6000)")},
  }}
  local path = T.tmpdir() .. "/long.jsonl"
  local res = rlm.run{task = "long", context = "abc", max_iterations = 12, context_window = 8000,
                      trace = path}
  T.eq(res.answer, "11", tostring(res.detail))
  local compactions = 0
  for line in assert(sys.read_file(path)):gmatch("[^\n]+") do
    if json.decode(line).type == "compaction" then compactions = compactions + 1 end
  end
  T.truthy(compactions >= 2, compactions .. " compactions")
  local lines = export{path}
  T.eq(#lines, compactions + 1, "a conversation per stretch between compactions")
  local got = lines[#lines].messages
  same_messages({table.unpack(got, 1, #got - 1)}, last_request(server), "the last stretch")
end

tests["keys are redacted, and --submitted and --min-score choose the runs"] = function()
  local server = F.model{rules = {
    {match = "Task: never", reply = F.code("print('again')")},
    {match = "Task: keyed", reply = F.code("print('sk-live0123456789abcdefghij', 'ghp_'"
                                           .. " + 'A' * 36)\nSUBMIT(answer='ok')")},
  }}
  local dir = T.tmpdir()
  assert(sys.mkdir_p(dir .. "/trajectories"))
  local env = F.env(server)
  T.eq(T.run_rlm({"ask", "keyed", "--quiet", "--trace", dir .. "/trajectories/k1.jsonl"}, {env = env}).code, 0)
  T.eq(T.run_rlm({"ask", "never", "--quiet", "--max-iterations", "2",
                  "--trace", dir .. "/trajectories/k2.jsonl"}, {env = env}).code, 3)
  assert(sys.write_file(dir .. "/results.jsonl",
    '{"method":"rlm","key":"k1","score":1}\n{"method":"rlm","key":"k2","score":0}\n'
    .. '{"method":"direct","key":"k2","score":1}\n'))

  local all = export{dir}
  T.eq(#all, 2, "both runs")
  local text = json.encode(all)
  T.truthy(not text:find("sk%-live0123456789"), "a key-shaped string is redacted")
  T.truthy(not text:find("ghp_AAAA"), "a GitHub token is redacted")
  T.truthy(not text:find("sk-test-key-0123456789", 1, true), "the provider key is redacted")
  T.contains(text, "[redacted]")
  T.eq(#export{dir, "--submitted"}, 1, "only the submitted run")
  local best = export{dir, "--min-score", "0.5"}
  T.eq(#best, 1, "only the run scored 1")
  T.contains(best[1].messages[2].content, "Task: keyed")
  T.eq(#export{dir, "--min-score", "0"}, 2, "a score of 0 passes --min-score 0")

  local r = T.run_rlm({"trace", "export", dir .. "/trajectories/k1.jsonl", "--min-score", "1"})
  T.eq(r.code, 1)
  T.contains(r.stderr, "--min-score needs a bench output folder")
  r = T.run_rlm({"trace", "export", "/etc/hostname"})
  T.eq(r.code, 1, "a file that is not a trajectory")
  T.contains(r.stderr, "cannot read the trajectory")
end

return tests
