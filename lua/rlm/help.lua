--- rlm's command-line help, rendered from one source: the overview in rlm.commands and each
-- command's own `help` text. `rlm help`, `rlm COMMAND --help`, the man page (`rlm help --man`,
-- installed as rlm.1) and docs/cli.md (`rlm help --markdown`) all come from here, so they never
-- disagree; a test checks docs/cli.md against this output.
local commands = require "rlm.commands"

local M = {}

-- The commands in the order the man page and docs/cli.md give them.
M.ORDER = {"run", "-e", "exec", "ask", "trace", "trace export", "replay", "cache", "bench", "skill", "mcp", "mcp deploy", "serve",
           "daytona-smoke", "sandboxes", "version", "help"}

M.SUMMARY = "Recursive Language Model runs: a model writes Python, a sandbox runs it"

M.DESCRIPTION = [[rlm runs Recursive Language Model work: a model writes Python, a sandbox runs it, the output feeds the model's next step, until the code calls SUBMIT(...). The input is a variable `context` in the sandbox; the model's code calls smaller models (llm_query, llm_query_batched) and child runs (rlm_query) through the host. Sandboxes are local (bubblewrap-isolated Python, no account needed) or Daytona sandboxes. Scripts are Lua 5.4 (rlm run), and the MCP server (rlm mcp) serves the same tools to agents.]]

M.EXIT = {
  {"0", "done (for rlm ask: an answer, submitted or extracted)"},
  {"1", "the work failed: the code raised, a run or a recipe failed, a value was refused"},
  {"2", "the command line itself is wrong: an unknown command, flag or skill, a missing argument or value"},
  {"3", "rlm ask ended without an answer (the reason is on stderr; nothing on stdout)"},
  {"128+N", "interrupted by signal N (130 for Ctrl-C, 143 for SIGTERM)"},
}

M.SIGNALS = [[Ctrl-C (SIGINT), SIGTERM, SIGHUP (the terminal closing) or SIGQUIT interrupts the running code wherever it waits, deletes every sandbox the process created, and exits 128 plus the signal's number. A script that calls os.exit gets the same cleanup first. Started as PID 1 (a container run without an init), rlm runs under a minimal init of its own that passes every signal on and reaps what the sandboxes leave, so `docker stop` cleans up and no zombie piles up. A command's own errors print one line saying what to do; RLM_DEBUG=1 adds where in rlm it was raised, with a traceback.]]

M.ENVIRONMENT = {
  {"RLM_MODEL", "default model, provider/name (openai/gpt-4o, anthropic/claude-sonnet-4-5, local/NAME)"},
  {"OPENAI_API_KEY, OPENAI_BASE_URL", "OpenAI, or any server speaking its API at another base URL"},
  {"ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL", "Anthropic"},
  {"RLM_LOCAL_BASE_URL, RLM_LOCAL_API_KEY", "the local/ provider: an OpenAI-compatible server (default http://127.0.0.1:8000/v1)"},
  {"OPENROUTER_API_KEY, GROQ_API_KEY, DEEPSEEK_API_KEY, MISTRAL_API_KEY, TOGETHER_API_KEY, OLLAMA_BASE_URL", "further providers (rlm.llm.providers)"},
  {"RLM_PRICES", "a JSON file of prices, {\"provider/model\": {\"input\": USD, \"output\": USD}} per million tokens"},
  {"DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID), DAYTONA_API_URL, DAYTONA_TARGET", "Daytona, as its official SDKs read them"},
  {"RLM_BACKEND", "default sandbox backend (local or daytona)"},
  {"RLM_MCP_TOKEN", "the bearer token rlm mcp --http requires (always when bound beyond 127.0.0.1)"},
  {"RLM_SERVE_TOKEN", "the API key rlm serve requires of its clients (always when bound beyond 127.0.0.1)"},
  {"RLM_MCP_ALLOWED_HOSTS, RLM_MCP_ALLOWED_ORIGINS", "further Host names and origins rlm mcp --http accepts (comma separated)"},
  {"XDG_DATA_HOME", "local volumes live in $XDG_DATA_HOME/rlm/volumes/NAME (default ~/.local/share)"},
  {"RLM_BWRAP, RLM_PYTHON", "the bubblewrap and Python executables of the local sandbox (defaults bwrap, /usr/bin/python3)"},
  {"RLM_VENV", "a virtualenv (made from /usr/bin/python3) or a folder of Python packages, read-only in the local sandbox"},
  {"RLM_SANDBOX_UID", "one uid every local sandbox runs as when rlm runs as root (default: a uid of each sandbox's own)"},
  {"RLM_LUA_PATH", "DIR[:DIR]: Lua modules found there win over the embedded ones"},
  {"RLM_SKILLS_PATH", "DIR[:DIR]: your own skills, beside $XDG_DATA_HOME/rlm/skills"},
  {"OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME", "send each run as an OpenTelemetry trace to this collector (OTLP/HTTP JSON; off when unset)"},
  {"RLM_DEBUG", "1: a command's error comes with where in rlm it was raised and a traceback"},
}

