--- `rlm ask "TASK"`: one RLM run from the command line.
local args = require "rlm.args"
local budget = require "rlm.budget"
local json = require "rlm.json"
local sys = require "rlm.sys"

local M = {}

--- The exit code of a run that ended without an answer (the reason is on stderr).
M.NO_ANSWER = 3

M.help = [[
usage: rlm ask "TASK" [--context FILE|-] [--model M] [--sub-model M] [--backend local|daytona]
                      [--outputs a,b] [--json] [--trace FILE.jsonl] [--max-iterations N]
                      [--max-llm-calls N] [--max-depth N] [--max-tokens N] [--max-cost USD]
                      [--max-time S] [--execute-timeout S] [--llm-call-timeout S]
                      [--sub-models a,b] [--prices FILE.json] [--limit NAME=VALUE]...
                      [--context-window N] [--history full|compact] [--resume FILE.jsonl]
                      [--cache] [--events FILE|-] [--otel URL] [--tools FILE.lua]
                      [--network FILE.lua]
                      [--venv DIR] [--reasoning-effort minimal|low|medium|high] [--quiet]
                      [--dry-run]

Runs the RLM loop: the model explores the context in a sandbox by writing Python, until its
code calls SUBMIT. Prints the answer (or, with --json, every output field and the run's usage).
One progress line per turn goes to stderr (--quiet: none), with what was read from and
written to the provider's prompt cache and what that saved, once it was used. The model comes
from --model or RLM_MODEL (provider/name, e.g. openai/gpt-4o, anthropic/claude-sonnet-4-5,
local/NAME); the backend from --backend or RLM_BACKEND (default local).
Budgets hold for the whole tree of sub-calls and child runs: --max-llm-calls (calls made
for code), --max-tokens, --max-cost (needs a price for every model: rlm.prices, --prices or
RLM_PRICES), --max-time (a deadline for everything, code included). --sub-models lists the
models llm_query(model=...) may use (default: the sub-model).
--reasoning-effort minimal|low|medium|high: how much a reasoning model (OpenAI's o-series and
gpt-5; a Claude model thinks with a budget of 1k/4k/16k/32k tokens) reasons before each answer.
A root turn may write up to its model's output limit (llm.output_limits); a sub-call's answer
and a child run's turn are held to 8192 tokens, with room for the reasoning above that.
--limit NAME=VALUE sets a resource limit of the sandboxes (as for `rlm exec`); --venv DIR gives
the local sandboxes the Python packages of a virtualenv (or of a folder of packages), read-only.
History: --context-window N (tokens; default from the model's known window) and
--history full|compact (compact: older turns are summarised near 0.8 of the window).
--resume run.jsonl continues a run from its trajectory (the code is run again with the
recorded answers, then the run goes on live, appending to the file); --cache keeps sub-call
answers under $XDG_CACHE_HOME/rlm and sends no repeated sub-call.
--events FILE|- writes the run's records (the trajectory's JSON lines) as they happen, for other
programs to follow; with `-` they go to stdout and the answer is only in the last one.
--tools FILE.lua gives the code your tools: the file returns a table of Lua functions and MCP
servers (docs/lua-api.md, Tools), each a Python function in the sandbox that runs here.
--network FILE.lua lets the code reach the hosts the file allows, with your keys added here:
the file returns {allow = {["api.example.com"] = {headers = {Authorization = "Bearer
${API_KEY}"}}}} (docs/lua-api.md, Network); the key never enters the sandbox.
--otel URL sends the run as one OpenTelemetry trace (OTLP/HTTP JSON) to the collector at URL
(default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set; none).
Exit codes: 0 an answer (submitted, or extracted when the run stopped early: the reason goes
to stderr), 1 an error before the run could start, 2 a usage error, 3 no answer (the reason
goes to stderr, nothing to stdout), 130/143 interrupted by SIGINT/SIGTERM.
--dry-run sends nothing and starts no sandbox: it prints what the first call costs, a typical
run's cost, the worst case the budget allows and the price of each model the run may use
(with --json, as {"preview": ...}).]]

local SPEC = {context = "string", model = "string", sub_model = "string", backend = "string",
              outputs = "list", json = "flag", trace = "string", max_iterations = "number",
              max_llm_calls = "number", max_depth = "number", max_cost = "number",
              max_time = "number", max_tokens = "number", quiet = "flag", limit = "assign",
              execute_timeout = "number", llm_call_timeout = "number", sub_models = "list",
              prices = "string", context_window = "number", history = "string",
              resume = "string", cache = "flag", events = "string", otel = "string", tools = "string",
              network = "string",
              venv = "string", reasoning_effort = "string", dry_run = "flag"}

-- Writes each record as one JSON line to path ("-": stdout), flushed at once.
local function event_writer(path)
  local f = io.stdout
  if path ~= "-" then
    local err
    f, err = io.open(path, "w")
    if not f then error("cannot write --events " .. path .. ": " .. tostring(err), 0) end
  end
  return function(record)
    local ok, err = f:write(json.encode(record), "\n")
    if ok then ok, err = f:flush() end
    if not ok then error("cannot write --events " .. path .. ": " .. tostring(err), 0) end
  end
end

local function env_backend()
  local b = sys.getenv("RLM_BACKEND")
  return b ~= "" and b or nil
end

-- The context is text for the model to read: a NUL byte in its first 64 KiB means a binary file
-- (grep's and git's test), refused; text that is not UTF-8 is taken, with a note, since its
-- bytes reach the code as \udcXX surrogates.
local function read_context(path)
  if path == nil then return nil end
  local data, err
  if path == "-" then
    data = io.stdin:read("a")
  else
    data, err = sys.read_file(path)
    if not data then error("cannot read the context: " .. err, 0) end
  end
  local name = path == "-" and "stdin" or path
  local nul = data:sub(1, 65536):find("\0", 1, true)
  if nul then
    error(("the context %s is binary (a NUL byte at offset %d): give text, or put the file in "
      .. "the sandbox from Lua (rlm.run{context_paths = {FILE}})"):format(name, nul - 1), 0)
  end
  if not utf8.len(data) then
    io.stderr:write(("rlm: note: the context %s is not UTF-8; the code sees its other bytes as "
      .. "\\udcXX characters\n"):format(name))
  end
  return data
end

local function progress(e)
  if e.type == "budget_warning" then
    io.stderr:write(("budget: %s has %.4g of %.4g left\n"):format(e.limit, e.remaining, e.of))
  end
  if e.type ~= "turn" then return end
  local u = e.usage
  local cache = budget.cache_words(u)
  io.stderr:write(("%sturn %d/%d  tokens %d  calls %d  cost $%.4f  %.1fs%s\n"):format(
    string.rep("  ", e.depth), e.turn, e.max_iterations, u.total_tokens, u.llm_calls, u.cost,
    u.elapsed, cache ~= "" and "  " .. cache or ""))
end

function M.main(argv)
  local opts, rest = args.parse(argv, SPEC)
  local turns = opts.max_iterations
  if turns and (turns < 1 or turns % 1 ~= 0) then
    args.fail(("--max-iterations must be a whole number of turns, at least 1 (got %s): a run of "
      .. "no turns cannot answer"):format(turns))
  end
  local task = rest[1]
  if (not task and not opts.resume) or #rest > 1 or task == "" then
    return args.usage("ask", "give the task as one argument", M.help)
  end
  local res = require("rlm").run{
    task = task, context = read_context(opts.context), model = opts.model,
    sub_model = opts.sub_model, backend = opts.backend or env_backend(), outputs = opts.outputs,
    trace = opts.trace, max_iterations = opts.max_iterations, max_llm_calls = opts.max_llm_calls,
    max_depth = opts.max_depth, max_cost = opts.max_cost, max_time = opts.max_time,
    max_tokens = opts.max_tokens, on_event = not opts.quiet and progress or nil,
    limits = opts.limit, execute_timeout = opts.execute_timeout,
    llm_call_timeout = opts.llm_call_timeout, sub_models = opts.sub_models, prices_file = opts.prices,
    context_window = opts.context_window, history = opts.history, resume = opts.resume,
    cache = opts.cache or nil, events = opts.events and event_writer(opts.events), otel = opts.otel,
    tools = opts.tools and require("rlm.tools").load_file(opts.tools),
    network = opts.network and require("rlm.netproxy").load_file(opts.network),
    venv = opts.venv,
    reasoning_effort = opts.reasoning_effort,
    dry_run = opts.dry_run or nil,
  }
  if res.preview then
    if opts.json then
      print(json.encode{preview = res.preview})
    else
      print(table.concat(require("rlm.preview").lines(res.preview), "\n"))
      print("nothing was sent")
    end
    return 0
  end
  local answered = res.submitted or res.extracted
  -- with --events -, stdout carries the events only
  local to_stdout = opts.events ~= "-"
  if to_stdout and opts.json then
    print(json.encode({fields = res.fields, reason = res.reason, detail = res.detail,
                       iterations = res.iterations, submitted = res.submitted,
                       extracted = res.extracted, usage = res.usage}))
  elseif to_stdout and answered then
    local outputs = opts.outputs or {"answer"}
    for _, name in ipairs(outputs) do
      local v = res.fields[name]
      if #outputs > 1 then io.write(name, ": ") end
      print(type(v) == "string" and v or json.encode(v == nil and json.null or v))
    end
  end
  if not res.submitted then
    io.stderr:write(("rlm ask: %s%s%s\n"):format(answered and "answer extracted: " or "no answer: ",
      res.reason, res.detail and " (" .. res.detail .. ")" or ""))
  end
  return answered and 0 or M.NO_ANSWER
end

return M
