--- `rlm replay run.jsonl`: a recorded run again, against its recorded answers, with no model call.
local args = require "rlm.args"

local M = {}

M.help = [[
usage: rlm replay run.jsonl [--context FILE|-] [--backend local|daytona]

Runs a recorded trajectory again in a fresh sandbox: each turn's code runs with the model's
recorded reply and the recorded answers of its sub-calls (llm_query, rlm_query, budget), so no
model is called and no key is needed. Each block's output is compared with the recording.
Prints "no differences" and exits 0, or each difference (turn, block, recorded and replayed
output) and exits 1. A regression test for prompts, code and the sandbox's environment.
--context gives the context again when it was too big to be recorded.]]

local function lines(text)
  local out = {}
  for line in (tostring(text or "") .. "\n"):gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

-- The first line where two outputs differ: its number, and the two lines.
local function first_difference(a, b)
  local la, lb = lines(a), lines(b)
  for n = 1, math.max(#la, #lb) do
    if la[n] ~= lb[n] then return n, la[n] or "(nothing)", lb[n] or "(nothing)" end
  end
  return 1, "", ""
end

function M.main(argv)
  local opts, rest = args.parse(argv, {context = "string", backend = "string"})
  if #rest ~= 1 then return args.usage("replay", "give one trajectory file", M.help) end
  local context
  if opts.context == "-" then
    context = io.stdin:read("a")
  elseif opts.context then
    context = assert(require("rlm.sys").read_file(opts.context))
  end
  local res = require("rlm.run").replay(rest[1], {context = context, backend = opts.backend})
  if res.reason == "sandbox_error" or res.reason == "error" then
    io.stderr:write(("rlm replay: the replay could not run: %s\n"):format(tostring(res.detail)))
    return 1
  end
  local diffs = res.differences
  if #diffs == 0 then
    print(("no differences (%d turns replayed, no model calls)"):format(res.iterations))
    return 0
  end
  for _, d in ipairs(diffs) do
    local line, was, now = first_difference(d.recorded, d.replayed)
    print(("turn %d, block %d differs at line %d:\n  recorded: %s\n  replayed: %s"):format(
      d.turn, d.block, line, was:sub(1, 200), now:sub(1, 200)))
  end
  print(("%d differences in %d turns"):format(#diffs, res.iterations))
  return 1
end

return M
