--- Reading a model's reply: its code blocks and its paper-era FINAL lines.
local M = {}

local CODE_LANGS = {repl = true, python = true, python3 = true, py = true, py3 = true, [""] = true}

--- The code of every ```repl / ```python / ```python3 / ```py / unlabelled fenced block, in
-- order. Blocks in other languages (```json, ```bash ...) are shown text, not code to run.
-- CRLF line ends are read as LF.
function M.code_blocks(text)
  text = text:gsub("\r\n", "\n")
  local blocks, pos = {}, 1
  while true do
    local s, e, lang = text:find("```([%w_+-]*)[ \t]*\n", pos)
    if not s then break end
    local close = text:find("\n```", e, true)
    -- An unterminated block (a reply cut at max_tokens) still runs up to the end.
    local code = text:sub(e + 1, (close or #text + 1) - 1)
    if CODE_LANGS[lang:lower()] and code:find("%S") then blocks[#blocks + 1] = code end
    if not close then break end
    pos = close + 4
  end
  return blocks
end

--- Removes fenced blocks so FINAL(...) inside code is not read as the answer.
local function prose(text)
  return (text:gsub("```.-```", ""))
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
