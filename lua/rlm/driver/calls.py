# ---------------------------------------------------------------------------------------------
# Calls (lua/rlm/driver/calls.py): the helpers the code sees as builtins, and their calls to
# the host.

def call(session, kind, args):
    """Sends a call event and returns the reply's results list. Calls from the code's threads
    are open side by side, each under its own number; the timer stands still while any is
    open."""
    reply = open_call(session, kind, to_json(args, f"{kind}: an argument"))
    if reply.get("error") is not None:
        raise RuntimeError(str(reply["error"]))
    results = reply.get("results")
    if not isinstance(results, list):
        raise RuntimeError("the host's reply carries no results list")
    return results


def open_call(session, kind, body):
    """Sends the call event and waits for its reply (the request)."""
    wake = _thread.allocate_lock()
    wake.acquire()   # held: released (under io_lock) when this call has something to look at
    with session.io_lock:
        if not session.running:
            raise RuntimeError(f"{kind} can only be used while a block runs")
        session.call_number += 1
        number = session.call_number
        if not session.open_calls:
            session.pause_timer()
        session.open_calls[number] = wake
        try:
            session.transport.send('{"ev":"call","id":%s,"call":%d,"kind":"%s","args":%s}\n' % (
                encode(session.request_id), number, kind, body))
        except BaseException:
            session.close_call(number)
            raise
    try:
        return await_reply(session, number, wake)
    finally:
        with session.io_lock:
            session.close_call(number)


def await_reply(session, number, wake):
    """The reply to call `number`. One waiting thread at a time reads requests; a reply for
    another call is handed to that call, and every waiting call is woken after each read, so
    that one of them reads next once the reader has its own reply."""
    while True:
        with session.io_lock:
            reply = session.replies.pop(number, None)
            if reply is not None:
                return reply
            reader = not session.reading
            session.reading = True
        if not reader:
            wake.acquire()
            continue
        req = None
        try:
            req = session.next_request()
        finally:
            with session.io_lock:
                session.reading = False
                if req is not None:
                    session.take_reply(req)
                for lock in session.open_calls.values():
                    if lock is not wake and lock.locked():
                        lock.release()


def expect_count(results, n, kind):
    if len(results) != n:
        raise RuntimeError(f"the host answered {kind} with {len(results)} results instead of {n}")
    return results


def check_text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")


# The image formats both providers take, by their first bytes.
IMAGE_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
               (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"))
IMAGE_MAX_BYTES = 20 * 1024 * 1024   # OpenAI's limit per image; Anthropic's is lower (the host checks)


def image_media_type(data):
    for magic, media_type in IMAGE_MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_items(images):
    """llm_query's images as the host takes them: {"url"} or {"data" (base64), "media_type"}."""
    if isinstance(images, (str, bytes, bytearray)):
        images = [images]
    out = []
    for i, image in enumerate(images):
        where = f"llm_query: images[{i}]"
        if isinstance(image, str) and image.startswith(("http://", "https://", "data:image/")):
            out.append({"url": image})
            continue
        if isinstance(image, str):
            try:
                with open(image, "rb") as f:
                    data = f.read(IMAGE_MAX_BYTES + 1)
            except OSError as e:
                raise ValueError(f"{where}: cannot read {image!r}: {e.strerror}") from None
        elif isinstance(image, (bytes, bytearray)):
            data = bytes(image)
        else:
            raise TypeError(f"{where} must be a path, bytes or a URL, not {type(image).__name__}")
        if len(data) > IMAGE_MAX_BYTES:
            raise ValueError(f"{where} is over {IMAGE_MAX_BYTES >> 20} MB")
        media_type = image_media_type(data)
        if media_type is None:
            raise ValueError(f"{where} is not a PNG, JPEG, GIF or WebP image")
        import binascii
        out.append({"data": binascii.b2a_base64(data, newline=False).decode("ascii"),
                    "media_type": media_type})
    return out


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
        raise Submitted(session.submit_fields(merged, lambda name: f"SUBMIT field {name!r}"))

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

    def llm_query(prompt, model=None, images=None):
        """Asks a language model; returns its answer text. images: a list of image files (paths
        here), bytes, or http(s)/data URLs, for models that take images."""
        check_text(prompt, "llm_query: prompt")
        args = {"prompt": prompt, "model": model}
        if images is not None:
            args["images"] = image_items(images)
        results = call(session, "llm_query", args)
        return expect_count(results, 1, "llm_query")[0]

    def llm_query_batched(prompts, model=None):
        """Asks a language model many prompts at once; returns the answers in order."""
        prompts = list(prompts)
        for i, prompt in enumerate(prompts):
            check_text(prompt, f"llm_query_batched: prompts[{i}]")
        results = call(session, "llm_query_batched", {"prompts": prompts, "model": model})
        return expect_count(results, len(prompts), "llm_query_batched")

    def llm_query_batched_iter(prompts, model=None):
        """Asks a language model many prompts at once; yields (index, answer) as each answer
        arrives, every index once, so the code can work on the first answers while the rest
        are still coming."""
        prompts = list(prompts)
        for i, prompt in enumerate(prompts):
            check_text(prompt, f"llm_query_batched_iter: prompts[{i}]")
        batch = expect_count(call(session, "llm_query_batched_start",
                                  {"prompts": prompts, "model": model}),
                             1, "llm_query_batched_iter")[0]
        left = len(prompts)
        while left:
            for index, answer in call(session, "llm_query_batched_next", {"batch": batch}):
                left -= 1
                yield index, answer

    def rlm_query(task, context=None):
        """Hands a task (and optional JSON context) to a child RLM; returns its answer."""
        check_text(task, "rlm_query: task")
        results = call(session, "rlm_query", {"task": task, "context": context})
        return expect_count(results, 1, "rlm_query")[0]

    def rlm_query_batched(tasks, contexts=None):
        """Hands each task (with the context at the same place, if given) to a child RLM; the
        children run side by side; returns their answers in order ("[ERROR] ..." for one that
        failed)."""
        tasks = list(tasks)
        for i, task in enumerate(tasks):
            check_text(task, f"rlm_query_batched: tasks[{i}]")
        if contexts is not None:
            contexts = list(contexts)
            if len(contexts) != len(tasks):
                raise ValueError(f"rlm_query_batched: {len(tasks)} tasks but {len(contexts)} "
                                 f"contexts")
        results = call(session, "rlm_query_batched", {"tasks": tasks, "contexts": contexts})
        return expect_count(results, len(tasks), "rlm_query_batched")

    def budget():
        """What the run may still spend: calls, tokens, cost (USD), seconds, depth (None: no
        limit), and what it has used. A copy: changing it changes nothing."""
        result = expect_count(call(session, "budget", {}), 1, "budget")[0]
        if not isinstance(result, dict):
            raise RuntimeError("the host answered budget() with something that is not a dict")
        return result

    def _rlm_tool(name, args):
        """Calls the host's tool `name` (the functions the tools= option defines call this)."""
        args = {k: v for k, v in args.items() if v is not None}
        return expect_count(call(session, "tool", {"name": name, "args": args}), 1, name)[0]

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

    return {f.__name__: f for f in (SUBMIT, FINAL, FINAL_VAR, llm_query, llm_query_batched,
                                    llm_query_batched_iter, rlm_query, rlm_query_batched, budget,
                                    _rlm_tool, add_buffer, get_buffer, clear_buffer, SHOW_VARS)}


