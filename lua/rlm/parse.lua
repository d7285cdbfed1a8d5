--- Reading a model's reply: the code blocks to run, what is not run and why, and its paper-era
-- FINAL lines. The shapes follow what real models write (tests/lua/test_parse.lua names the
-- public run each case comes from).
local M = {}

local CODE_LANGS = {repl = true, python = true, python3 = true, py = true, py3 = true, [""] = true}

-- Each fenced block, in order: {lang =, code =, closed =, from =, to =} (from, to: the bytes
-- it spans, fences included). A fence may be indented (a block inside a numbered list): its
-- lines lose that indentation, and its closing fence may carry it. As in CommonMark, a fence
-- of more than three backticks closes only with as many or more: models fence code that
-- holds a ``` line (a string of Markdown) with four.
local function fenced(text)
  local blocks, pos = {}, 1
  while true do
    local s, e, ticks, lang = text:find("(```+)([%w_+-]*)[ \t]*\n", pos)
    if not s then break end
    local line_start = s
    while line_start > 1 and text:byte(line_start - 1) ~= 10 do line_start = line_start - 1 end
    local indent = text:sub(line_start, s - 1)
    if indent:find("[^ \t]") then indent = "" end   -- a fence after text on its line
    local close_s, close_e = text:find("\n[ \t]*" .. ticks .. "`*[ \t]*\n", e)
    local body = close_s and text:sub(e + 1, close_s - 1) or text:sub(e + 1, -2)
    if #indent > 0 then
      body = ("\n" .. body):gsub("\n" .. indent:gsub("%p", "%%%0"), "\n"):sub(2)
    end
    blocks[#blocks + 1] = {lang = lang:lower(), code = body, closed = close_s ~= nil,
                           from = s, to = close_e or #text}
    if not close_s then break end
    pos = close_e
  end
  return blocks
end

local function inside(pos, ranges)
  for _, r in ipairs(ranges) do
    if pos >= r.from and pos <= r.to then return true end
  end
  return false
end

-- The reply's thinking, as ranges: reasoning that Qwen, GLM and DeepSeek-R1 servers without a
-- reasoning parser leak into the content, as <think>...</think> or <thinking>...</thinking>
-- (QwenLM/qwen-code issue #10791, PR #6033), or as text ending in a lone </think> when the chat
-- template opened the section in the prompt (kekzl/imp PR #509, qwen-code issue #6007). Tags
-- count only outside fenced blocks (code may well handle the tags as strings); an unclosed
-- section runs to the end of the reply.
local function thinking(text, blocks)
  local spans = {}
  local function find(tag, init)
    local s, e = text:find(tag, init, true)
    while s and inside(s, blocks) do s, e = text:find(tag, e + 1, true) end
    return s, e
  end
  for _, name in ipairs{"think", "thinking"} do
    local open, close = "<" .. name .. ">", "</" .. name .. ">"
    local pos = 1
    local lone_s, lone_e = find(close, 1)
    local first_open = find(open, 1)
    if lone_s and (not first_open or lone_s < first_open) then
      spans[#spans + 1] = {from = 1, to = lone_e}
      pos = lone_e + 1
    end
    while true do
      local s = find(open, pos)
      if not s then break end
      local _, e = find(close, s)
      spans[#spans + 1] = {from = s, to = e or #text}
      if not e then break end
      pos = e + 1
    end
  end
  return spans
end

-- The reply's fenced blocks and thinking spans, on its text with LF line ends.
local function read(text)
  text = "\n" .. text:gsub("\r\n", "\n") .. "\n"
  local blocks = fenced(text)
  return text, blocks, thinking(text, blocks)
end

--- The reply read for running: {code = {text...}, notes = {text...}, cut = bool}.
-- code: the blocks to run, in order. When the reply has a ```repl block, only ```repl blocks
-- run (a ```python block beside it illustrates); otherwise every Python or unlabelled block
-- does. Blocks in other languages (```json, ```bash) are text. A last block without its
-- closing fence is not run when the reply was cut at the output limit (opts.cut): its first
-- lines would run without the rest. notes: one line per block not run, for the model.
function M.reply(text, opts)
  opts = opts or {}
  local _, all, thought = read(text)
  local blocks = {}
  for _, b in ipairs(all) do
    if not inside(b.from, thought) then blocks[#blocks + 1] = b end
  end
  local has_repl = false
  for _, b in ipairs(blocks) do has_repl = has_repl or (b.lang == "repl" and b.code:find("%S")) end
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

--- The reply without its fenced blocks and thinking, so FINAL(...) there is not an answer.
local function prose(text)
  local lf, blocks, thought = read(text)
  local ranges = table.move(thought, 1, #thought, #blocks + 1, table.move(blocks, 1, #blocks, 1, {}))
  table.sort(ranges, function(a, b) return a.from < b.from end)
  local parts, pos = {}, 1
  for _, r in ipairs(ranges) do
    if r.from > pos then parts[#parts + 1] = lf:sub(pos, r.from - 1) end
    pos = math.max(pos, r.to + 1)
  end
  parts[#parts + 1] = lf:sub(pos)
  return table.concat(parts, "\n")
end

--- A FINAL(text) or FINAL_VAR(name) line outside code: returns {text = ...} or {var = ...}.
-- FINAL( may open a text that goes on over several lines, up to the line ending in ")".
function M.final(text)
  text = prose(text)
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
