--- `rlm trace export`: trajectories as chat-format JSONL for fine-tuning. Each line is one
-- conversation, {"messages": [{role, content}, ...]}, exactly as the model was sent it: the run's
-- system prompt and first message (its `prompt` record), then each turn's reply and the REPL
-- output that went back (rendered with the run's own turn template). A compaction starts a new
-- line from the summarised history the model saw after it. Sub-calls (--subcalls) are lines of
-- their own: the prompt and the answer, and each child run's conversation.
local args = require "rlm.args"
local json = require "rlm.json"
local prompts = require "rlm.prompts"
local secrets = require "rlm.secrets"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local M = {}

M.help = [=[
usage: rlm trace export FILE.jsonl|BENCH_DIR ... [--subcalls] [--submitted] [--min-score X]
                        [--out OUT.jsonl]

Writes trajectories (rlm ask --trace, rlm.run{trace = ...}, or a `rlm bench` output folder,
whose trajectories/ it reads) as chat-format JSONL for fine-tuning, one conversation per line:
{"messages": [{"role": "system", ...}, {"role": "user", ...}, {"role": "assistant", ...}, ...]},
the messages the root model was sent and its replies. A compaction starts a new line from the
summarised history. --subcalls adds each sub-call (its prompt and answer) and each child run's
conversation. --submitted keeps only runs that ended by SUBMIT; --min-score X keeps only bench
runs scored at least X (read from the folder's results.jsonl). Keys are redacted: the values of
the key variables set now, and anything shaped like a provider, GitHub, AWS or Slack key. Lines
go to --out (default standard output); a count goes to stderr.]=]

-- Key shapes redacted whatever the environment holds now: a trajectory may be exported on
-- another machine than the one that ran it.
local KEY_SHAPES = {
  "sk%-ant%-[%w_%-]+", "sk%-[%w_%-][%w_%-][%w_%-][%w_%-][%w_%-][%w_%-][%w_%-][%w_%-][%w_%-]+",
  "dtn_%w+", "gh[pousr]_%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w%w+", "AKIA[%u%d]+",
  "xox[abprs]%-[%w%-]+",
}

local function scrub(text)
  text = trace.redact(text, secrets.values())
  for _, shape in ipairs(KEY_SHAPES) do text = text:gsub(shape, "[redacted]") end
  return text
end

-- The conversations of one run: a list of message lists, split at each compaction.
local function conversations(run)
  local p = run.prompt
  local out, messages = {}, {{role = "system", content = p.system},
                              {role = "user", content = p.first_message}}
  for turn = 1, math.huge do
    local s = run.steps[turn]
    if not s then break end
    local c = run.compactions[turn]
    if c and #messages >= 4 then
      out[#out + 1] = messages
      messages = {messages[1], {role = "user", content = p.first_message .. "\n\n"
                    .. prompts.render(p.summary_template, {summary = c.summary, turns = turn - 1})},
                  messages[#messages - 1], messages[#messages]}
    end
    messages[#messages + 1] = {role = "assistant", content = s.reply}
    if run.steps[turn + 1] then
      messages[#messages + 1] = {role = "user", content = prompts.render(p.turn_template, {
        output = s.output or "", variables = s.variables or "", feedback = s.feedback or "",
        turn = turn + 1, max_iterations = p.max_iterations})}
    end
  end
  if #messages > 2 then out[#out + 1] = messages end
  return out
end

-- One sub-call's prompt and answer, when the trajectory holds the whole prompt.
local function subcall_pairs(s, emit)
  if s.kind == "rlm_query" then return 0 end           -- the child's own conversation is exported
  local partial = 0
  for i, reply in ipairs(s.replies or {}) do
    local item = (s.items or {})[i] or {}
    if item.prompt and #item.prompt >= (item.prompt_chars or 0) and item.input_tokens
       and type(reply) == "string" then
      emit{{role = "user", content = item.prompt}, {role = "assistant", content = reply}}
    elseif item.prompt then
      partial = partial + 1
    end
  end
  return partial
end

-- The bench scores of a folder, by trajectory name (rlm runs only).
local function bench_scores(dir)
  local scores, data = {}, sys.read_file(dir .. "/results.jsonl")
  for line in (data or ""):gmatch("[^\n]+") do
    local r = json.decode(line)
    if type(r) == "table" and r.method == "rlm" and r.key then scores[r.key] = r.score end
  end
  return scores
end

-- The trajectory files named by the arguments: files, and bench folders' trajectories/.
local function inputs(rest)
  local out = {}
  for _, path in ipairs(rest) do
    local st = sys.stat(path)
    if not st then error("cannot read " .. path .. ": no such file or folder", 0) end
    if st.type == "dir" then
      local dir, scores = path .. "/trajectories", bench_scores(path)
      local names = sys.list_dir(dir)
      if not names then error(path .. " is a folder but not a rlm bench output (no trajectories/)", 0) end
      table.sort(names)
      for _, name in ipairs(names) do
        local key = name:match("^(.*)%.jsonl$")
        if key then out[#out + 1] = {path = dir .. "/" .. name, score = scores[key], bench = true} end
      end
    else
      out[#out + 1] = {path = path}
    end
  end
  return out
end

function M.main(argv)
  for _, a in ipairs(argv) do
    if a == "--help" or a == "-h" then print(M.help); return 0 end
  end
  local opts, rest = args.parse(argv, {subcalls = "flag", submitted = "flag",
                                       min_score = "number", out = "string"})
  if #rest == 0 then return args.usage("trace export", "give a FILE.jsonl or a bench folder", M.help) end
  local lines, counts = {}, {runs = 0, skipped = 0, partial = 0}
  local function emit(messages)
    for _, m in ipairs(messages) do m.content = scrub(m.content) end
    lines[#lines + 1] = json.encode{messages = messages}
  end
  for _, input in ipairs(inputs(rest)) do
    local records, err = trace.read(input.path)
    if not records then error("cannot read the trajectory: " .. err, 0) end
    if records[1] and records[1].type == "metadata" then
      error(input.path .. ": a reference-implementation log; export reads rlm trajectories", 0)
    end
    local runs, order = trace.runs(records)
    local root = order[1]
    if not root then error(input.path .. " holds no run", 0) end
    local keep = not opts.submitted or (root.final and root.final.reason == "submitted")
    if opts.min_score then
      if not input.bench then error("--min-score needs a bench output folder (its results.jsonl)", 0) end
      keep = keep and input.score ~= nil and input.score >= opts.min_score
    end
    if keep then
      for _, run in ipairs(order) do
        if run.depth == 0 or opts.subcalls then
          if run.prompt then
            counts.runs = counts.runs + 1
            for _, messages in ipairs(conversations(run)) do emit(messages) end
          else
            counts.skipped = counts.skipped + 1     -- written before rlm recorded its prompts
          end
          if opts.subcalls then
            for _, s in ipairs(run.subcalls) do counts.partial = counts.partial + subcall_pairs(s, emit) end
          end
        end
      end
    end
  end
  local text = #lines > 0 and table.concat(lines, "\n") .. "\n" or ""
  if opts.out then
    local ok, werr = sys.write_file(opts.out, text)
    if not ok then error("cannot write " .. opts.out .. ": " .. tostring(werr), 0) end
  else
    io.stdout:write(text)
  end
  io.stderr:write(("exported %d conversations from %d runs"):format(#lines, counts.runs)
    .. (counts.skipped > 0 and (", %d runs without a prompt record skipped"):format(counts.skipped) or "")
    .. (counts.partial > 0 and (", %d sub-calls whose prompt was cut skipped"):format(counts.partial) or "")
    .. "\n")
  return 0
end

return M
