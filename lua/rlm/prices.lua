--- Model prices in US dollars per million tokens, used by rlm.llm to turn token counts into
-- cost. Keys are "provider/model" as written in model strings; a model the provider reports with
-- a date suffix ("claude-sonnet-4-5-20250929") is priced by the longest key that prefixes it.
-- Prices change: check the provider's pricing page, and add or correct entries from a script:
--
--   require("rlm.prices")["openrouter/qwen/qwen3-coder"] = {input = 0.4, output = 1.6}
--
-- A model with no entry costs 0 and is counted in llm.usage() as unpriced.
-- cached_input: input read from the provider's prompt cache; cache_write: input written to it
-- (Anthropic bills 1.25x input for its 5-minute cache and 0.1x for reads; OpenAI writes for
-- free). Without them a cached token costs the input rate and a written one 1.25x it.
local function anthropic(input, output)
  return {input = input, output = output, cached_input = input / 10, cache_write = input * 1.25}
end

return {
  ["openai/gpt-4o"] = {input = 2.50, output = 10.00, cached_input = 1.25},
  ["openai/gpt-4o-mini"] = {input = 0.15, output = 0.60, cached_input = 0.075},
  ["openai/gpt-4.1"] = {input = 2.00, output = 8.00, cached_input = 0.50},
  ["openai/gpt-4.1-mini"] = {input = 0.40, output = 1.60, cached_input = 0.10},
  ["openai/gpt-4.1-nano"] = {input = 0.10, output = 0.40, cached_input = 0.025},
  ["openai/gpt-5"] = {input = 1.25, output = 10.00, cached_input = 0.125},
  ["openai/gpt-5-mini"] = {input = 0.25, output = 2.00, cached_input = 0.025},
  ["openai/gpt-5-nano"] = {input = 0.05, output = 0.40, cached_input = 0.005},
  ["anthropic/claude-sonnet-4-5"] = anthropic(3.00, 15.00),
  ["anthropic/claude-sonnet-4"] = anthropic(3.00, 15.00),
  ["anthropic/claude-haiku-4-5"] = anthropic(1.00, 5.00),
  ["anthropic/claude-opus-4-1"] = anthropic(15.00, 75.00),
}
