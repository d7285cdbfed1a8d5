# ---------------------------------------------------------------------------------------------
# Proxy (lua/rlm/driver/proxy.py): the code's HTTP proxy, on 127.0.0.1 inside the sandbox,
# started by the "proxy" request when the host gives the run a network allow list. It decides
# nothing: each request it receives goes to the host as an "http" call (counted, traced,
# limited and cancelled like llm_query), and the host's answer goes back as the response. The
# host checks the host name, adds the user's keys and makes the request; the keys never come
# here. The sandbox has no network of its own: this is its only way out.

PROXY_MAX_HEAD = 64 << 10         # request line and headers
PROXY_MAX_BODY = 16 << 20         # a request body the code sends, at most (proxy_max_body)
PROXY_TIMEOUT = 120               # seconds a client may take to send its request
# Headers of one connection, not of the request: never passed on, never sent back.
HOP_HEADERS = frozenset(("connection", "keep-alive", "proxy-connection", "proxy-authorization",
                         "proxy-authenticate", "te", "trailer", "transfer-encoding", "upgrade",
                         "content-length"))


class ProxyRefusal(Exception):
    """A request the proxy cannot read: answered with 400 and this message."""


class Proxy:
    def __init__(self, session):
        socket, = stdlib_modules("socket")
        self.session = session
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        # Away from the numbers the code's files get, as the driver's own descriptors are.
        self.listener = socket.socket(fileno=moved_high(listener.detach()))
        _thread.start_new_thread(self.accept_loop, ())

    def accept_loop(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return   # the code closed the listener: no proxy from now on
            _thread.start_new_thread(self.serve, (conn,))

    def serve(self, conn):
        """One request on conn, then the connection is closed."""
        try:
            conn.settimeout(PROXY_TIMEOUT)
            reader = conn.makefile("rb")
            try:
                args = read_proxy_request(reader, proxy_max_body(self.session))
            except ProxyRefusal as e:
                answer = (400, "Bad Request", [], f"rlm: {e}\n".encode())
            except ValueError:   # a chunk size that is not hexadecimal
                answer = (400, "Bad Request", [], b"rlm: a malformed chunked body\n")
            else:
                answer = self.ask_host(args)
            conn.sendall(response_bytes(*answer))
        except OSError:
            pass   # the client went away
        finally:
            conn.close()

    def ask_host(self, args):
        """(status, reason, headers, body) the host answers; 502 when the call fails."""
        try:
            r = expect_count(call(self.session, "http", args), 1, "http")[0]
            import binascii
            return (int(r["status"]), str(r.get("reason") or ""), r.get("headers") or [],
                    binascii.a2b_base64(r.get("body") or ""))
        except Exception as e:
            return 502, "Bad Gateway", [], f"rlm: {e}\n".encode()


def proxy_max_body(session):
    """The largest request body the call can carry: the host reads lines up to a little more
    than the SUBMIT cap (limits.submit), and base64 makes 3 bytes 4."""
    submit = session.default_max_submit
    return PROXY_MAX_BODY if submit is None else max(1024, min(PROXY_MAX_BODY, submit * 3 // 4))


def read_proxy_request(reader, max_body):
    """The call's args from a request: method, url (as the client gave it, with Host for an
    origin-form target), headers ([name, value] pairs, in order) and body (base64 or None)."""
    line = reader.readline(PROXY_MAX_HEAD)
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise ProxyRefusal("not an HTTP request line")
    method, target = parts[0], parts[1]
    headers, size = [], len(line)
    while True:
        line = reader.readline(PROXY_MAX_HEAD)
        size += len(line)
        if size > PROXY_MAX_HEAD:
            raise ProxyRefusal(f"the request's headers are over {PROXY_MAX_HEAD} bytes")
        if line in (b"\r\n", b"\n", b""):
            break
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ProxyRefusal("a header line without a colon")
        headers.append([name.strip(), value.strip()])
    names = {n.lower(): v for n, v in headers}
    if target.startswith("/"):
        target = "http://" + names.get("host", "") + target
    body = read_proxy_body(reader, names, max_body)
    import binascii
    return {"method": method, "url": target,
            "headers": [h for h in headers if h[0].lower() not in HOP_HEADERS],
            "body": None if body is None else binascii.b2a_base64(body, newline=False).decode()}


def read_proxy_body(reader, names, max_body):
    if "chunked" in names.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size = int(reader.readline(100).split(b";")[0].strip() or b"0", 16)
            if size < 0:
                raise ValueError("a negative chunk size")   # read(-1) reads to the end
            if size == 0:
                while reader.readline(PROXY_MAX_HEAD) not in (b"\r\n", b"\n", b""):
                    pass   # trailers
                return bytes(body)
            if len(body) + size > max_body:
                raise ProxyRefusal(f"the request's body is over {max_body} bytes")
            body += reader.read(size)
            reader.readline(10)
    length = names.get("content-length")
    if length is None:
        return None
    if not length.isdigit():
        raise ProxyRefusal("Content-Length is not a number")
    if int(length) > max_body:
        raise ProxyRefusal(f"the request's body is over {max_body} bytes")
    return reader.read(int(length))


def status_phrase(status):
    http, = stdlib_modules("http")
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "-"


def response_bytes(status, reason, headers, body):
    # The reason may carry the host's one-line explanation: a client that shows nothing else
    # (a refused CONNECT) shows it. Kept to one line of printable ASCII.
    reason = "".join(c for c in reason if " " <= c <= "~")[:300] or status_phrase(status)
    head = [f"HTTP/1.1 {status} {reason}"]
    for name, value in headers:
        if str(name).lower() not in HOP_HEADERS:
            head.append(f"{name}: {value}".replace("\r", " ").replace("\n", " "))
    head += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(head).encode("latin-1", "replace") + body


def start_proxy(session):
    """Starts the proxy once per driver and points the code's HTTP clients at it (curl reads
    the lower-case names, most others either); the proxy event names its port."""
    if session.proxy is None:
        try:
            session.proxy = Proxy(session)
        except OSError as e:
            return error_line(f"cannot listen on 127.0.0.1 for the code's HTTP proxy: {e}")
        url = f"http://127.0.0.1:{session.proxy.port}"
        import os
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
            os.environ[name] = url
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            os.environ.pop(name, None)
    return '{"ev":"proxy","port":%d}\n' % session.proxy.port
