--- Reading a model's reply: the code blocks to run, what is not run and why, and its paper-era
-- FINAL lines. The shapes follow what real models write (tests/lua/test_parse.lua names the
-- public run each case comes from).
local M = {}

local CODE_LANGS = {repl = true, python = true, python3 = true, py = true, py3 = true, [""] = true}

-- The reply without its thinking: reasoning that Qwen, GLM and DeepSeek-R1 servers without a
-- reasoning parser leak into the content, as <think>...</think> or <thinking>...</thinking>
-- (QwenLM/qwen-code issue #10791, PR #6033), or as text ending in a lone </think> when the chat
-- template opened the section in the prompt (kekzl/imp PR #509, qwen-code issue #6007). Draft
-- code there is never run; an unclosed section runs to the end of the reply.
local function without_thinking(text)
  for _, tag in ipairs{"think", "thinking"} do
    text = text:gsub("<" .. tag .. ">.-</" .. tag .. ">", "")
    text = text:gsub("^.-</" .. tag .. ">", "")
    text = text:gsub("<" .. tag .. ">.*$", "")
  end
  return text
end

-- Each fenced block, in order: {lang =, code =, closed =}. A fence may be indented (a block
-- inside a numbered list): its lines lose that indentation, and its closing fence may carry it.
local function fenced(text)
  local blocks, pos = {}, 1
  while true do
    local s, e, indent, lang = text:find("\n([ \t]*)```([%w_+-]*)[ \t]*\n", pos)
    if not s then break end
    local close_s, close_e = text:find("\n[ \t]*```[ \t]*\n", e)
    local body = close_s and text:sub(e + 1, close_s - 1) or text:sub(e + 1, -2)
    if #indent > 0 then
      body = ("\n" .. body):gsub("\n" .. indent:gsub("%p", "%%%0"), "\n"):sub(2)
    end
    blocks[#blocks + 1] = {lang = lang:lower(), code = body, closed = close_s ~= nil}
    if not close_s then break end
    pos = close_e - 1
  end
  return blocks
end

--- The reply read for running: {code = {text...}, notes = {text...}, cut = bool}.
-- code: the blocks to run, in order. When the reply has a ```repl block, only ```repl blocks
-- run (a ```python block beside it illustrates); otherwise every Python or unlabelled block
-- does. Blocks in other languages (```json, ```bash) are text. A last block without its
-- closing fence is not run when the reply was cut at the output limit (opts.cut): its first
-- lines would run without the rest. notes: one line per block not run, for the model.
function M.reply(text, opts)
  opts = opts or {}
  text = without_thinking("\n" .. text:gsub("\r\n", "\n") .. "\n")
  local blocks = fenced(text)
  local has_repl = false
  for _, b in ipairs(blocks) do has_repl = has_repl or b.lang == "repl" end
  local out = {code = {}, notes = {}, cut = false}
  for i, b in ipairs(blocks) do
    local label = b.lang == "" and "an unlabelled block" or ("a ```%s block"):format(b.lang)
    if not CODE_LANGS[b.lang] or not b.code:find("%S") then
      -- shown text (json, bash, output), or empty: nothing to say
    elseif has_repl and b.lang ~= "repl" then
      out.notes[#out.notes + 1] = ("Block %d (%s) was not run: only ```repl blocks run when a "
        .. "reply has one."):format(i, label)
    elseif not b.closed and opts.cut then
      out.cut = true
      out.notes[#out.notes + 1] = ("Block %d was not run: your reply was cut off at the output "
        .. "limit before the block ended. Write a shorter block."):format(i)
    else
      out.code[#out.code + 1] = b.code
    end
  end
  return out
end

--- The code of every block that runs in a reply that was not cut (see M.reply).
function M.code_blocks(text)
  return M.reply(text).code
end

--- Removes fenced blocks and thinking so FINAL(...) inside them is not read as the answer.
local function prose(text)
  return (without_thinking(text):gsub("```.-```", ""))
end

--- A FINAL(text) or FINAL_VAR(name) line outside code: returns {text = ...} or {var = ...}.
-- FINAL( may open a text that goes on over several lines, up to the line ending in ")".
function M.final(text)
  text = prose(text:gsub("\r\n", "\n"))
  local multi = text:match("\n%s*FINAL%((.-)%)%s*$") or text:match("^%s*FINAL%((.-)%)%s*$")
  if multi and multi:find("\n") then
    return {text = (multi:gsub("^%s*([\"'])(.*)%1%s*$", "%2"))}
  end
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local var = line:match("^%s*FINAL_VAR%((.-)%)%s*$")
    if var then
      var = var:gsub("^%s*[\"']?", ""):gsub("[\"']?%s*$", "")
      if var:match("^[%a_][%w_]*$") then return {var = var} end
    end
    local answer = line:match("^%s*FINAL%((.*)%)%s*$")
    if answer then
      answer = answer:gsub("^%s*([\"'])(.*)%1%s*$", "%2")
      return {text = answer}
    end
  end
  return nil
end

--- The first JSON object in a reply (fenced or bare), for the extraction answer.
function M.json_object(text, json)
  for _, c in ipairs{text:match("```json%s*\n(.-)\n```") or "", text:match("%b{}") or ""} do
    local v = json.decode(c)
    if type(v) == "table" then return v end
  end
  return nil
end

return M
