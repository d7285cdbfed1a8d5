--- Images in sub-calls (llm_query(prompt, images=[...])): the content each wire takes, what a
-- reservation counts for them, and the models known to take none.
local llm = require "rlm.llm"

local M = {}

-- What a reservation counts per image, in tokens, estimated high: Anthropic bills about
-- width*height/750 after scaling an image down to about 1.15 megapixels (about 1,600 tokens);
-- OpenAI's high detail at most 85 + 170 per 512-pixel tile of a 768x2048 fit (1,445).
M.RESERVE_TOKENS = 1600

-- Anthropic's limit per image sent as base64 (its vision guide: 5 MB through the API).
local ANTHROPIC_MAX_BYTES = 5 * 1024 * 1024

-- Models known to take no image: refused before anything is sent. Others are asked, and a
-- provider that refuses says so in its error.
M.text_only = {"^openai/gpt%-3%.5", "^openai/o1%-mini", "^openai/o3%-mini", "^deepseek/",
               "^anthropic/claude%-2", "^anthropic/claude%-instant"}

--- nil when label may be sent images, else why not.
function M.refusal(label)
  for _, pattern in ipairs(M.text_only) do
    if label:find(pattern) then
      return ("images: %s takes no images; use a model that does (its sub_models)"):format(label)
    end
  end
end

-- The decoded size of base64 text.
local function decoded_bytes(b64)
  local pad = b64:sub(-2) == "==" and 2 or (b64:sub(-1) == "=" and 1 or 0)
  return #b64 // 4 * 3 - pad
end

--- Checks the images a sandbox sent: a list of {url} or {data, media_type}. nil, err if not.
function M.check(images, label)
  if type(images) ~= "table" then return nil, "images must be a list" end
  local wire = llm.resolve(label).wire
  for i, img in ipairs(images) do
    if type(img) ~= "table" then return nil, ("images[%d] must be an object"):format(i - 1) end
    if type(img.url) ~= "string" and not (type(img.data) == "string" and type(img.media_type) == "string") then
      return nil, ("images[%d] needs a url, or data and media_type"):format(i - 1)
    end
    if wire == "anthropic" and img.data and decoded_bytes(img.data) > ANTHROPIC_MAX_BYTES then
      return nil, ("images[%d]: %s takes images of at most 5 MB"):format(i - 1, label)
    end
  end
  local refused = M.refusal(label)
  if refused then return nil, refused end
  return true
end

--- The message content of a prompt with images, in label's wire format.
function M.content(label, prompt, images)
  local wire = llm.resolve(label).wire
  local parts = {}
  for _, img in ipairs(images) do
    if wire == "anthropic" then
      -- Anthropic's vision guide: image blocks before the text that asks about them.
      local url, media, data = img.url, img.media_type, img.data
      if url and url:find("^data:") then
        media, data = url:match("^data:([^;,]+);base64,(.*)$")
        url = nil
      end
      parts[#parts + 1] = {type = "image", source = url and {type = "url", url = url}
        or {type = "base64", media_type = media, data = data}}
    else
      parts[#parts + 1] = {type = "image_url", image_url = {url = img.url
        or ("data:%s;base64,%s"):format(img.media_type, img.data)}}
    end
  end
  local text = {type = "text", text = prompt}
  if wire == "anthropic" then parts[#parts + 1] = text else table.insert(parts, 1, text) end
  return parts
end

--- What the images add to a prompt's cache key: their bytes or URLs, in order.
function M.key(images)
  local out = {}
  for i, img in ipairs(images) do out[i] = img.url or (img.media_type .. ":" .. img.data) end
  return table.concat(out, "\n")
end

return M
