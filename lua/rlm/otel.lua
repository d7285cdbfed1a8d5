--- OpenTelemetry: a finished run's trajectory as one trace, sent over OTLP/HTTP (JSON) to the
-- collector the user names. Off unless a collector is named: the run option `otel`, `rlm ask
-- --otel URL`, or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT (the
-- variables every OpenTelemetry SDK reads; the first is the full URL, the second a base to which
-- /v1/traces is added). OTEL_EXPORTER_OTLP_HEADERS (k=v,k2=v2) and OTEL_SERVICE_NAME are read too.
--
-- The spans, from the records the run wrote (rlm.trace), with the GenAI semantic conventions'
-- attributes (gen_ai.*) where one applies and rlm.* where none does:
--   invoke_agent rlm            the run (a child run: under the rlm_query sub-call that made it)
--     turn N                    one turn
--       chat MODEL              the turn's model call (tokens, cache, cost, finish reason)
--       execute_code            each block of code, after the reply
--     chat SUBMODEL             a batch of sub-calls (llm_query, llm_query_batched),
--     execute_tool NAME         a call of one of the user's tools (rlm.tools), or
--     rlm_query                 a child run's call
-- Records give each span's end and duration; nothing here reads a clock.
local http = require "rlm.http"
local json = require "rlm.json"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local M = {}

--- The collector's traces URL for a run's `otel` option (a URL, true, false or nil), or nil when
-- none is named.
function M.endpoint(option)
  if option == false then return nil end
  if type(option) == "string" and option ~= "" then
    return option:find("/v1/traces$") and option or (option:gsub("/+$", "") .. "/v1/traces")
  end
  local full = sys.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
  if full and full ~= "" then return full end
  local base = sys.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
  if base and base ~= "" then return (base:gsub("/+$", "")) .. "/v1/traces" end
  if option == true then
    error("otel = true needs a collector: set OTEL_EXPORTER_OTLP_ENDPOINT or give otel = URL", 0)
  end
  return nil
end

