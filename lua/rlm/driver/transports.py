# ---------------------------------------------------------------------------------------------
# Transports (lua/rlm/driver/transports.py): read() -> one request line (None at EOF),
# send(line), close().

HIGH_FD_MIN = 100   # the driver's own descriptors: see moved_high
# A client that connects but never sends must not wedge the server for good.
CONNECTION_TIMEOUT = 60.0
CLOSE_WAIT = 1.0   # seconds the socket server's last events (bye) may take to go out


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


# Threads the driver runs for itself (the socket server's), not the code's (Capture.let_go).
OWN_THREADS = 0
IDLE_EVENT = '{"ev":"idle"}\n'
KNOWN_IDS = 256   # request ids remembered with their answers, the latest


class Waiter:
    """A request's connections waiting for events: the first, and repeats of it."""
    __slots__ = ("conns",)

    def __init__(self, conn):
        self.conns = [conn]


class Connection:
    """One client: the line it is sending, then (key set) the wait for its answer."""
    __slots__ = ("sock", "data", "deadline", "key")

    def __init__(self, sock, deadline):
        self.sock, self.data, self.deadline, self.key = sock, bytearray(), deadline, None


def split_header(line):
    """(request id or None, seconds to wait or None, the request line) of a client's line:
    `[@ID ][~WAIT ]REQUEST`, REQUEST being `poll` for a client that only waits."""
    key = wait = None
    if line.startswith(b"@"):
        key, _, line = line[1:].partition(b" ")
    if line.startswith(b"~"):
        text, _, line = line[1:].partition(b" ")
        try:
            wait = max(0.0, float(text))
        except ValueError:
            wait = 0.0
    return key, wait, line


