"""Tests of lua/rlm/driver.py, started the way the host starts it: python3 -u -c <source>."""
import base64
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import unittest

# The Python that runs the driver; set RLM_TEST_PYTHON to check another version (3.9+).
PYTHON = os.environ.get("RLM_TEST_PYTHON", "/usr/bin/python3")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The joined driver (make lua/rlm/driver.py); RLM_TEST_DRIVER names another, an older one say.
DRIVER = os.environ.get("RLM_TEST_DRIVER") or os.path.join(ROOT, "lua", "rlm", "driver.py")
with open(DRIVER, encoding="utf-8") as _f:
    SOURCE = _f.read()
WAIT = 60.0  # seconds before a test gives up on an event instead of hanging (a loaded machine)
# What a done event's fields are when the driver leaves them out (its docstring).
DONE_DEFAULTS = {"stdout": "", "stderr": "", "stdout_chars": 0, "stderr_chars": 0, "error": None,
                 "traceback": None, "variables_more": 0, "timed_out": False, "submitted": None}


def with_defaults(ev):
    """The host's reading of an event: a done event's field left out is at its default."""
    return dict(DONE_DEFAULTS, **ev) if ev.get("ev") == "done" else ev


def read_line(stream, timeout=WAIT):
    """One line from a pipe, or AssertionError when none comes in time."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise AssertionError(f"no line from the driver within {timeout} s")
    return stream.readline()


def wait_for_file(path, timeout=WAIT):
    """Until a file exists (made by the code under test), or AssertionError after timeout s."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


