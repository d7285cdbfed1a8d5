# ---------------------------------------------------------------------------------------------
# Calls (lua/rlm/driver/calls.py): the helpers the code sees as builtins, and their calls to
# the host.

def call(session, kind, args):
    """Sends a call event and returns the reply's results list; the timer stands still."""
    line = '{"ev":"call","id":%s,"kind":"%s","args":%s}\n' % (
        encode(session.request_id), kind, to_json(args, f"{kind}: an argument"))
    with session.io_lock:
        if not session.running:
            raise RuntimeError(f"{kind} can only be used while a block runs")
        session.in_protocol = True
        left = _signal.setitimer(_signal.ITIMER_REAL, 0)[0]
        session.timer_end = None
        try:
            session.transport.send(line)
            return await_reply(session)
        finally:
            # A thread's call may end after the block did: the timer then stays stopped.
            if session.block_running:
                session.in_protocol = False
                if session.late_alarm:  # re-fire at once, so it lands in the main thread
                    session.late_alarm = False
                    left = 1e-6
                if left > 0:   # the end is taken before: the timer never runs out sooner
                    session.timer_end = monotonic() + left
                    _signal.setitimer(_signal.ITIMER_REAL, left)


def await_reply(session):
    while True:
        req = session.next_request()
        if req is None:
            continue
        if req.get("op") == "reply" and req.get("id") == session.request_id:
            if req.get("error") is not None:
                raise RuntimeError(str(req["error"]))
            results = req.get("results")
            if not isinstance(results, list):
                raise RuntimeError("the host's reply carries no results list")
            return results
        session.transport.send(error_line(
            f"code is waiting for the reply to call {session.request_id!r}; "
            f"got {req.get('op')!r} (id {req.get('id')!r})"))


def expect_count(results, n, kind):
    if len(results) != n:
        raise RuntimeError(f"the host answered {kind} with {len(results)} results instead of {n}")
    return results


def check_text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")


def named_value(ns, variable):
    """What FINAL_VAR(variable) submits. A str written in the call ("name", or the reference's
    ' "name" ') that is a Python name is the variable of that name; any other value, a str
    held by a variable among them (FINAL_VAR(name) with name = "Paris"), is itself."""
    if not isinstance(variable, str) or any(v is variable for v in ns.values()):
        return variable
    name = variable.strip().strip("\"'")
    if not name.isidentifier():
        return variable
    if name not in ns:
        raise NameError(f"FINAL_VAR: no variable is named {name!r}")
    return ns[name]


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
        raise Submitted(session.check_submit(
            {name: session.field_text(value, f"SUBMIT field {name!r}")
             for name, value in merged.items()}))

    def FINAL(value):
        """SUBMIT(value) for a task with one output: ends the block at once."""
        names = session.output_names
        if len(names) != 1:
            raise TypeError(f"FINAL gives one value, and this task's outputs are "
                            f"{', '.join(names)}: call SUBMIT({'=..., '.join(names)}=...)")
        SUBMIT(value)

    def FINAL_VAR(variable):
        """FINAL of a variable: FINAL_VAR("name") names it, FINAL_VAR(name) passes its value."""
        FINAL(named_value(session.ns, variable))

    def llm_query(prompt, model=None):
        """Asks a language model; returns its answer text."""
        check_text(prompt, "llm_query: prompt")
        results = call(session, "llm_query", {"prompt": prompt, "model": model})
        return expect_count(results, 1, "llm_query")[0]

    def llm_query_batched(prompts, model=None):
        """Asks a language model many prompts at once; returns the answers in order."""
        prompts = list(prompts)
        for i, prompt in enumerate(prompts):
            check_text(prompt, f"llm_query_batched: prompts[{i}]")
        results = call(session, "llm_query_batched", {"prompts": prompts, "model": model})
        return expect_count(results, len(prompts), "llm_query_batched")

    def rlm_query(task, context=None):
        """Hands a task (and optional JSON context) to a child RLM; returns its answer."""
        check_text(task, "rlm_query: task")
        results = call(session, "rlm_query", {"task": task, "context": context})
        return expect_count(results, 1, "rlm_query")[0]

    def budget():
        """What the run may still spend: calls, tokens, cost (USD), seconds, depth (None: no
        limit), and what it has used. A copy: changing it changes nothing."""
        result = expect_count(call(session, "budget", {}), 1, "budget")[0]
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
        rows = loads(summary(session.ns)[0])
        if not rows:
            print("(no variables)")
        for row in rows:
            size = "" if row["size"] is None else f", size {row['size']}"
            print(f"{row['name']} ({row['type']}{size}): {row['preview']}")

    return {f.__name__: f for f in (SUBMIT, FINAL, FINAL_VAR, llm_query, llm_query_batched, rlm_query, budget,
                                    add_buffer, get_buffer, clear_buffer, SHOW_VARS)}


