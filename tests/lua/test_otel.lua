--- OpenTelemetry: a run, its turns, sub-calls and child runs reach a stand-in OTLP/HTTP
-- collector as one trace with the GenAI attributes; nothing is sent unless a collector is named.
local T = require "support"
local F = require "rlm_fixtures"
local json = require "rlm.json"
local sys = require "rlm.sys"

local tests = {}

local function collector()
  return T.server{"tests/standins/otlp"}
end

local function received(c)
  local res = assert(require("rlm.http").request{url = c.url .. "/_spans"})
  return assert(json.decode(res.body))
end

local function attr(span, key)
  for _, a in ipairs(span.attributes or {}) do
    if a.key == key then
      local v = a.value
      if v.intValue then return tonumber(v.intValue) end
      if v.arrayValue then
        local out = {}
        for i, x in ipairs(v.arrayValue.values) do out[i] = x.stringValue end
        return out
      end
      return v.stringValue or v.doubleValue or v.boolValue
    end
  end
end

local SCRIPT = {rules = {
  {match = "^[ab]$", reply_expr = "'sub ' + prompt"},
  {match = "Task: child", reply = F.code("SUBMIT(answer='c')")},
  {match = "Task: traced", reply = F.code("r = llm_query_batched(['a', 'b'])\nk = rlm_query('child')\nprint(r, k)")},
  {match = ".", reply = F.code("SUBMIT(answer=str(len(r)))")},
}}

tests["a run with sub-calls and a child reaches the collector as one trace"] = function()
  local server = F.model(SCRIPT)
  local c = collector()
  local r = T.run_rlm({"ask", "traced", "--quiet", "--sub-model", "openai/sub-model",
                       "--otel", c.url}, {env = F.env(server, {OTEL_SERVICE_NAME = "my-service"})})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "2\n")
  local got = received(c)
  T.eq(got.requests, 1, "one export per run")
  T.eq(got.headers[1]["content-type"], "application/json")
  local spans, by_id, names = got.spans, {}, {}
  local trace_id = spans[1].traceId
  for _, s in ipairs(spans) do
    T.eq(s.traceId, trace_id, "every span in one trace")
    T.eq(s.service, "my-service")
    by_id[s.spanId] = s
    names[s.name] = (names[s.name] or 0) + 1
  end
  -- root: 2 turns, each a chat and one block; a sub-call batch; the child (whose root model is
  -- the sub-model): 1 turn.
  T.eq(names["invoke_agent rlm"], 2, "the run and its child")
  T.eq(names["turn 1"], 2, "the first turn of each")
  T.eq(names["turn 2"], 1, "the root's second turn")
  T.eq(names["chat root-model"], 2, "a model call per root turn")
  T.eq(names["chat sub-model"], 2, "the sub-call batch and the child's turn")
  T.eq(names["rlm_query"], 1)
  T.eq(names["execute_code"], 3, "a block per turn")
  T.eq(#spans, 13)

  local root, child, batch
  for _, s in ipairs(spans) do
    if s.name == "invoke_agent rlm" and not s.parentSpanId then root = s
    elseif s.name == "invoke_agent rlm" then child = s
    elseif s.name == "chat sub-model" and attr(s, "rlm.kind") then batch = s end
  end
  T.truthy(root, "one span without a parent: the run")
  T.eq(attr(root, "gen_ai.operation.name"), "invoke_agent")
  T.eq(attr(root, "gen_ai.request.model"), "root-model")
  T.eq(attr(root, "rlm.reason"), "submitted")
  T.eq(attr(root, "rlm.depth"), 0)
  T.eq(attr(child, "rlm.depth"), 1)
  T.eq(by_id[child.parentSpanId].name, "rlm_query", "the child hangs under its rlm_query call")
  T.eq(by_id[by_id[child.parentSpanId].parentSpanId].name, "turn 1", "made in the root's first turn")
  T.eq(by_id[by_id[batch.parentSpanId].parentSpanId].spanId, root.spanId, "the batch under a root turn")
  T.eq(attr(batch, "gen_ai.provider.name"), "openai")
  T.eq(attr(batch, "rlm.count"), 2)
  T.eq(attr(batch, "gen_ai.usage.input_tokens"), 2, "two one-token prompts")
  T.eq(attr(batch, "gen_ai.usage.output_tokens"), 4)
  local stats, billed_in = F.stats(server), 0
  for _, s in ipairs(spans) do
    if s.name == "chat root-model" or s.name == "chat sub-model" then
      T.eq(s.kind, 3, "a model call is a CLIENT span")
      billed_in = billed_in + attr(s, "gen_ai.usage.input_tokens")
      T.truthy(tonumber(s.endTimeUnixNano) >= tonumber(s.startTimeUnixNano))
    end
    if s.name == "chat root-model" then
      T.eq(attr(s, "gen_ai.response.finish_reasons")[1], "stop")
    end
    if s.parentSpanId then
      local p = by_id[s.parentSpanId]
      T.truthy(p, s.name .. " has its parent in the trace")
      T.truthy(tonumber(s.startTimeUnixNano) >= tonumber(p.startTimeUnixNano) - 1e6,
               s.name .. " starts within its parent " .. p.name)
    end
  end
  T.eq(billed_in, stats.input_tokens, "the spans' input tokens are what the model server counted")
end

tests["nothing is sent without a collector, and the environment names one"] = function()
  local server = F.model(SCRIPT)
  local c = collector()
  local env = F.env(server)
  env.OTEL_EXPORTER_OTLP_ENDPOINT, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = nil, nil
  local r = T.run_rlm({"ask", "traced", "--quiet", "--sub-model", "openai/sub-model"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  T.eq(received(c).requests, 0, "off by default")
  env.OTEL_EXPORTER_OTLP_ENDPOINT = c.url .. "/"
  env.OTEL_EXPORTER_OTLP_HEADERS = "x-team=rlm%20users,authorization=Bearer%20abc"
  r = T.run_rlm({"ask", "traced", "--quiet", "--sub-model", "openai/sub-model"}, {env = env})
  T.eq(r.code, 0, r.stderr)
  local got = received(c)
  T.eq(got.requests, 1)
  T.eq(got.headers[1]["x-team"], "rlm users", "OTEL_EXPORTER_OTLP_HEADERS, percent-decoded")
  T.eq(got.spans[1].service, "rlm")
end

tests["a collector that is down costs one line on stderr, not the answer"] = function()
  local server = F.model(SCRIPT)
  local c = collector()
  c.proc:kill("TERM"); sys.wait(c.proc, 10)
  local r = T.run_rlm({"ask", "traced", "--quiet", "--sub-model", "openai/sub-model", "--otel", c.url},
                      {env = F.env(server), timeout = 120})
  T.eq(r.code, 0, r.stderr)
  T.eq(r.stdout, "2\n")
  T.contains(r.stderr, "rlm: the OpenTelemetry trace was not sent:")
  local _, lines = r.stderr:gsub("\n", "")
  T.eq(lines, 1, r.stderr)
end

return tests