class SocketServer:
    """The transport of a driver that serves a unix socket (Daytona: the host reaches the
    sandbox only by running commands there). Every connection is a short-lived client that
    sends one line, `[@ID ][~WAIT ](REQUEST | poll)`, and is then given the events the driver
    sends next: all those waiting for a connection, one per line; or `{"ev":"idle"}` after WAIT
    seconds with none, or at once when another connection waits already. One connection waits
    at a time, so events go to it in order and none is left waiting once a block is done;
    events that find none are kept for the next. Requests reach read() in the order their
    lines came, so calls from the code's threads are open side by side: replies come on
    connections of their own while another waits for the next call.

    A line under an id seen before runs nothing again: the host sends it again, with the same
    id, when its HTTP call broke or ran out of time (Daytona's daemon runs the client whether or
    not anyone waits for it). The repeat is given the events given under that id, or, when none
    were yet, waits beside the first connection, or in its place once that one is gone.

    One thread of its own (serve_connections) accepts, reads lines, answers idle and hands
    events out; the driver's threads only queue requests and events for it."""

    def __init__(self, path):
        import socket
        import stat
        from _queue import SimpleQueue
        try:
            if stat.S_ISSOCK(posix.lstat(path).st_mode):
                posix.unlink(path)  # left by a driver that died
        except FileNotFoundError:
            pass
        self.path = path
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = socket.socket(fileno=moved_high(listener.detach()))
        self.sock.bind(path)
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.requests = SimpleQueue()   # request lines for read(), in the order they came
        self.lock = _thread.allocate_lock()
        self.events = []                # events not yet handed to a connection
        self.in_hand = 0                # texts of events taken from there, not yet written
        wake_r, wake_w = posix.pipe()
        self.wake_r, self.wake_w = moved_high(wake_r), moved_high(wake_w)
        posix.set_blocking(self.wake_r, False)
        posix.set_blocking(self.wake_w, False)
        # Kept by the server's thread alone:
        self.conns = {}                 # fd -> Connection
        self.waiting = {}               # key -> Waiter, the longest waiting first
        self.known = {}                 # request id -> the events it was given (None: not yet)
        global OWN_THREADS
        OWN_THREADS += 1
        _thread.start_new_thread(self.serve_connections, ())

    def read(self):
        return self.requests.get()

    def read_payload(self, size):
        return None   # the host sends payloads only over stdio

    def send(self, line, payloads=()):
        with self.lock:
            self.events.append(line)
        try:
            posix.write(self.wake_w, b"!")
        except BlockingIOError:
            pass   # the pipe is full of wake-ups already

    def close(self):
        """Gives the last events (bye) a moment to reach a connection; removes the socket."""
        deadline = monotonic() + CLOSE_WAIT
        while monotonic() < deadline:
            with self.lock:
                if not self.events and not self.in_hand:
                    break
            time.sleep(0.002)
        try:
            posix.unlink(self.path)
        except OSError:
            pass

    # -- the server's thread

    def serve_connections(self):
        import select
        self.poller, self.pollin = select.poll(), select.POLLIN
        self.poller.register(self.sock.fileno(), self.pollin)
        self.poller.register(self.wake_r, self.pollin)
        while True:
            deadlines = [c.deadline for c in self.conns.values() if c.deadline is not None]
            timeout = None
            if deadlines:
                timeout = max(0, int((min(deadlines) - monotonic()) * 1000) + 1)
            for fd, _ in self.poller.poll(timeout):
                if fd == self.sock.fileno():
                    self.accept()
                elif fd == self.wake_r:
                    try:
                        posix.read(self.wake_r, 4096)
                    except BlockingIOError:
                        pass
                elif fd in self.conns:
                    self.receive(self.conns[fd])
            self.expire(monotonic())
            self.hand_out()

    def accept(self):
        import socket
        while True:
            try:
                sock, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:   # out of descriptors: the client is told so by its closed socket
                return
            sock = socket.socket(fileno=moved_high(sock.detach()))
            sock.setblocking(False)
            self.conns[sock.fileno()] = Connection(sock, monotonic() + CONNECTION_TIMEOUT)
            self.poller.register(sock.fileno(), self.pollin)

    def receive(self, conn):
        try:
            chunk = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if conn.key is not None or not chunk:
            self.drop(conn)   # a waiting client that hung up (or sent more than its line)
            return
        conn.data += chunk
        if b"\n" in chunk:
            self.take_line(conn, bytes(conn.data[:conn.data.index(b"\n")]))

    def take_line(self, conn, line):
        key, wait, line = split_header(line)
        conn.deadline = None if wait is None else monotonic() + wait
        fresh = key is None or key not in self.known
        if key is None:
            key = object()   # no id: never a repeat
        else:
            given = self.known.get(key)
            if given is not None:
                self.answer(conn, given)
                return
            if key in self.waiting:
                conn.key = key
                self.waiting[key].conns.append(conn)
                return
            if fresh:
                self.remember(key, None)
        if fresh and line != b"poll":
            self.requests.put(line)
        if self.waiting:
            self.answer(conn, IDLE_EVENT)   # the events go to the one waiting already
            return
        conn.key = key
        self.waiting[key] = Waiter(conn)

    def remember(self, key, given):
        self.known[key] = given
        if len(self.known) > KNOWN_IDS:
            del self.known[next(iter(self.known))]

    def expire(self, now):
        for conn in list(self.conns.values()):
            if conn.deadline is not None and conn.deadline <= now:
                if conn.key is None:
                    self.drop(conn)   # connected, and never sent its line
                else:
                    self.answer(conn, IDLE_EVENT)

    def hand_out(self):
        """The events the driver sent, all to the connection that has waited longest."""
        if not self.waiting:
            return
        with self.lock:
            if not self.events:
                return
            text = "".join(self.events)
            self.events.clear()
            self.in_hand += 1
        key = next(iter(self.waiting))
        waiter = self.waiting.pop(key)
        if type(key) is bytes:
            self.remember(key, text)
        for conn in waiter.conns:
            conn.key = None
            self.answer(conn, text)
        with self.lock:
            self.in_hand -= 1

    def answer(self, conn, text):
        try:
            conn.sock.setblocking(True)
            conn.sock.settimeout(CONNECTION_TIMEOUT)
            conn.sock.sendall(text.encode())
        except OSError:
            pass  # the client gave up; a repeat of its id is given the same events
        self.drop(conn)

    def drop(self, conn):
        fd = conn.sock.fileno()
        if self.conns.pop(fd, None) is not None:
            self.poller.unregister(fd)
        waiter = self.waiting.get(conn.key)
        if waiter is not None and conn in waiter.conns:
            waiter.conns.remove(conn)
            if not waiter.conns:
                del self.waiting[conn.key]
        conn.sock.close()
