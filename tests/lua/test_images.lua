--- Images in sub-calls: llm_query(prompt, images=[...]) from sandbox code reaches the model in
-- each wire's format (checked by the stand-in as each provider checks it), is billed by the
-- provider's rule and counted and priced as billed; a model that takes no image is a clear error.
local T = require "support"
local F = require "rlm_fixtures"
local rlm = require "rlm"
local sys = require "rlm.sys"

local tests = {}

-- Python that writes a PNG header of w x h (all the stand-in reads of it) to path.
local function png(path, w, h)
  return ("import struct\nopen(%q, 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + struct.pack('>I', 13) + "
          .. "b'IHDR' + struct.pack('>II', %d, %d) + b'\\x08\\x02\\x00\\x00\\x00')\n"):format(path, w, h)
end

local DESCRIBE = "'%d images: %s' % (len(images), ', '.join('%dx%d %s' % (i['width'], i['height'], "
  .. "i['media_type']) for i in images))"

local function setup(code)
  local server = F.model{rules = {
    {match = "^describe", reply_expr = DESCRIBE},
    {match = "Task: pictures", reply = F.code(code)},
  }}
  local saved = {sys.getenv("ANTHROPIC_BASE_URL"), sys.getenv("ANTHROPIC_API_KEY")}
  T.defer(function() sys.setenv("ANTHROPIC_BASE_URL", saved[1]); sys.setenv("ANTHROPIC_API_KEY", saved[2]) end)
  sys.setenv("ANTHROPIC_BASE_URL", server.url)
  sys.setenv("ANTHROPIC_API_KEY", "sk-test-key-0123456789")
  return server
end

local PRICES = {["openai/root-model"] = {input = 1, output = 1}, ["openai/sub-model"] = {input = 2, output = 4},
                ["anthropic/sub-model"] = {input = 3, output = 15}}

local function run(sub_model, code)
  local server = setup(code)
  local path = T.tmpdir() .. "/t.jsonl"
  local res = rlm.run{task = "pictures", context = "x", sub_model = sub_model, trace = path,
                      sub_models = {sub_model, "deepseek/deepseek-chat"}, prices = PRICES,
                      max_iterations = 1}
  return res, server
end

local CALLS = png("pic.png", 1024, 768) .. [[
data = open('pic.png', 'rb').read()
a = llm_query('describe these', images=['pic.png', data, 'https://example.com/cat.png'])
SUBMIT(answer=a)
]]

tests["the OpenAI wire: text first, then image_url parts, billed by OpenAI's tile rule"] = function()
  local res, server = run("openai/sub-model", CALLS)
  T.eq(res.answer, "3 images: 1024x768 image/png, 1024x768 image/png, 512x512 None", tostring(res.detail))
  local stats = F.stats(server)
  local parts = stats.last_body.messages[1].content
  T.eq(#parts, 4)
  T.eq(parts[1].type, "text")
  T.eq(parts[1].text, "describe these")
  T.eq(parts[2].type, "image_url")
  T.contains(parts[2].image_url.url, "data:image/png;base64,iVBORw0KGgo")
  T.eq(parts[4].image_url.url, "https://example.com/cat.png")
  -- 1024x768 high detail: 2x2 tiles, 85 + 4 x 170 = 765 each; the URL one 512x512: 255.
  local sub = res.usage.by_model["openai/sub-model"]
  T.eq(sub.input_tokens, 765 * 2 + 255 + 4, "three images and the four-token text, as billed")
  T.eq(sub.input_tokens + res.usage.by_model["openai/root-model"].input_tokens, stats.input_tokens)
  T.truthy(math.abs(sub.cost - (sub.input_tokens * 2 + sub.output_tokens * 4) / 1e6) < 1e-12, "priced")
end

tests["the Anthropic wire: image blocks before the text, billed by width x height / 750"] = function()
  local res, server = run("anthropic/sub-model", CALLS)
  T.eq(res.answer, "3 images: 1024x768 image/png, 1024x768 image/png, 512x512 None", tostring(res.detail))
  local body = F.stats(server).last_body
  local parts = body.messages[1].content
  T.eq(parts[1].type, "image")
  T.eq(parts[1].source.type, "base64")
  T.eq(parts[1].source.media_type, "image/png")
  T.eq(parts[3].source.type, "url")
  T.eq(parts[4].type, "text")
  T.eq(parts[4].text, "describe these")
  local sub = res.usage.by_model["anthropic/sub-model"]
  T.eq(sub.input_tokens, 1049 * 2 + 350 + 4, "ceil(1024*768/750) twice, 512x512 once, the text")
end

tests["a model that takes no image is a clear error in the code, and bad images are refused"] = function()
  local res, server = run("openai/text-only-model", png("pic.png", 10, 10) .. [[
out = []
for model in ['openai/text-only-model', 'deepseek/deepseek-chat']:
    try:   # a refusal raises; a failed call answers '[ERROR] ...' (the sub-call failure rule)
        out.append(llm_query('describe', model=model, images=['pic.png']))
    except RuntimeError as e:
        out.append(str(e))
for bad in [b'hello', 'missing.png', 42]:
    try:
        llm_query('describe', images=[bad])
    except (ValueError, TypeError) as e:
        out.append(type(e).__name__ + ': ' + str(e))
SUBMIT(answer='\n'.join(out))
]])
  local lines = {}
  for line in tostring(res.answer):gmatch("[^\n]+") do lines[#lines + 1] = line end
  T.eq(#lines, 5, tostring(res.answer) .. tostring(res.detail))
  T.contains(lines[1], "image_url is only supported by certain models")
  T.contains(lines[2], "deepseek/deepseek-chat takes no images")
  T.contains(lines[3], "ValueError: llm_query: images[0] is not a PNG, JPEG, GIF or WebP image")
  T.contains(lines[4], "ValueError: llm_query: images[0]: cannot read 'missing.png'")
  T.contains(lines[5], "TypeError: llm_query: images[0] must be a path, bytes or a URL, not int")
  for _, m in ipairs(F.stats(server).models) do
    T.truthy(m ~= "deepseek-chat", "nothing was sent to the model known to take no image")
  end
end

return tests
