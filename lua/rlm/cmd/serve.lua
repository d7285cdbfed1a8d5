--- `rlm serve`: an OpenAI-compatible HTTP endpoint that answers each chat completion with an
-- RLM run, so any OpenAI client can call one. The model name chooses a configuration (the
-- root model, sub-model, backend, budgets): "rlm" from the flags, or the names of --config.
local args = require "rlm.args"
local async = require "rlm.async"
local b64 = require "rlm.backend.common"
local httpd = require "rlm.core.httpd"
local json = require "rlm.json"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local M = {}

M.help = [[
usage: rlm serve [--http [HOST:]PORT] [--config FILE.lua] [--model M] [--sub-model M]
                 [--backend local|daytona] [--max-cost USD] [--max-time S]
                 [--max-iterations N] [--max-runs N]

Serves the OpenAI Chat Completions API (POST /v1/chat/completions, streamed or not; GET
/v1/models) where each completion is an RLM run: the last user message is the task; earlier
messages, the system message and attached files (content parts of type "file" with
file_data) are the context. The answer is the assistant message; usage is the whole tree's
(every sub-call and child run), with its cost in usage.cost. A streamed completion sends a
progress line per turn as delta.reasoning_content before the answer.

The model name chooses the configuration: "rlm" is --model, --sub-model, --backend and the
budgets given here (or RLM_MODEL, RLM_BACKEND); --config FILE.lua returns more, a table of
name -> rlm.run options, e.g. return {["rlm-cheap"] = {model = "openai/gpt-4o-mini",
max_cost = 0.05}}. A request may lower max_tokens (the tree's tokens), never raise a limit.

--http defaults to 127.0.0.1:8080 (PORT 0 picks a free port; "READY http://HOST:PORT" is
printed). Binding beyond loopback needs RLM_SERVE_TOKEN, which clients then send as their API
key (Authorization: Bearer); it is checked on loopback too when set. At most --max-runs runs
at once (default 4); more are answered 429 with Retry-After. A client that disconnects ends
its run and its sandboxes.]]

local SPEC = {http = "string", config = "string", model = "string", sub_model = "string",
              backend = "string", max_cost = "number", max_time = "number",
              max_iterations = "number", max_runs = "number"}

-- The options a request may not set through a configuration: the server sets them itself.
local SERVER_SET = {task = true, context = true, trace = true, on_event = true, events = true,
                    resume = true}

local function eprint(...)
  io.stderr:write("rlm serve: ", table.concat({...}), "\n")
  io.stderr:flush()
end

-- The configurations by model name: "rlm" from the flags, then --config's.
local function configurations(opts)
  local env = function(name) local v = sys.getenv(name); return v ~= "" and v or nil end
  local models = {rlm = {model = opts.model or env("RLM_MODEL"), sub_model = opts.sub_model,
                         backend = opts.backend or env("RLM_BACKEND"), max_cost = opts.max_cost,
                         max_time = opts.max_time, max_iterations = opts.max_iterations}}
  if opts.config then
    local chunk, err = loadfile(opts.config, "t")
    if not chunk then error("--config: " .. err, 0) end
    local t = chunk()
    if type(t) ~= "table" then error("--config: the file must return a table of name -> rlm.run options", 0) end
    for name, o in pairs(t) do
      if type(name) ~= "string" or type(o) ~= "table" then
        error("--config: each entry must be name = {rlm.run options}", 0)
      end
      for k in pairs(o) do
        if SERVER_SET[k] then error(("--config: %s: '%s' is set by each request"):format(name, k), 0) end
      end
      models[name] = o
    end
  end
  return models
end

-- The OpenAI error shape.
local function fail(req, status, message, kind, code, headers)
  headers = headers or {}
  headers["Content-Type"] = "application/json"
  req:respond(status, headers, json.encode{error = {message = message, type = kind or "invalid_request_error",
                                                    param = json.null, code = code or json.null}})
end

local function reply(req, status, obj)
  req:respond(status, {["Content-Type"] = "application/json"}, json.encode(obj))
end

-- A message's text and files: content is a string or a list of parts.
local function parts_of(content)
  if type(content) == "string" then return content, {} end
  if type(content) ~= "table" then return nil, nil, "content must be a string or a list of parts" end
  local texts, files = {}, {}
  for _, p in ipairs(content) do
    if type(p) ~= "table" then return nil, nil, "each content part must be an object" end
    if p.type == "text" and type(p.text) == "string" then
      texts[#texts + 1] = p.text
    elseif p.type == "file" and type(p.file) == "table" then
      local data = type(p.file.file_data) == "string" and p.file.file_data or ""
      local bytes, err = b64.base64_decode(data:gsub("^data:[^,]*;base64,", ""))
      if not bytes then return nil, nil, "a file part's file_data: " .. err end
      files[#files + 1] = {name = p.file.filename or ("file" .. (#files + 1)), content = bytes}
    else
      return nil, nil, ("content parts of type %q are not taken (text and file are)"):format(tostring(p.type))
    end
  end
  return table.concat(texts, "\n"), files
end

-- The run's task and context from the messages: the last user message is the task; the
-- system messages, earlier messages and every attached file the context.
local function task_and_context(messages)
  if type(messages) ~= "table" or #messages == 0 then return nil, "messages must be a non-empty list" end
  local last = messages[#messages]
  if type(last) ~= "table" or last.role ~= "user" then return nil, "the last message must be the user's task" end
  local task, files, err = parts_of(last.content)
  if not task then return nil, "the last message: " .. err end
  if task == "" then return nil, "the last message has no text: it is the task" end
  local transcript = {}
  for i = 1, #messages - 1 do
    local m = messages[i]
    local text, more, perr = parts_of(type(m) == "table" and m.content or nil)
    if not text then return nil, ("message %d: %s"):format(i, perr) end
    if text ~= "" then transcript[#transcript + 1] = ("[%s]\n%s"):format(tostring(m.role), text) end
    for _, f in ipairs(more) do files[#files + 1] = f end
  end
  local conversation = table.concat(transcript, "\n\n")
  if #files == 0 then return task, conversation end
  if #files == 1 and conversation == "" then return task, files[1].content end
  local parts = {conversation ~= "" and ("=== conversation ===\n" .. conversation) or nil}
  for _, f in ipairs(files) do parts[#parts + 1] = ("=== file %s ===\n%s"):format(f.name, f.content) end
  return task, table.concat(parts, "\n\n")
end

-- OpenAI's usage object for a run's usage (the whole tree's), with the cost beside it.
local function usage_of(u)
  u = u or {}
  return {prompt_tokens = u.input_tokens or 0, completion_tokens = u.output_tokens or 0,
          total_tokens = (u.input_tokens or 0) + (u.output_tokens or 0),
          prompt_tokens_details = {cached_tokens = u.cache_read_tokens or 0}, cost = u.cost or 0}
end

local Server = {}
Server.__index = Server

function Server:models(req)
  local data = {}
  for _, name in ipairs(self.names) do
    data[#data + 1] = {id = name, object = "model", created = self.created, owned_by = "rlm"}
  end
  reply(req, 200, {object = "list", data = data})
end

-- Runs the task; with a stream, sends progress chunks on the way. Returns the result.
function Server:run(options, task, context, on_turn)
  local o = {}
  for k, v in pairs(options) do o[k] = v end
  o.task, o.context = task, context
  o.on_event = function(e)
    if e.type == "turn" and on_turn then on_turn(e) end
  end
  return require("rlm").run(o)
end

function Server:chat(req)
  local body = json.decode(req:body())
  if type(body) ~= "table" then return fail(req, 400, "the body must be a JSON object") end
  local options = self.configs[body.model]
  if not options then
    return fail(req, 404, ("The model '%s' does not exist; this server has %s"):format(
      tostring(body.model), table.concat(self.names, ", ")), "invalid_request_error", "model_not_found")
  end
  local task, context = task_and_context(body.messages)
  if not task then return fail(req, 400, context) end
  if body.max_tokens ~= nil or body.max_completion_tokens ~= nil then
    local n = math.tointeger(body.max_completion_tokens or body.max_tokens)
    if not n or n < 1 then return fail(req, 400, "max_tokens must be a positive integer") end
    local copy = {}
    for k, v in pairs(options) do copy[k] = v end
    copy.max_tokens = math.min(n, options.max_tokens or n)
    options = copy
  end
  if self.running >= self.max_runs then
    return fail(req, 429, ("all %d runs are busy: retry shortly"):format(self.max_runs),
                "rate_limit_error", "rate_limit_exceeded", {["Retry-After"] = "5"})
  end
  self.running = self.running + 1
  local counted <close> = setmetatable({}, {__close = function() self.running = self.running - 1 end})
  local id = "chatcmpl-" .. sys.random_hex(12)
  local created = math.floor(sys.time())
  local base = {id = id, object = "chat.completion.chunk", created = created, model = body.model}
  local function chunk(delta, finish, extra)
    local c = {}
    for k, v in pairs(base) do c[k] = v end
    c.choices = {{index = 0, delta = delta, finish_reason = finish or json.null}}
    for k, v in pairs(extra or {}) do c[k] = v end
    return "data: " .. json.encode(c) .. "\n\n"
  end
  local stream = body.stream == true
  local task_handle = async.spawn(function()
    if stream then
      req:stream(200, {["Content-Type"] = "text/event-stream", ["Cache-Control"] = "no-cache"})
      req:send(chunk{role = "assistant", content = ""})
    end
    return self:run(options, task, context, stream and function(e)
      local u = e.usage or {}
      req:send(chunk{reasoning_content = ("turn %d of at most %d: %d tokens, %d sub-calls, $%.4f\n")
        :format(e.turn, e.max_iterations, u.total_tokens or 0, u.llm_calls or 0, u.cost or 0)})
    end)
  end)
  -- A client that goes away ends its run: the task is closed, and its sandboxes with it.
  local watching = true
  async.spawn(function()
    while watching do
      local ended = async.await(req:id(), 15)
      if not watching then break end
      if ended or req:gone() then
        if coroutine.status(task_handle.co) == "suspended" then coroutine.close(task_handle.co) end
        break
      end
      if stream then req:send(": keep-alive\n\n") end
    end
    async.forget(req:id())
  end)
  local ok, res = task_handle:result()
  watching = false
  if not ok then
    local msg = trace.redact(tostring(res))
    eprint("a run failed: ", msg)
    if stream then
      req:send("data: " .. json.encode{error = {message = msg, type = "server_error"}} .. "\n\n")
      return req:finish()
    end
    return fail(req, 500, msg, "server_error")
  end
  if not res then return end                                       -- the client went away
  local answered = res.submitted or res.extracted
  local text = answered and (type(res.answer) == "string" and res.answer
    or json.encode(res.fields)) or nil
  if stream then
    if text then
      req:send(chunk{content = text})
      req:send(chunk({}, "stop"))
    else
      req:send("data: " .. json.encode{error = {message = ("the run ended without an answer: %s%s")
        :format(res.reason, res.detail and (" (" .. res.detail .. ")") or ""), type = "server_error"}} .. "\n\n")
    end
    if type(body.stream_options) == "table" and body.stream_options.include_usage then
      req:send(chunk(nil, nil, {choices = json.array(), usage = usage_of(res.usage)}))
    end
    req:send("data: [DONE]\n\n")
    return req:finish()
  end
  if not text then
    return fail(req, 502, ("the run ended without an answer: %s%s"):format(res.reason,
      res.detail and (" (" .. res.detail .. ")") or ""), "server_error", res.reason)
  end
  reply(req, 200, {id = id, object = "chat.completion", created = created, model = body.model,
                   choices = {{index = 0, message = {role = "assistant", content = text,
                                                     refusal = json.null},
                               finish_reason = "stop"}},
                   usage = usage_of(res.usage)})
end

function Server:handle(req)
  local path, method = req:path(), req:method()
  if path == "/health" then return reply(req, 200, {status = "ok", runs = self.running}) end
  if path == "/v1/models" and method == "GET" then return self:models(req) end
  if path == "/v1/chat/completions" and method == "POST" then return self:chat(req) end
  fail(req, 404, ("no route %s %s (this server has GET /v1/models and POST /v1/chat/completions)")
    :format(method, path), "invalid_request_error", "not_found")
end

function M.serve(opts, on_ready)
  local h, port = require("rlm.cmd.mcp").parse_address(opts.http or "127.0.0.1:8080")
  local token = sys.getenv("RLM_SERVE_TOKEN")
  if token == "" then token = nil end
  if not require("rlm.mcp.http").is_loopback(h) and not token then
    error(("binding to %s runs models and sandboxes for anyone on the network: set " ..
           "RLM_SERVE_TOKEN to a secret clients send as their API key (or bind to 127.0.0.1)"):format(h), 0)
  end
  local max_runs = opts.max_runs or 4
  if max_runs ~= math.floor(max_runs) or max_runs < 1 then
    error("--max-runs needs a whole number of at least 1", 0)
  end
  local configs = configurations(opts)
  local names = {}
  for name in pairs(configs) do names[#names + 1] = name end
  table.sort(names)
  local self = setmetatable({configs = configs, names = names, running = 0, max_runs = max_runs,
                             created = math.floor(sys.time())}, Server)
  -- The Host, Origin and token checks of rlm mcp --http (a web page must not spend the key).
  local admit = require("rlm.mcp.http").new({}, {host = h, token = token}):admission()
  admit.open_paths = {"/health"}
  local listener <close> = assert(httpd.listen{host = h, port = port, max_body = 64 * 1024 * 1024,
                                               admit = admit})
  on_ready(h, listener:port())
  while true do
    async.await(listener:id())
    while true do
      local req = listener:next()
      if not req then break end
      async.spawn(function()
        local fine, why = pcall(self.handle, self, req)
        if not fine then
          eprint("request failed: ", trace.redact(tostring(why)))
          pcall(fail, req, 500, "internal error", "server_error")
        end
      end)
    end
  end
end

function M.main(argv)
  local opts, rest = args.parse(argv, SPEC)
  if #rest > 0 then return args.usage("serve", ("unexpected argument '%s'"):format(rest[1]), M.help) end
  local ok, err = pcall(M.serve, opts, function(h, bound)
    local shown = h:find(":") and ("[" .. h .. "]") or h
    io.stdout:write(("READY http://%s:%d\n"):format(shown, bound))
    io.stdout:flush()
    eprint(("serving the OpenAI API at http://%s:%d/v1"):format(shown, bound))
  end)
  if ok then return 0 end
  if tostring(err):find("interrupted", 1, true) then eprint("stopped"); return 0 end
  error(err, 0)
end

return M
