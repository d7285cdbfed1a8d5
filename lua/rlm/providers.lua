--- The model providers rlm.llm knows, by name (rlm.llm.providers is this table; add your own
-- there): wire format, base URL (and the variable that overrides it), key variable.
-- key_optional: servers that need no key (a key from the variable or api_key is still sent).
-- path: appended to the base URL (default: the wire's usual path). headers, extra: added to
-- every request's headers and JSON body. prompt_cache: how the provider caches a prompt prefix
-- that repeats (a run's turns): "key" (OpenAI caches by itself; prompt_cache_key keeps a run's
-- requests on one cache) or "breakpoint" (Anthropic caches only where a request marks it).
-- wires: the models of the provider that take another wire, by the start of their name: OpenAI
-- serves some models only on its Responses API ("responses").
-- A leaf module: rlm.secrets reads the key variables here without loading rlm.llm.
return {
  openai = {wire = "openai", base_url = "https://api.openai.com/v1",
            base_url_env = "OPENAI_BASE_URL", key_env = "OPENAI_API_KEY",
            max_tokens_field = "max_completion_tokens", prompt_cache = "key",
            wires = {["o1-pro"] = "responses", ["o3-pro"] = "responses",
                     ["o3-deep-research"] = "responses", ["o4-mini-deep-research"] = "responses",
                     ["gpt-5-pro"] = "responses", ["codex-mini"] = "responses"}},
  anthropic = {wire = "anthropic", base_url = "https://api.anthropic.com",
               base_url_env = "ANTHROPIC_BASE_URL", key_env = "ANTHROPIC_API_KEY",
               prompt_cache = "breakpoint"},
  ["local"] = {wire = "openai", base_url = "http://127.0.0.1:8000/v1",
               base_url_env = "RLM_LOCAL_BASE_URL", key_env = "RLM_LOCAL_API_KEY",
               key_optional = true},
  ollama = {wire = "openai", base_url = "http://127.0.0.1:11434/v1",
            base_url_env = "OLLAMA_BASE_URL", key_optional = true},
  openrouter = {wire = "openai", base_url = "https://openrouter.ai/api/v1",
                base_url_env = "OPENROUTER_BASE_URL", key_env = "OPENROUTER_API_KEY"},
  groq = {wire = "openai", base_url = "https://api.groq.com/openai/v1",
          base_url_env = "GROQ_BASE_URL", key_env = "GROQ_API_KEY"},
  deepseek = {wire = "openai", base_url = "https://api.deepseek.com/v1",
              base_url_env = "DEEPSEEK_BASE_URL", key_env = "DEEPSEEK_API_KEY"},
  mistral = {wire = "openai", base_url = "https://api.mistral.ai/v1",
             base_url_env = "MISTRAL_BASE_URL", key_env = "MISTRAL_API_KEY"},
  together_ai = {wire = "openai", base_url = "https://api.together.xyz/v1",
                 base_url_env = "TOGETHER_BASE_URL", key_env = "TOGETHER_API_KEY"},
}
