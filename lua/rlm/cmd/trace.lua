--- `rlm trace FILE.jsonl --html OUT.html`: a self-contained page to follow a run step by step.
-- Child runs (rlm_query) and sub-calls nest under the turn that made them, as <details>
-- elements, and a run with children shows their lanes side by side (when each ran), so everything is readable without a script; a small inline one adds a search box
-- (also from the address: page.html#q=TEXT) and keys (j/k between turns, o to open, / to search).
-- No network: one file.
local args = require "rlm.args"
local budget = require "rlm.budget"
local json = require "rlm.json"
local sys = require "rlm.sys"
local trace = require "rlm.trace"

local M = {}

M.help = [=[
usage: rlm trace FILE.jsonl [--html OUT.html | --follow | --serve [--port P]]
       rlm trace export FILE.jsonl ...   (chat-format JSONL: `rlm trace export --help`)

Reads a trajectory written by `rlm ask --trace` or rlm.run{trace = ...} (or a log of the
reference implementation, alexzhang13/rlm). Without options prints a line per turn, sub-call
batch, compaction, budget warning and result; --html writes a self-contained page (totals, a
timeline, child runs side by side in lanes, turns that open on click, search, keys); --follow
prints the lines as a running run appends them and stops at its result; --serve serves the page
on 127.0.0.1 (printing its address), made again at each request and reloading itself until the
run ends.]=]

local function esc(s)
  s = tostring(s == nil and "" or s)
  return (s:gsub("[&<>\"]", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;"}))
end

local PY_KEYWORDS = {}
for w in ([[False None True and as assert async await break class continue def del elif else
  except finally for from global if import in is lambda nonlocal not or pass raise return try
  while with yield]]):gmatch("%S+") do PY_KEYWORDS[w] = true end

-- The end (exclusive) of the string literal that starts at i with the quote q (one quote
-- character, or three).
local function string_end(code, i, q)
  local j = i + #q
  while j <= #code do
    local c = code:sub(j, j)
    if c == "\\" then
      j = j + 2
    elseif code:sub(j, j + #q - 1) == q then
      return j + #q
    elseif #q == 1 and c == "\n" then
      return j
    else
      j = j + 1
    end
  end
  return #code + 1
end

-- Python source as HTML with its keywords, strings and comments marked (.k .s .c).
local function colour(code)
  code = tostring(code or "")
  local out, i = {}, 1
  while i <= #code do
    local c = code:sub(i, i)
    local j
    if c == "#" then
      j = code:find("\n", i, true) or #code + 1
      out[#out + 1] = '<span class="c">' .. esc(code:sub(i, j - 1)) .. "</span>"
    elseif c == "'" or c == '"' then
      local q = code:sub(i, i + 2) == c:rep(3) and c:rep(3) or c
      j = string_end(code, i, q)
      out[#out + 1] = '<span class="s">' .. esc(code:sub(i, j - 1)) .. "</span>"
    elseif c:match("[%a_]") then
      local word = code:match("^[%w_]+", i)
      j = i + #word
      out[#out + 1] = PY_KEYWORDS[word] and ('<span class="k">' .. word .. "</span>") or word
    else
      j = code:find("[#'\"%a_]", i + 1) or #code + 1
      out[#out + 1] = esc(code:sub(i, j - 1))
    end
    i = j
  end
  return table.concat(out)
end

local function str(v)
  if type(v) == "string" then return v end
  if v == nil then return "" end
  return json.encode(v, {indent = 2})
end

local CSS = [[
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:70em;padding:0 1em;color:#222}
h1{font-size:1.4em}pre{background:#f6f6f4;border:1px solid #ddd;padding:.6em;overflow:auto;
white-space:pre-wrap;word-break:break-word;max-height:40em}details{margin:.4em 0 .4em 1em;
border-left:3px solid #cfd8e3;padding-left:.6em}summary{cursor:pointer;font-weight:600}
.meta{color:#666;font-weight:400}.final{border-left-color:#5a9;}.sub{border-left-color:#e0b050}
.child{border-left-color:#a07be0}.err{color:#b00}table{border-collapse:collapse}
td{padding:.1em .8em .1em 0;vertical-align:top}.totals td:first-child{color:#666}
.first{font-weight:400;color:#333}.prose{white-space:pre-wrap}.k{color:#0b57a4;font-weight:600}
.s{color:#2a7a2a}.c{color:#888;font-style:italic}
details.hit>summary{background:#fff3b0}#find{position:sticky;top:0;background:#fff;padding:.4em 0}
#find input{width:24em;font:inherit}.bar{display:inline-block;height:.9em;background:#9bb7d4;
margin-right:1px;vertical-align:middle}.track{width:600px}.span{display:inline-block;height:.9em;
vertical-align:middle;background:#9bb7d4}.span.d1{background:#a07be0}.span.d2,.span.d3{background:#c9b3f0}]]

-- The search box and the keys; the time the page took to be ready goes in body[data-ready].
local SCRIPT = [[
(function () {
  var box = document.getElementById('q'), hits = document.getElementById('hits');
  var steps = [].slice.call(document.querySelectorAll('details.step')), at = -1;
  function search(q) {
    q = q.toLowerCase();
    var n = 0;
    steps.forEach(function (d) {
      var hit = q !== '' && d.textContent.toLowerCase().indexOf(q) >= 0;
      d.classList.toggle('hit', hit);
      if (hit) { d.open = true; n++; }
    });
    hits.textContent = q ? n + ' turns match' : '';
  }
  box.addEventListener('input', function () { search(box.value); });
  if (location.hash.indexOf('#q=') === 0) {
    box.value = decodeURIComponent(location.hash.slice(3));
    search(box.value);
  }
  document.addEventListener('keydown', function (e) {
    if (e.target === box || steps.length === 0) return;
    if (e.key === 'j' || e.key === 'k') {
      at = Math.max(0, Math.min(steps.length - 1, at + (e.key === 'j' ? 1 : -1)));
      steps[at].scrollIntoView({block: 'center'});
    } else if (e.key === 'o' && at >= 0) {
      steps[at].open = !steps[at].open;
    } else if (e.key === '/') {
      e.preventDefault();
      box.focus();
    }
  });
  document.body.setAttribute('data-ready', String(Math.round(performance.now())));
})();]]

-- The reply without its fenced code (the blocks are shown once, with their output).
local function prose(reply)
  return (tostring(reply or ""):gsub("```.-```", "[code below]"):gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The first line of the reply's prose, cut to fit one summary line.
local function first_line(reply)
  local line = prose(reply):match("^[^\n]*") or ""
  return #line > 90 and line:sub(1, 87) .. "..." or line
end

-- The header: the task, the answer, why the run ended and what it cost, in all and per model.
local FOLD_OUTPUT = 2000     -- characters of output shown open; longer ones are folded

local function render_totals(out, run)
  local st, f = run.start or {}, run.final or {}
  local u = f.usage or {}
  local rows = {
    {"task", st.task}, {"answer", str(f.fields)},
    {"reason", (f.reason or "(the run did not finish)") .. (f.detail and (": " .. f.detail) or "")},
    {"turns", ("%s%s"):format(f.iterations or #run.steps, f.extracted and " (answer extracted)" or "")},
    {"model calls", ("%s (%s for code)"):format(u.calls or "?", u.llm_calls or "?")},
    {"tokens", ("%s in, %s out"):format(u.input_tokens or "?", u.output_tokens or "?")},
    {"cost", u.cost and ("$%.4f"):format(u.cost) or "?"},
    {"prompt cache", budget.cache_words(u) ~= "" and budget.cache_words(u) or "(none)"},
    {"time", u.elapsed and ("%.1f s"):format(u.elapsed) or "?"},
  }
  local models = {}
  for name, m in pairs(u.by_model or {}) do
    models[#models + 1] = ("%s: %s calls, %s in / %s out, $%.4f"):format(name, m.calls or 0,
      m.input_tokens or 0, m.output_tokens or 0, m.cost or 0)
  end
  table.sort(models)
  if #models > 0 then rows[#rows + 1] = {"per model", table.concat(models, "\n")} end
  out[#out + 1] = '<table class="totals">'
  for _, r in ipairs(rows) do
    out[#out + 1] = ('<tr><td>%s</td><td class="prose">%s</td></tr>'):format(r[1], esc(r[2]))
  end
  -- The timeline: one bar per turn, as wide as the turn was long.
  local total = 0
  for _, s in ipairs(run.steps) do total = total + (s.duration or 0) end
  local bars = {}
  for _, s in ipairs(run.steps) do
    local subs = #(run.subcalls[s.turn] or {})
    bars[#bars + 1] = ('<span class="bar" style="width:%dpx" title="turn %d: %.2f s, %d sub-call groups"></span>')
      :format(math.max(2, math.floor((s.duration or 0) / math.max(total, 1e-9) * 600)), s.turn,
              s.duration or 0, subs)
  end
  out[#out + 1] = ('<tr><td>timeline</td><td>%s</td></tr>'):format(table.concat(bars))
  out[#out + 1] = "</table>"
end

local function index(records)
  local runs, order = {}, {}
  for _, r in ipairs(records) do
    local id = r.run or ""   -- a record of no run (a file written by hand) joins one of its own
    local run = runs[id]
    if not run then
      run = {id = r.run, depth = r.depth or 0, parent = r.parent, steps = {}, subcalls = {},
             compactions = {}, warnings = {}, children = {}}
      runs[id] = run
      order[#order + 1] = run
      -- a child's first record comes after its parent's start: the parent is known by then
      local parent = r.parent and runs[r.parent]
      if parent then parent.children[#parent.children + 1] = run end
    end
    -- when the run was last heard of: the end of its lane when it has no result
    if type(r.t) == "number" then run.last_t = math.max(run.last_t or r.t, r.t) end
    if r.type == "start" then run.start = r
    elseif r.type == "step" then run.steps[#run.steps + 1] = r
    elseif r.type == "subcall" then
      local t = r.turn or 0
      run.subcalls[t] = run.subcalls[t] or {}
      table.insert(run.subcalls[t], r)
    elseif r.type == "compaction" then run.compactions[r.turn or 0] = r
    elseif r.type == "budget_warning" then
      run.warnings[r.turn or 0] = run.warnings[r.turn or 0] or {}
      table.insert(run.warnings[r.turn or 0], r)
    elseif r.type == "final" then run.final = r
    elseif r.type == "extract" then run.extract = r end
  end
  return runs, order
end

local render_run

-- The runs of root's tree, depth first (each child after its parent, in the file's order).
local function tree(root, list)
  list = list or {}
  list[#list + 1] = root
  for _, child in ipairs(root.children) do tree(child, list) end
  return list
end

-- The most of `spans` ({from, to} each) that are under way at one moment.
local function most_at_once(spans)
  local edges = {}
  for _, s in ipairs(spans) do
    edges[#edges + 1] = {s[1], 1}
    edges[#edges + 1] = {s[2], -1}
  end
  -- at one instant an end goes before a start: runs that only touch are not at once
  table.sort(edges, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  local now, most = 0, 0
  for _, e in ipairs(edges) do
    now = now + e[2]
    most = math.max(most, now)
  end
  return most
end

local LANE_PX = 600    -- the width of the whole run in a lane, as the turns' timeline

-- Runs side by side: a lane per run of the tree (the root's first), its bar placed where the
-- run started and as long as it ran, counted from the root's start. Children that ran at once
-- (rlm_query_batched, calls from threads) show as bars one above the other. Nothing for a run
-- without children, or records without times (written by hand, the reference's logs).
local function render_lanes(out, root)
  local runs = tree(root)
  if #runs < 2 or not (root.start and root.start.t) then return end
  local t0, lanes, spans, last = root.start.t, {}, {}, root.start.t
  for _, run in ipairs(runs) do
    local from = run.start and run.start.t
    local to = run.final and run.final.t or run.last_t
    if from and to then
      lanes[#lanes + 1] = {run = run, from = from - t0, to = to - t0}
      if run ~= root then spans[#spans + 1] = {from, to} end
      last = math.max(last, to)
    end
  end
  local whole = math.max(last - t0, 1e-9)
  out[#out + 1] = ('<details class="lanes" open><summary>runs side by side <span class="meta">%d child runs, at most %d at once</span></summary><table class="lanes">')
    :format(#spans, most_at_once(spans))
  for _, lane in ipairs(lanes) do
    local run = lane.run
    local left = math.floor(lane.from / whole * LANE_PX)
    local width = math.max(2, math.floor((lane.to - lane.from) / whole * LANE_PX))
    out[#out + 1] = ('<tr class="lane" data-run="%s"><td style="padding-left:%dem">%s %s</td><td class="track"><span class="span d%d" style="margin-left:%dpx;width:%dpx" title="%s"></span></td><td class="meta">%.2f s to %.2f s</td></tr>')
      :format(esc(run.id), run.depth, run == root and "root" or "child", esc(run.id), math.min(run.depth, 3),
              left, width, esc(run.final and run.final.reason or "(no result)"), lane.from, lane.to)
  end
  out[#out + 1] = "</table></details>"
end

local function render_subcall(out, s, runs)
  if s.kind == "rlm_query" and s.child and runs[s.child] then
    out[#out + 1] = ('<details class="child"><summary>child run %s <span class="meta">depth %d, %.2fs, %s</span></summary>')
      :format(esc(s.child), (runs[s.child].depth or 0), s.duration or 0, esc(s.reason))
    render_run(out, runs[s.child], runs)
    out[#out + 1] = "</details>"
    return
  end
  if s.kind == "http" then
    out[#out + 1] = ('<div class="sub">%s %s <span class="meta">%s, %s bytes, %.2fs</span>%s</div>')
      :format(esc(s.method), esc(s.url), esc(s.status or "no answer"), s.bytes or 0, s.duration or 0,
              s.refused and ("<pre>" .. esc(s.refused) .. "</pre>") or "")
    return
  end
  out[#out + 1] = ('<details class="sub"><summary>%s &times;%d <span class="meta">%s, depth %d, %d chars in, %d out, %.2fs</span></summary>')
    :format(esc(s.kind), s.count or 1, esc(s.model or ""), (s.depth or 0) + 1, s.prompt_chars or 0,
            s.reply_chars or 0, s.duration or 0)
  for i, reply in ipairs(s.replies or {}) do
    local item = (s.items or {})[i] or {}
    local meta = item.input_tokens
      and ("%s in / %s out tokens, $%.4f"):format(item.input_tokens, item.output_tokens or "?", item.cost or 0)
      or "no call (refused, failed or cached)"
    if item.prompt then
      local more = (item.prompt_chars or 0) > #item.prompt
        and ("\n[... %d characters in all]"):format(item.prompt_chars) or ""
      out[#out + 1] = ("<div>prompt %d</div><pre>%s%s</pre>"):format(i, esc(item.prompt), esc(more))
    end
    out[#out + 1] = ('<div>answer %d <span class="meta">%s</span></div><pre>%s</pre>'):format(
      i, esc(meta), esc(reply))
  end
  out[#out + 1] = "</details>"
end

function render_run(out, run, runs)
  local st = run.start or {}
  if run.depth == 0 then
    render_totals(out, run)
    render_lanes(out, run)
  end
  out[#out + 1] = ("<table><tr><td>model</td><td>%s (sub-calls: %s)</td></tr></table>")
    :format(esc(st.model), esc(st.sub_model))
  for _, step in ipairs(run.steps) do
    local c = run.compactions[step.turn]
    if c then
      out[#out + 1] = ('<details class="sub"><summary>history compacted before turn %d <span class="meta">%s to %s tokens, %s messages summarised</span></summary><pre>%s</pre></details>')
        :format(step.turn, c.before_tokens or "?", c.after_tokens or "?", c.dropped or "?", esc(c.summary))
    end
    local subs = run.subcalls[step.turn] or {}
    local u = step.usage or {}
    local failed = false
    for _, c in ipairs(step.code or {}) do failed = failed or c.error ~= nil end
    -- One line per turn, opened on click: a 200-turn run stays one screen.
    out[#out + 1] = ('<details class="step"><summary>Turn %d%s <span class="meta">%.2fs, %s in / %s out tokens, %d sub-call groups</span> <span class="first">%s</span></summary>')
      :format(step.turn, failed and ' <span class="err">error</span>' or "", step.duration or 0,
              u.input_tokens or "?", u.output_tokens or "?", #subs, esc(first_line(step.reply)))
    out[#out + 1] = ('<div>model reply</div><pre class="prose">%s</pre>'):format(esc(prose(step.reply)))
    for i, c in ipairs(step.code or {}) do
      out[#out + 1] = ("<div>code block %d%s</div><pre>%s</pre>")
        :format(i, c.error and (' <span class="err">' .. esc(c.error) .. "</span>") or "", colour(c.code))
      local text = tostring(c.output or "")
      local pre = ("<pre%s>%s</pre>"):format(c.error and ' class="err"' or "", esc(text))
      -- A long output is folded under its first line and its size.
      if #text > FOLD_OUTPUT then
        out[#out + 1] = ('<details class="out"><summary>output <span class="meta">%d characters: %s</span></summary>%s</details>')
          :format(#text, esc((text:match("^[^\n]*") or ""):sub(1, 80)), pre)
      else
        out[#out + 1] = "<div>output</div>" .. pre
      end
    end
    for _, s in ipairs(subs) do render_subcall(out, s, runs) end
    for _, w in ipairs(run.warnings[step.turn] or {}) do
      out[#out + 1] = ('<div class="err">budget: %s has %.4g of %.4g left</div>'):format(
        esc(w.limit), w.remaining or 0, w.of or 0)
    end
    if step.variables or step.feedback then
      out[#out + 1] = ("<div>sent back to the model with the output</div><pre>REPL variables: %s\n%s</pre>")
        :format(esc(step.variables or ""), esc(step.feedback or ""))
    end
    out[#out + 1] = "</details>"
  end
  if run.extract then
    out[#out + 1] = ("<details><summary>extraction</summary><pre>%s</pre></details>"):format(esc(run.extract.reply))
  end
  if run.final then
    local f = run.final
    out[#out + 1] = ('<details class="final" open><summary>Result <span class="meta">%s%s</span></summary><pre>%s</pre></details>')
      :format(esc(f.reason), f.detail and (": " .. esc(f.detail)) or "", esc(str(f.fields)))
  end
end

--- The HTML page for a list of trajectory records.
function M.html(records)
  local runs, order = index(records)
  local out = {'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>rlm trajectory</title>',
               "<style>", CSS, "</style></head><body><h1>rlm trajectory</h1>",
               '<div id="find"><input id="q" type="search" placeholder="search every turn (/)"> ' ..
               '<span id="hits" class="meta"></span> <span class="meta">j/k: next/previous turn, ' ..
               'o: open it</span></div>'}
  for _, run in ipairs(order) do
    if not run.parent or not runs[run.parent] then
      out[#out + 1] = ('<section class="run" id="%s">'):format(esc(run.id))
      render_run(out, run, runs)
      out[#out + 1] = "</section>"
    end
  end
  out[#out + 1] = "<script>" .. SCRIPT .. "</script></body></html>\n"
  return table.concat(out)
end

-- The reference implementation's logs (alexzhang13/rlm, rlm/logger/rlm_logger.py: a
-- "metadata" line, then one "iteration" line per turn) as rlm's records, so the page opens them.
function M.from_reference(records)
  local meta = records[1]
  local out = {{type = "start", run = "reference", depth = 0, model = meta.root_model,
                task = "(a run of the reference implementation)"}}
  local final
  for _, it in ipairs(records) do
    if it.type == "iteration" then
      local code = {}
      local turn = it.iteration
      for i, block in ipairs(it.code_blocks or {}) do
        local r = block.result or {}
        code[i] = {code = block.code, duration = r.execution_time,
                   output = (r.stdout or "") .. ((r.stderr or "") ~= "" and "\n[stderr]\n" .. r.stderr or "")}
        local calls = r.rlm_calls or {}
        if #calls > 0 then
          local replies, items = {}, {}
          for k, c in ipairs(calls) do
            replies[k] = str(c.response)
            items[k] = {prompt = str(c.prompt)}
          end
          out[#out + 1] = {type = "subcall", run = "reference", depth = 0, turn = turn,
                           kind = "llm_query", count = #calls, replies = replies, items = items}
        end
      end
      out[#out + 1] = {type = "step", run = "reference", depth = 0, turn = turn,
                       reply = str(it.response), code = code, duration = it.iteration_time}
      if it.final_answer ~= nil then final = it.final_answer end
    end
  end
  out[#out + 1] = {type = "final", run = "reference", depth = 0,
                   reason = final ~= nil and "submitted" or "(no final answer logged)",
                   fields = final ~= nil and {answer = final} or {}}
  return out
end

-- One line per record, for watching a run in a terminal.
local function show(r)
  local pad = string.rep("  ", r.depth or 0)
  if r.type == "step" then
    local u = r.usage or {}
    local cache = budget.cache_words(u)
    return ("%sturn %d  %.2fs  %s in / %s out tokens  %d code blocks%s"):format(pad, r.turn,
      r.duration or 0, u.input_tokens or "?", u.output_tokens or "?", #(r.code or {}),
      cache ~= "" and "  " .. cache or "")
  elseif r.type == "subcall" and r.kind == "http" then
    return ("%s  http %s %s -> %s  %.2fs"):format(pad, tostring(r.method), tostring(r.url),
      tostring(r.status or r.refused), r.duration or 0)
  elseif r.type == "subcall" then
    return ("%s  %s x%d  %.2fs"):format(pad, tostring(r.kind), r.count or 1, r.duration or 0)
  elseif r.type == "compaction" then
    return ("%s  history compacted: %s -> %s tokens"):format(pad, r.before_tokens, r.after_tokens)
  elseif r.type == "budget_warning" then
    return ("%s  budget: %s has %.4g of %.4g left"):format(pad, r.limit, r.remaining or 0, r.of or 0)
  elseif r.type == "final" then
    local cache = budget.cache_words(r.usage or {})
    return ("%sresult: %s%s%s"):format(pad, tostring(r.reason),
      r.detail and (" (" .. r.detail .. ")") or "", cache ~= "" and "  " .. cache or "")
  end
end

-- The text view in the order of the run, not of the file: a turn's sub-calls, compaction and
-- child runs are written before the turn's own record (which waits for its code to end), so
-- they wait here for it and print under it. A child's lines are kept until its result and go
-- under its parent's turn as one block, headed by when it ran: children that ran at once
-- (rlm_query_batched, threads) write their records interleaved, and are not mixed. Returns
-- add(record), which prints what can be printed, and finish(), which prints what still waits
-- (a run cut short).
local function is_child(r)
  return r.parent ~= nil and (r.depth or 0) > 0
end

local function text_view()
  -- by run: lines waiting for its next step, a child's block so far, its last step's turn, its
  -- start record (else its first), whether it ended; and the runs in the order first seen
  local pending, block, last_turn, starts, ended, order = {}, {}, {}, {}, {}, {}
  local root_t
  local function take(map, id)
    local lines = map[id] or {}
    map[id] = nil
    return lines
  end
  local function add_to(map, id, lines)
    local to = map[id] or {}
    map[id] = to
    table.move(lines, 1, #lines, #to + 1, to)
  end
  -- lines of run r that are done: a root's are printed, a child's join its block
  local function place(lines, r)
    if is_child(r) then return add_to(block, r.run, lines) end
    for _, line in ipairs(lines) do print(line) end
    io.stdout:flush()
  end
  -- a child's block, headed by when it ran, waits for its parent's turn
  local function close_block(id, r)
    local lines = take(block, id)
    local st = starts[id]
    local from, to = st.type == "start" and st.t, r and r.t
    local when = from and to and root_t and
      ("  from %.2f s to %.2f s"):format(from - root_t, to - root_t) or ""
    table.insert(lines, 1, ("%schild %s%s"):format(string.rep("  ", st.depth or 1), tostring(id),
                                                   when))
    local parent = st.parent
    if parent and starts[parent] then return add_to(pending, parent, lines) end
    for _, line in ipairs(lines) do print(line) end
  end
  local function add(r)
    local id = r.run or ""
    if not starts[id] then order[#order + 1] = id end
    if r.type == "start" and (not starts[id] or starts[id].type ~= "start") then
      starts[id] = r
      if not is_child(r) then root_t = root_t or r.t end
    end
    starts[id] = starts[id] or r
    local text = show(r)
    if not text then return end
    if r.type == "step" then
      last_turn[id] = r.turn
      local lines = take(pending, id)
      table.insert(lines, 1, text)
      place(lines, r)
    elseif r.type == "final" then
      last_turn[id] = nil             -- another run may follow with the same id
      local lines = take(pending, id)
      lines[#lines + 1] = text
      place(lines, r)
      if is_child(r) then close_block(id, r) end
      ended[id] = true
    elseif last_turn[id] and r.turn and r.turn <= last_turn[id] then
      place({text}, r)                -- after its turn's record (a budget warning)
    else
      add_to(pending, id, {text})
    end
  end
  local function finish()
    for i = #order, 1, -1 do          -- children before their parents
      local id = order[i]
      local st = starts[id]
      local lines = take(pending, id)
      if not is_child(st) then
        place(lines, st)
      elseif not ended[id] then
        add_to(block, id, lines)
        close_block(id, nil)
      end
    end
  end
  return add, finish
end

-- Prints each record as the run appends it, until the root run's final record.
local function follow(path)
  local pos, partial = 0, ""
  local add = text_view()
  while true do
    local f = io.open(path, "rb")
    if f then
      f:seek("set", pos)
      local data = f:read("a") or ""
      f:close()
      pos = pos + #data
      partial = partial .. data
      for line in partial:gmatch("([^\n]*)\n") do
        local r = json.decode(line)
        if type(r) == "table" then
          add(r)
          if r.type == "final" and (r.depth or 0) == 0 then return 0 end
        end
      end
      partial = partial:match("([^\n]*)$")
    end
    sys.sleep(0.2)
  end
end

-- Serves the page on loopback, made again at each request; it reloads itself every 2 s until
-- the run's final record is in.
local function serve(path, port)
  local httpd = require "rlm.core.httpd"
  local async = require "rlm.async"
  local listener <close> = assert(httpd.listen{host = "127.0.0.1", port = port or 0,
    admit = {hosts = {"127.0.0.1", "localhost"}, origins = {}}})
  print(("READY http://127.0.0.1:%d/"):format(listener:port()))
  io.stdout:flush()
  while true do
    async.await(listener:id())
    while true do
      local req = listener:next()
      if not req then break end
      local records = trace.read(path) or {}
      local done = false
      for _, r in ipairs(records) do done = done or (r.type == "final" and (r.depth or 0) == 0) end
      local page = M.html(records)
      if not done then
        page = page:gsub("<head>", '<head><meta http-equiv="refresh" content="2">', 1)
      end
      req:respond(200, {["Content-Type"] = "text/html; charset=utf-8"}, page)
    end
  end
end

function M.main(argv)
  if argv[1] == "export" then return require("rlm.cmd.trace_export").main({table.unpack(argv, 2)}) end
  local opts, rest = args.parse(argv, {html = "string", follow = "flag", serve = "flag",
                                       port = "number"})
  if #rest ~= 1 then
    return args.usage("trace", "give one FILE.jsonl", M.help)
  end
  if opts.follow then return follow(rest[1]) end
  if opts.serve then return serve(rest[1], opts.port) end
  local records, err = trace.read(rest[1])
  if not records then error("cannot read the trajectory: " .. err, 0) end
  if records[1] and records[1].type == "metadata" then records = M.from_reference(records) end
  local known = 0
  for _, r in ipairs(records) do
    if type(r) == "table" and (r.type == "start" or show(r)) then known = known + 1 end
  end
  if known == 0 then
    error(("%s is not a trajectory: %s"):format(rest[1], #records == 0 and "it holds no records"
      or "none of its lines is a record of a run (write one with rlm ask --trace FILE.jsonl)"), 0)
  end
  if opts.html then
    assert(sys.write_file(opts.html, M.html(records)))
    io.stderr:write(("wrote %s (%d records)\n"):format(opts.html, #records))
  else
    local add, finish = text_view()
    for _, r in ipairs(records) do add(r) end
    finish()
  end
  return 0
end

return M