-- OTLP's JSON attribute list, in the order given (a list of {key, value} pairs, nils skipped).
local function attributes(pairs_list)
  local out = {}
  for _, kv in ipairs(pairs_list) do
    local k, v = kv[1], kv[2]
    local value
    if math.type(v) == "integer" then value = {intValue = tostring(v)}
    elseif type(v) == "number" then value = {doubleValue = v}
    elseif type(v) == "boolean" then value = {boolValue = v}
    elseif type(v) == "string" then value = {stringValue = v}
    elseif type(v) == "table" then
      local values = {}
      for i, s in ipairs(v) do values[i] = {stringValue = tostring(s)} end
      value = {arrayValue = {values = values}}
    end
    if value then out[#out + 1] = {key = k, value = value} end
  end
  return out
end

local function nanos(t) return ("%.0f"):format(t * 1e9) end

local function int(n) return n and math.tointeger(n) or (n and math.floor(n + 0.5)) end

-- "openai/gpt-4o" -> "openai", "gpt-4o".
local function split_model(label)
  local provider, name = tostring(label or ""):match("^([^/]+)/(.+)$")
  return provider, name or label
end

local Trace = {}
Trace.__index = Trace

function Trace:span(name, parent, t_start, t_end, attrs, failed)
  local id = sys.random_hex(8)
  self.spans[#self.spans + 1] = {traceId = self.id, spanId = id, parentSpanId = parent, name = name,
    kind = name:match("^chat ") and 3 or 1,            -- CLIENT for a model call, else INTERNAL
    startTimeUnixNano = nanos(t_start), endTimeUnixNano = nanos(math.max(t_start, t_end)),
    attributes = attributes(attrs), status = {code = failed and 2 or 1}}
  return id
end

-- The span of a model call: GenAI's chat span.
local function chat_attrs(label, usage, extra)
  local provider, name = split_model(label)
  usage = usage or {}
  local list = {{"gen_ai.operation.name", "chat"}, {"gen_ai.provider.name", provider},
    {"gen_ai.system", provider}, {"gen_ai.request.model", name},
    {"gen_ai.usage.input_tokens", int(usage.input_tokens)},
    {"gen_ai.usage.output_tokens", int(usage.output_tokens)},
    {"gen_ai.usage.cache_read.input_tokens", int(usage.cache_read_tokens)},
    {"gen_ai.usage.cache_creation.input_tokens", int(usage.cache_write_tokens)},
    {"rlm.cost", usage.cost}}
  for _, kv in ipairs(extra or {}) do list[#list + 1] = kv end
  return list
end

function Trace:run_span(run, runs, parent, t_start, t_end)
  local start, final = run.start or {}, run.final or {}
  t_start = start.t or t_start
  t_end = final.t or t_end
  local usage = type(final.usage) == "table" and final.usage or {}
  local provider, name = split_model(start.model)
  local id = self:span("invoke_agent rlm", parent, t_start, t_end, {
    {"gen_ai.operation.name", "invoke_agent"}, {"gen_ai.agent.name", "rlm"},
    {"gen_ai.provider.name", provider}, {"gen_ai.request.model", name},
    {"gen_ai.usage.input_tokens", int(usage.input_tokens)},
    {"gen_ai.usage.output_tokens", int(usage.output_tokens)},
    {"rlm.run", run.id}, {"rlm.depth", int(start.depth or 0)}, {"rlm.reason", final.reason},
    {"rlm.iterations", int(final.iterations)}, {"rlm.cost", usage.cost},
    {"rlm.llm_calls", int(usage.llm_calls)}},
    final.reason ~= nil and final.reason ~= "submitted" and final.reason ~= "extracted")
  local turns = {}
  for _, s in ipairs(run.steps) do
    local t1 = s.t or t_end
    local t0 = t1 - (s.duration or 0)
    local turn = self:span("turn " .. tostring(s.turn), id, t0, t1, {{"rlm.turn", int(s.turn)}})
    turns[s.turn] = turn
    local code_time = 0
    for _, block in ipairs(s.code or {}) do code_time = code_time + (block.duration or 0) end
    local replied = math.max(t0, t1 - code_time)
    self:span("chat " .. tostring(name), turn, t0, replied, chat_attrs(start.model, s.usage,
      {{"gen_ai.response.finish_reasons", s.finish_reason and {s.finish_reason} or nil}}))
    local at = replied
    for _, block in ipairs(s.code or {}) do
      local d = block.duration or 0
      self:span("execute_code", turn, at, at + d, {{"rlm.output_chars", #(block.output or "")}},
                block.error ~= nil)
      at = at + d
    end
  end
  for _, c in ipairs(run.subcalls) do
    local t1 = c.t or t_end
    local t0 = t1 - (c.duration or 0)
    local under = turns[c.turn] or id
    if c.kind == "tool" then
      local item = (c.items or {})[1] or {}
      local failed = type((c.replies or {})[1]) == "string" and c.replies[1]:find("^%[ERROR%]") ~= nil
      self:span("execute_tool " .. tostring(c.tool), under, t0, t1, {{"gen_ai.operation.name", "execute_tool"},
        {"gen_ai.tool.name", c.tool}, {"rlm.cost", item.cost}}, failed)
    elseif c.kind == "http" then
      -- the code's request through its proxy (rlm.netproxy): OpenTelemetry's HTTP client names
      self:span(tostring(c.method), under, t0, t1, {{"http.request.method", c.method},
        {"server.address", c.host}, {"http.response.status_code", c.status and int(c.status)},
        {"error.type", c.refused and tostring(c.status or "refused")}}, c.refused ~= nil)
    elseif c.kind == "rlm_query" then
      local call = self:span("rlm_query", under, t0, t1, {{"rlm.child", c.child}, {"rlm.reason", c.reason}})
      if c.child and runs[c.child] then self:run_span(runs[c.child], runs, call, t0, t1) end
    else
      local usage = {cost = 0}
      for _, item in ipairs(c.items or {}) do
        for _, k in ipairs{"input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"} do
          if item[k] then usage[k] = (usage[k] or 0) + item[k] end
        end
        usage.cost = usage.cost + (item.cost or 0)
      end
      local _, sub = split_model(c.model)
      self:span("chat " .. tostring(sub), under, t0, t1, chat_attrs(c.model, usage,
        {{"rlm.kind", c.kind}, {"rlm.count", int(c.count or 1)}}))
    end
  end
  return id
end

--- The OTLP/HTTP JSON body for a trajectory's records (the root run and its children).
function M.body(records)
  local runs, order = trace.runs(records)
  local self = setmetatable({id = sys.random_hex(16), spans = {}}, Trace)
  local root = order[1]
  if root then
    local last = records[#records] and records[#records].t or sys.time()
    self:run_span(root, runs, nil, root.start and root.start.t or last, last)
  end
  local service = sys.getenv("OTEL_SERVICE_NAME")
  return json.encode{resourceSpans = {{
    resource = {attributes = attributes{{"service.name", service ~= "" and service or "rlm"}}},
    scopeSpans = {{scope = {name = "rlm"}, spans = self.spans}}}}}, #self.spans
end

-- OTEL_EXPORTER_OTLP_HEADERS: "k=v,k2=v2", values percent-encoded.
local function headers()
  local h = {["content-type"] = "application/json"}
  for pair in (sys.getenv("OTEL_EXPORTER_OTLP_HEADERS") or ""):gmatch("[^,]+") do
    local k, v = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
    if k and k ~= "" then
      h[k:lower()] = v:gsub("%%(%x%x)", function(x) return string.char(tonumber(x, 16)) end)
    end
  end
  return h
end

--- Sends a finished run's trace; returns the number of spans, or nil, err (the run goes on:
-- a collector that is down costs a line on stderr, not the run).
function M.export(url, records)
  local body, count = M.body(records)
  local res, err = http.request{url = url, method = "POST", headers = headers(), body = body,
                                timeout = 10, retries = 2}
  if not res then return nil, tostring(err) end
  if res.status < 200 or res.status > 299 then
    return nil, ("the collector at %s answered %d"):format(url, res.status)
  end
  return count
end

return M
