--- TEST ONLY: the fixture tools, resources and prompts the official MCP conformance suite
-- (@modelcontextprotocol/conformance, server scenarios) calls by name. `rlm mcp --fixtures
-- tests/mcp/fixtures.lua` (or RLM_MCP_FIXTURES=tests/mcp/fixtures.lua) registers them so the
-- suite can run in full; they do nothing useful, and they are not in the shipped binary.
local async = require "rlm.async"
local json = require "rlm.json"
local mcp = require "rlm.mcp.server"
local tools_mod = require "rlm.mcp.tools"

local M = {}

-- A 1x1 red PNG, generated for these fixtures.
local PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"

-- A tenth of a second of silence as 8 kHz mono 8-bit PCM.
local function wav()
  local samples = string.rep("\128", 800)
  local header = "RIFF" .. string.pack("<I4", 36 + #samples) .. "WAVEfmt " ..
    string.pack("<I4I2I2I4I4I2I2", 16, 1, 1, 8000, 8000, 1, 8) .. "data" ..
    string.pack("<I4", #samples)
  return tools_mod.base64_encode(header .. samples)
end

local function no_args()
  return {type = "object", properties = json.object()}
end

local function content(list)
  return {content = json.array(list)}
end

local function text(t)
  return {type = "text", text = t}
end

local function image()
  return {type = "image", data = PNG, mimeType = "image/png"}
end

local function resource(uri, body)
  return {type = "resource", resource = {uri = uri, mimeType = "text/plain", text = body}}
end

local function elicit(ctx, message, schema)
  local res, err = ctx.request("elicitation/create", {message = message, requestedSchema = schema})
  if not res then return mcp.error_result("elicitation failed: " .. tostring(err.message)) end
  local got = res.content
  return content{text(("Elicitation completed: action=%s, content=%s"):format(
    tostring(res.action), got ~= nil and json.encode(got) or "{}"))}
end

-- Questions for the stateless revision's multi round-trip requests (ctx.input).
local function ask_name(message)
  return {method = "elicitation/create", params = {message = message or "What is your name?",
    requestedSchema = {type = "object", properties = {name = {type = "string"}},
                       required = json.array{"name"}}}}
end

local function ask_model(prompt, max_tokens)
  return {method = "sampling/createMessage", params = {
    messages = json.array{{role = "user", content = text(prompt)}}, maxTokens = max_tokens}}
end

local ASK_ROOTS = {method = "roots/list", params = json.object()}

local function confirm()
  return {method = "elicitation/create", params = {message = "Please confirm",
    requestedSchema = {type = "object", properties = {ok = {type = "boolean"}},
                       required = json.array{"ok"}}}}
end

local function accepted(answer, field)
  local c = type(answer) == "table" and answer.content
  return type(c) == "table" and tostring(c[field]) or "?"
end

local function mrtr_tool(name, description, run)
  return {name = name, description = description, inputSchema = no_args(), run = run}
end

M.tools = {
  -- The tasks extension's scenarios.
  {name = "greet", description = "Says hello (never a task).",
   inputSchema = {type = "object", properties = {name = {type = "string"}}},
   run = function(args) return content{text(("Hello, %s!"):format(tostring(args.name or "World")))} end},
  {name = "slow_compute", description = "Sleeps `seconds`, then answers (a task).", task = "optional",
   inputSchema = {type = "object", properties = {seconds = {type = "number"}, label = {type = "string"}}},
   run = function(args)
     async.sleep(args.seconds or 1)
     return content{text(("Computed %s after %s s"):format(tostring(args.label or ""), tostring(args.seconds or 1)))}
   end},
  {name = "failing_job", description = "Fails as a tool (a task, only a task).", task = "required",
   inputSchema = no_args(),
   run = function() async.sleep(0.2) return mcp.error_result("The job failed, as it always does") end},
  {name = "protocol_error_job", description = "Fails as a protocol error (a task).", task = "optional",
   inputSchema = no_args(),
   run = function(_, ctx) ctx.fail(mcp.INTERNAL_ERROR, "The job hit an internal error") end},
  mrtr_tool("test_input_required_result_elicitation", "Asks for a name, then greets.",
    function(_, ctx)
      local a = ctx.input{user_name = ask_name()}
      return content{text(("Hello, %s!"):format(accepted(a.user_name, "name")))}
    end),
  mrtr_tool("test_input_required_result_sampling", "Asks the client's model a question.",
    function(_, ctx)
      local a = ctx.input{capital_question = ask_model("What is the capital of France?", 100)}
      local c = a.capital_question.content
      return content{text("Model answered: " .. tostring(type(c) == "table" and c.text or c))}
    end),
  mrtr_tool("test_input_required_result_list_roots", "Asks for the client's roots.",
    function(_, ctx)
      local roots = ctx.input{client_roots = ASK_ROOTS}.client_roots.roots
      local uris = {}
      for i, r in ipairs(type(roots) == "table" and roots or {}) do uris[i] = tostring(r.uri) end
      return content{text("Roots: " .. table.concat(uris, ", "))}
    end),
  mrtr_tool("test_input_required_result_request_state", "Asks for a confirmation, keeping state.",
    function(_, ctx)
      local _, resumed = ctx.input{confirm = confirm()}
      return content{text(resumed and "Confirmed: state-ok" or "Confirmed without state")}
    end),
  mrtr_tool("test_input_required_result_tampered_state", "Asks for a confirmation, keeping state.",
    function(_, ctx)
      ctx.input{confirm = confirm()}
      return content{text("Confirmed")}
    end),
  mrtr_tool("test_input_required_result_multiple_inputs", "Asks three questions at once.",
    function(_, ctx)
      local a = ctx.input{user_name = ask_name(), greeting = ask_model("Generate a greeting", 50),
                          client_roots = ASK_ROOTS}
      return content{text(("Hello, %s! (%d answers)"):format(accepted(a.user_name, "name"), 3))}
    end),
  mrtr_tool("test_input_required_result_multi_round", "Asks two questions, one after the other.",
    function(_, ctx)
      local a = ctx.input{step1 = ask_name("Step 1: What is your name?")}
      local b = ctx.input{step2 = {method = "elicitation/create", params = {
        message = "Step 2: What is your favorite color?", requestedSchema = {type = "object",
          properties = {color = {type = "string"}}, required = json.array{"color"}}}}}
      return content{text(("%s likes %s"):format(accepted(a.step1, "name"), accepted(b.step2, "color")))}
    end),
  mrtr_tool("test_input_required_result_capabilities", "Asks only what the client can answer.",
    function(_, ctx)
      local caps, asks = ctx.client_capabilities, {}
      if caps.elicitation ~= nil then asks.user_name = ask_name() end
      if caps.sampling ~= nil then asks.greeting = ask_model("Generate a greeting", 50) end
      if caps.roots ~= nil then asks.client_roots = ASK_ROOTS end
      if next(asks) then ctx.input(asks) end
      return content{text("Done")}
    end),
  mrtr_tool("test_missing_capability", "Needs the client's sampling capability.",
    function(_, ctx)
      ctx.input{question = ask_model("Say hello", 20)}
      return content{text("Sampled")}
    end),
  mrtr_tool("test_streaming_elicitation", "Asks for a name while it runs.",
    function(_, ctx)
      local a = ctx.input{user_name = ask_name()}
      return content{text(("Hello, %s!"):format(accepted(a.user_name, "name")))}
    end),
  mrtr_tool("test_logging_tool", "Logs three messages at info level.",
    function(_, ctx)
      for _, m in ipairs{"first", "second", "third"} do ctx.log("info", m) end
      return content{text("Logged")}
    end),
  {name = "test_simple_text", description = "Returns a simple text response.",
   inputSchema = no_args(),
   run = function() return content{text("This is a simple text response for testing.")} end},
  {name = "test_image_content", description = "Returns a 1x1 PNG image.",
   inputSchema = no_args(), run = function() return content{image()} end},
  {name = "test_audio_content", description = "Returns a short WAV clip.",
   inputSchema = no_args(),
   run = function() return content{{type = "audio", data = wav(), mimeType = "audio/wav"}} end},
  {name = "test_embedded_resource", description = "Returns an embedded text resource.",
   inputSchema = no_args(),
   run = function()
     return content{resource("test://embedded-resource", "This is an embedded resource content.")}
   end},
  {name = "test_multiple_content_types", description = "Returns text, an image and a resource.",
   inputSchema = no_args(),
   run = function()
     return content{text("Multiple content types test:"), image(),
                    resource("test://mixed-content-resource", '{"test":"data","value":123}')}
   end},
  {name = "test_tool_with_logging", description = "Sends three log messages while it runs.",
   inputSchema = no_args(),
   run = function(_, ctx)
     for i, msg in ipairs{"Tool execution started", "Tool processing data", "Tool execution completed"} do
       if i > 1 then async.sleep(0.05) end
       ctx.log("info", msg)
     end
     return content{text("Tool with logging executed successfully")}
   end},
  {name = "test_error_handling", description = "Always fails.",
   inputSchema = no_args(),
   run = function() return mcp.error_result("This tool intentionally returns an error for testing") end},
  {name = "test_tool_with_progress", description = "Reports progress 0, 50 and 100 of 100.",
   inputSchema = no_args(),
   run = function(_, ctx)
     for i, p in ipairs{0, 50, 100} do
       if i > 1 then async.sleep(0.05) end
       ctx.progress(p, 100, ("Completed step %d of 3"):format(i))
     end
     return content{text("Progress test completed")}
   end},
  {name = "test_sampling", description = "Asks the client's model to answer a prompt.",
   inputSchema = {type = "object", properties = {prompt = {type = "string"}},
                  required = json.array{"prompt"}},
   run = function(args, ctx)
     local res, err = ctx.request("sampling/createMessage", {
       messages = json.array{{role = "user", content = text(args.prompt)}}, maxTokens = 100})
     if not res then return mcp.error_result("sampling failed: " .. tostring(err.message)) end
     local reply = type(res.content) == "table" and res.content.text or json.encode(res.content)
     return content{text("LLM response: " .. tostring(reply))}
   end},
  {name = "test_elicitation", description = "Asks the user for a username and an email.",
   inputSchema = {type = "object", properties = {message = {type = "string"}},
                  required = json.array{"message"}},
   run = function(args, ctx)
     return elicit(ctx, args.message, {type = "object", properties = {
       username = {type = "string", description = "User's response"},
       email = {type = "string", description = "User's email address"}},
       required = json.array{"username", "email"}})
   end},
  {name = "test_elicitation_sep1034_defaults", description = "Elicitation with default values.",
   inputSchema = no_args(),
   run = function(_, ctx)
     return elicit(ctx, "Please review and update the form fields with defaults",
       {type = "object", properties = {
         name = {type = "string", description = "User name", default = "John Doe"},
         age = {type = "integer", description = "User age", default = 30},
         score = {type = "number", description = "User score", default = 95.5},
         status = {type = "string", description = "User status",
                   enum = json.array{"active", "inactive", "pending"}, default = "active"},
         verified = {type = "boolean", description = "Verification status", default = true}},
       required = json.array()})
   end},
  {name = "test_elicitation_sep1330_enums", description = "Elicitation with every enum form.",
   inputSchema = no_args(),
   run = function(_, ctx)
     return elicit(ctx, "Please select options from the enum fields", {type = "object", properties = {
       untitledSingle = {type = "string", enum = json.array{"option1", "option2", "option3"}},
       titledSingle = {type = "string", oneOf = json.array{
         {const = "value1", title = "First Option"}, {const = "value2", title = "Second Option"},
         {const = "value3", title = "Third Option"}}},
       legacyEnum = {type = "string", enum = json.array{"opt1", "opt2", "opt3"},
                     enumNames = json.array{"Option One", "Option Two", "Option Three"}},
       untitledMulti = {type = "array", items = {type = "string",
                        enum = json.array{"option1", "option2", "option3"}}},
       titledMulti = {type = "array", items = {anyOf = json.array{
         {const = "value1", title = "First Choice"}, {const = "value2", title = "Second Choice"},
         {const = "value3", title = "Third Choice"}}}}},
       required = json.array()})
   end},
  {name = "json_schema_2020_12_tool", description = "Tool with JSON Schema 2020-12 features",
   inputSchema = {["$schema"] = "https://json-schema.org/draft/2020-12/schema", type = "object",
                  ["$defs"] = {address = {type = "object", properties = {
                    street = {type = "string"}, city = {type = "string"}}}},
                  properties = {name = {type = "string"}, address = {["$ref"] = "#/$defs/address"}},
                  additionalProperties = false},
   run = function(args) return content{text("received " .. json.encode(json.object(args)))} end},
}

local RESOURCES = {
  ["test://static-text"] = {name = "Static Text Resource", description = "A static text resource",
                            mimeType = "text/plain",
                            text = "This is the content of the static text resource."},
  ["test://static-binary"] = {name = "Static Binary Resource", description = "A 1x1 PNG",
                              mimeType = "image/png", blob = PNG},
  ["test://watched-resource"] = {name = "Watched Resource", description = "Can be subscribed to",
                                 mimeType = "text/plain", text = "Watched resource content"},
}
local RESOURCE_ORDER = {"test://static-text", "test://static-binary", "test://watched-resource"}

local function read_resource(uri)
  local r = RESOURCES[uri]
  if r then return {uri = uri, mimeType = r.mimeType, text = r.text, blob = r.blob} end
  local id = type(uri) == "string" and uri:match("^test://template/([^/]+)/data$")
  if id then
    return {uri = uri, mimeType = "application/json",
            text = json.encode({id = id, templateTest = true, data = "Data for ID: " .. id})}
  end
end

local function not_found(what, data)
  return nil, {code = mcp.INVALID_PARAMS, message = what, data = data}
end

local PROMPTS = {
  {name = "test_simple_prompt", description = "A simple prompt without arguments",
   get = function()
     return {{role = "user", content = text("This is a simple prompt for testing.")}}
   end},
  {name = "test_prompt_with_arguments", description = "A prompt with required arguments",
   arguments = {{name = "arg1", description = "First test argument", required = true},
                {name = "arg2", description = "Second test argument", required = true}},
   get = function(a)
     return {{role = "user", content = text(("Prompt with arguments: arg1='%s', arg2='%s'"):format(
       tostring(a.arg1), tostring(a.arg2)))}}
   end},
  {name = "test_prompt_with_embedded_resource", description = "A prompt with an embedded resource",
   arguments = {{name = "resourceUri", description = "URI of the resource to embed", required = true}},
   get = function(a)
     return {{role = "user", content = resource(tostring(a.resourceUri), "Embedded resource content for testing.")},
             {role = "user", content = text("Please process the embedded resource above.")}}
   end},
  {name = "test_prompt_with_image", description = "A prompt with image content",
   get = function()
     return {{role = "user", content = image()},
             {role = "user", content = text("Please analyze the image above.")}}
   end},
}

M.handlers = {}
local H = M.handlers

H["resources/list"] = function()
  local list = json.array()
  for _, uri in ipairs(RESOURCE_ORDER) do
    local r = RESOURCES[uri]
    list[#list + 1] = {uri = uri, name = r.name, description = r.description, mimeType = r.mimeType}
  end
  return {resources = list}
end

H["resources/templates/list"] = function()
  return {resourceTemplates = json.array{{uriTemplate = "test://template/{id}/data",
    name = "Resource Template", description = "A resource template with parameter substitution",
    mimeType = "application/json"}}}
end

H["resources/read"] = function(_, params)
  local c = read_resource(params.uri)
  if not c then return not_found("Resource not found: " .. tostring(params.uri), {uri = params.uri}) end
  return {contents = json.array{c}}
end

H["resources/subscribe"] = function(session, params)
  session.subscriptions = session.subscriptions or {}
  session.subscriptions[tostring(params.uri)] = true
  return json.object()
end

H["resources/unsubscribe"] = function(session, params)
  if session.subscriptions then session.subscriptions[tostring(params.uri)] = nil end
  return json.object()
end

H["prompts/list"] = function()
  local list = json.array()
  for _, p in ipairs(PROMPTS) do
    list[#list + 1] = {name = p.name, description = p.description,
                       arguments = p.arguments and json.array(p.arguments) or nil}
  end
  return {prompts = list}
end

H["prompts/get"] = function(session, params, _, channel)
  if params.name == "test_input_required_result_prompt" then
    local a = session:input(params, {user_context = {method = "elicitation/create", params = {
      message = "What context should the prompt use?", requestedSchema = {type = "object",
        properties = {context = {type = "string"}}, required = json.array{"context"}}}}}, channel)
    return {description = "A prompt that asks first", messages = json.array{
      {role = "user", content = text("Context: " .. accepted(a.user_context, "context"))}}}
  end
  for _, p in ipairs(PROMPTS) do
    if p.name == params.name then
      local args = type(params.arguments) == "table" and params.arguments or {}
      for _, a in ipairs(p.arguments or {}) do
        if a.required and args[a.name] == nil then
          return not_found("Missing required argument: " .. a.name)
        end
      end
      return {description = p.description, messages = json.array(p.get(args))}
    end
  end
  return not_found("Unknown prompt: " .. tostring(params.name))
end

H["completion/complete"] = function()
  return {completion = {values = json.array(), total = 0, hasMore = false}}
end

return M