class Driver:
    """A driver over stdio, as the local backend runs it."""

    def __init__(self, prelude="", flags=(), env=None, cwd=None, args=()):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([PYTHON, "-u", *flags, "-c", prelude + SOURCE, "--stdio", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0, env=env, cwd=cwd)
        self.ready = json.loads(read_line(self.proc.stdout))
        self.start_seconds = time.perf_counter() - self.started
        self.next_id = 0
        self.raw = None

    def send(self, req):
        self.proc.stdin.write((json.dumps(req) + "\n").encode())

    def event(self, timeout=WAIT):
        self.raw = read_line(self.proc.stdout, timeout)
        if not self.raw:
            raise AssertionError("the driver exited: " + self.proc.stderr.read().decode())
        return with_defaults(json.loads(self.raw))

    def request(self, req, timeout=WAIT):
        self.send(req)
        return self.event(timeout)

    def start(self, code, **fields):
        """Sends an execute; returns its id (the first event is read by the caller)."""
        self.next_id += 1
        self.send(dict(op="execute", id=self.next_id, code=code, **fields))
        return self.next_id

    def execute(self, code, **fields):
        rid = self.start(code, **fields)
        ev = self.event()
        assert ev["ev"] == "done" and ev["id"] == rid, ev
        return ev

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()


class DriverTest(unittest.TestCase):
    def setUp(self):
        self.d = Driver()
        self.addCleanup(self.d.close)

    def run_ok(self, code, **fields):
        ev = self.d.execute(code, **fields)
        self.assertIsNone(ev["error"], ev["traceback"])
        return ev


class TestBasics(DriverTest):
    def test_ready_event_and_start_time(self):
        ready = self.d.ready
        self.assertEqual(ready["ev"], "ready")
        self.assertEqual(ready["pid"], self.d.proc.pid)
        self.assertRegex(ready["python"], r"^3\.\d+\.\d+$")
        times = [self.d.start_seconds]
        for _ in range(4):
            other = Driver()
            times.append(other.start_seconds)
            other.close()
        print(f"\n  driver start to ready: median {statistics.median(times) * 1000:.1f} ms "
              f"over {len(times)} starts")

    def test_start_imports_nothing_heavy(self):
        # Each of these costs milliseconds of every sandbox's start (json pulls in re and enum);
        # the driver uses the accelerators behind them, and a syntax tree only when it must.
        ev = self.run_ok("import sys\nx = 1\nprint(sorted(m for m in ('json', 're', 'enum', "
                         "'_ast', 'ast', 'typing') if m in sys.modules))")
        self.assertEqual(ev["stdout"], "[]\n")

    def test_state_persists_across_executes(self):
        self.run_ok("import math\nx = 20\ndef twice(v):\n    return 2 * v")
        ev = self.run_ok("twice(x) + int(math.sqrt(4))")
        self.assertEqual(ev["stdout"], "42\n")

    def test_last_expression_echo(self):
        self.assertEqual(self.run_ok("None")["stdout"], "")
        self.assertEqual(self.run_ok("print('a')")["stdout"], "a\n")
        self.assertEqual(self.run_ok("x = 'q'\nx")["stdout"], "'q'\n")
        self.assertEqual(self.run_ok("for i in range(2):\n    i")["stdout"], "")

    def test_trailing_expression_wherever_the_cell_is_cut(self):
        # The driver cuts a cell before its last line at column 0 and compiles the parts
        # apart; each case would fool a cut that trusts the text instead of the compiler.
        cases = {
            "x = 5\nx": "5\n", "x = 1; x": "1\n", "x = 3\nx  # show it": "3\n",
            "x = 3\n# done\n\n": "", "x = 1\r\nx\r\n": "1\n",
            "f = lambda a=1: a\nf(2)": "2\n", "(y := 5)": "5\n",
            "g = dict\ng(a=1,\nb=2,\n    )": "{'a': 1, 'b': 2}\n",
            "dict(a=1,\nb=2)": "{'a': 1, 'b': 2}\n", "dict(x=1)": "{'x': 1}\n",
            "for i in range(3):\n    pass\nelse:\n    9": "",
            "if True:\n    1\nelif False:\n    2\nelse:\n    3": "",
            "try:\n    1/0\nexcept ZeroDivisionError:\n    7\nfinally:\n    8": "",
            "x = 1 \\\n + 2\nx": "3\n", "y = 3 \\\n== 3\ny": "True\n",
            "[1,\n2]": "[1, 2]\n", "sum(i\nfor i in range(4))": "6\n",
            "v = [i\nfor i in range(3)\nif i]\nv": "[1, 2]\n",
            "d = {'=': 1}\nd['=']": "1\n", "x = 2\n'doc'": "'doc'\n", "'doc'\nx = 1": "",
            "match = 3\nmatch": "3\n", "for_each = 2\nfor_each": "2\n",
            "z = 1\nz if z else 0": "1\n", "x = 0\nx >>= 1\nx": "0\n",
            "from math import (\n    pi,\n)\npi": "3.141592653589793\n",
            "def f():\n    return 4\nf()": "4\n", "print(1, end='')\n": "1",
            "from __future__ import annotations\nx: int = 1\nx": "1\n",
            "x = 1\nx\n   ": "1\n", "x = 1\nx\n\t": "1\n", "passé = [1]\npassé[:1]": "[1]\n",
            "x = 1\n*range(3),": "(0, 1, 2)\n", "x = 1\x0c\n\x0cx": "1\n", "x = 1\rx": "1\n",
            "x = 1\nif x:\n    y = 2\nelse:\n    y = 3\ny": "2\n",
            # one line: a plain assignment is compiled at once, anything else is told apart
            "k = 1 if True else 2": "", "2 <= 3": "True\n", "q = [0] * 2": "",
            "h = lambda a=1: a": "", "print(sep='=')": "\n", "1 != 2": "True\n",
        }
        for code, stdout in cases.items():
            self.d.request({"op": "reset"})
            self.assertEqual(self.run_ok(code)["stdout"], stdout, code)
        self.assertTrue(self.run_ok("lambda a=1: a")["stdout"].startswith("<function <lambda>"))
        self.assertTrue(self.d.execute("@x = 1")["error"].startswith("SyntaxError: invalid syntax"))

    def test_whole_cell_checks_survive_the_cut(self):
        # Checks the compiler makes across the whole module; and an annotation made before the
        # first line runs.
        self.assertEqual(self.d.execute("x = 1\nglobal x")["error"],
                         "SyntaxError: name 'x' is assigned to before global declaration (line 2)")
        self.assertEqual(self.d.execute("1/0\ny: int = 5")["error"],
                         "ZeroDivisionError: division by zero")
        self.assertEqual(self.run_ok("print('__annotations__' in globals())")["stdout"], "True\n")

    def test_a_warning_is_shown_once(self):
        ev = self.run_ok("x = 'a'\nif x is 'a':\n    y = 1\nelse:\n    y = 2")
        self.assertEqual(ev["stderr"].count("SyntaxWarning"), 1, ev["stderr"])

    def test_line_numbers_survive_the_cut(self):
        for code, line in (("a = 1\nb = 2\n\nraise ValueError('v')", 4), ("a = 1\n\n1/0", 3),
                           ("a = 1\n\nb = = 2", 3), ("x = [\n1,\n]\n\n\nx.y", 6)):
            ev = self.d.execute(code)
            self.assertIn(f"line {line}", ev["traceback"], code)

    def test_variables_injection_and_summary(self):
        ev = self.run_ok("import os\n__hidden__ = 1\nprint(context[:3], n * 2)\n_private = [1, 2]",
                         variables={"context": "abcdef" * 100, "n": 21, "big": list(range(100000))})
        self.assertEqual(ev["stdout"], "abc 42\n")
        rows = {v["name"]: v for v in ev["variables"]}
        self.assertEqual(set(rows), {"context", "n", "big", "_private"})
        self.assertEqual(rows["context"]["type"], "str")
        self.assertEqual(rows["context"]["size"], 600)
        self.assertLessEqual(len(rows["context"]["preview"]), 100)
        self.assertTrue(rows["context"]["preview"].startswith("'abcdefabcdef"))
        self.assertEqual(rows["n"], {"name": "n", "type": "int", "size": None, "preview": "21"})
        self.assertEqual(rows["big"]["size"], 100000)
        self.assertTrue(rows["big"]["preview"].startswith("[0, 1, 2"))
        self.assertEqual(rows["_private"]["preview"], "[1, 2]")

    def test_summary_rows_of_every_scalar_and_odd_names(self):
        # Scalar rows are written without escaping, other rows through it: each must stay JSON.
        ev = self.run_ok("f, g, h = float('inf'), "
                         "-2.5e-300, float('nan')\nt, u = True, None\nbig = -10 ** 200\n"
                         "K = type('a\"b\\\\c\\u00e9', (), {})\nk = K()\n\u00e9t\u00e9 = -7")
        rows = {v["name"]: v for v in json.loads(self.d.raw)["variables"]}
        self.assertEqual({n: rows[n]["preview"] for n in ("f", "g", "h", "t", "u", "\u00e9t\u00e9")},
                         {"f": "inf", "g": "-2.5e-300", "h": "nan", "t": "True", "u": "None",
                          "\u00e9t\u00e9": "-7"})
        self.assertEqual(rows["t"]["type"], "bool")
        self.assertEqual(rows["u"]["type"], "NoneType")
        self.assertEqual(rows["big"]["type"], "int")
        self.assertTrue(rows["big"]["preview"].startswith("-1000") and
                        rows["big"]["preview"].endswith("..."), rows["big"])
        self.assertEqual(rows["k"]["type"], 'a"b\\c\u00e9')
        self.assertTrue(rows["k"]["preview"].startswith('<__main__.a"b\\c\u00e9 object'), rows["k"])
        self.assertIn("k (a\"b\\c\u00e9): <__main__", self.run_ok("SHOW_VARS()")["stdout"])

    def test_summary_lists_objects_whose_hooks_raise(self):
        # A half-made object's __repr__ or __len__ that raises (a mistake): listed all the same.
        ev = self.run_ok(
            "class Half:\n    def __repr__(self):\n        return self.name\n"
            "    def __len__(self):\n        raise ValueError('not ready')\n"
            "h = Half()\nafter = 5")
        rows = {v["name"]: v for v in ev["variables"]}
        self.assertEqual(rows["h"], {"name": "h", "type": "Half", "size": None,
                                     "preview": "<Half: repr failed with AttributeError>"})
        self.assertEqual(rows["after"]["preview"], "5")
        self.assertIn("h (Half): <Half: repr failed", self.run_ok("SHOW_VARS()")["stdout"])

    def test_summary_of_huge_containers_looks_at_a_few_items(self):
        # The work of a preview does not grow with a container: a few items' reprs, counted.
        self.run_ok("class R:\n    def __repr__(self):\n        global reprs\n"
                    "        reprs += 1\n        return 'r'\n"
                    "d = {str(i): R() for i in range(1_000_000)}\ns = [R()] * 1_000_000\nreprs = 0")
        ev = self.run_ok("print(reprs)\nreprs = 0")
        self.assertTrue(1 <= int(ev["stdout"]) <= 20, ev["stdout"])
        rows = {v["name"]: v for v in ev["variables"]}
        self.assertEqual((rows["d"]["size"], rows["s"]["size"]), (1_000_000, 1_000_000))
        self.assertLessEqual(len(rows["d"]["preview"]), 100)

    def test_show_vars(self):
        ev = self.run_ok("answer = 42\nitems = [1, 2, 3]\nSHOW_VARS()")
        self.assertEqual(ev["stdout"], "answer (int): 42\nitems (list, size 3): [1, 2, 3]\n")

    def test_ping_and_bad_requests_keep_serving(self):
        self.assertEqual(self.d.request({"op": "ping"}), {"ev": "pong"})
        ev = self.d.request({"op": "nope"})
        self.assertEqual(ev["ev"], "error")
        self.assertIn("nope", ev["message"])
        self.d.proc.stdin.write(b"{not json\n")
        self.assertEqual(self.d.event()["ev"], "error")
        self.assertEqual(self.d.request({"op": "execute", "id": 1, "code": 5})["ev"], "error")
        self.assertEqual(self.d.request({"op": "reply", "id": 1, "results": []})["ev"], "error")
        self.assertEqual(self.run_ok("1 + 1")["stdout"], "2\n")

    def test_shutdown_and_eof_exit_zero(self):
        self.assertEqual(self.d.request({"op": "shutdown"}), {"ev": "bye"})
        self.assertEqual(self.d.proc.wait(WAIT), 0)
        other = Driver()
        self.addCleanup(other.close)
        other.proc.stdin.close()
        self.assertEqual(other.proc.wait(WAIT), 0)
        waiting = Driver()
        self.addCleanup(waiting.close)
        waiting.start("llm_query('never answered')")
        self.assertEqual(waiting.event()["ev"], "call")
        waiting.proc.stdin.close()
        self.assertEqual(waiting.proc.wait(WAIT), 0)


class TestReadText(DriverTest):
    """__rlm_read_text__, the host's load of a long context: the str read() and decode give,
    built in place a chunk (1 MB) at a time."""

    def test_same_str_as_decode_for_every_width_and_bad_bytes(self):
        cases = {"ascii": b"abc\n" * 700000, "latin": ("x\xe9" * 800000).encode(),
                 "bmp": ("ab\u20ac" * 600000).encode(), "astral": ("\U0001F600a" * 400000).encode(),
                 "bad": b"ab\xff\xc3" * 500000 + b"\xe2\x82", "empty": b"", "small": "h\xe9".encode(),
                 "split": b"a" * ((1 << 20) - 1) + "\u20ac".encode() + b"z" * 10,
                 "late_wide": b"a" * (3 << 20) + "\U0001F600".encode()}
        with tempfile.TemporaryDirectory() as tmp:
            for name, data in cases.items():
                path = os.path.join(tmp, name)
                with open(path, "wb") as f:
                    f.write(data)
                ev = self.run_ok(
                    f"got = __rlm_read_text__({path!r})\n"
                    f"want = open({path!r}, 'rb').read().decode('utf-8', 'surrogateescape')\n"
                    "import sys\n"
                    "print(got == want, hash(got) == hash(want), len(got) == len(want),\n"
                    "      sys.getsizeof(got) == sys.getsizeof(want), got[-3:] + 'q' == want[-3:] + 'q',\n"
                    "      {got: 1}.get(want))\n"
                    "del got, want")
                self.assertEqual(ev["stdout"], "True True True True True 1\n", name)


class TestSiteOnDemand(unittest.TestCase):
    """Started with -S (as the local backend starts it), the driver runs site only when an
    import or a look for distributions needs it; code must not see the difference."""

    def setUp(self):
        base = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, base)
        version = "python%d.%d" % tuple(json.loads(subprocess.run(
            [PYTHON, "-c", "import sys, json; print(json.dumps(sys.version_info[:2]))"],
            capture_output=True, text=True, check=True).stdout))
        self.site_dir = site_dir = os.path.join(base, "lib", version, "site-packages")
        os.makedirs(os.path.join(site_dir, "probe_dist-1.0.dist-info"))
        with open(os.path.join(site_dir, "rlm_probe.py"), "w") as f:
            f.write("VALUE = 42\n")
        with open(os.path.join(site_dir, "probe.pth"), "w") as f:
            f.write("import os; os.environ['RLM_PTH_RAN'] = '1'\n")
        with open(os.path.join(site_dir, "probe_dist-1.0.dist-info", "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: probe-dist\nVersion: 1.0\n")
        # The user site folder is one site adds; PYTHONUSERBASE puts it here.
        env = dict(os.environ, PYTHONUSERBASE=base)
        self.d = Driver(flags=["-S"], env=env, cwd=base)
        self.addCleanup(self.d.close)
        self.other = Driver(flags=["-S"], env=env)
        self.addCleanup(self.other.close)

    def run_ok(self, driver, code):
        ev = driver.execute(code)
        self.assertIsNone(ev["error"], ev["traceback"])
        return ev["stdout"]

    def test_site_runs_at_the_first_import_it_is_needed_for(self):
        self.assertEqual(self.run_ok(self.d, "import sys, json\nprint('site' in sys.modules, "
                                     "'os' in sys.modules, any(p.endswith(('site-packages', "
                                     "'dist-packages')) for p in sys.path))"),
                         "False False False\n")
        self.assertEqual(self.run_ok(self.d, "import rlm_probe, os\nprint(rlm_probe.VALUE, "
                                     "os.environ.get('RLM_PTH_RAN'), sys.path[0] == '')"),
                         "42 1 True\n")
        ev = self.d.execute("import no_such_module_anywhere")
        self.assertEqual(ev["error"], "ModuleNotFoundError: No module named "
                                      "'no_such_module_anywhere'")

    def test_standard_library_probes_do_not_run_site(self):
        # pathlib, copy, subprocess... look for Windows and Jython modules: site must not run
        # in the middle of them (a .pth file needing the half-made module would fail).
        self.assertEqual(self.run_ok(self.d, "import pathlib, copy, pickle, subprocess, zipfile, "
                                     "sys\nprint('site' in sys.modules)"), "False\n")

    def test_a_folder_in_the_working_directory_does_not_hide_a_package(self):
        # Found first as a namespace package (a folder without __init__.py), the name is looked
        # for again once site has run, as it would have been with site at the start.
        with open(os.path.join(self.site_dir, "shadowed.py"), "w") as f:
            f.write("REAL = True\n")
        self.run_ok(self.d, "import posix\nposix.mkdir('shadowed')")
        self.assertEqual(self.run_ok(self.d, "import shadowed\nprint(shadowed.REAL)"), "True\n")

    def test_threads_importing_at_first_use(self):
        # Every thread's import waits for the one that runs site, then finds its module.
        for k in range(8):
            with open(os.path.join(self.site_dir, f"probe_t{k}.py"), "w") as f:
                f.write(f"K = {k}\n")
        code = ("import threading\nbar = threading.Barrier(8)\ngot = []\n"
                "def load(k):\n    bar.wait()\n    got.append(__import__(f'probe_t{k}').K)\n"
                "ts = [threading.Thread(target=load, args=(k,)) for k in range(8)]\n"
                "for t in ts: t.start()\nfor t in ts: t.join()\nprint(sorted(got))")
        self.assertEqual(self.run_ok(self.d, code), str(list(range(8))) + "\n")

    def test_distributions_and_site_builtins(self):
        self.assertEqual(self.run_ok(self.other, "import importlib.metadata as m\n"
                                     "print(m.version('probe-dist'))"), "1.0\n")
        self.assertEqual(self.run_ok(self.d, "print(exit)\nprint(callable(help), "
                                     "'Python' in repr(copyright))"),
                         "Use exit() or Ctrl-D (i.e. EOF) to exit\nTrue True\n")
        self.assertEqual(self.d.execute("quit(3)")["error"], "SystemExit: 3")
        self.assertEqual(self.run_ok(self.d, "print(1)"), "1\n")


class TestOutput(DriverTest):
    def test_print_and_subprocess_output_are_captured(self):
        ev = self.run_ok("import os, subprocess\nprint('a')\nos.system('echo hi')\n"
                         "subprocess.run(['sh', '-c', 'echo err >&2'])\nprint('b')")
        self.assertEqual(ev["stdout"], "a\nhi\nb\n")
        self.assertEqual(ev["stderr"], "err\n")
        self.assertEqual(ev["stdout_chars"], 7)

    def test_stderr(self):
        ev = self.run_ok("import sys\nsys.stderr.write('oops\\n')\nprint('fine')")
        self.assertEqual(ev["stderr"], "oops\n")
        self.assertEqual(ev["stdout"], "fine\n")
        self.assertEqual(self.run_ok("pass")["stderr"], "")

    def test_long_output_keeps_head_and_tail(self):
        ev = self.run_ok("print('H' * 60 + 'x' * 1000 + 'T' * 60, end='')", max_output_chars=100)
        self.assertEqual(ev["stdout_chars"], 1120)
        self.assertEqual(ev["stdout"], "H" * 50 + "\n... [1020 characters cut] ...\n" + "T" * 50)

    def test_long_multibyte_output_counts_characters(self):
        ev = self.run_ok("print('é' * 30000 + '→', end='')", max_output_chars=20)
        self.assertEqual(ev["stdout_chars"], 30001)
        self.assertEqual(ev["stdout"],
                         "é" * 10 + "\n... [29981 characters cut] ...\n" + "é" * 9 + "→")

    def test_50_mb_output_does_not_blow_memory(self):
        ev = self.run_ok("import sys\nline = 'y' * 1023 + '\\n'\n"
                         "for _ in range(50 * 1024):\n    sys.stdout.write(line)\nprint('END')",
                         max_output_chars=1000)
        self.assertEqual(ev["stdout_chars"], 50 * 1024 * 1024 + 4)
        self.assertTrue(ev["stdout"].startswith("y" * 500))
        self.assertTrue(ev["stdout"].endswith("y\nEND\n"))
        self.assertIn(f"... [{50 * 1024 * 1024 + 4 - 1000} characters cut] ...", ev["stdout"])
        with open(f"/proc/{self.d.proc.pid}/status") as f:
            peak_kb = int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
        self.assertLess(peak_kb, 40 * 1024, "the driver's peak memory grew with the output")
        self.assertEqual(self.run_ok("print(1)")["stdout"], "1\n")

    def test_user_output_never_corrupts_the_protocol(self):
        ev = self.run_ok(
            "import os, sys\nprint('{\"ev\":\"done\",\"id\":99}')\n"
            "os.write(1, b'{\"ev\":\"pong\"}\\n')\nsys.__stdout__.write('raw\\n')\n"
            "try:\n    input()\nexcept EOFError:\n    print('stdin is closed')")
        self.assertEqual(ev["stdout"],
                         '{"ev":"done","id":99}\n{"ev":"pong"}\nraw\nstdin is closed\n')
        self.assertEqual(self.d.request({"op": "ping"}), {"ev": "pong"})

    def test_closed_fd_1_is_restored(self):
        self.run_ok("import os\nos.close(1)")
        self.assertEqual(self.run_ok("print('back')")["stdout"], "back\n")

    def test_writers_that_outlive_their_block_lose_nothing(self):
        # A thread writing without pause, and a process left running in the background: every
        # line reaches some block's output (the first block's included: the process may write
        # before that block's output is read), once and in order (the capture is never emptied
        # under them). The writers end only when told to, after 150 blocks ran beside them.
        out, err = [], []

        def collect(code):
            ev = self.run_ok(code, max_output_chars=10 ** 9)
            out.append(ev["stdout"])
            err.append(ev["stderr"])

        collect("import os, subprocess, threading, time\nrunning = True\n"
                "def spam():\n    i = 0\n    while running or i < 3000:\n"
                "        os.write(1, b'%d\\n' % i)\n        i += 1\n        time.sleep(0.0001)\n"
                "writer = threading.Thread(target=spam, daemon=True)\nwriter.start()\n"
                "p = subprocess.Popen(['/bin/sh', '-c', 'i=0; while [ $i -lt 3000 ]; do "
                "echo $i >&2; i=$((i+1)); done'])")
        for _ in range(150):
            collect("time.sleep(0.002)")
        collect("running = False\nwriter.join()\nstatus = p.wait()")
        numbers = [int(x) for x in "".join(out).split()]
        self.assertGreaterEqual(len(numbers), 3000)
        self.assertEqual(numbers, list(range(len(numbers))))
        self.assertEqual("".join(err).split(), [str(i) for i in range(3000)])

    def test_output_of_stray_continuation_bytes_is_kept_and_cut(self):
        ev = self.run_ok("import os\nn = os.write(1, b'\\x80' * 3000)", max_output_chars=1000)
        self.assertEqual(ev["stdout_chars"], 3000)
        self.assertEqual(len(ev["stdout"]), 1000 + len("\n... [2000 characters cut] ...\n"))
        self.assertIn("\n... [2000 characters cut] ...\n", ev["stdout"])
        ev = self.run_ok("import os\nn = os.write(1, b'\\x80' * 30)", max_output_chars=1000)
        self.assertEqual((ev["stdout"], ev["stdout_chars"]), ("\ufffd" * 30, 30))

    def test_a_capture_file_the_code_empties_still_captures(self):
        self.run_ok("print('a' * 10)")
        ev = self.run_ok("import os\nos.ftruncate(1, 0)\nprint('after')")
        self.assertEqual(ev["stdout"], "after\n")
        self.assertEqual(self.run_ok("print('next')")["stdout"], "next\n")

    def test_moved_fd_1_and_2_keep_what_came_before_and_are_put_back(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = f"{tmp}/elsewhere"
            ev = self.run_ok(
                "import os\nprint('before', flush=True)\nos.write(2, b'err before\\n')\n"
                f"f = os.open({path!r}, os.O_WRONLY | os.O_CREAT)\nos.dup2(f, 1)\nos.dup2(f, 2)\n"
                "os.write(1, b'moved\\n')\nn = os.write(2, b'moved err\\n')")
            self.assertEqual((ev["stdout"], ev["stderr"]), ("before\n", "err before\n"))
            with open(path) as fh:
                self.assertEqual(fh.read(), "moved\nmoved err\n")
            ev = self.run_ok("import os\nos.write(1, b'back\\n')\nn = os.write(2, b'err back\\n')")
            self.assertEqual((ev["stdout"], ev["stderr"]), ("back\n", "err back\n"))
            ev = self.run_ok("import os\nos.lseek(1, 0, os.SEEK_SET)\nn = os.write(1, b'xy')")
            self.assertEqual(ev["stdout"], "xy")

    def test_closed_capture_files_are_replaced(self):
        find = ("import os\nfds = []\nfor f in os.listdir('/proc/self/fd'):\n    try:\n"
                "        if int(f) > 2 and 'rlm-driver-' in os.readlink(f'/proc/self/fd/{f}'):\n"
                "            fds.append(int(f))\n    except OSError:\n        pass\n")
        ev = self.run_ok(find + "print(sorted(fds))")
        self.assertTrue(all(fd >= 100 for fd in eval(ev["stdout"])), ev["stdout"])
        ev = self.d.execute(find + "for fd in fds:\n    os.close(fd)\nprint('lost')")
        self.assertEqual(ev["ev"], "done")
        ev = self.run_ok("import sys\nprint('out')\nprint('err', file=sys.stderr)")
        self.assertEqual((ev["stdout"], ev["stderr"]), ("out\n", "err\n"))
        ev = self.run_ok(find + "f = open('/dev/null')\nprint(f.fileno() < 100, len(fds))")
        self.assertEqual(ev["stdout"], "True 2\n")

    def test_capture_works_under_a_low_open_files_limit(self):
        d = Driver(prelude="import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n")
        self.addCleanup(d.close)
        ev = d.execute("import sys\nprint('out')\nprint('err', file=sys.stderr)")
        self.assertEqual((ev["stdout"], ev["stderr"]), ("out\n", "err\n"))

    def test_replaced_sys_stdout_is_restored(self):
        self.run_ok("import io, sys\nsys.stdout = io.StringIO()\nprint('lost')")
        self.assertEqual(self.run_ok("print('seen')")["stdout"], "seen\n")


class TestSubmit(DriverTest):
    def test_final_in_code_ends_the_block_as_submit_does(self):
        # Models write FINAL(...) in code as a natural pattern (alexzhang13/rlm PR #115): the
        # block ends at the call, so a second call and the lines after it never run.
        ev = self.run_ok("x = 6 * 7\nprint('before')\nFINAL(x)\nprint('after')\nFINAL(0)")
        self.assertEqual(ev["submitted"], {"answer": 42})
        self.assertEqual(ev["stdout"], "before\n")
        ev = self.run_ok("try:\n    FINAL('a')\nexcept Exception:\n    print('swallowed')\n"
                         "SUBMIT(answer='b')")
        self.assertEqual((ev["submitted"], ev["stdout"]), ({"answer": "a"}, ""))
        ev = self.run_ok("FINAL([1, 2])", output_names=["items"])
        self.assertEqual(ev["submitted"], {"items": [1, 2]})

    def test_final_var_takes_a_name_or_a_value(self):
        ev = self.run_ok("result = {'n': 3}\nFINAL_VAR('result')")
        self.assertEqual(ev["submitted"], {"answer": {"n": 3}})
        ev = self.run_ok("result = 'ok'\nFINAL_VAR(result)")   # its value, though 'ok' is a name
        self.assertEqual(ev["submitted"], {"answer": "ok"})
        # A value that names a variable is still the value it was passed as.
        ev = self.run_ok("word = 'context'\ncontext = 'big'\nFINAL_VAR(word)")
        self.assertEqual(ev["submitted"], {"answer": "context"})
        ev = self.run_ok("FINAL_VAR(' \"result\" ')")   # the reference's quoted-name spelling
        self.assertEqual(ev["submitted"], {"answer": "ok"})
        ev = self.run_ok("FINAL_VAR('The answer is 5.')")   # no name: the text itself
        self.assertEqual(ev["submitted"], {"answer": "The answer is 5."})

    def test_final_var_of_a_missing_name_is_a_clear_error(self):
        ev = self.d.execute("FINAL_VAR('nothing_here')\nprint('after')")
        self.assertEqual(ev["error"], "NameError: FINAL_VAR: no variable is named 'nothing_here'")
        self.assertIsNone(ev["submitted"])
        self.assertEqual(ev["stdout"], "")

    def test_final_with_several_outputs_says_to_use_submit(self):
        ev = self.d.execute("FINAL('x')", output_names=["a", "b"])
        self.assertEqual(ev["error"], "TypeError: FINAL gives one value, and this task's outputs "
                         "are a, b: call SUBMIT(a=..., b=...)")
        self.assertIsNone(ev["submitted"])

    def test_kwargs_end_the_block(self):
        ev = self.run_ok("print('before')\nSUBMIT(answer=42, note='x')\nprint('after')")
        self.assertEqual(ev["submitted"], {"answer": 42, "note": "x"})
        self.assertEqual(ev["stdout"], "before\n")

    def test_except_exception_does_not_catch_submit(self):
        ev = self.run_ok("try:\n    SUBMIT(answer=1)\nexcept Exception:\n    print('swallowed')")
        self.assertEqual(ev["submitted"], {"answer": 1})
        self.assertEqual(ev["stdout"], "")

    def test_positional_values_take_output_names(self):
        ev = self.run_ok("SUBMIT('x', [1, (2, 3)], extra=None)", output_names=["first", "second"])
        self.assertEqual(ev["submitted"], {"first": "x", "second": [1, [2, 3]], "extra": None})
        ev = self.run_ok("SUBMIT(7)")
        self.assertEqual(ev["submitted"], {"answer": 7})
        ev = self.d.execute("SUBMIT(1, 2)")
        self.assertIn("TypeError: SUBMIT got 2 positional values", ev["error"])
        ev = self.d.execute("SUBMIT(1, answer=2)")
        self.assertEqual(ev["error"], "TypeError: SUBMIT got field 'answer' twice")

    def test_non_serialisable_value_is_a_type_error(self):
        ev = self.d.execute("SUBMIT(x={1, 2})")
        self.assertEqual(ev["error"], "TypeError: SUBMIT field 'x' is not JSON-serialisable (set)")
        self.assertIsNone(ev["submitted"])
        self.assertIn("SUBMIT(x={1, 2})", ev["traceback"])
        ev = self.run_ok("try:\n    SUBMIT(y=[object()])\nexcept TypeError as e:\n    print(e)")
        self.assertEqual(ev["stdout"], "SUBMIT field 'y' is not JSON-serialisable (object)\n")
        ev = self.d.execute("SUBMIT(z=float('nan'))")
        self.assertTrue(
            ev["error"].startswith("TypeError: SUBMIT field 'z' is not JSON-serialisable"))

    def test_bytes_are_sent_with_surrogate_escapes(self):
        ev = self.run_ok("SUBMIT(raw=b'ok\\xff\\x80', text='h\\u00e9')")
        self.assertIn('"raw":"ok\\udcff\\udc80"', self.d.raw.decode())
        self.assertEqual(ev["submitted"]["raw"].encode("utf-8", "surrogateescape"), b"ok\xff\x80")
        self.assertEqual(ev["submitted"]["text"], "hé")

    def test_big_integers_stay_exact(self):
        ev = self.run_ok("import math\nSUBMIT(answer=math.factorial(25), small=2**63 - 1)")
        self.assertIn('"answer":15511210043330985984000000', self.d.raw.decode())
        self.assertIn('"small":9223372036854775807', self.d.raw.decode())
        self.assertEqual(ev["submitted"]["answer"], 15511210043330985984000000)

    def test_huge_int_is_a_type_error_in_python(self):
        ev = self.d.execute("SUBMIT(answer=10**400)")
        self.assertIsNone(ev["submitted"])
        self.assertIn("309 digits or more", ev["error"])
        ev = self.d.execute("SUBMIT(answer=['1' * 400, 10**300])")
        self.assertEqual(ev["submitted"]["answer"][0], "1" * 400, "a digit string is fine")

    def test_final_variable(self):
        ev = self.run_ok("Final = 'the answer'")
        self.assertEqual(ev["submitted"], {"answer": "the answer"})
        self.assertIsNone(self.run_ok("x = Final")["submitted"])
        self.assertIsNone(self.d.execute("Final = 'late'\n1/0")["submitted"])
        ev = self.d.execute("Final = {1}")
        self.assertEqual(ev["error"], "TypeError: Final is not JSON-serialisable (set)")

    def test_submit_over_max_submit_bytes_raises_in_python(self):
        code = "try:\n    SUBMIT(answer='x' * 5000)\nexcept ValueError as e:\n    print(e)\nSUBMIT(n=1)"
        ev = self.run_ok(code, max_submit_bytes=4096)
        self.assertIn("SUBMIT is at least 5006 bytes of JSON, over the limit of 4096 bytes "
                      "(limits.submit)", ev["stdout"])
        self.assertEqual(ev["submitted"], {"n": 1})
        # past the cap only once encoded (each escaped to six characters): measured exactly
        code = code.replace("'x' * 5000", "'\\u00e9' * 1000")
        ev = self.run_ok(code, max_submit_bytes=4096)
        self.assertIn("SUBMIT is 6008 bytes of JSON, over the limit of 4096 bytes (limits.submit)",
                      ev["stdout"])
        self.assertEqual(ev["submitted"], {"n": 1})
        ev = self.d.execute("Final = 'y' * 5000", max_submit_bytes=4096)
        self.assertIsNone(ev["submitted"])
        self.assertIn("limits.submit", ev["error"])
        self.assertEqual(self.run_ok("SUBMIT(answer='x' * 4000)", max_submit_bytes=4096)
                         ["submitted"]["answer"], "x" * 4000)

    def test_submit_past_the_cap_is_refused_before_it_is_encoded(self):
        # The first field alone is past the cap: the second, whose encoding would fail (and
        # a huge one would cost seconds and memory), is never encoded.
        code = ("class Spy:\n    pass\n"
                "SUBMIT(answer='x' * 5000, more=Spy())")
        ev = self.d.execute(code, max_submit_bytes=4096)
        self.assertIsNone(ev["submitted"])
        self.assertIn("SUBMIT is at least 5006 bytes of JSON, over the limit of 4096 bytes "
                      "(limits.submit)", ev["error"])
        # a value inside a list is counted too, before its JSON is made
        ev = self.d.execute("SUBMIT(answer=[['\u00e9' * 5000]])", max_submit_bytes=4096)
        self.assertIn("over the limit of 4096 bytes (limits.submit)", ev["error"])
        ev = self.d.execute("Final = ['y' * 5000, Spy()]", max_submit_bytes=4096)
        self.assertIn("over the limit of 4096 bytes (limits.submit)", ev["error"])
        # the lower bound: what fits goes through, its size counted exactly as before
        ev = self.run_ok("SUBMIT(a='x' * 2000, b=['y' * 2000])", max_submit_bytes=4096)
        self.assertEqual(ev["submitted"], {"a": "x" * 2000, "b": ["y" * 2000]})

    def test_variables_summary_is_capped(self):
        ev = self.run_ok("import json\nfor i in range(5000):\n    globals()[f'v{i}'] = i")
        self.assertEqual(len(ev["variables"]), 50)
        self.assertEqual([v["name"] for v in ev["variables"][:2]], ["i", "v0"])
        self.assertEqual(ev["variables_more"], 4951)   # v49..v4999: 4,951 names not listed
        ev = self.run_ok("del v4999\nx = 1")
        self.assertEqual(ev["variables_more"], 4951)   # one gone, one more
        ev = self.run_ok("pass")
        self.assertEqual(ev["variables_more"], 4951)
        listing = self.run_ok("SHOW_VARS()", max_output_chars=10 ** 7)["stdout"]
        self.assertEqual(listing.count("\n"), 5001)   # i, v0..v4998 and x: all, on request
        self.assertIn("v4998 (int): 4998\n", listing)


class TestErrors(DriverTest):
    def test_exception_error_line_and_traceback(self):
        self.run_ok("def f(x):\n    return x / 0")
        ev = self.d.execute("y = 1\nf(y)")
        self.assertEqual(ev["error"], "ZeroDivisionError: division by zero")
        tb = ev["traceback"]
        self.assertTrue(tb.startswith("Traceback (most recent call last):\n"), tb)
        self.assertIn('File "<rlm-cell-2>", line 2, in <module>\n    f(y)', tb)
        self.assertIn('File "<rlm-cell-1>", line 2, in f\n    return x / 0', tb)
        self.assertNotIn("<string>", tb)
        self.assertNotIn("driver", tb)
        self.assertTrue(tb.rstrip().endswith("ZeroDivisionError: division by zero"))
        self.assertEqual(self.run_ok("y")["stdout"], "1\n")

    def test_chained_and_custom_exceptions(self):
        ev = self.d.execute("class Oops(Exception):\n    pass\ntry:\n    {}['k']\n"
                            "except KeyError as e:\n    raise Oops('bad') from e")
        self.assertEqual(ev["error"], "Oops: bad")
        self.assertIn("KeyError: 'k'", ev["traceback"])
        self.assertIn("direct cause", ev["traceback"])
        self.assertEqual(self.d.execute("raise SystemExit(3)")["error"], "SystemExit: 3")
        self.assertEqual(self.d.execute("raise KeyboardInterrupt")["error"], "KeyboardInterrupt")

    def test_syntax_error_reports_the_line(self):
        ev = self.d.execute("a = 1\nb = = 2\n")
        self.assertEqual(ev["error"], "SyntaxError: invalid syntax (line 2)")
        self.assertIn('"<rlm-cell-1>", line 2', ev["traceback"])
        self.assertIn("b = = 2", ev["traceback"])
        self.assertEqual(ev["variables"], [])

    def test_timeout_stops_a_busy_loop_and_keeps_state(self):
        self.run_ok("x = 5")
        started = time.perf_counter()
        ev = self.d.execute("while True:\n    pass", timeout=0.3)
        self.assertEqual(ev["error"], "TimeoutError: execution exceeded 0.3 seconds")
        self.assertTrue(ev["timed_out"])
        self.assertGreaterEqual(time.perf_counter() - started, 0.3)
        self.assertIn('File "<rlm-cell-2>", line', ev["traceback"])
        ev = self.run_ok("x", timeout=5)
        self.assertEqual(ev["stdout"], "5\n")
        self.assertFalse(ev["timed_out"])

    def test_timeout_interrupts_sleep(self):
        self.run_ok("import time\nstate = 'kept'")
        started = time.perf_counter()
        ev = self.d.execute("time.sleep(100)", timeout=0.3)
        self.assertGreaterEqual(time.perf_counter() - started, 0.3)
        self.assertEqual(ev["error"], "TimeoutError: execution exceeded 0.3 seconds")
        self.assertEqual(self.run_ok("state")["stdout"], "'kept'\n")
        # The timer is disarmed after a block that ends in time.
        self.run_ok("pass", timeout=0.2)
        time.sleep(0.3)
        self.assertEqual(self.run_ok("time.sleep(0.05)")["error"], None)

    def test_a_timer_kept_across_quick_blocks_still_stops_a_long_one(self):
        # Quick blocks in a row keep the timer armed by the first (no timer call each); the
        # block that runs long is stopped no sooner than its timeout (and stopped: a block
        # that is not never ends, and the event's wait fails).
        for timeout in (0.5, 0.3):
            for _ in range(5):
                self.run_ok("pass", timeout=timeout)
            started = time.perf_counter()
            ev = self.d.execute("while True:\n    pass", timeout=timeout)
            took = time.perf_counter() - started
            self.assertEqual(ev["error"], f"TimeoutError: execution exceeded {timeout} seconds")
            self.assertGreaterEqual(took, timeout)
        # The host's timeout shrinking with the sandbox's time left keeps the same end.
        end = time.monotonic() + 2.0
        left = lambda: max(0.05, round(end - time.monotonic(), 3))
        for _ in range(3):
            self.run_ok("pass", timeout=left())
        ev = self.d.execute("while True:\n    pass", timeout=left())
        self.assertTrue(ev["timed_out"])

    def test_a_timer_running_out_between_blocks_stops_no_later_block(self):
        # A block's timer left to run out fires while the next block is being set up; the
        # next block (with or without a timeout of its own) must not be stopped by it.
        for k in range(3000):
            first = {"op": "execute", "id": 1, "code": "pass", "timeout": 0.00002 + k % 30 * 2e-5}
            second = {"op": "execute", "id": 2, "code": "pass"}
            if k % 2:
                second["timeout"] = 5
            self.d.proc.stdin.write((json.dumps(first) + "\n" + json.dumps(second) + "\n").encode())
            self.d.event()
            ev = self.d.event()
            self.assertIsNone(ev["error"], (k, ev["error"]))

    def test_a_sigalrm_from_elsewhere_leaves_the_timer_alone(self):
        # The code (or another process) sends SIGALRM: the timer still runs, and a block
        # without a timeout after it stops it rather than being stopped by it.
        ev = self.run_ok("import os\ntry:\n    os.kill(os.getpid(), 14)\nexcept TimeoutError:\n"
                         "    print('caught')", timeout=0.3)
        self.assertEqual(ev["stdout"], "caught\n")
        self.assertIsNone(self.run_ok("import time\ntime.sleep(0.5)")["error"])

    def test_code_that_replaces_time_monotonic_does_not_move_the_timer(self):
        self.run_ok("import time\nreal = time.monotonic\ntime.monotonic = lambda: 1000.0")
        self.run_ok("pass", timeout=3)
        time.sleep(1.5)   # a frozen clock would keep that block's timer for the next one
        self.assertIsNone(self.run_ok("time.sleep(2)", timeout=3)["error"])
        self.run_ok("time.monotonic = real")

    def test_a_thread_call_that_ends_after_its_block_leaves_the_driver_well(self):
        rid = self.d.start("import threading\nthreading.Thread(target=lambda: llm_query('q'))"
                           ".start()", timeout=0.3)
        self.assertEqual(self.d.event()["ev"], "call")
        time.sleep(0.1)
        ev = self.d.request({"op": "reply", "id": rid, "results": ["a"]})
        self.assertEqual(ev["ev"], "done")
        time.sleep(0.5)   # past the block's timeout, with the driver waiting for a request
        self.assertEqual(self.d.request({"op": "ping"}), {"ev": "pong"})

    def test_code_that_cancels_the_timer_does_not_escape_the_next_timeout(self):
        self.run_ok("pass", timeout=0.5)
        self.run_ok("import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)", timeout=0.5)
        started = time.perf_counter()
        ev = self.d.execute("while True:\n    pass", timeout=0.5)
        self.assertTrue(ev["timed_out"])
        self.assertGreaterEqual(time.perf_counter() - started, 0.5)

    def test_user_timeout_error_is_not_timed_out(self):
        ev = self.d.execute("raise TimeoutError('mine')", timeout=5)
        self.assertEqual(ev["error"], "TimeoutError: mine")
        self.assertFalse(ev["timed_out"])


class TestMistakes(unittest.TestCase):
    """Code that breaks, by a plausible mistake, what the driver uses after a block: each block
    still ends with one done event, and the session goes on. (Code that attacks the driver on
    purpose can only end its own session: the driver's docstring, "Threat model".)"""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.d = Driver(cwd=self.dir, args=("--payload-min", "1000"))
        self.addCleanup(self.d.close)

    def alive(self):
        ev = self.d.execute("print('alive')")
        self.assertEqual((ev["stdout"], ev["error"]), ("alive\n", None))

    def test_workspace_files_named_like_the_standard_library(self):
        # a model's helper module may well be called re.py or token.py
        for name in ("traceback", "linecache", "tokenize", "re", "token", "textwrap"):
            with open(os.path.join(self.dir, name + ".py"), "w") as f:
                f.write("raise SystemExit(9)\n")
        for code in ("int('oops')", "import json\njson.loads('x')", "def f():\n    1/0\nf()"):
            ev = self.d.execute(code)
            self.assertIsNotNone(ev["error"], code)
            self.assertIn('File "<rlm-cell-', ev["traceback"], code)
        self.assertIn("    1/0\n", ev["traceback"])
        self.alive()

    def test_hooks_that_raise_after_the_block(self):
        cases = {
            "import sys\ndel sys.stdout": None,
            "import sys\nsys.stdout = None\nprint('lost')": None,
            "import sys\nclass W:\n    def write(self, s): return len(s)\n"
            "    def flush(self): raise ValueError('I/O operation on closed file')\n"
            "sys.stdout = W()": None,
            "class E(Exception):\n    def __str__(self): return self.detail\nraise E()":
                "E: <the exception's str() failed>",
            "class D(dict):\n    def items(self): raise KeyError('no')\nFinal = D(a=1)": "KeyError",
            "Final = {1, 2}": "TypeError: Final is not JSON-serialisable (set)",
        }
        for code, error in cases.items():
            ev = self.d.execute(code)
            if error is None:
                self.assertIsNone(ev["error"], code)
            else:
                self.assertIn(error, ev["error"] or "", code)
            self.alive()

    def test_interrupts_and_signal_handlers_between_blocks(self):
        # Each lands once the test says so, between blocks: an interrupt and a SIGINT from a
        # thread of the code's, then the SIGCHLD of a child the block started, whose handler
        # raises. The next request is sent once that handler ran: a line read just before it
        # runs is lost with its exception (the driver's docstring).
        go, fired = os.path.join(self.dir, "go"), os.path.join(self.dir, "fired")
        go2, ended = os.path.join(self.dir, "go2"), os.path.join(self.dir, "ended")
        self.d.execute("import threading, _thread, os, signal, subprocess, time\n"
                       f"def on_child(*a):\n    open({ended!r}, 'w').close()\n    1 / 0\n"
                       "signal.signal(signal.SIGCHLD, on_child)\n"
                       "child = subprocess.Popen(['/bin/sh', '-c', "
                       f"'while [ ! -e {go2} ]; do sleep 0.01; done'])\n"
                       "def wait_for(path):\n"
                       "    while not os.path.exists(path):\n        time.sleep(0.01)\n"
                       f"def later():\n    wait_for({go!r})\n"
                       "    _thread.interrupt_main()\n    os.kill(os.getpid(), signal.SIGINT)\n"
                       f"    open({fired!r}, 'w').close()\n"
                       "threading.Thread(target=later).start()")
        open(go, "w").close()
        wait_for_file(fired)
        self.alive()
        open(go2, "w").close()
        wait_for_file(ended)
        self.alive()
        ev = self.d.execute("import _thread, time\n_thread.interrupt_main()\ntime.sleep(5)")
        self.assertEqual(ev["error"], "KeyboardInterrupt")   # inside a block it interrupts

    def test_a_forked_process_ends_with_its_block_and_cannot_call(self):
        ev = self.d.execute(
            "import os\npid = os.fork()\nif pid == 0:\n    try:\n        llm_query('x')\n"
            "    except RuntimeError as e:\n        print('child:', e, flush=True)\n"
            "else:\n    os.waitpid(pid, 0)\n    print('parent')")
        self.assertIn("child: a forked process cannot talk to the host", ev["stdout"])
        self.assertTrue(ev["stdout"].endswith("parent\n"), ev["stdout"])
        self.alive()
        self.alive()   # no second done event of the child's waits in the pipe

    def test_a_closed_or_detached_sys_stdout_is_made_anew(self):
        for code in ("import sys\nsys.stdout.close()", "import sys\nsys.stderr.detach()",
                     "import sys\nsys.stdout.detach()\nsys.stderr.close()"):
            self.d.execute(code)
            ev = self.d.execute("import sys\nprint('back \u00e9')\nprint('err', file=sys.stderr)\n"
                                "x = 5\nx")
            self.assertEqual((ev["stdout"], ev["stderr"], ev["error"]),
                             ("back \u00e9\n5\n", "err\n", None), code)

    def test_a_tracer_of_the_codes_lasts_until_its_block_ends(self):
        for setter in ("settrace", "setprofile"):
            ev = self.d.execute(f"import sys\ndef t(*a):\n    print(a[0].f_code.co_filename)\n"
                                f"    return t\nsys.{setter}(t)\nx = 2")
            traced = set(ev["stdout"].split())
            if setter == "settrace":   # (a profiler sees the calls that take it away)
                self.assertEqual(traced, {"<rlm-cell-%d>" % self.d.next_id})   # the code's only
            ev = self.d.execute("def f():\n    return x + 1\nprint(f())")
            self.assertEqual(ev["stdout"], "3\n", setter)
        self.d.execute("import sys\nsys.settrace(lambda *a: 1 / 0)")
        self.alive()

    def test_closing_descriptors_spares_the_protocol(self):
        ev = self.d.execute("import os\nos.closerange(3, 100)\nprint('closed')")
        self.assertEqual(ev["stdout"], "closed\n")
        self.alive()


class TestCalls(DriverTest):
    def test_llm_query_round_trip(self):
        rid = self.d.start("r = llm_query('What is 6*7?', model='small')\nprint(r)")
        ev = self.d.event()
        self.assertEqual(ev, {"ev": "call", "id": rid, "call": 1, "kind": "llm_query",
                              "args": {"prompt": "What is 6*7?", "model": "small"}})
        self.assertEqual(self.d.request({"op": "ping"}), {"ev": "pong"})
        ev = self.d.request({"op": "reply", "id": rid, "results": ["42"]})
        self.assertEqual(ev["ev"], "done")
        self.assertEqual(ev["stdout"], "42\n")
        self.assertIsNone(ev["error"])

    def test_llm_query_error_reply(self):
        rid = self.d.start("try:\n    llm_query('x')\nexcept RuntimeError as e:\n"
                           "    print('caught', e)\nllm_query('y')")
        self.assertEqual(self.d.event()["kind"], "llm_query")
        ev = self.d.request({"op": "reply", "id": rid, "error": "budget exhausted"})
        self.assertEqual(ev["ev"], "call")
        self.assertEqual(ev["args"]["prompt"], "y")
        ev = self.d.request({"op": "reply", "id": rid, "error": "still exhausted"})
        self.assertEqual(ev["stdout"], "caught budget exhausted\n")
        self.assertEqual(ev["error"], "RuntimeError: still exhausted")

    def test_llm_query_batched_round_trip(self):
        rid = self.d.start("out = llm_query_batched(['a', 'b', 'c'])\nprint(out)")
        self.assertEqual(self.d.event(), {"ev": "call", "id": rid, "call": 1,
                                          "kind": "llm_query_batched",
                                          "args": {"prompts": ["a", "b", "c"], "model": None}})
        ev = self.d.request({"op": "reply", "id": rid, "results": ["A", "B", "C"]})
        self.assertEqual(ev["stdout"], "['A', 'B', 'C']\n")

    def test_llm_query_batched_error_and_wrong_count(self):
        rid = self.d.start("llm_query_batched(['a', 'b'])")
        self.d.event()
        ev = self.d.request({"op": "reply", "id": rid, "error": "rate limited"})
        self.assertEqual(ev["error"], "RuntimeError: rate limited")
        rid = self.d.start("llm_query_batched(['a', 'b'])")
        self.d.event()
        ev = self.d.request({"op": "reply", "id": rid, "results": ["only one"]})
        self.assertIn("1 results instead of 2", ev["error"])

    def test_rlm_query_and_bad_arguments(self):
        rid = self.d.start("print(rlm_query('summarise', context={'doc': 'text'}))")
        self.assertEqual(self.d.event()["args"], {"task": "summarise", "context": {"doc": "text"}})
        self.assertEqual(self.d.request({"op": "reply", "id": rid, "results": ["short"]})["stdout"],
                         "short\n")
        ev = self.d.execute("llm_query(42)")
        self.assertEqual(ev["error"], "TypeError: llm_query: prompt must be a str, not int")
        ev = self.d.execute("rlm_query('t', context={1, 2})")
        self.assertEqual(ev["error"],
                         "TypeError: rlm_query: an argument is not JSON-serialisable (set)")

    def test_calls_from_threads_are_open_at_once_and_answered_in_any_order(self):
        rid = self.d.start("import threading\nout = {}\n"
                           "def ask(p):\n    out[p] = llm_query(p)\n"
                           "ts = [threading.Thread(target=ask, args=(p,)) for p in 'abc']\n"
                           "for t in ts: t.start()\nfor t in ts: t.join()\n"
                           "print(sorted(out.items()))")
        calls = {}
        for _ in range(3):   # all three before any reply
            ev = self.d.event()
            calls[ev["args"]["prompt"]] = ev["call"]
        self.assertEqual(sorted(calls), ["a", "b", "c"])
        self.assertEqual(len(set(calls.values())), 3)
        for p in "cba":
            self.d.send({"op": "reply", "id": rid, "call": calls[p], "results": [p.upper()]})
        ev = self.d.event()
        self.assertEqual(ev["ev"], "done")
        self.assertEqual(ev["stdout"], "[('a', 'A'), ('b', 'B'), ('c', 'C')]\n")

    def test_wrong_request_while_waiting_for_a_reply(self):
        rid = self.d.start("print(llm_query('q'))")
        self.d.event()
        self.assertEqual(self.d.request({"op": "execute", "id": 99, "code": "1"})["ev"], "error")
        self.assertEqual(self.d.request({"op": "reply", "id": rid + 1, "results": ["x"]})["ev"],
                         "error")
        self.assertEqual(self.d.request({"op": "reply", "id": rid, "results": ["ok"]})["stdout"],
                         "ok\n")

    def test_waiting_for_a_reply_does_not_count_against_the_timeout(self):
        rid = self.d.start("import time\nr = llm_query('slow')\ntime.sleep(0.1)\nprint(r)",
                           timeout=1)
        self.d.event()
        time.sleep(1.5)
        ev = self.d.request({"op": "reply", "id": rid, "results": ["done"]})
        self.assertIsNone(ev["error"])
        self.assertEqual(ev["stdout"], "done\n")
        rid = self.d.start("r = llm_query('fast')\nwhile True:\n    pass", timeout=0.3)
        self.d.event()
        ev = self.d.request({"op": "reply", "id": rid, "results": ["x"]})
        self.assertEqual(ev["error"], "TimeoutError: execution exceeded 0.3 seconds")

    def test_alarm_during_a_call_is_deferred_not_lost(self):
        # A SIGALRM that lands while the driver waits for the reply (the timer's race) must
        # neither break the protocol nor vanish: it fires as soon as the reply is in.
        rid = self.d.start("import os, signal, threading, time\n"
                           "threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGALRM)).start()\n"
                           "r = llm_query('q')\ntime.sleep(3)", timeout=5)
        self.assertEqual(self.d.event()["ev"], "call")
        time.sleep(0.4)
        ev = self.d.request({"op": "reply", "id": rid, "results": ["a"]})
        self.assertEqual(ev["error"], "TimeoutError: execution exceeded 5 seconds")
        self.assertIn("r = llm_query('q')", ev["traceback"])
        self.assertEqual(self.d.request({"op": "ping"}), {"ev": "pong"})

    def test_block_end_waits_for_a_thread_inside_a_call(self):
        folder = tempfile.mkdtemp(prefix="rlm-driver-test-")
        self.addCleanup(shutil.rmtree, folder, True)
        go = os.path.join(folder, "go")
        rid = self.d.start("import os, threading, time\nresults = []\nworker = threading."
                           "Thread(target=lambda: results.append(llm_query('w')))\n"
                           f"worker.start()\nwhile not os.path.exists({go!r}):\n"
                           "    time.sleep(0.01)")
        self.assertEqual(self.d.event()["ev"], "call")
        open(go, "w").close()
        time.sleep(0.3)
        self.assertEqual(select.select([self.d.proc.stdout], [], [], 0)[0], [],
                         "the block ended while a thread still waited for its reply")
        ev = self.d.request({"op": "reply", "id": rid, "results": ["W"]})
        self.assertEqual((ev["ev"], ev["error"]), ("done", None))
        self.assertEqual(self.run_ok("worker.join()\nresults")["stdout"], "['W']\n")

    def test_calls_from_threads_are_serialised(self):
        rid = self.d.start("from concurrent.futures import ThreadPoolExecutor\n"
                           "with ThreadPoolExecutor(3) as pool:\n"
                           "    out = list(pool.map(llm_query, ['a', 'b', 'c']))\n"
                           "print(sorted(out))")
        for _ in range(3):
            ev = self.d.event()
            self.assertEqual(ev["kind"], "llm_query")
            self.d.send({"op": "reply", "id": rid, "results": [ev["args"]["prompt"].upper()]})
        ev = self.d.event()
        self.assertEqual(ev["stdout"], "['A', 'B', 'C']\n")

    def test_replies_without_call_numbers_go_to_the_calls_in_turn(self):
        # Two replies read at once, neither naming its call: the second goes to the second
        # open call, not again to the first (whose reply is not taken yet).
        rid = self.d.start("from concurrent.futures import ThreadPoolExecutor\n"
                           "with ThreadPoolExecutor(2) as pool:\n"
                           "    out = list(pool.map(llm_query, ['a', 'b']))\n"
                           "print(sorted(out))")
        prompts = [self.d.event()["args"]["prompt"] for _ in range(2)]
        self.d.send({"op": "replies", "replies": [
            {"op": "reply", "id": rid, "results": [p.upper()]} for p in prompts]})
        ev = self.d.event()
        self.assertEqual(ev.get("stdout"), "['A', 'B']\n", ev)

    def test_call_outside_a_block_fails_in_user_code(self):
        # The thread calls only once the test creates `go`, i.e. between two blocks.
        folder = tempfile.mkdtemp(prefix="rlm-driver-test-")
        self.addCleanup(shutil.rmtree, folder, True)
        go, finished = os.path.join(folder, "go"), os.path.join(folder, "finished")
        self.run_ok("import os, threading, time\nerrors = []\ndef late():\n"
                    f"    while not os.path.exists({go!r}):\n        time.sleep(0.01)\n"
                    "    try:\n        llm_query('x')\n    except RuntimeError as e:\n"
                    f"        errors.append(str(e))\n    open({finished!r}, 'w').close()\n"
                    "threading.Thread(target=late).start()")
        open(go, "w").close()
        wait_for_file(finished)
        ev = self.run_ok("errors")
        self.assertEqual(ev["stdout"], "['llm_query can only be used while a block runs']\n")


class TestBuffersAndReset(DriverTest):
    def test_buffers(self):
        self.run_ok("add_buffer('notes', 1)\nadd_buffer('notes', {'k': 'v'})")
        ev = self.run_ok("print(get_buffer('notes'), get_buffer('none'))")
        self.assertEqual(ev["stdout"], "[1, {'k': 'v'}] []\n")
        self.assertEqual(ev["variables"], [])
        ev = self.run_ok("add_buffer('other', 2)\nclear_buffer('notes')\n"
                         "print(get_buffer('notes'), get_buffer('other'))\nclear_buffer()\n"
                         "print(get_buffer('other'))")
        self.assertEqual(ev["stdout"], "[] [2]\n[]\n")

    def test_reset_clears_globals_and_buffers_but_keeps_helpers(self):
        self.run_ok("import json\nx = 1\nadd_buffer('b', 1)\nSUBMIT = 'mine'\nprint(SUBMIT)")
        self.assertEqual(self.run_ok("SUBMIT")["stdout"], "'mine'\n")
        self.assertEqual(self.d.request({"op": "reset"}), {"ev": "reset"})
        self.assertEqual(self.d.execute("x")["error"], "NameError: name 'x' is not defined")
        self.assertEqual(self.d.execute("json")["error"], "NameError: name 'json' is not defined")
        ev = self.run_ok("print(get_buffer('b'))\nSUBMIT(answer=__name__)")
        self.assertEqual(ev["stdout"], "[]\n")
        self.assertEqual(ev["submitted"], {"answer": "__main__"})
        self.assertEqual(ev["variables"], [])

    def test_user_classes_pickle(self):
        ev = self.run_ok("import pickle\nclass P:\n    def __init__(self):\n        self.v = 3\n"
                         "print(pickle.loads(pickle.dumps(P())).v)")
        self.assertEqual(ev["stdout"], "3\n")


class TestPayloads(DriverTest):
    """Raw bytes after a line (the local backend's way for long strings)."""

    def test_payload_variables_and_submitted_payloads(self):
        data = b"line\n\x00\xff\xe2\x82 \xc3\xa9" * 1000
        self.d.next_id += 1
        self.d.proc.stdin.write((json.dumps({
            "op": "execute", "id": self.d.next_id, "variables": {"n": 3}, "payload_min": 100,
            "payloads": [{"name": "v", "bytes": len(data)}, {"name": "w", "bytes": 2}],
            "code": "SUBMIT(back=v, short=w * n, count=len(v))"}) + "\n").encode() + data + b"ab")
        ev = self.d.event()
        self.assertIsNone(ev["error"], ev["traceback"])
        self.assertEqual(ev["submitted"], {"short": "ababab", "count": len(data) - 1000})
        self.assertEqual(ev["payloads"], [{"name": "back", "bytes": len(data)}])
        self.assertEqual(self.d.proc.stdout.read(len(data)), data)
        self.assertEqual(self.run_ok("print(len(v))")["stdout"], f"{len(data) - 1000}\n")

    def test_a_submitted_value_is_let_go_with_its_block(self):
        d = Driver(args=("--payload-min", "1000"))
        self.addCleanup(d.close)
        rss = "int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) // 1024"
        before = int(d.execute(f"print({rss})")["stdout"])
        for _ in range(2):
            ev = d.execute("SUBMIT(s='b' * (64 << 20))")
            left = ev["payloads"][0]["bytes"]
            while left:
                left -= len(d.proc.stdout.read(left))
        after = int(d.execute(f"print({rss})")["stdout"])
        self.assertLess(after - before, 32, f"the driver holds {after - before} MB more")

    def test_no_payloads_without_payload_min(self):
        ev = self.run_ok("SUBMIT(s='x' * 100000)")
        self.assertNotIn("payloads", ev)
        self.assertEqual(len(ev["submitted"]["s"]), 100000)

    def test_a_malformed_announcement_is_an_error_and_the_driver_goes_on(self):
        ev = self.d.request({"op": "execute", "id": 1, "code": "1", "payloads": [{"name": 5}]})
        self.assertEqual(ev["ev"], "error")
        self.assertEqual(self.run_ok("1 + 1")["stdout"], "2\n")


class TestSettings(unittest.TestCase):
    """What every execute would carry, given once when the driver starts (the backends do)."""

    def driver(self, *args):
        d = Driver(args=args)
        self.addCleanup(d.close)
        return d

    def test_settings_serve_every_execute_and_a_request_overrides_them(self):
        d = self.driver("--max-output-chars", "100", "--max-submit-bytes", "4096")
        ev = d.execute("print('H' * 60 + 'x' * 1000 + 'T' * 60, end='')")
        self.assertEqual(ev["stdout_chars"], 1120)
        self.assertTrue(ev["stdout"].startswith("H" * 50 + "\n... [1020 characters cut]"), ev)
        ev = d.execute("Final = 'y' * 5000")
        self.assertIn("limits.submit", ev["error"])
        self.assertEqual(len(d.execute("SUBMIT(answer='y' * 5000)", max_submit_bytes=None)
                             ["submitted"]["answer"]), 5000, "null lifts the cap")
        self.assertEqual(d.execute("print('z' * 500, end='')", max_output_chars=1000)["stdout"],
                         "z" * 500)
        self.assertIn("limits.submit", d.execute("SUBMIT(answer='y' * 5000)")["error"],
                      "an override lasts one execute")

    def test_payload_min_sends_long_submitted_strings_raw(self):
        d = self.driver("--payload-min", "1000")
        ev = d.execute("SUBMIT(long='é' * 1000, short='s')")
        self.assertEqual(ev["payloads"], [{"name": "long", "bytes": 2000}])
        self.assertEqual(ev["submitted"], {"short": "s"})
        self.assertEqual(d.proc.stdout.read(2000).decode(), "é" * 1000)
        self.assertNotIn("payloads", d.execute("SUBMIT(long='é' * 1000)", payload_min=None))

    def test_a_bad_setting_exits_2_with_the_usage(self):
        for args in (["--max-output-chars", "1"], ["--max-submit-bytes", "4k"], ["--payload-min"],
                     ["--payload-min", "\u00b2"], ["--max-output-chars", "-5"]):
            p = subprocess.run([PYTHON, "-c", SOURCE, "--stdio", *args], capture_output=True,
                               timeout=WAIT, stdin=subprocess.DEVNULL)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(args[0], p.stderr.decode())
            self.assertIn("usage:", p.stderr.decode())


class TestJsonPackageFallback(DriverTest):
    """Where the _json accelerator is missing (or differs), the json package serves."""

    def setUp(self):
        self.d = Driver(prelude="import sys\nsys.modules['_json'] = None\n")
        self.addCleanup(self.d.close)

    def test_requests_events_and_values(self):
        ev = self.run_ok("SUBMIT(x=[1, 2.5, 'é', None, {'a': True}], big=2**62)", variables={"y": 1})
        self.assertEqual(ev["submitted"], {"x": [1, 2.5, "é", None, {"a": True}], "big": 2 ** 62})
        self.d.proc.stdin.write(b"{not json\n")
        self.assertEqual(self.d.event()["ev"], "error")
        self.assertEqual(self.run_ok("print(y)")["stdout"], "1\n")


class TestSocketTransport(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rlm-driver-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "driver.sock")

    def serve(self):
        proc = subprocess.Popen([PYTHON, "-u", "-c", SOURCE, "--serve", self.path],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)

        def stop():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        self.addCleanup(stop)
        ready = json.loads(read_line(proc.stdout))
        self.assertEqual(ready["ev"], "ready")
        self.assertTrue(os.path.exists(self.path), "the socket must exist before ready")
        return proc

    def client(self, req, via_file=False, request_id=None):
        args = [PYTHON, "-c", SOURCE, "--client", self.path]
        if request_id is not None:
            args += ["--request-id", request_id]
        if via_file:
            name = os.path.join(self.dir, "request.json")
            with open(name, "w") as f:
                json.dump(req, f)
            args += ["--request-file", name]
        else:
            args += ["--request-b64", base64.b64encode(json.dumps(req).encode()).decode()]
        done = subprocess.run(args, capture_output=True, timeout=WAIT)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertEqual(done.stdout.count(b"\n"), 1)
        return with_defaults(json.loads(done.stdout))

    def test_wait_ready_reads_the_ready_line_an_exit_or_times_out(self):
        prefix = os.path.join(self.dir, "driver-1")
        # started as the Daytona backend starts it: output and exit status in files
        cmd = (f"{PYTHON} -u -c \"$SRC\" --serve {self.path} > {prefix}.out 2> {prefix}.err; "
               f"echo $? > {prefix}.exit")
        # its own process group: the cleanup ends the shell and the driver it started
        proc = subprocess.Popen(["/bin/sh", "-c", cmd], env={**os.environ, "SRC": SOURCE},
                                start_new_session=True)
        self.addCleanup(lambda: (os.killpg(proc.pid, signal.SIGKILL), proc.wait()))
        wait = [PYTHON, "-c", SOURCE, "--wait-ready", prefix, "--timeout", "10"]
        done = subprocess.run(wait, capture_output=True, timeout=WAIT)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        self.assertEqual(json.loads(done.stdout)["ev"], "ready")
        # a driver that died: its status and the tail of its stderr
        dead = os.path.join(self.dir, "driver-2")
        subprocess.run(["/bin/sh", "-c", f"{PYTHON} -c 'import sys; sys.exit(\"boom\")' > {dead}.out "
                        f"2> {dead}.err; echo $? > {dead}.exit"], timeout=WAIT)
        done = subprocess.run(wait[:4] + [dead, "--timeout", "10"], capture_output=True, timeout=WAIT)
        self.assertEqual(done.returncode, 3)
        self.assertIn("exit 1: boom", done.stderr.decode())
        done = subprocess.run(wait[:4] + [os.path.join(self.dir, "none"), "--timeout", "0.2"],
                              capture_output=True, timeout=WAIT)
        self.assertEqual(done.returncode, 4)

    def test_serve_and_client_end_to_end(self):
        proc = self.serve()
        self.assertEqual(self.client({"op": "ping"}), {"ev": "pong"})
        ev = self.client({"op": "execute", "id": 1, "code": "x = 20\nprint('set')"})
        self.assertEqual((ev["ev"], ev["stdout"]), ("done", "set\n"))
        ev = self.client({"op": "execute", "id": 2, "code": "print(llm_query('q') * 2, x)"},
                         via_file=True)
        self.assertEqual(ev, {"ev": "call", "id": 2, "call": 1, "kind": "llm_query",
                              "args": {"prompt": "q", "model": None}})
        ev = self.client({"op": "reply", "id": 2, "results": ["ab"]})
        self.assertEqual((ev["ev"], ev["stdout"], ev["error"]), ("done", "abab 20\n", None))
        self.assertEqual(self.client({"op": "shutdown"}), {"ev": "bye"})
        self.assertEqual(proc.wait(WAIT), 0)
        self.assertFalse(os.path.exists(self.path))

    def test_a_request_id_is_answered_once(self):
        # Daytona's daemon runs a command whether or not its HTTP client is still there: the
        # host sends a request again with its id, and gets the first answer, not a second run.
        self.serve()
        run = {"op": "execute", "id": 1, "code": "n = globals().get('n', 0) + 1\nprint(n)"}
        first = self.client(run, request_id="r1")
        self.assertEqual(first["stdout"], "1\n")
        self.assertEqual(self.client(run, request_id="r1"), first)
        # a call event is answered once too, and the reply goes on from there
        ask = {"op": "execute", "id": 2, "code": "n += 1\nprint(llm_query('q'), n)"}
        call = self.client(ask, request_id="r2")
        self.assertEqual(call["ev"], "call")
        self.assertEqual(self.client(ask, request_id="r2"), call)
        done = self.client({"op": "reply", "id": 2, "results": ["a"]}, request_id="r3")
        self.assertEqual(done["stdout"], "a 2\n")
        # a new id runs again; no id at all always runs
        self.assertEqual(self.client(run, request_id="r4")["stdout"], "3\n")
        self.assertEqual(self.client(run)["stdout"], "4\n")
        self.assertEqual(self.client(run)["stdout"], "5\n")

    def client_argv(self, req=None, request_id=None, wait=None):
        args = [PYTHON, "-c", SOURCE, "--client", self.path]
        if request_id is not None:
            args += ["--request-id", request_id]
        if wait is not None:
            args += ["--wait", str(wait)]
        if req is None:
            return args + ["--poll"]
        return args + ["--request-b64", base64.b64encode(json.dumps(req).encode()).decode()]

    def events(self, req=None, request_id=None, wait=None):
        """Every event one client was given (req None: a poll)."""
        done = subprocess.run(self.client_argv(req, request_id, wait), capture_output=True,
                              timeout=WAIT)
        self.assertEqual(done.returncode, 0, done.stderr.decode())
        return [json.loads(line) for line in done.stdout.splitlines()]

    def background(self, req=None, request_id=None, wait=None):
        """A client left running; .result() gives its events."""
        proc = subprocess.Popen(self.client_argv(req, request_id, wait), stdout=subprocess.PIPE)
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(),
                                 proc.stdout.close()))

        def result():
            out, _ = proc.communicate(timeout=WAIT)
            self.assertEqual(proc.returncode, 0)
            return [json.loads(line) for line in out.splitlines()]
        proc.result = result
        return proc

    def test_calls_from_threads_are_open_at_once_each_answered_on_its_own(self):
        self.serve()
        code = ("import threading\ngot = {}\n"
                "def ask(i): got[i] = llm_query('q%d' % i)\n"
                "ts = [threading.Thread(target=ask, args=(i,)) for i in range(3)]\n"
                "for t in ts: t.start()\n"
                "for t in ts: t.join()\n"
                "print(sorted(got.items()))")
        seen = self.events({"op": "execute", "id": 1, "code": code}, "e1", 10)
        polls = 0
        while sum(ev["ev"] == "call" for ev in seen) < 3:
            polls += 1
            self.assertLess(polls, 100, seen)
            seen += self.events(None, f"p{polls}", 10)
        calls = [ev for ev in seen if ev["ev"] == "call"]
        self.assertEqual(sorted(c["args"]["prompt"] for c in calls), ["q0", "q1", "q2"],
                         "all three calls open before any reply")
        # each reply on a connection of its own, the last answered first
        after = []
        for c in reversed(calls):
            after += self.events({"op": "reply", "id": 1, "call": c["call"],
                                  "results": ["a" + c["args"]["prompt"]]}, f"r{c['call']}", 0.2)
        while not any(ev["ev"] == "done" for ev in after):
            polls += 1
            self.assertLess(polls, 100, after)
            after += self.events(None, f"p{polls}", 10)
        done = [with_defaults(ev) for ev in after if ev["ev"] != "idle"]
        self.assertEqual(len(done), 1, after)
        self.assertEqual((done[0]["stdout"], done[0]["error"]),
                         ("[(0, 'aq0'), (1, 'aq1'), (2, 'aq2')]\n", None))

    def test_several_replies_in_one_request(self):
        self.serve()
        code = ("import threading\ngot = {}\n"
                "def ask(i): got[i] = llm_query('q%d' % i)\n"
                "ts = [threading.Thread(target=ask, args=(i,)) for i in range(2)]\n"
                "for t in ts: t.start()\n"
                "for t in ts: t.join()\n"
                "print(sorted(got.items()))")
        seen = self.events({"op": "execute", "id": 1, "code": code}, "e1", 10)
        while sum(ev["ev"] == "call" for ev in seen) < 2:
            seen += self.events(None, f"p{len(seen)}", 10)
        replies = [{"op": "reply", "id": 1, "call": ev["call"], "results": ["a" + ev["args"]["prompt"]]}
                   for ev in seen if ev["ev"] == "call"]
        after = self.events({"op": "replies", "replies": replies}, "r1", 30)
        self.assertEqual([ev["ev"] for ev in after], ["done"])
        self.assertEqual(with_defaults(after[0])["stdout"], "[(0, 'aq0'), (1, 'aq1')]\n")

    def test_one_connection_waits_at_a_time_and_the_others_hear_idle(self):
        self.serve()
        self.assertEqual(self.events(None, "p0", 0.2), [{"ev": "idle"}])
        # of two polls that would wait a minute, the second to arrive is told idle at once
        polls = [self.background(None, "p1", 60), self.background(None, "p2", 60)]
        deadline = time.monotonic() + 30
        while all(p.poll() is None for p in polls):
            self.assertLess(time.monotonic(), deadline, "neither poll was told idle")
            time.sleep(0.01)
        told = next(p for p in polls if p.returncode is not None)
        waits = next(p for p in polls if p is not told)
        self.assertEqual(told.result(), [{"ev": "idle"}])
        self.assertIsNone(waits.poll(), "the first one still waits")
        # a request's own connection hears idle too, and its event goes to the one waiting
        self.assertEqual(self.events({"op": "ping"}, "q1", 60), [{"ev": "idle"}])
        self.assertEqual(waits.result(), [{"ev": "pong"}])

    def test_events_nobody_waits_for_go_to_the_next_connection(self):
        self.serve()
        slow = {"op": "execute", "id": 1, "code": "import time\ntime.sleep(0.5)\nprint('late')"}
        self.assertEqual(self.events(slow, "e1", 0.05), [{"ev": "idle"}])
        got = []
        while not got or got == [{"ev": "idle"}]:
            got = self.events(None, f"p{len(got)}", 10)
        self.assertEqual(with_defaults(got[0])["stdout"], "late\n")

    def test_a_repeat_waits_in_place_of_its_first_connection_and_runs_nothing(self):
        self.serve()
        gate = os.path.join(self.dir, "gate")
        run = {"op": "execute", "id": 1, "code": (
            "import os, time\nn = globals().get('n', 0) + 1\n"
            f"while not os.path.exists({gate!r}): time.sleep(0.01)\nprint(n)")}
        self.assertEqual(self.events(run, "r1", 0.05), [{"ev": "idle"}])
        repeat = self.background(run, "r1", 30)   # the first connection is gone: it waits
        with open(gate, "w"):
            pass
        first = repeat.result()
        self.assertEqual(with_defaults(first[0])["stdout"], "1\n")
        self.assertEqual(self.events(run, "r1", 30), first, "the same answer again")
        self.assertEqual(self.events({"op": "ping"}, "r2", 30), [{"ev": "pong"}])
        self.assertEqual(self.events(None, "p1", 0.05), [{"ev": "idle"}], "nothing left over")

    def test_serve_from_a_file_without_unbuffered_output(self):
        # Daytona runs the driver from an uploaded file, in a session that may not pass -u.
        script = os.path.join(self.dir, "driver.py")
        shutil.copy(DRIVER, script)
        with open(os.path.join(self.dir, "helper.py"), "w") as f:
            f.write("VALUE = 'from the working directory'\n")
        proc = subprocess.Popen([PYTHON, script, "--serve", self.path], cwd=self.dir,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        self.addCleanup(proc.stderr.close)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(proc.wait)
        self.addCleanup(proc.kill)
        self.assertEqual(json.loads(read_line(proc.stdout))["ev"], "ready")
        ev = self.client({"op": "execute", "id": 1, "code": "import helper\nprint(helper.VALUE)"})
        self.assertEqual((ev["stdout"], ev["error"]), ("from the working directory\n", None))

    def test_client_without_server_fails_clearly(self):
        done = subprocess.run([PYTHON, "-c", SOURCE, "--client", self.path, "--request-b64",
                               base64.b64encode(b'{"op":"ping"}').decode()],
                              capture_output=True, timeout=WAIT)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(b"no driver is listening at " + self.path.encode(), done.stderr)
        self.assertEqual(done.stdout, b"")

    def test_bad_arguments(self):
        done = subprocess.run([PYTHON, "-c", SOURCE, "--client", self.path],
                              capture_output=True, timeout=WAIT)
        self.assertEqual(done.returncode, 2)
        self.assertIn(b"--request-file, --request-b64 or --poll", done.stderr)


class TestSpeed(DriverTest):
    def test_trivial_execute_round_trip(self):
        times = []
        for _ in range(1000):
            started = time.perf_counter()
            self.d.execute("pass")
            times.append(time.perf_counter() - started)
        ping = []
        for _ in range(200):
            started = time.perf_counter()
            self.d.request({"op": "ping"})
            ping.append(time.perf_counter() - started)
        median = statistics.median(times)
        print(f"\n  execute round trip over 1000 trivial executes: median {median * 1e6:.0f} us, "
              f"p90 {sorted(times)[900] * 1e6:.0f} us; ping round trip (pipes only) median "
              f"{statistics.median(ping) * 1e6:.0f} us")
        self.assertEqual(self.d.next_id, 1000)   # a figure, not a gate: bench/ has the gate


if __name__ == "__main__":
    unittest.main()
