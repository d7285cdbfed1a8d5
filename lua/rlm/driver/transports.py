# ---------------------------------------------------------------------------------------------
# Transports (lua/rlm/driver/transports.py): read() -> one request line (None at EOF),
# send(line), close().

HIGH_FD_MIN = 100   # the driver's own descriptors: see moved_high
# A client that connects but never sends must not wedge the server for good.
CONNECTION_TIMEOUT = 60.0


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
    side_by_side = True   # calls from threads may be open at once

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
    side_by_side = False

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
    side_by_side = False   # a call event ends its connection: the next one carries the reply

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
        # A request line may start with "@ID ": the host sends it again, with the same id, when
        # its HTTP call broke or ran out of time (Daytona's daemon runs the client whether or
        # not anyone waits for it). The last answer given under an id is given again, so a
        # repeat never runs the code twice. Requests are one at a time: a repeat is accepted
        # only once the first has been answered.
        self.request_id = None
        self.answered = (None, None)

    def read(self):
        while True:
            conn, _ = self.sock.accept()
            conn.settimeout(CONNECTION_TIMEOUT)
            try:
                line = recv_line(conn)
            except OSError:
                conn.close()
                continue
            request_id = None
            if line.startswith(b"@"):
                request_id, _, line = line[1:].partition(b" ")
            if request_id is not None and request_id == self.answered[0]:
                self.conn = conn
                self.send(self.answered[1])
                continue
            self.conn, self.request_id = conn, request_id
            return line

    def read_payload(self, size):
        return None   # the host sends payloads only over stdio

    def send(self, line, payloads=()):
        conn, self.conn = self.conn, None
        if self.request_id is not None:
            self.answered, self.request_id = (self.request_id, line), None
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


