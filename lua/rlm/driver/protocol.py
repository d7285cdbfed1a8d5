"""The rlm sandbox driver: runs the user's Python for the rlm host and keeps its state.

Threat model. The sandbox boundary is bubblewrap (the local backend) or the remote service
(Daytona): that is what holds against code that means harm. The code runs in the driver's own
process, so the driver cannot hold against it and does not try: code that attacks the driver
(a __repr__ that never returns while variables are listed, a metaclass whose __hash__ raises,
forged protocol lines) can only end or stall its own session, which rlm notices by its own
checks and timeouts, restarts and reports (state_lost). What the driver does guard against is
the code's plausible mistakes, so that the session survives them: a workspace file named like
a standard module (token.py, re.py), a closed or replaced sys.stdout, fd 1 closed or moved,
os.closerange, a forked child that returns into the driver, a signal handler or a late
interrupt_main() that fires between blocks, a tracer left set, a __repr__ or __str__ that
raises, a Final that is not JSON, output from threads and background processes that outlive
their block, running out of memory under limits.memory.

This file is joined by the Makefile from the parts in lua/rlm/driver/ (protocol, transports,
capture, listing, cells, session, calls, startup), in that order; it ships as one file.

Started as `python3 -u [-S] -c "<this source>" [--stdio] [--capture-dir DIR] [SETTINGS]` (with -S,
site runs when an import needs it: SiteOnDemand), as `--serve PATH [SETTINGS]` (unix socket
server), or as
`--client PATH (--request-file F | --request-b64 B64 | --poll) [--request-id ID] [--wait S]`
(the one-shot client of --serve), or as
`--wait-ready PREFIX [--timeout S]` (waits inside the sandbox for a --serve driver started with
stdout in PREFIX.out, stderr in PREFIX.err and its exit status written to PREFIX.exit: prints
the ready line and exits 0, or exits 3 with the status and stderr's tail, or 4 after S seconds).
SETTINGS are what every execute would otherwise carry, read once: --max-output-chars N (default
10000), --max-submit-bytes B (default none), --payload-min N (default none, stdio only).
Standard library only, Python 3.9+. This docstring is the protocol reference for the host.

Wire: UTF-8 JSON, one object per line. Events are pure ASCII (non-ASCII is \\u-escaped).

Requests, host -> driver
  {"op":"execute","id":N,"code":"...","variables":{...}|null,"output_names":[...]|null,
   "max_output_chars":10000|null,"timeout":S|null,"max_submit_bytes":B|null} -> call* then done
      output_names null means ["answer"]; timeout null: none; max_output_chars absent or null
      means the setting; max_submit_bytes absent means the setting, null no cap on the JSON
      size of what SUBMIT hands back
      Over stdio an execute may also carry "payloads":[{"name","bytes"}], raw bytes that follow
      its line in that order, each a variable (a str decoded with surrogateescape), and
      "payload_min":N (absent: the setting, null: none): a SUBMIT field that is a str of N
      characters or more goes back raw too
  {"op":"reply","id":N,"call":K,"results":[...]} | {"op":"reply","id":N,"call":K,"error":"message"}
                                    answers the call event with the same id (the execute's id)
                                    and call number K (without "call": the oldest open call)
  {"op":"replies","replies":[reply, ...]}   several replies at once, each as above
  {"op":"reset"}    -> {"ev":"reset"}    user globals, imports and buffers cleared
  {"op":"ping"}     -> {"ev":"pong"}     also answered while code waits for a reply
  {"op":"proxy"}    -> {"ev":"proxy","port":P}   starts the code's HTTP proxy on 127.0.0.1:P
                    (once; HTTP_PROXY and the like point at it): each request it receives
                    becomes an "http" call, and the call's answer its response
  {"op":"shutdown"} -> {"ev":"bye"}, then exit 0.  EOF on stdin also exits 0.

Events, driver -> host
  {"ev":"ready","pid":P,"python":"3.11.2"}     first line on stdout, with either transport
  {"ev":"done","id":N,"stdout":"...","stderr":"...","stdout_chars":C,"stderr_chars":C,
   "error":null|"ZeroDivisionError: division by zero","traceback":null|"...",
   "variables":[{"name","type","size","preview"}],"variables_more":K,"timed_out":false,
   "submitted":null|{...}, "payloads":[{"name","bytes"}]}   payloads (only when the execute set
      payload_min): more submitted fields, as UTF-8 bytes (surrogateescape) after the line.
      A field at its default may be left out: "" for stdout/stderr, 0 for the counts, null for
      error/traceback/submitted, false for timed_out (a trivial block's event is its id and
      variables)
  {"ev":"call","id":N,"call":K,"kind":C,"args":{...}}   the thread that made the call is
      blocked until the matching reply; K numbers the calls of a driver. Calls from several
      threads are open at once (with either transport), answered in any order; the done
      event comes after the last of them is answered:
      llm_query          {"prompt","model"}   -> results: [text]
      llm_query_batched  {"prompts","model"}  -> results: one text per prompt, in order
      llm_query_batched_start  {"prompts","model"}  -> results: [batch number]; the batch runs on
      llm_query_batched_next   {"batch"}  -> results: [[index, text], ...], the answers that
                         arrived since the last next (at least one; waits for it), until all have
      rlm_query          {"task","context"}   -> results: [text]
      rlm_query_batched  {"tasks","contexts"} -> results: one text per task, in order
      tool               {"name","args"}      -> results: [the tool's JSON answer]
      http               {"method","url","headers":[[name,value],...],"body":base64|null}
                         -> results: [{"status","reason"?,"headers":[[name,value],...],
                         "body":base64}]; an error is answered to the client as a 502
  {"ev":"error","message":"..."}               a request that cannot be served; the driver goes on

Execute semantics
- One persistent namespace (a module registered as __main__). `variables` are set as globals
  first. A last statement that is a bare expression with a non-None value prints its repr.
- fd 1 and fd 2 point at private temp files at the start of every block (code that moved or
  closed them finds them put back, and a sys.stdout or sys.stderr it closed or detached is made
  anew; what reached the files since the last block is the block's output: a thread or a
  background process still writing there loses nothing, its later lines go to later blocks.
  A file is emptied after a block only when no thread of the code's runs and nothing came
  since it was read; otherwise what was taken is freed as holes, and the file starts again
  from empty past 256 MB, or half of limits.file_size); the
  protocol uses close-on-exec dups of the original stdin/stdout, numbered 100 and up (as the
  captures' own: away from the numbers the code's files get), and fd 0 reads /dev/null: subprocesses cannot reach the
  protocol. The code itself runs in the driver's process and could (the host trusts no event
  beyond its own checks); a process it forks gets no protocol (its calls fail) and ends with its
  block. Ctrl-C (SIGINT, _thread.interrupt_main) raises KeyboardInterrupt in a running block
  and is dropped between blocks and while a call waits for its reply. A signal handler of the
  code's that raises between blocks is dropped too, and with it a request line read just
  before it ran (the host's timeout then restarts the driver). A trace or profile
  function the code sets (sys.settrace) lasts until its block ends. Output longer than max_output_chars keeps
  head and tail around a line `... [N characters cut] ...`; stdout_chars/stderr_chars count
  every character (for invalid UTF-8 the count is of lead bytes). Text is decoded as UTF-8
  with U+FFFD for bad bytes.
- SUBMIT(*values, **fields) ends the block (a BaseException, so `except Exception` does not
  stop it); positional values take the output_names in order. Values must be JSON: bytes are
  sent as str decoded with surrogateescape (\\udc80-\\udcff stand for raw bytes), tuples as
  lists, ints exactly. Otherwise user code gets TypeError "SUBMIT field 'x' is not
  JSON-serialisable (set)"; fields whose JSON is longer than max_submit_bytes in all make it
  raise ValueError naming the limit. When the only output is `answer`, a global `Final` bound
  to a new object by a block that ends without error counts as SUBMIT(answer=Final) (as in
  the paper's code); with other outputs it is an ordinary variable.
- FINAL(value) is SUBMIT(value) for a task with one output (with several it raises TypeError
  saying to call SUBMIT with every field). FINAL_VAR(v) is FINAL of a variable: a str written
  in the call that is a Python name ("x", or ' "x" ') names the variable (NameError when there
  is none), any other value (a str a variable holds among them) is taken as it is. Each ends
  the block at the call as SUBMIT does: what follows, a second FINAL or SUBMIT included, never
  runs.
- error is "Type: message" ("SyntaxError: msg (line L)" for syntax errors); traceback shows
  only frames outside the driver, with source lines from cells named <rlm-cell-K>.
- timeout: SIGALRM raises TimeoutError("execution exceeded S seconds") in the user's code and
  sets timed_out; globals are kept. Time spent waiting for replies does not count. It fires no
  sooner than S seconds and at most 50 ms (and a tenth of S) later: one timer can then serve
  many quick blocks in a row. Code that stops the timer around the signal module (through
  _signal or ctypes) is stopped by the host instead, which restarts the driver.
- Helpers (builtins of the namespace, so they survive reset, never show up in variables, and a
  user global of the same name only shadows them): SUBMIT, FINAL, FINAL_VAR,
  llm_query(prompt, model=None, images=None),
  llm_query_batched(prompts, model=None), llm_query_batched_iter(prompts, model=None) (yields
  (index, answer) as answers arrive), rlm_query(task, context=None), budget(), add_buffer(name,
  value), get_buffer(name), clear_buffer(name=None), SHOW_VARS(),
  rlm_query_batched(tasks, contexts=None). A reply with error raises RuntimeError(message).
  Calls from threads go side by side; they fail outside an execute.
- variables lists user globals except modules and __dunder__ names: type name, len or null,
  and a repr preview of at most 100 characters (computed in bounded time for big containers);
  at most 50 of them, so the event stays small and quick whatever the code defines;
  variables_more counts the namespace's names after the last one listed (modules among them:
  counting them out would mean walking every global on every execute). SHOW_VARS() lists all.
  A value whose __len__ raises while it is listed has size null; one whose __repr__ raises,
  the preview "<Type: repr failed with E>". A workspace file named like a standard module (re.py) never
  replaces it in the driver's own work (tracebacks).
- --capture-dir DIR: where the stdout/stderr capture files live (default $TMPDIR or /tmp). The
  local sandbox gives it a tmpfs of its own, so its size caps what one execute may print.

--serve PATH: listens on a unix socket (created before ready is printed). Each connection
carries one line, "[@ID ][~S ](<request> | poll)", and is then given the next events, one per
line (all those no connection had taken yet), or {"ev":"idle"} after S seconds without one
(never, without ~S) or at once when another connection is waiting already; then it is
closed. The events are one stream, as on stdio, handed to whichever connection waits: a reply
travels on a connection of its own while another waits for the next call, so the calls of
several threads are open at once. poll sends nothing and only waits. The driver carries each
ID's request once: a repeat of an ID (the host's HTTP call broke) gets the events that ID was
given, or waits for them in its place. --client prints what it was given and exits 0 (a
request file is removed then; a repeat whose file is gone goes as poll under its ID), or exits
2 with a message on stderr; --poll sends poll, --wait S sends ~S.
"""
import builtins
import fcntl
import io
import posix   # what the driver needs of os, without importing os at every start
import sys
import time
import _signal
import _thread
from time import monotonic   # the driver's own: code may replace time.monotonic (freezegun)
from _frozen_importlib_external import PathFinder   # importlib.machinery's, without its imports