M.SEE_ALSO = "The reference is in the docs/ folder of rlm's source: cli.md (this page), lua-api.md, " ..
  "configuration.md, security.md, daytona.md, mcp.md, deploy.md, skills.md, bench.md, " ..
  "performance.md, architecture.md."

--- The help text of a command (a string).
function M.text(name)
  if name == "mcp deploy" then return require("rlm.cmd.mcp_deploy").help end
  if name == "trace export" then return require("rlm.cmd.trace_export").help end
  return commands.help(name)
end

-- ---------- the man page ----------

-- A line for roff: backslashes escaped, a leading dot or quote made literal.
local function roff_line(line)
  line = line:gsub("\\", "\\e")
  if line:match("^[.']") then line = "\\&" .. line end
  return line
end

local function roff_block(text)
  local out = {".nf"}
  for line in (text .. "\n"):gmatch("(.-)\n") do out[#out + 1] = roff_line(line) end
  out[#out + 1] = ".fi"
  return table.concat(out, "\n")
end

local function roff_text(text)
  return roff_line((text:gsub("\n", " ")))
end

function M.man(version)
  local out = {
    ('.TH RLM 1 "" "rlm %s" "User Commands"'):format(version),
    ".SH NAME", "rlm \\- " .. roff_text(M.SUMMARY),
    ".SH SYNOPSIS", ".B rlm", ".I COMMAND", ".RI [ ARGS ...]",
    ".SH DESCRIPTION", roff_text(M.DESCRIPTION),
    ".SH OVERVIEW", roff_block(commands.USAGE),
    ".SH COMMANDS",
  }
  for _, name in ipairs(M.ORDER) do
    out[#out + 1] = ('.SS "rlm %s"'):format(name)
    out[#out + 1] = roff_block(M.text(name))
  end
  out[#out + 1] = '.SH "EXIT STATUS"'
  for _, e in ipairs(M.EXIT) do
    out[#out + 1] = ".TP\n.B " .. e[1] .. "\n" .. roff_text(e[2])
  end
  out[#out + 1] = ".SH SIGNALS\n" .. roff_text(M.SIGNALS)
  out[#out + 1] = ".SH ENVIRONMENT"
  for _, e in ipairs(M.ENVIRONMENT) do
    out[#out + 1] = ".TP\n.B " .. roff_text(e[1]) .. "\n" .. roff_text(e[2])
  end
  out[#out + 1] = '.SH "SEE ALSO"\n' .. roff_text(M.SEE_ALSO)
  return table.concat(out, "\n") .. "\n"
end

-- ---------- docs/cli.md ----------

local function cell(text)
  return (text:gsub("|", "\\|"))
end

function M.markdown()
  local out = {"# The command line", "",
    "<!-- Generated by `rlm help --markdown` from the help texts in lua/ (the man page, rlm.1, " ..
    "comes from the same source): edit those, then run `make docs`. -->", "",
    M.DESCRIPTION, "", "```", commands.USAGE, "```", "", "## Commands", ""}
  for _, name in ipairs(M.ORDER) do
    out[#out + 1] = "### rlm " .. name
    out[#out + 1] = ""
    out[#out + 1] = "```"
    out[#out + 1] = M.text(name)
    out[#out + 1] = "```"
    out[#out + 1] = ""
  end
  out[#out + 1] = "## Exit status"
  out[#out + 1] = ""
  out[#out + 1] = "| code | meaning |"
  out[#out + 1] = "|---|---|"
  for _, e in ipairs(M.EXIT) do out[#out + 1] = ("| %s | %s |"):format(e[1], cell(e[2])) end
  out[#out + 1] = ""
  out[#out + 1] = M.SIGNALS
  out[#out + 1] = ""
  out[#out + 1] = "## Environment"
  out[#out + 1] = ""
  out[#out + 1] = "| variable | meaning |"
  out[#out + 1] = "|---|---|"
  for _, e in ipairs(M.ENVIRONMENT) do out[#out + 1] = ("| %s | %s |"):format(cell(e[1]), cell(e[2])) end
  out[#out + 1] = ""
  return table.concat(out, "\n")
end

return M
