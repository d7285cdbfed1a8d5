"""The rlm sandbox driver: runs the user's Python for the rlm host and keeps its state.

Started as `python3 -u [-S] -c "<this source>" [--stdio] [--capture-dir DIR] [SETTINGS]` (with -S,
site runs when an import needs it: SiteOnDemand), as `--serve PATH [SETTINGS]` (unix socket
server), or as
`--client PATH (--request-file F | --request-b64 B64)` (the one-shot client of --serve), or as
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
  {"op":"reply","id":N,"results":[...]} | {"op":"reply","id":N,"error":"message"}
                                    answers the call event with the same id (the execute's id)
  {"op":"reset"}    -> {"ev":"reset"}    user globals, imports and buffers cleared
  {"op":"ping"}     -> {"ev":"pong"}     also answered while code waits for a reply
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
  {"ev":"call","id":N,"kind":K,"args":{...}}   the code is blocked until the matching reply:
      llm_query          {"prompt","model"}   -> results: [text]
      llm_query_batched  {"prompts","model"}  -> results: one text per prompt, in order
      rlm_query          {"task","context"}   -> results: [text]
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
  and is dropped between blocks and while a call waits for its reply. A trace or profile
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
- error is "Type: message" ("SyntaxError: msg (line L)" for syntax errors); traceback shows
  only frames outside the driver, with source lines from cells named <rlm-cell-K>.
- timeout: SIGALRM raises TimeoutError("execution exceeded S seconds") in the user's code and
  sets timed_out; globals are kept. Time spent waiting for replies does not count. It fires no
  sooner than S seconds and at most 50 ms (and a tenth of S) later: one timer can then serve
  many quick blocks in a row. Code that stops the timer around the signal module (through
  _signal or ctypes) is stopped by the host instead, which restarts the driver.
- Helpers (builtins of the namespace, so they survive reset, never show up in variables, and a
  user global of the same name only shadows them): SUBMIT, llm_query(prompt, model=None),
  llm_query_batched(prompts, model=None), rlm_query(task, context=None), budget(), add_buffer(name,
  value), get_buffer(name), clear_buffer(name=None), SHOW_VARS(). A reply with error raises
  RuntimeError(message). Calls from threads are serialised; they fail outside an execute.
- variables lists user globals except modules and __dunder__ names: type name, len or null,
  and a repr preview of at most 100 characters (computed in bounded time for big containers);
  at most 50 of them, so the event stays small and quick whatever the code defines;
  variables_more counts the namespace's names after the last one listed (modules among them:
  counting them out would mean walking every global on every execute). SHOW_VARS() lists all.
  A value whose hooks raise while it is listed shows "<unlistable: Type>"; one whose hook does
  not return is cut off when the block's time runs out ("<unlistable: ReportTimeout>") and not
  tried again. A workspace file named like a standard module (re.py) never replaces it in the
  driver's own work (tracebacks).
- --capture-dir DIR: where the stdout/stderr capture files live (default $TMPDIR or /tmp). The
  local sandbox gives it a tmpfs of its own, so its size caps what one execute may print.

--serve PATH: listens on a unix socket (created before ready is printed). Each connection
carries one request line and gets one event line, then is closed; an execute that calls
llm_query answers its connection with the call event, and the next connection must carry the
reply. --client prints the one event line and exits 0, or exits 2 with a message on stderr.
"""
import builtins
import fcntl
import io
import posix   # what the driver needs of os, which would cost 1.5 ms of each start
import sys
import time
import _signal
import _thread
from time import monotonic   # the driver's own: code may replace time.monotonic (freezegun)
from _frozen_importlib_external import PathFinder   # importlib.machinery's, without its 0.8 ms

DEFAULT_OUTPUT_CHARS = 10000
DEFAULT_OUTPUT_NAMES = ["answer"]   # shared: never changed in place
PREVIEW_CHARS = 100
PREVIEW_ITEMS = 8
# Variables listed in each done event; the rest are counted (variables_more). A turn's prompt
# names as many, and building rows is the costly part: with 10,000 globals, listing them all
# took 28 ms an execute; the listing stops after these and the count is len() arithmetic.
MAX_VARIABLES = 50
READ_CHUNK = 1 << 20
# A capture file keeps growing (Capture.let_go): what was taken is freed once it reaches this
# many bytes, and the file starts again from empty past CAPTURE_REWIND (or half of
# limits.file_size, if smaller).
CAPTURE_PUNCH = 16 << 10
CAPTURE_REWIND = 256 << 20
PAGE_SIZE = posix.sysconf("SC_PAGE_SIZE")
HIGH_FD_MIN = 100   # the driver's own descriptors: see moved_high
# Memory held back for the driver's own work after user code ran out (under limits.memory the
# code's data stays alive in its globals): released when a block ends in MemoryError. The limit
# counts address space, so bytes() (calloc: pages never touched) holds it back for free, where
# a bytearray's zeroing cost 6 ms of every start.
RESERVE_BYTES = 8 << 20
TIMER_SLACK = 0.05   # seconds a timeout may fire late, at most a tenth of it (Session.arm_timer)
REPORT_GRACE = 0.05   # seconds each further hung hook of the code's gets, once the block's ran out
# A client that connects but never sends must not wedge the server for good.
CONNECTION_TIMEOUT = 60.0
UTF8_CONTINUATION = bytes(range(0x80, 0xC0))
ModuleType = type(sys)
MISSING = object()
# The fields of the common execute request: one with no others keeps the driver's settings.
PLAIN_EXECUTE = frozenset(("op", "id", "timeout", "code"))
# The names a module starts with: skipped by the variables listing without slicing each one.
MODULE_NAMES = frozenset(vars(ModuleType("__main__"))) | {"__builtins__"}
DRIVER_GLOBALS = globals()
# The standard library's folders: what sys.path holds at start, but the working directory
# ("" under -c), which main() puts first for the code's imports.
STDLIB_PATH = [p for p in sys.path if p]
JSON_SPACE = " \t\n\r"


class Submitted(BaseException):
    """Raised by SUBMIT; a BaseException so that `except Exception` in user code lets it pass.
    The fields stay with the session (Session.submitted): code that catches one cannot change
    what it carries."""


class ReportTimeout(BaseException):
    """The block's time ran out while the driver read its result: a hook of the code's (a
    __repr__, __len__, flush or Final's serialisation) that does not return. A BaseException,
    so that the hook's own `except Exception` does not swallow it."""


class NotSerialisable(Exception):
    pass


def json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise NotSerialisable(type(value).__name__)


# JSON straight from the C accelerator the json package wraps: importing the package pulls in
# re and enum, about 10 ms of every sandbox's start. The package itself where the accelerator
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
# per item, not per byte: a regex over the encoded text took a second for 100 MB.
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


def moved_high(fd):
    """fd moved to HIGH_FD_MIN or above, close-on-exec: away from the numbers the code's own
    files are given, and from a closerange(3, 100). fd itself where the limit on open files
    (limits.open_files) is lower."""
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD_MIN)
    except (OSError, AttributeError):   # the limit; an fcntl without F_DUPFD_CLOEXEC
        return fd
    posix.close(fd)
    return high