DEFAULT_OUTPUT_CHARS = 10000
DEFAULT_OUTPUT_NAMES = ["answer"]   # shared: never changed in place
ModuleType = type(sys)
MISSING = object()
JSON_SPACE = " \t\n\r"


class Submitted(BaseException):
    """Raised by SUBMIT with the fields' JSON texts (or bytes); a BaseException so that
    `except Exception` in user code lets it pass."""

    def __init__(self, fields):
        self.fields = fields


class NotSerialisable(Exception):
    pass


def json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise NotSerialisable(type(value).__name__)


# JSON straight from the C accelerator the json package wraps: importing the package pulls in
# re and enum, a large part of a sandbox's start. The package itself where the accelerator
# is missing or takes other arguments (another Python).
def c_codec():
    from _json import encode_basestring_ascii, make_encoder, make_scanner

    class Options:   # what json.JSONDecoder hands its scanner
        strict, object_hook, object_pairs_hook = True, None, None
        parse_float, parse_int = float, int
        parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                          "-Infinity": float("-inf")}.__getitem__
        memo = {}

    scan = make_scanner(Options())

    def loads(text):
        if isinstance(text, bytes):
            text = text.decode()
        try:
            value, end = scan(text, 0)
        except (StopIteration, SystemError):
            # Bad JSON or leading space: the package reads both (and words the errors) and is
            # imported only now.
            import json
            return json.loads(text)
        if end != len(text) and text[end:].strip(JSON_SPACE):
            raise ValueError(f"Extra data at character {end}")
        return value

    def encoder(default, markers, allow_nan):
        return make_encoder(markers, default, encode_basestring_ascii, None, ":", ",", False,
                            False, allow_nan)

    events = encoder(None, None, True)
    # A fresh cycle guard each time: one that failed half-way may keep entries.
    encode_value = lambda value: "".join(encoder(json_default, {}, False)(value, 0))
    if events({"a": [1, 2.5, "\u00e9"]}, 0) != ['{"a":[1,2.5,"\\u00e9"]}'] or loads('[1]\n') != [1]:
        raise ImportError("the json accelerator works differently here")
    return loads, lambda value: "".join(events(value, 0)), encode_value, encode_basestring_ascii


