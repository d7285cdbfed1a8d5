--- The command table: the overview, the exit codes, each command's help text and the module
-- that runs a command kept outside rlm.cli. rlm.cli runs the commands, rlm.help renders the
-- texts; both read them here, so neither needs the other.
local M = {}

M.USAGE = [[
usage: rlm COMMAND [ARGS...]

commands:
  run FILE.lua [ARGS...]   run a Lua script as `lua` does (or `rlm FILE.lua`: #!/usr/bin/env rlm)
  -e CODE                  run a chunk of Lua
  ask "TASK"               run the RLM loop on a task (--context FILE, --model M, ...)
  trace FILE.jsonl         summarise a trajectory, or render it (--html OUT.html)
  trace export FILE ...    trajectories as chat-format JSONL for fine-tuning
  replay FILE.jsonl        run a trajectory again on its recorded answers; report differences
  cache [show|prune|clear] the sub-call cache: where, how many entries, how big; remove them
  bench TASK               the paper's evaluations with your key: accuracy, cost, spread
  skill list|show|NAME     the bundled recipes (and yours, from RLM_SKILLS_PATH)
  exec CODE|-              run one block of Python in a fresh sandbox (--backend, --volume, --json)
  daytona-smoke            check a Daytona setup end to end, without any model (--repo URL)
  sandboxes                list the Daytona sandboxes rlm made (--prune, --all: delete leftovers)
  mcp [--http [HOST:]PORT] serve rlm's tools over MCP (stdio, or Streamable HTTP at /mcp)
  mcp deploy [--name N]    the MCP server, always on, in a Daytona sandbox (--status, --stop, ...)
  serve [--http HOST:PORT] the OpenAI API (/v1/chat/completions) answered by RLM runs
  version                  print the version
  help [COMMAND]           this text, or a command's help (--man: the manual page)

Run `rlm COMMAND --help` for a command's options.
Environment: RLM_LUA_PATH=DIR[:DIR] loads Lua modules from DIR before the embedded ones.]]

--- Exit codes, the same for every command (rlm.help's table).
M.EXIT = {ok = 0, failed = 1, usage = 2, no_answer = 3}

--- The commands rlm.cli runs itself, by name: their help texts.
M.BUILTIN = {
  version = "usage: rlm version\n\nPrints the rlm version.",
  help = [[
usage: rlm help [COMMAND | --man | --markdown]

Prints the list of commands, or a command's help. --man prints the manual page (roff, installed
as rlm.1) and --markdown the command-line reference (docs/cli.md); both come from the same help
texts as this command.]],
  run = [[
usage: rlm run FILE.lua [ARGS...]

Runs a Lua 5.4 script, as `lua5.4 FILE.lua` does; `rlm FILE.lua [ARGS...]` is the same, so a
script may start with `#!/usr/bin/env rlm`. `arg[0]` is the script, `arg[1..]` its arguments,
and `...` holds them too; LUA_INIT_5_4 or LUA_INIT runs first. `require` finds the rlm modules
(rlm, rlm.http, rlm.json, rlm.sys, ...) first, then modules beside the script, then along
LUA_PATH and LUA_CPATH (`;;` is lua5.4's default, less the working directory). An error prints
one message with a traceback and exits 1; a script may return an integer exit status.]],
  ["-e"] = "usage: rlm -e CODE\n\nRuns a chunk of Lua code.",
}

--- The commands kept in modules of their own (each with `help` and `main(args)`), loaded
-- only when used or their help is asked for.
M.MODULES = {
  ask = "rlm.cmd.ask", trace = "rlm.cmd.trace", serve = "rlm.cmd.serve", replay = "rlm.cmd.replay",
  bench = "rlm.cmd.bench", skill = "rlm.cmd.skill", mcp = "rlm.cmd.mcp",
  exec = "rlm.cmd.exec", ["daytona-smoke"] = "rlm.cmd.daytona_smoke",
  sandboxes = "rlm.cmd.sandboxes", cache = "rlm.cmd.cache",
}

--- The help text of command name, or nil when there is no such command.
function M.help(name)
  local module = M.MODULES[name]
  if module then return require(module).help end
  return M.BUILTIN[name]
end

return M