def punch_hole(fd, begin, end):
    """Frees bytes [begin, end) of a file (whole pages) without changing its size or any
    offset: MADV_REMOVE on a shared mapping of them (tmpfs, and the file systems that punch
    holes). False where that cannot be done. mmap is imported only now: it costs 0.7 ms."""
    if end <= begin:
        return True
    try:
        import mmap
        with mmap.mmap(fd, end - begin, offset=begin) as m:
            m.madvise(mmap.MADV_REMOVE)
        return True
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def rewind_limit():
    """Where a capture file starts again from empty: CAPTURE_REWIND, or half of the largest
    file the code may write (RLIMIT_FSIZE) when that is smaller."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and soft >= 0:
            return min(CAPTURE_REWIND, soft // 2)
    except (ImportError, OSError, ValueError):
        pass
    return CAPTURE_REWIND


def write_all(fd, data):
    written = posix.write(fd, data)
    if written < len(data):   # a pipe takes a short line whole; a big one goes in pieces
        view = memoryview(data)[written:]
        while view:
            view = view[posix.write(fd, view):]


# ---------------------------------------------------------------------------------------------
# Transports: read() -> one request line (None at EOF), send(line), close().

class Stdio:
    def __init__(self, fd_in, fd_out):
        self.inp = io.open(fd_in, "rb")
        self.out = fd_out

    def read(self):
        while True:
            line = self.inp.readline()
            if not line:
                return None
            if not line.isspace():  # a stray blank line must not earn an event and desync the host
                return line

    def read_payload(self, size):
        """The `size` raw bytes after a request line; None at EOF."""
        data = self.inp.read(size)
        return data if len(data) == size else None

    def send(self, line, payloads=()):
        write_all(self.out, line.encode())
        for data in payloads:
            write_all(self.out, data)

    def close(self):
        pass


class NoTransport:
    """The transport of a process the code forked: the host's dialogue is its parent's."""

    def fail(self, *args):
        raise RuntimeError("a forked process cannot talk to the host (llm_query and the other "
                           "calls work in the driver's own process)")

    read = read_payload = send = fail

    def close(self):
        pass


def recv_line(conn):
    data = bytearray()
    while True:
        chunk = conn.recv(65536)
        data += chunk
        if not chunk or b"\n" in chunk:
            return bytes(data.split(b"\n", 1)[0])


class SocketServer:
    def __init__(self, path):
        import socket
        import stat
        try:
            if stat.S_ISSOCK(posix.lstat(path).st_mode):
                posix.unlink(path)  # left by a driver that died
        except FileNotFoundError:
            pass
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(16)
        self.conn = None

    def read(self):
        while True:
            conn, _ = self.sock.accept()
            conn.settimeout(CONNECTION_TIMEOUT)
            try:
                line = recv_line(conn)
            except OSError:
                conn.close()
                continue
            self.conn = conn
            return line

    def read_payload(self, size):
        return None   # the host sends payloads only over stdio

    def send(self, line, payloads=()):
        conn, self.conn = self.conn, None
        try:
            conn.sendall(line.encode())
        except OSError:
            pass  # the client gave up; nobody is left to tell
        finally:
            conn.close()

    def close(self):
        try:
            posix.unlink(self.path)
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# Output capture

class Capture:
    """A temp file that fd `target` writes into; unlinked at once so it never outlives us."""

    def __init__(self, target, directory):
        self.target, self.directory = target, directory
        self.renew()

    def renew(self):
        """A new file for fd `target`: at the start, and after the code closed the old one. Its
        own descriptor sits high (moved_high): one of the code's files taking its number
        would be read and emptied."""
        name = f"rlm-driver-{posix.getpid()}-{self.target}-{posix.urandom(4).hex()}"
        path = f"{self.directory}/{name}"
        # O_APPEND: every write lands at the end, where take looks, even after the code moved
        # fd 1's offset (the file is not emptied after each block: let_go)
        fd = posix.open(path, posix.O_RDWR | posix.O_APPEND | posix.O_CREAT | posix.O_EXCL, 0o600)
        posix.unlink(path)
        self.fd = moved_high(fd)
        self.start = self.freed = 0   # bytes taken; bytes of them freed (let_go)
        self.rewind_at = None
        posix.dup2(self.fd, self.target)

    def take(self, limit):
        """(text, total characters) written since the last take."""
        # The bytes written since the last take end at the file's size, which fd `target`
        # writes into unless the code moved or closed it (`reattach` puts it back after each
        # block). Its end is where the next write goes in any case: an lseek, with no stat.
        try:
            size = posix.lseek(self.fd, 0, io.SEEK_END)
        except OSError:   # the code closed the file's descriptor: what it held went with it
            self.renew()
            return "", 0
        start = self.start
        if size == start:
            return "", 0
        if size < start:   # the code cut the file (os.ftruncate(1, 0)): what is there is new
            start = self.start = self.freed = 0
        try:
            if size - start <= limit:  # never more characters than bytes
                text = posix.pread(self.fd, size - start, start).decode("utf-8", "replace")
                total = len(text)
            else:
                total = self.count_chars(start, size)
                if total <= limit:
                    text = posix.pread(self.fd, size - start, start).decode("utf-8", "replace")
                    if len(text) > limit:   # stray continuation bytes: each one a U+FFFD
                        total = len(text)
                        text = cut_text(text[:limit // 2], text[len(text) - (limit - limit // 2):],
                                        total)
                else:
                    text = self.head_and_tail(start, size, limit, total)
        except BaseException:   # cut off by the block's time (a 20 GB sparse file): not again
            self.clear()
            raise
        self.let_go(size)
        return text, total

    def let_go(self, size):
        """Marks the file's first `size` bytes taken. It is emptied when nothing seems to be
        writing into it any more: no thread of the code's runs (a Python thread writes just
        when the driver's own system calls let it) and nothing came since `size` was read.
        Otherwise what was written between the take and the emptying would be lost: the file
        grows instead, and the pages taken are freed (a hole punched, CAPTURE_PUNCH bytes or
        more at a time); past half of the largest file the code may write (limits.file_size),
        it is emptied after all."""
        if _thread._count() == 0 and posix.lseek(self.fd, 0, io.SEEK_END) == size:
            self.clear()
            return
        self.start = size
        if size - self.freed < CAPTURE_PUNCH:
            return
        if self.rewind_at is None:
            self.rewind_at = rewind_limit()
        end = size - size % PAGE_SIZE
        if size >= self.rewind_at or not punch_hole(self.fd, self.freed, end):
            self.clear()
        else:
            self.freed = end

    def clear(self):
        try:
            posix.ftruncate(self.fd, 0)
            posix.lseek(self.fd, 0, io.SEEK_SET)  # the offset is shared with fd 1/2 and others
        except OSError:   # the code put another file (read-only, say) at the file's number
            self.renew()
        self.start = self.freed = 0

    def reattach(self):
        """Points fd `target` at the file (again: the code may have moved or closed it)."""
        try:
            posix.dup2(self.fd, self.target)
        except OSError:   # the file's own descriptor is gone too
            self.renew()

    def discard(self):
        """Forgets what was written; fd `target` points at the file again."""
        self.reattach()
        self.clear()

    def count_chars(self, start, size):
        total, offset = 0, start
        while offset < size:
            chunk = posix.pread(self.fd, READ_CHUNK, offset)
            if not chunk:
                break
            offset += len(chunk)
            total += len(chunk.translate(None, UTF8_CONTINUATION))
        return total

    def head_and_tail(self, start, size, limit, total):
        # A character is at most 4 bytes; 3 more bytes cover a character split at the tail's start.
        head_n = limit // 2
        tail_n = limit - head_n
        head = posix.pread(self.fd, min(4 * head_n, size - start), start).decode(
            "utf-8", "replace")[:head_n]
        tail_bytes = min(size - start, 4 * tail_n + 3)
        tail = posix.pread(self.fd, tail_bytes, size - tail_bytes).decode("utf-8", "replace")
        return cut_text(head, tail[-tail_n:], total)


def cut_text(head, tail, total):
    """head and tail of a text of `total` characters, around a line that counts the rest."""
    return f"{head}\n... [{total - len(head) - len(tail)} characters cut] ...\n{tail}"


# ---------------------------------------------------------------------------------------------
# Variables summary

# Types whose values have no length and a short repr (an int's may fail past 4,300 digits:
# preview() catches that).
SCALARS = frozenset((int, float, bool, type(None)))
SHORT_INT = 10 ** (PREVIEW_CHARS - 2)   # an int whose repr fits a preview


def size_of(value):
    if not hasattr(type(value), "__len__"):
        return None
    try:
        return len(value)
    except Exception:
        return None


def short_repr(value, depth=2):
    """repr whose cost does not grow with the size of strings and containers."""
    if isinstance(value, (str, bytes, bytearray)):
        return repr(value[:PREVIEW_CHARS])
    for kind, opening, closing in CONTAINERS:
        if isinstance(value, kind):
            break
    else:
        return repr(value)
    if not value:
        return repr(value)
    if depth == 0:
        return f"{opening}...{closing}"
    items = value.items() if isinstance(value, dict) else value
    parts = []
    for item in items:
        if len(parts) == PREVIEW_ITEMS:
            parts.append("...")
            break
        if isinstance(value, dict):
            parts.append(f"{short_repr(item[0], depth - 1)}: {short_repr(item[1], depth - 1)}")
        else:
            parts.append(short_repr(item, depth - 1))
    tail = "," if isinstance(value, tuple) and len(value) == 1 else ""
    return f"{opening}{', '.join(parts)}{tail}{closing}"


CONTAINERS = ((dict, "{", "}"), (list, "[", "]"), (tuple, "(", ")"), (set, "{", "}"),
              (frozenset, "frozenset({", "})"))


def preview(value):
    try:
        text = short_repr(value)
    except Exception as e:
        text = f"<{type(value).__name__}: repr failed with {type(e).__name__}>"
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS - 3] + "..."


# A variables row by format: twice as fast as the encoder's walk of 50 dicts. A scalar's type
# name and repr (digits, True, None, inf) need no escaping.
ROW = '{"name":%s,"type":%s,"size":%s,"preview":%s}'
SCALAR_ROW = '{"name":%s,"type":"%s","size":null,"preview":"%s"}'


def done_line(request_id, variables):
    """The done event's first fields, without its closing brace."""
    return '{"ev":"done","id":%s,"variables":%s' % (
        request_id if type(request_id) is int else encode(request_id), variables)