def package_codec():
    import json
    from json.encoder import encode_basestring_ascii
    return (json.loads, json.JSONEncoder(separators=(",", ":")).encode,
            json.JSONEncoder(separators=(",", ":"), default=json_default, allow_nan=False).encode,
            encode_basestring_ascii)


try:
    loads, encode, encode_value, escape = c_codec()
except (ImportError, TypeError):
    loads, encode, encode_value, escape = package_codec()


# An int of more digits than a double can hold (the host reads JSON numbers as doubles or
# 64-bit integers; 10**400 would be infinite there). Found by walking the value, which costs
# per item, not per byte (a regex over the encoded text costs per byte).
DOUBLE_MAX = 10 ** 308


def has_huge_int(value, depth=0):
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) >= DOUBLE_MAX
    if depth > 100:
        return False
    if isinstance(value, dict):
        return any(has_huge_int(v, depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(has_huge_int(v, depth + 1) for v in value)
    return False


def least_size(value, enough, depth=0):
    """A lower bound of the size of value's JSON text (or raw payload), counted no further
    than `enough`: a str by its length (its text is never shorter), a list or dict by what it
    holds. Nothing is copied or encoded, and none of the value's own methods runs."""
    if isinstance(value, str):
        return str.__len__(value)
    if isinstance(value, (int, float)) or value is None:
        return 1
    if depth > 100 or not isinstance(value, (list, tuple, dict)):
        return 0
    total = 1   # the brackets, and a comma or a key's quotes and colon per item after the first
    if isinstance(value, dict):
        items = dict.items(value)
    else:
        items = ((None, v) for v in (list.__iter__ if isinstance(value, list) else tuple.__iter__)(value))
    for key, item in items:
        total += 1 + (str.__len__(key) if isinstance(key, str) else 0) + \
            least_size(item, enough - total, depth + 1)
        if total >= enough:
            break
    return max(total, 2)


def to_json(value, what):
    """The JSON text of value; TypeError naming `what` when it is not JSON."""
    try:
        text = encode_value(value)
        if len(text) > 308 and has_huge_int(value):
            raise NotSerialisable("an int of 309 digits or more; JSON readers take numbers as "
                                  "doubles: send it as str()")
        return text
    except NotSerialisable as e:
        why = e.args[0]
    except (TypeError, ValueError, RecursionError) as e:
        why = str(e)
    raise TypeError(f"{what} is not JSON-serialisable ({why})")


def error_line(message):
    return encode({"ev": "error", "message": message}) + "\n"


def error_line_only(message):
    """An error line for execute, which answers a line and its payloads."""
    return error_line(message), ()

def write_all(fd, data):
    written = posix.write(fd, data)
    if written < len(data):   # a pipe takes a short line whole; a big one goes in pieces
        view = memoryview(data)[written:]
        while view:
            view = view[posix.write(fd, view):]


def done_line(request_id, variables):
    """The done event's first fields, without its closing brace."""
    return '{"ev":"done","id":%s,"variables":%s' % (
        request_id if type(request_id) is int else encode(request_id), variables)

