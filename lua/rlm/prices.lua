--- Model prices in US dollars per million tokens, used by rlm.llm to turn token counts into
-- cost. Keys are "provider/model" as written in model strings; a model the provider reports with
-- a date suffix ("claude-sonnet-4-5-20250929") is priced by the longest key that prefixes it.
-- Prices change: check the provider's pricing page, and add or correct entries from a script:
--
--   require("rlm.prices")["openrouter/qwen/qwen3-coder"] = {input = 0.4, output = 1.6}
--
-- A model with no entry costs 0 and is counted in llm.usage() as unpriced.
return {
  ["openai/gpt-4o"] = {input = 2.50, output = 10.00},
  ["openai/gpt-4o-mini"] = {input = 0.15, output = 0.60},
  ["openai/gpt-4.1"] = {input = 2.00, output = 8.00},
  ["openai/gpt-4.1-mini"] = {input = 0.40, output = 1.60},
  ["openai/gpt-4.1-nano"] = {input = 0.10, output = 0.40},
  ["openai/gpt-5"] = {input = 1.25, output = 10.00},
  ["openai/gpt-5-mini"] = {input = 0.25, output = 2.00},
  ["openai/gpt-5-nano"] = {input = 0.05, output = 0.40},
  ["anthropic/claude-sonnet-4-5"] = {input = 3.00, output = 15.00},
  ["anthropic/claude-sonnet-4"] = {input = 3.00, output = 15.00},
  ["anthropic/claude-haiku-4-5"] = {input = 1.00, output = 5.00},
  ["anthropic/claude-opus-4-1"] = {input = 15.00, output = 75.00},
}