# ---------------------------------------------------------------------------------------------
# Errors

TYPE_NAME = type.__dict__["__name__"].__get__        # the type's own names: no metaclass
TYPE_QUALNAME = type.__dict__["__qualname__"].__get__  # property or __eq__ of the code's runs


def error_text(e):
    """"Type: message" for an exception of the code's; never raises, whatever its hooks do."""
    kind = type(e)
    name = TYPE_QUALNAME(kind)
    module = kind.__dict__.get("__module__")
    if type(module) is str and module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    try:
        if isinstance(e, SyntaxError) and type(e.lineno) is int:
            return f"{name}: {str(e.msg)} (line {e.lineno})"
        message = str(e)
    except BaseException:
        message = "<the exception's str() failed>"
    return f"{name}: {message}" if message else name


def stdlib_modules(*names):
    """The standard library's modules of these names, imported with sys.path cut to its own
    folders (the code's working directory comes first in sys.path: a traceback.py, re.py or
    token.py of the workspace would stand in for them). One the code imported already is
    taken from sys.modules as it is."""
    saved = sys.path[:]
    sys.path[:] = STDLIB_PATH
    try:
        return [__import__(name, fromlist=["_"]) for name in names]
    finally:
        sys.path[:] = saved


def raised_by_code(e):
    """Whether one of e's frames is the code's (a signal handler it installed, say)."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals is not DRIVER_GLOBALS:
            return True
        tb = tb.tb_next
    return False


def drop_driver_frames(e, seen):
    """Unlinks the driver's own frames from e's traceback (and from chained exceptions)."""
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        kept = []
        tb = e.__traceback__
        while tb is not None:
            if tb.tb_frame.f_globals is not DRIVER_GLOBALS:
                kept.append(tb)
            tb = tb.tb_next
        for tb, after in zip(kept, kept[1:] + [None]):
            tb.tb_next = after
        e.__traceback__ = kept[0] if kept else None
        drop_driver_frames(e.__cause__, seen)
        e = e.__context__


# Words that begin a statement that is not an expression (soft keywords such as match can
# also be names, so they are not among them).
STATEMENT_WORDS = frozenset((
    "assert", "async", "break", "class", "continue", "def", "del", "for", "from", "global", "if",
    "import", "nonlocal", "pass", "raise", "return", "try", "while", "with"))
# Words that begin a clause of a compound statement begun above it.
CLAUSE_WORDS = frozenset(("elif", "else", "except", "finally"))
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
OPENERS, CLOSERS = "([{", ")]}"
# What the text before an assignment's = may hold without a second look: names, attributes and
# the first characters of an augmented assignment's operator.
TARGET_CHARS = NAME_CHARS + " .+-*/%&|^@"


def compile_cell(code, filename):
    """(codes to run in order, the code of a trailing bare expression or None).

    The cell is cut before its last line of code that starts at column 0. When the part before
    compiles on its own, that line starts the cell's last top-level statement, and the rest is
    compiled alone: as an expression when it is one. So each line is parsed once; finding the
    trailing expression through a syntax tree compiled a cell twice (1.9x the time of a plain
    compile for a 7-line cell). A cell this cut does not fit takes the syntax-tree way."""
    if "\n" not in code and ";" not in code and "\r" not in code and code[:1] not in " \t#\f":
        # One line of code (a trivial block): nothing to cut, only its kind to tell. A plain
        # assignment (x = 1, n += 1) is compiled at once: every other way ends the same.
        if plainly_assignment(code):
            return (compile(code, filename, "exec"),), None
        return compile_parts(code, 0, filename) or compile_by_tree(code, filename)
    if code.endswith((" ", "\t")):   # a last line of blanks would read as an indented one
        code += "\n"
    start = last_line_start(code)
    # Future imports must reach every part, global and nonlocal are checked against the whole
    # cell; a form feed resets the column the cut goes by, a carriage return ends lines the
    # compiler's way; after a semicolon on the last line another statement may follow.
    if start >= 0 and "__future__" not in code and "global" not in code and \
            "nonlocal" not in code and "\f" not in code and "\r" not in code and \
            ";" not in code[start:]:
        parts = compile_parts(code, start, filename)
        if parts is not None:
            return parts
    return compile_by_tree(code, filename)


def last_line_start(code):
    """Where the last line of code at column 0 starts; -1 when there is none, or when the line
    before ends in a backslash (the two would be one logical line)."""
    end = len(code)
    while True:
        start = code.rfind("\n", 0, end) + 1
        first = code[start:start + 1]
        if first and first not in " \t\n#":
            return -1 if start > 1 and code[start - 2] == "\\" else start
        if start == 0:
            return -1
        end = start - 1


def compile_parts(code, start, filename):
    line_end = code.find("\n", start)
    line = code[start:line_end] if line_end >= 0 else code[start:]
    # The word of ASCII letters the line starts with; none when a name goes on past them (a
    # keyword followed by é is a name).
    n = len(line) - len(line.lstrip(NAME_CHARS))
    word = "" if line[n:n + 1].isidentifier() else line[:n]
    # A clause of a compound statement, a closing bracket or a backslash continue what is
    # above; a starred expression cannot be compiled alone as one; a decorator leads a def.
    if word in CLAUSE_WORDS or line[0] in ")]}*\\@":
        return None
    codes = ()
    tail = code[start:]
    if start:
        try:
            codes = (compile(code[:start], filename, "exec"),)
        except SyntaxError:
            return None   # the line continues something begun above it
        tail = "\n" * code.count("\n", 0, start) + tail   # line numbers as in the cell
    if word not in STATEMENT_WORDS and not plainly_assignment(line):
        try:
            return codes, compile(tail, filename, "eval")
        except SyntaxError:
            pass
    body = compile(tail, filename, "exec")   # a SyntaxError here is the cell's own
    if codes and ("__doc__" in body.co_names or "__annotations__" in body.co_names):
        return None   # taken as the docstring; annotations made before the first part runs
    return codes + (body,), None


def plainly_assignment(line):
    """Whether a line that starts a statement plainly starts an assignment: a = outside
    brackets, strings and comments. False when unsure; the caller then tries the rest as an
    expression."""
    at = line.find("=")
    if at <= 0 or line[at + 1:at + 2] == "=":
        return False
    before = line[:at]
    if not before.strip(TARGET_CHARS):   # x = 1, a.b = 2, n += 1: the common ones, at once
        return "lambda" not in before    # lambda x=1: x
    if "lambda" in line or "'" in before or '"' in before or "#" in before or \
            before[-1] in "<>!:":
        return False
    return sum(map(before.count, OPENERS)) == sum(map(before.count, CLOSERS))


def compile_by_tree(code, filename):
    import _ast
    tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = compile(_ast.Expression(tree.body.pop().value), filename, "eval")
    return (compile(tree, filename, "exec"),), last


# ---------------------------------------------------------------------------------------------
# The session

class Session:
    def __init__(self, transport, capture_dir, settings=None):
        self.transport = transport
        settings = settings or {}
        self.default_output_chars = settings.get("max_output_chars", DEFAULT_OUTPUT_CHARS)
        self.default_max_submit = settings.get("max_submit_bytes")
        self.default_payload_min = settings.get("payload_min")
        # One protocol exchange at a time: user threads may call llm_query concurrently.
        self.io_lock = _thread.allocate_lock()
        self.builtins = dict(vars(builtins))
        self.builtins.update(make_helpers(self))
        self.buffers = {}
        self.cells = []   # the source of cell K at K - 1: <rlm-cell-K> in tracebacks
        self.ns = None
        self.new_namespace()
        self.stdout = Capture(1, capture_dir)
        self.stderr = Capture(2, capture_dir)
        self.streams = (sys.stdout, sys.stderr)
        self.stream_errors = (sys.stdout.errors, sys.stderr.errors)
        self.request_id = None
        self.submitted = None   # (the Submitted SUBMIT raised, its fields) in this block
        self.output_names = DEFAULT_OUTPUT_NAMES
        self.max_submit_bytes = None
        self.payload_min = None
        self.running = False
        self.timeout = None
        self.timed_out = False
        # While the driver talks to the host an alarm is only noted, so no line is cut in half.
        self.in_protocol = True
        self.late_alarm = False
        self.reserve = bytes(RESERVE_BYTES)
        self.alarm_handler = self.on_alarm   # one object, so a check by identity finds it
        self.timer_end = None   # when the armed timer runs out (monotonic()), if it is
        self.block_running = False   # between the start and the end of the code of a block
        self.forked = False   # in a process the code forked (Session.in_forked_child)
        self.reporting = False   # while report() reads a block's result
        self.report_cut = False   # the timer ran out while it did (on_alarm)
        self.hung = {}   # id -> value: objects whose listing ran out of time, not tried again
        _signal.signal(_signal.SIGALRM, self.alarm_handler)
        _signal.signal(_signal.SIGINT, self.on_interrupt)
        posix.register_at_fork(after_in_child=self.in_forked_child)

    def new_namespace(self):
        # A real __main__ module lets pickle and multiprocessing find the user's classes.
        module = ModuleType("__main__")
        module.__dict__["__builtins__"] = self.builtins
        sys.modules["__main__"] = module
        self.ns = module.__dict__

    def stop(self):
        # _exit: tearing down a namespace of many GB could take seconds and nobody waits for it.
        self.transport.close()
        posix._exit(0)

    def on_alarm(self, signum, frame):
        if self.timer_end is not None and monotonic() >= self.timer_end:
            self.timer_end = None   # it ran out (a SIGALRM may also come from elsewhere)
        if self.in_protocol:
            if self.reporting:   # the timer ran out on a hook of the code's that report called
                # The next hook that hangs is cut off sooner: the result is late already.
                self.timer_end = None
                self.report_cut = True
                _signal.setitimer(_signal.ITIMER_REAL, REPORT_GRACE)
                raise ReportTimeout("reading the block's result ran past its time (a __repr__, "
                                    "__len__, flush or Final of the code's that does not return)")
            self.late_alarm = True
            return
        self.timed_out = True
        raise TimeoutError(f"execution exceeded {self.timeout:.3g} seconds")

    def on_interrupt(self, signum, frame):
        # Between blocks, or while the driver talks to the host, there is nothing of the code's
        # to stop: a watchdog's late interrupt_main() must not end the driver.
        if self.block_running and not self.in_protocol:
            raise KeyboardInterrupt

    def in_forked_child(self):
        """The code forked: the child has no protocol (a call there fails instead of writing
        into the host's dialogue) and ends with its block instead of serving requests."""
        self.transport = NoTransport()
        self.forked = True

    # -- requests

    def next_request(self):
        """The next request that needs more than a fixed answer, or None after a bad one."""
        line = self.transport.read()
        if line is None:
            self.stop()
        try:
            req = loads(line)
        except ValueError as e:
            self.transport.send(error_line(f"cannot parse request: {e}"))
            return None
        if not isinstance(req, dict):
            self.transport.send(error_line("a request must be a JSON object"))
            return None
        if "payloads" in req:
            req["payloads"] = self.read_payloads(req["payloads"])
            if req["payloads"] is None:
                self.transport.send(error_line("payloads must be a list of {name, bytes}"))
                return None
        op = req.get("op")
        if op == "ping":
            self.transport.send('{"ev":"pong"}\n')
            return None
        if op == "shutdown":
            self.transport.send('{"ev":"bye"}\n')
            self.stop()
        return req

    def read_payloads(self, announced):
        """(name, bytes) for each payload the request announced; the bytes follow its line."""
        if not isinstance(announced, list) or not all(
                isinstance(p, dict) and isinstance(p.get("name"), str) and
                isinstance(p.get("bytes"), int) and p["bytes"] >= 0 for p in announced):
            return None
        payloads = []
        for p in announced:
            data = self.transport.read_payload(p["bytes"])
            if data is None:
                self.stop()
            payloads.append((p["name"], data))
        return payloads

    def serve_forever(self):
        while True:
            try:
                req = self.next_request()
            except BaseException as e:
                if not raised_by_code(e):
                    raise
                continue   # a signal handler of the code's raised while the driver waited
            if req is None:
                continue
            op = req.get("op")
            payloads = ()
            if op == "execute":
                line, payloads = self.execute(req)
            elif op == "reset":
                line = self.reset()
            elif op == "reply":
                line = error_line("no code is waiting for a reply")
            else:
                line = error_line(f"unknown op {op!r}")
            self.transport.send(line, payloads)
            if op == "execute":
                # Once the event is on its way, while the host reads it: fd 1 and fd 2 are
                # put back for the next block (one dup2 each, where checking them would cost
                # a stat each on the round trip's path).
                self.stdout.reattach()
                self.stderr.reattach()

    def reset(self):
        self.new_namespace()
        self.buffers.clear()
        self.stdout.discard()
        self.stderr.discard()
        return '{"ev":"reset"}\n'

    # -- execute

    def execute(self, req):
        code = req.get("code")
        timeout = req.get("timeout")
        if not isinstance(code, str):
            return error_line_only("execute: code must be a string")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            return error_line_only("execute: timeout must be a positive number or null")
        if req.keys() <= PLAIN_EXECUTE:   # the common request: the settings hold, nothing to set
            names, limit = DEFAULT_OUTPUT_NAMES, self.default_output_chars
            max_submit, payload_min = self.default_max_submit, self.default_payload_min
        else:
            names, limit, max_submit, payload_min = self.execute_options(req)
            if names is None:
                return error_line_only(limit)
        self.cells.append(code)
        filename = f"<rlm-cell-{len(self.cells)}>"
        self.request_id = req.get("id")
        self.output_names = names
        self.max_submit_bytes = max_submit
        self.payload_min = payload_min
        final_before = self.ns.get("Final", MISSING)
        error = traceback_text = submitted = self.submitted = None
        self.running = True
        try:
            self.run(code, filename, timeout)
        except Submitted as s:
            submitted = self.submitted_by(s)
            if submitted is None:
                error = "RuntimeError: a SUBMIT the code caught was raised after another one"
        except SystemExit as e:
            # sys.exit() / sys.exit(0) ends the block as a script ends: not an error
            try:
                code = e.args[0] if len(e.args) == 1 else e.args or None
            except BaseException:   # an args of the code's own making
                code = 1
            if not (code is None or type(code) in (int, bool) and code == 0):
                error, traceback_text = error_text(e), self.format_traceback(e)
        except BaseException as e:
            if issubclass(type(e), MemoryError):   # (isinstance may ask the code's __class__)
                self.reserve = None  # room to report it; taken back below when there is some
            error, traceback_text = error_text(e), self.format_traceback(e)
        self.submitted = None   # with the Submitted, SUBMIT's frame and its values go
        if self.forked:
            self.restore_streams()
            posix._exit(0 if error is None else 1)
        self.reporting = True
        try:
            return self.report(names, limit, final_before, error, traceback_text, submitted)
        except BaseException as e:   # the code's objects broke the report (a hook that raises)
            self.restore_streams()
            return done_line(self.request_id, "[]") + ',"error":%s,"timed_out":false}\n' % (
                escape("RuntimeError: the block ended but its result could not be read: " +
                       error_text(e))), ()
        finally:
            self.reporting = False
            if self.report_cut:   # the timer ran out meanwhile and was set again: stopped
                self.report_cut = False
                _signal.setitimer(_signal.ITIMER_REAL, 0)

    def submission(self, fields):
        """The Submitted for SUBMIT to raise, its fields kept here."""
        s = Submitted()
        self.submitted = (s, fields)
        return s

    def submitted_by(self, s):
        """The fields SUBMIT computed for the Submitted s; None for one raised again after
        another SUBMIT."""
        if self.submitted is not None and self.submitted[0] is s:
            return self.submitted[1]
        return None

    def report(self, names, limit, final_before, error, traceback_text, submitted):
        """The done event of a block and its payloads (execute calls it with self.reporting
        set: the code's hooks it calls run under the block's timer, which is left running, and
        one that never returns is cut off by it)."""
        final = self.ns.get("Final", MISSING)
        if error is None and submitted is None and final is not final_before and \
                names == DEFAULT_OUTPUT_NAMES:
            try:
                submitted = self.check_submit({"answer": self.field_text(final, "Final")})
            except BaseException as e:   # not JSON, too big, or its hooks raised
                error = error_text(e)
        self.restore_streams()
        rows, more = self.summary(MAX_VARIABLES)
        line = done_line(self.request_id, rows)
        # Fields at their default are left out (the protocol allows it): the common event stays
        # short to write and to read.
        text, chars = self.stdout.take(limit)
        if chars:
            line += ',"stdout":%s,"stdout_chars":%d' % (escape(text), chars)
        text, chars = self.stderr.take(limit)
        if chars:
            line += ',"stderr":%s,"stderr_chars":%d' % (escape(text), chars)
        if error is not None:
            line += ',"error":%s,"traceback":%s,"timed_out":%s' % (
                escape(error), "null" if traceback_text is None else escape(traceback_text),
                "true" if self.timed_out else "false")
        if more:
            line += ',"variables_more":%d' % more
        if self.reserve is None:
            try:
                self.reserve = bytes(RESERVE_BYTES)
            except MemoryError:
                pass
        if submitted is None:
            return line + '}\n', ()
        raw = [(name, data) for name, data in submitted.items() if isinstance(data, bytes)]
        fields = ",".join(f"{encode(name)}:{text}" for name, text in submitted.items()
                          if not isinstance(text, bytes))
        line += ',"submitted":{' + fields + '}'
        if raw:
            line += ',"payloads":' + encode([{"name": n, "bytes": len(d)} for n, d in raw])
        return line + '}\n', [data for _, data in raw]

    def execute_options(self, req):
        """(output names, max_output_chars, max_submit_bytes, payload_min) of an execute
        request, its variables and payloads set as globals; (None, why) when one is wrong."""
        variables = req.get("variables")
        names = req.get("output_names") or DEFAULT_OUTPUT_NAMES
        limit = req.get("max_output_chars") or self.default_output_chars
        max_submit = req.get("max_submit_bytes", self.default_max_submit)
        payload_min = req.get("payload_min", self.default_payload_min)
        if variables is not None and type(variables) is not dict:
            return None, "execute: variables must be an object", None, None
        if names is not DEFAULT_OUTPUT_NAMES and (
                not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            return None, "execute: output_names must be a list of strings", None, None
        if not isinstance(limit, int) or limit < 2:
            return None, "execute: max_output_chars must be an integer >= 2", None, None
        if max_submit is not None and (not isinstance(max_submit, int) or max_submit < 1):
            return None, "execute: max_submit_bytes must be a positive integer or null", None, None
        if payload_min is not None and (not isinstance(payload_min, int) or payload_min < 1):
            return None, "execute: payload_min must be a positive integer or null", None, None
        if variables:
            self.ns.update(variables)
        for name, data in req.get("payloads") or ():
            self.ns[name] = data.decode("utf-8", "surrogateescape")
        return names, limit, max_submit, payload_min

    def field_text(self, value, what):
        """A SUBMIT field's JSON text; or, for a str of payload_min characters or more, its
        UTF-8 bytes, sent raw after the done line (no escaping here, no JSON parse on the
        host: a 100 MB answer crosses as it is)."""
        if self.payload_min is not None and isinstance(value, str) and \
                str.__len__(value) >= self.payload_min:
            try:   # str's own methods: a subclass's could hand back text or lie about a size
                return str.encode(value, "utf-8", "surrogateescape")
            except UnicodeEncodeError:
                pass   # a lone surrogate that stands for no byte: JSON carries it escaped
        return to_json(value, what)

    def run(self, code, filename, timeout):
        """Runs a block while calls are open (self.running), and closes them however it ends:
        a user thread inside a call finishes it first."""
        try:
            codes, last = compile_cell(code, filename)
            self.timed_out = False
            # The timer is left to run out after a block (our handler then only notes a late
            # alarm: it is put back below whenever the code replaced it, so it is ours here); a
            # block without a timeout stops an earlier one. A late alarm noted before the timer
            # is armed (or kept: it then runs out no sooner than this block's time) belongs to
            # an earlier block and is forgotten.
            if timeout:
                self.timeout = timeout
                self.arm_timer(timeout)
            elif self.timer_end is not None:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
                self.timer_end = None
            self.late_alarm = False
            self.block_running, self.in_protocol = True, False
            for body in codes:
                exec(body, self.ns)
            if last is not None:
                value = eval(last, self.ns)
                if value is not None:
                    print(repr(value))
        finally:
            # A trace or profile function of the code's lasts until its block ends: the driver's
            # own frames are not the code's to trace (a tracer's prints would become output).
            if sys.gettrace() is not None or sys.getprofile() is not None:
                sys.settrace(None)
                sys.setprofile(None)
            with self.io_lock:   # a call a thread of the code makes reads these
                self.running = self.block_running = False
                self.in_protocol = True
            if _signal.getsignal(_signal.SIGALRM) is not self.alarm_handler:
                _signal.signal(_signal.SIGALRM, self.alarm_handler)

    def arm_timer(self, timeout):
        """Arms the timer for a block of `timeout` seconds, a little late (TIMER_SLACK), or
        keeps the armed one when it runs out no sooner than the block's time and at most that
        slack later: quick blocks in a row then make no timer call each (the host's timeout
        for a block is the sandbox's time left, unless execute_timeout is shorter). Kept only
        while the code has not imported signal, through which it could have moved the timer."""
        slack = min(TIMER_SLACK, timeout / 10)
        now = monotonic()
        end = self.timer_end
        if end is not None and now + timeout <= end <= now + timeout + slack and \
                "signal" not in sys.modules:
            return
        self.timer_end = now + timeout + slack   # taken before: it never runs out sooner
        _signal.setitimer(_signal.ITIMER_REAL, timeout + slack)

    def restore_streams(self):
        """Flushes the user's streams and puts back ours, in case the code replaced them."""
        streams = self.streams
        try:
            user = (sys.stdout, sys.stderr)
        except AttributeError:   # the code deleted one
            user = (getattr(sys, "stdout", None), getattr(sys, "stderr", None))
        if user[0] is not streams[0] or user[1] is not streams[1]:
            streams = user + streams
        for stream in streams:
            try:
                stream.flush()
            except BaseException:   # the code's stream: whatever its flush raises is its own
                if stream is self.streams[0] or stream is self.streams[1]:
                    self.renew_stream(stream)   # ours, closed or detached by the code
        sys.stdout, sys.stderr = self.streams

    def renew_stream(self, stream):
        """A new sys.stdout or sys.stderr in place of ours, made as -u made it (UTF-8, each
        write passed on at once, its error handler)."""
        k = 0 if stream is self.streams[0] else 1
        fresh = io.TextIOWrapper(io.FileIO(k + 1, "w", closefd=False), encoding="utf-8",
                                 errors=self.stream_errors[k], write_through=True)
        self.streams = (fresh, self.streams[1]) if k == 0 else (self.streams[0], fresh)

    def format_traceback(self, e):
        """The traceback of an exception of the code's, from its own frames; never raises."""
        try:
            drop_driver_frames(e, set())
            traceback, linecache = stdlib_modules("traceback", "linecache")
            for number, source in enumerate(self.cells, 1):
                filename = f"<rlm-cell-{number}>"
                if filename not in linecache.cache:
                    linecache.cache[filename] = (len(source), None, source.splitlines(True),
                                                 filename)
            return "".join(traceback.format_exception(type(e), e, e.__traceback__))
        except BaseException:   # the code broke what formatting needs (sys, a hook, a module)
            return self.plain_traceback(e)

    def plain_traceback(self, e):
        """Where the exception passed, without the traceback module: file, line and function
        of each frame, the cells' lines quoted."""
        lines = ["Traceback (most recent call last):\n"]
        try:
            tb = e.__traceback__
            while tb is not None and len(lines) < 200:
                code = tb.tb_frame.f_code
                lines.append(f'  File "{code.co_filename}", line {tb.tb_lineno}, in {code.co_name}\n')
                cell = code.co_filename[10:-1] if code.co_filename.startswith("<rlm-cell-") else ""
                if cell.isdigit() and 0 < int(cell) <= len(self.cells):
                    source = self.cells[int(cell) - 1].splitlines()
                    if 0 < tb.tb_lineno <= len(source):
                        lines.append(f"    {source[tb.tb_lineno - 1].strip()}\n")
                tb = tb.tb_next
        except BaseException:
            pass
        return "".join(lines) + error_text(e) + "\n"

    def summary(self, limit=None):
        """(rows, more): the user's globals in definition order as a JSON list of {name, type,
        size, preview}, at most limit of them, and how many names of the namespace come after
        the last one looked at."""
        try:   # without a copy of the whole namespace: the listing stops early
            rows, more = self.summarise(self.ns.items(), limit)
        except RuntimeError:   # a thread of the code changed the globals meanwhile
            rows, more = self.summarise(list(self.ns.items()), limit)
        return "[" + ",".join(rows) + "]", more

    def summarise(self, items, limit):
        """The rows' JSON texts and the count after them; see summary. Names that are not
        exactly str (globals()[1] = 2, a subclass with its own __hash__) cannot be variables
        and are left out, before any of their methods runs. A value whose hooks fail (a
        metaclass's __hash__, a __class__ or __len__ that raises, even SystemExit) is listed
        as unlistable: the code's objects must not end the driver."""
        rows, seen = [], 0
        for name, value in items:
            seen += 1
            if type(name) is not str or name in MODULE_NAMES or name[:2] == "__" == name[-2:]:
                continue
            try:
                kind = type(value)
                if kind in SCALARS and (kind is not int or -SHORT_INT < value < SHORT_INT):
                    # the common case, without the general walk: its repr is plain ASCII
                    row = SCALAR_ROW % (escape(name), kind.__name__, repr(value))
                elif isinstance(value, ModuleType):
                    continue
                elif id(value) in self.hung:
                    row = ROW % (escape(name), escape(kind.__name__), "null",
                                 '"<unlistable: ReportTimeout>"')
                else:
                    size = size_of(value)
                    row = ROW % (escape(name), escape(kind.__name__),
                                 "null" if size is None else size, escape(preview(value)))
            except BaseException as e:
                row = ROW % (escape(name), escape(TYPE_NAME(type(value))), "null",
                             escape(f"<unlistable: {TYPE_NAME(type(e))}>"))
                if type(e) is ReportTimeout:   # the time is up: no more of the code's hooks
                    self.hung[id(value)] = value   # (held: its id stays its own)
                    rows.append(row)
                    break
            rows.append(row)
            if len(rows) == limit:
                break
        return rows, len(self.ns) - seen

    def check_submit(self, fields):
        """fields (name -> JSON text) when they fit max_submit_bytes; ValueError otherwise."""
        cap = self.max_submit_bytes
        if cap is not None:
            size = sum(len(name) + len(text) for name, text in fields.items())
            if size > cap:
                raise ValueError(f"SUBMIT is {size} bytes of JSON, over the limit of {cap} "
                                 f"bytes (limits.submit)")
        return fields

    # -- calls to the host

    def call(self, kind, args):
        """Sends a call event and returns the reply's results list; the timer stands still."""
        line = '{"ev":"call","id":%s,"kind":"%s","args":%s}\n' % (
            encode(self.request_id), kind, to_json(args, f"{kind}: an argument"))
        with self.io_lock:
            if not self.running:
                raise RuntimeError(f"{kind} can only be used while a block runs")
            self.in_protocol = True
            left = _signal.setitimer(_signal.ITIMER_REAL, 0)[0]
            self.timer_end = None
            try:
                self.transport.send(line)
                return self.await_reply()
            finally:
                # A thread's call may end after the block did: the timer then stays stopped.
                if self.block_running:
                    self.in_protocol = False
                    if self.late_alarm:  # re-fire at once, so it lands in the main thread
                        self.late_alarm = False
                        left = 1e-6
                    if left > 0:   # the end is taken before: the timer never runs out sooner
                        self.timer_end = monotonic() + left
                        _signal.setitimer(_signal.ITIMER_REAL, left)

    def await_reply(self):
        while True:
            req = self.next_request()
            if req is None:
                continue
            if req.get("op") == "reply" and req.get("id") == self.request_id:
                if req.get("error") is not None:
                    raise RuntimeError(str(req["error"]))
                results = req.get("results")
                if not isinstance(results, list):
                    raise RuntimeError("the host's reply carries no results list")
                return results
            self.transport.send(error_line(
                f"code is waiting for the reply to call {self.request_id!r}; "
                f"got {req.get('op')!r} (id {req.get('id')!r})"))


def expect_count(results, n, kind):
    if len(results) != n:
        raise RuntimeError(f"the host answered {kind} with {len(results)} results instead of {n}")
    return results


def check_text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")


def make_helpers(session):
    """The functions user code sees as builtins; they close over the session."""

    def SUBMIT(*values, **fields):
        """Ends the block and hands fields to the host; values take the output names in order."""
        names = session.output_names
        if len(values) > len(names):
            raise TypeError(f"SUBMIT got {len(values)} positional values but the output "
                            f"fields are {names}")
        merged = dict(zip(names, values))
        for name, value in fields.items():
            if name in merged:
                raise TypeError(f"SUBMIT got field {name!r} twice")
            merged[name] = value
        # No local of this frame holds the Submitted: its traceback holds the frame, and such a
        # cycle would keep the values (100 MB of them, maybe) until Python's cycle collector ran.
        raise session.submission(session.check_submit(
            {name: session.field_text(value, f"SUBMIT field {name!r}")
             for name, value in merged.items()}))

    def llm_query(prompt, model=None):
        """Asks a language model; returns its answer text."""
        check_text(prompt, "llm_query: prompt")
        results = session.call("llm_query", {"prompt": prompt, "model": model})
        return expect_count(results, 1, "llm_query")[0]

    def llm_query_batched(prompts, model=None):
        """Asks a language model many prompts at once; returns the answers in order."""
        prompts = list(prompts)
        for i, prompt in enumerate(prompts):
            check_text(prompt, f"llm_query_batched: prompts[{i}]")
        results = session.call("llm_query_batched", {"prompts": prompts, "model": model})
        return expect_count(results, len(prompts), "llm_query_batched")

    def rlm_query(task, context=None):
        """Hands a task (and optional JSON context) to a child RLM; returns its answer."""
        check_text(task, "rlm_query: task")
        results = session.call("rlm_query", {"task": task, "context": context})
        return expect_count(results, 1, "rlm_query")[0]

    def budget():
        """What the run may still spend: calls, tokens, cost (USD), seconds, depth (None: no
        limit), and what it has used. A copy: changing it changes nothing."""
        result = expect_count(session.call("budget", {}), 1, "budget")[0]
        if not isinstance(result, dict):
            raise RuntimeError("the host answered budget() with something that is not a dict")
        return result

    def add_buffer(name, value):
        """Appends value to the named buffer."""
        session.buffers.setdefault(name, []).append(value)

    def get_buffer(name):
        """The named buffer (a list; empty when nothing was added)."""
        return session.buffers.setdefault(name, [])

    def clear_buffer(name=None):
        """Empties one buffer, or all of them."""
        if name is None:
            session.buffers.clear()
        else:
            session.buffers.pop(name, None)

    def SHOW_VARS():
        """Prints the user's variables: name, type, size and a short preview."""
        rows = loads(session.summary()[0])
        if not rows:
            print("(no variables)")
        for row in rows:
            size = "" if row["size"] is None else f", size {row['size']}"
            print(f"{row['name']} ({row['type']}{size}): {row['preview']}")

    return {f.__name__: f for f in (SUBMIT, llm_query, llm_query_batched, rlm_query, budget,
                                    add_buffer, get_buffer, clear_buffer, SHOW_VARS)}


# ---------------------------------------------------------------------------------------------
# Entry points

USAGE = ("usage: driver.py ([--stdio] [--capture-dir DIR] | --serve PATH) [--max-output-chars N] "
         "[--max-submit-bytes B] [--payload-min N] | "
         "--client PATH (--request-file FILE | --request-b64 B64) | "
         "--wait-ready PREFIX [--timeout S]")
# The settings an execute may leave out (see the docstring): option -> (field, least value).
SETTINGS = {"--max-output-chars": ("max_output_chars", 2), "--max-submit-bytes":
            ("max_submit_bytes", 1), "--payload-min": ("payload_min", 1)}


def parse_args(argv):
    opts = {}
    args = iter(argv)
    for arg in args:
        if arg == "--stdio":
            continue
        if arg not in ("--serve", "--client", "--request-file", "--request-b64", "--capture-dir",
                       "--wait-ready", "--timeout") and arg not in SETTINGS:
            raise ValueError(f"unknown argument {arg!r}")
        value = next(args, None)
        if value is None:
            raise ValueError(f"{arg} needs a value")
        if arg in SETTINGS:
            least = SETTINGS[arg][1]
            if not (value.isascii() and value.isdigit()) or int(value) < least:
                raise ValueError(f"{arg} needs an integer >= {least}")
        opts[arg] = value
    if "--client" in opts and ("--request-file" in opts) == ("--request-b64" in opts):
        raise ValueError("--client needs one of --request-file or --request-b64")
    return opts


def client(path, opts):
    import socket
    if "--request-file" in opts:
        with open(opts["--request-file"], "rb") as f:
            request = f.read()
    else:
        import binascii
        request = binascii.a2b_base64(opts["--request-b64"])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sys.stderr.write(f"rlm driver client: no driver is listening at {path} ({e.strerror})\n")
        return 2
    sock.sendall(request.rstrip(b"\n") + b"\n")
    line = recv_line(sock)
    if not line:
        sys.stderr.write(f"rlm driver client: the driver at {path} closed without an answer\n")
        return 2
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.flush()
    return 0


def wait_ready(prefix, timeout):
    """Polls, inside the sandbox, for a --serve driver's ready line: one remote call instead of
    one per poll."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(prefix + ".out", "rb") as f:
                line = f.readline()
            if line.endswith(b"\n"):
                sys.stdout.buffer.write(line)
                return 0
        except FileNotFoundError:
            pass
        try:
            with open(prefix + ".exit") as f:
                status = f.read().strip()
        except FileNotFoundError:
            status = None
        if status is not None:
            try:
                with open(prefix + ".err", "rb") as f:
                    tail = f.read()[-600:].decode("utf-8", "replace").strip()
            except FileNotFoundError:
                tail = ""
            sys.stderr.write(f"exit {status}" + (f": {tail}" if tail else "") + "\n")
            return 3
        if time.monotonic() >= deadline:
            return 4
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------------
# site, when it is needed

class SiteOnDemand:
    """The path finder's stand-in, just before it, in a driver started with -S (the local
    backend starts it so): site (its folders, the .pth files in them and the imports those
    make) costs milliseconds of every sandbox's start, and most cells import only the standard
    library. A top-level import that the path finder cannot find, or finds only as a namespace
    package (a folder of the same name in the working directory would hide an installed
    package), runs site, as the start would have, and is looked for again; so does the first
    look for installed distributions (importlib.metadata). Names the standard library probes
    for on other platforms never run it: site would run in the middle of that import."""

    lock = _thread.RLock()   # re-entered by the imports site itself makes
    state = None             # None, "running", then the folders site added

    @classmethod
    def run_site(cls):
        """The folders site added; "running" for the thread inside site, whose imports reach
        here too. Other threads wait for site to finish."""
        with cls.lock:
            if cls.state is None:
                cls.state = "running"
                before = list(sys.path)
                # The start runs site before "" (the working directory) leads sys.path: site
                # would make it absolute, and imports would stop following the working folder.
                sys.path[:] = [p for p in sys.path if p != ""]
                try:
                    import site
                    site.main()
                finally:
                    added = [p for p in sys.path if p not in before]
                    sys.path[:] = before + added
                    cls.state = added
            return cls.state

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or type(cls.state) is list or name in PLATFORM_PROBES:
            return None   # the path finder goes on as ever
        spec = PathFinder.find_spec(name, None, target)
        if spec is not None and not (spec.origin is None and spec.submodule_search_locations):
            return spec
        if type(cls.run_site()) is not list:
            return spec   # an import site itself makes
        return PathFinder.find_spec(name, None, target)

    @classmethod
    def find_distributions(cls, context):
        added = cls.run_site()
        # The path finder, next, reads the folders the context was made with.
        missing = [p for p in added if p not in context.path] if type(added) is list else ()
        if not missing:
            return ()
        from importlib.metadata import DistributionFinder, MetadataPathFinder
        return MetadataPathFinder.find_distributions(
            DistributionFinder.Context(name=context.name, path=missing))


# Names never looked for in site folders: the standard library's (those missing here are the
# ones it tries on other platforms, as its Windows modules) and Jython's org and java packages.
PLATFORM_PROBES = getattr(sys, "stdlib_module_names", frozenset(
    ("nt", "_winapi", "msvcrt", "winreg", "_overlapped"))) | {"org", "java"}


class SiteBuiltin:
    """Stands for a builtin site sets (exit, help, ...) until it is used: importing site
    imports os, 1.5 ms of a start. Used, it has site set the real one and acts as it."""

    def __init__(self, name, setter):
        self.name, self.setter = name, setter

    def real(self):
        import site
        getattr(site, self.setter)()
        return getattr(builtins, self.name)

    def __repr__(self):
        return repr(self.real())

    def __call__(self, *args, **kwargs):
        return self.real()(*args, **kwargs)


def defer_site():
    """site's builtins when they are used, the rest of site when an import needs it."""
    for name, setter in (("exit", "setquit"), ("quit", "setquit"), ("help", "sethelper"),
                         ("copyright", "setcopyright"), ("credits", "setcopyright"),
                         ("license", "setcopyright")):
        setattr(builtins, name, SiteBuiltin(name, setter))
    sys.meta_path.insert(sys.meta_path.index(PathFinder), SiteOnDemand)


def main(argv):
    try:
        opts = parse_args(argv)
    except ValueError as e:
        sys.stderr.write(f"rlm driver: {e}\n{USAGE}\n")
        return 2
    if "--client" in opts:
        return client(opts["--client"], opts)
    if "--wait-ready" in opts:
        try:
            timeout = float(opts.get("--timeout", "30"))
        except ValueError:
            sys.stderr.write("rlm driver: --timeout needs a number of seconds\n")
            return 2
        return wait_ready(opts["--wait-ready"], timeout)
    if sys.flags.no_site:
        defer_site()
    real_err = moved_high(posix.dup(2))
    real_out = moved_high(posix.dup(1))
    if "--serve" in opts:
        transport = SocketServer(opts["--serve"])
    else:
        transport = Stdio(moved_high(posix.dup(0)), real_out)
    devnull = posix.open("/dev/null", posix.O_RDONLY)
    posix.dup2(devnull, 0)
    posix.close(devnull)
    sys.path[0] = ""  # user imports see the working directory first, as under -c
    sys.stdout.reconfigure(encoding="utf-8")  # the captures are decoded as UTF-8
    sys.stderr.reconfigure(encoding="utf-8")
    capture_dir = opts.get("--capture-dir") or posix.environ.get(b"TMPDIR", b"").decode()
    settings = {field: int(opts[arg]) for arg, (field, _) in SETTINGS.items() if arg in opts}
    session = Session(transport, capture_dir or "/tmp", settings)
    ready = {"ev": "ready", "pid": posix.getpid(), "python": "%d.%d.%d" % sys.version_info[:3]}
    write_all(real_out, (encode(ready) + "\n").encode())
    try:
        session.serve_forever()
    except BaseException as e:
        try:
            report = stdlib_modules("traceback")[0].format_exc()
        except BaseException:   # the code broke the traceback module's way in: the bare error
            report = error_text(e) + "\n"
        write_all(real_err, ("rlm driver crashed:\n" + report).encode("utf-8", "replace"))
        transport.close()
        return 70


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
