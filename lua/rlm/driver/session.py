# ---------------------------------------------------------------------------------------------
# Session (lua/rlm/driver/session.py): the namespace, the request loop, running a block under
# its timer and reporting it.

# Memory held back for the driver's own work after user code ran out (under limits.memory the
# code's data stays alive in its globals): released when a block ends in MemoryError. The limit
# counts address space, so bytes() (calloc: pages never touched) holds it back for free, where
# a bytearray would be zeroed at every start.
RESERVE_BYTES = 8 << 20
TIMER_SLACK = 0.05   # seconds a timeout may fire late, at most a tenth of it (Session.arm_timer)
# The fields of the common execute request: one with no others keeps the driver's settings.
PLAIN_EXECUTE = frozenset(("op", "id", "timeout", "code"))

class Session:
    def __init__(self, transport, capture_dir, settings=None):
        self.transport = transport
        settings = settings or {}
        self.default_output_chars = settings.get("max_output_chars", DEFAULT_OUTPUT_CHARS)
        self.default_max_submit = settings.get("max_submit_bytes")
        self.default_payload_min = settings.get("payload_min")
        # Guards the calls' state and whole lines on the wire: user threads call side by side.
        self.io_lock = _thread.allocate_lock()
        self.open_calls = {}   # call number -> the lock its thread waits on
        self.replies = {}      # call number -> its reply, until its thread takes it
        self.call_number = 0
        self.reading = False   # a waiting thread reads requests for all of them
        self.idle = _thread.allocate_lock()   # held while any call is open
        self.paused_left = 0.0   # the block's time left when its timer was stopped for calls
        self.builtins = dict(vars(builtins))
        self.builtins.update(make_helpers(self))
        # for the host's load of a long context (rlm.run), under a name no code would pick
        self.builtins["__rlm_read_text__"] = read_text
        self.buffers = {}
        self.cells = []   # the source of cell K at K - 1: <rlm-cell-K> in tracebacks
        self.ns = None
        self.new_namespace()
        self.stdout = Capture(1, capture_dir)
        self.stderr = Capture(2, capture_dir)
        self.streams = (sys.stdout, sys.stderr)
        self.stream_errors = (sys.stdout.errors, sys.stderr.errors)
        self.request_id = None
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
        self.proxy = None   # the code's HTTP proxy (start_proxy), when the host asked for it
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
                self.serve_one()
            except BaseException as e:
                if not raised_by_code(e):
                    raise
                # A signal handler of the code's raised between blocks: dropped. (A request
                # line read just before it ran is lost with it; the host's timeout ends that.)

    def serve_one(self):
        req = self.next_request()
        if req is None:
            return
        op = req.get("op")
        payloads = ()
        if op == "execute":
            line, payloads = self.execute(req)
        elif op == "reset":
            line = self.reset()
        elif op == "proxy":
            line = start_proxy(self)
        elif op in ("reply", "replies"):
            line = error_line("no code is waiting for a reply")
        else:
            line = error_line(f"unknown op {op!r}")
        self.transport.send(line, payloads)
        if op == "execute":
            # Once the event is on its way, while the host reads it: fd 1 and fd 2 are put
            # back for the next block (one dup2 each, where checking them would cost a stat
            # each on the round trip's path).
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
        error = traceback_text = submitted = None
        self.running = True
        try:
            self.run(code, filename, timeout)
        except Submitted as s:
            submitted = s.fields
        except SystemExit as e:
            # sys.exit() / sys.exit(0) ends the block as a script ends: not an error
            code = e.args[0] if len(e.args) == 1 else e.args or None
            if not (code is None or type(code) in (int, bool) and code == 0):
                error, traceback_text = error_text(e), format_traceback(e, self.cells)
        except BaseException as e:
            if isinstance(e, MemoryError):
                self.reserve = None  # room to report it; taken back below when there is some
            error, traceback_text = error_text(e), format_traceback(e, self.cells)
        if self.forked:
            self.restore_streams()
            posix._exit(0 if error is None else 1)
        return self.report(names, limit, final_before, error, traceback_text, submitted)

    def report(self, names, limit, final_before, error, traceback_text, submitted):
        """The done event of a block and its payloads."""
        final = self.ns.get("Final", MISSING)
        if error is None and submitted is None and final is not final_before and \
                names == DEFAULT_OUTPUT_NAMES:
            try:
                submitted = self.submit_fields({"answer": final}, lambda name: "Final")
            except Exception as e:   # not JSON, too big, or its hooks raised
                error = error_text(e)
        self.restore_streams()
        rows, more = summary(self.ns, MAX_VARIABLES)
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
                len(value) >= self.payload_min:
            try:
                return value.encode("utf-8", "surrogateescape")
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
            with self.io_lock:   # no call opens from here on, and an alarm is only noted
                self.running = False
                self.in_protocol = True
            with self.idle:   # a user thread inside a call finishes it first
                pass
            self.block_running = False
            if _signal.getsignal(_signal.SIGALRM) is not self.alarm_handler:
                _signal.signal(_signal.SIGALRM, self.alarm_handler)

    # -- calls (calls.py), each under io_lock

    def pause_timer(self):
        """The first call opened: the block's timer stands still until the last one closes."""
        self.idle.acquire()
        self.in_protocol = True
        self.paused_left = _signal.setitimer(_signal.ITIMER_REAL, 0)[0]
        self.timer_end = None

    def close_call(self, number):
        """Forgets call `number`; the last one to close starts the block's timer again."""
        if self.open_calls.pop(number, None) is None:
            return
        self.replies.pop(number, None)
        if self.open_calls:
            return
        self.idle.release()
        # A thread's call may end after the block's code did: the timer then stays stopped.
        if self.running and self.block_running:
            self.in_protocol = False
            left = self.paused_left
            if self.late_alarm:  # re-fire at once, so it lands in the main thread
                self.late_alarm = False
                left = 1e-6
            if left > 0:   # the end is taken before: the timer never runs out sooner
                self.timer_end = monotonic() + left
                _signal.setitimer(_signal.ITIMER_REAL, left)

    def take_reply(self, req):
        """Hands a request read while calls wait to the call it answers (no "call": the
        first open one still without a reply), or each of several ("replies"); anything else
        is answered with an error line."""
        if req.get("op") == "replies" and isinstance(req.get("replies"), list):
            for reply in req["replies"]:
                self.take_reply(reply if isinstance(reply, dict) else {})
            return
        number = req.get("call")
        if number is None:   # the first open call that has no reply yet
            number = min((n for n in self.open_calls if n not in self.replies), default=None)
        if req.get("op") == "reply" and req.get("id") == self.request_id and \
                number in self.open_calls and number not in self.replies:
            self.replies[number] = req
            return
        self.transport.send(error_line(
            f"code is waiting for replies to calls {sorted(self.open_calls)} of request "
            f"{self.request_id!r}; got {req.get('op')!r} (call {number!r})"))

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
        user = (getattr(sys, "stdout", None), getattr(sys, "stderr", None))   # or deleted
        if user[0] is not streams[0] or user[1] is not streams[1]:
            streams = user + streams
        for stream in streams:
            try:
                stream.flush()
            except Exception:   # the code's stream: what its flush raises is its own
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

    def submit_fields(self, values, what):
        """The fields (name -> JSON text) of values (name -> value) when they fit
        max_submit_bytes; ValueError otherwise. Each field is measured from below before it is
        encoded (least_size), so a value far past the cap is refused without its JSON being
        made: encoding 10 GB took half a minute before the cap was looked at."""
        cap = self.max_submit_bytes
        fields, size = {}, 0
        for name, value in values.items():
            if cap is not None:
                least = size + len(name) + least_size(value, cap - size - len(name) + 1)
                if least > cap:
                    raise ValueError(f"SUBMIT is at least {least} bytes of JSON, over the "
                                     f"limit of {cap} bytes (limits.submit)")
            fields[name] = self.field_text(value, what(name))
            size += len(name) + len(fields[name])
        if cap is not None and size > cap:
            raise ValueError(f"SUBMIT is {size} bytes of JSON, over the limit of {cap} "
                             f"bytes (limits.submit)")
        return fields
