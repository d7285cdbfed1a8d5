# ---------------------------------------------------------------------------------------------
# Start-up (lua/rlm/driver/startup.py): the command line, the --serve client and waiter, site
# when an import needs it, and main.

USAGE = ("usage: driver.py ([--stdio] [--capture-dir DIR] | --serve PATH) [--site-dir DIR] "
         "[--max-output-chars N] "
         "[--max-submit-bytes B] [--payload-min N] | "
         "--client PATH (--request-file FILE | --request-b64 B64 | --poll) [--request-id ID] "
         "[--wait S] | "
         "--wait-ready PREFIX [--timeout S]")
# The settings an execute may leave out (see the docstring): option -> (field, least value).
SETTINGS = {"--max-output-chars": ("max_output_chars", 2), "--max-submit-bytes":
            ("max_submit_bytes", 1), "--payload-min": ("payload_min", 1)}
FLAGS = ("--stdio", "--poll")   # options without a value
OPTIONS = ("--serve", "--client", "--request-file", "--request-b64", "--request-id", "--wait",
           "--capture-dir", "--wait-ready", "--timeout", "--site-dir")


def parse_args(argv):
    opts = {}
    args = iter(argv)
    for arg in args:
        if arg in FLAGS:
            opts[arg] = True
            continue
        if arg not in OPTIONS and arg not in SETTINGS:
            raise ValueError(f"unknown argument {arg!r}")
        value = next(args, None)
        if value is None:
            raise ValueError(f"{arg} needs a value")
        if arg in SETTINGS:
            least = SETTINGS[arg][1]
            if not (value.isascii() and value.isdigit()) or int(value) < least:
                raise ValueError(f"{arg} needs an integer >= {least}")
        opts[arg] = value
    if "--client" in opts and \
            sum(k in opts for k in ("--request-file", "--request-b64", "--poll")) != 1:
        raise ValueError("--client needs one of --request-file, --request-b64 or --poll")
    if "--wait" in opts:
        try:
            float(opts["--wait"])
        except ValueError:
            raise ValueError("--wait needs a number of seconds") from None
    return opts


def client_request(opts):
    """The line a --client sends: its request, or `poll`. A request file the first run under
    the same id took away is a repeat: its id alone finds what that run was given."""
    if "--request-b64" in opts:
        import binascii
        return binascii.a2b_base64(opts["--request-b64"])
    if "--request-file" in opts:
        try:
            with open(opts["--request-file"], "rb") as f:
                return f.read()
        except FileNotFoundError:
            if "--request-id" not in opts:
                raise
    return b"poll"


def client(path, opts):
    """Sends one line to a --serve driver and prints the events it is given (see
    SocketServer). A request file is removed once the answer is out."""
    import socket
    try:
        request = client_request(opts)
    except OSError as e:
        sys.stderr.write(f"rlm driver client: cannot read the request: {e.strerror}\n")
        return 2
    header = b""
    if "--request-id" in opts:
        header += b"@" + opts["--request-id"].encode() + b" "
    if "--wait" in opts:
        header += b"~" + opts["--wait"].encode() + b" "
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as e:
        sys.stderr.write(f"rlm driver client: no driver is listening at {path} ({e.strerror})\n")
        return 2
    sock.sendall(header + request.rstrip(b"\n") + b"\n")
    answer = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        answer += chunk
    if not answer.endswith(b"\n"):
        sys.stderr.write(f"rlm driver client: the driver at {path} closed without an answer\n")
        return 2
    sys.stdout.buffer.write(answer)
    sys.stdout.flush()
    if "--request-file" in opts:
        try:
            posix.unlink(opts["--request-file"])
        except OSError:
            pass
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
    make) is a good part of every sandbox's start, and most cells import only the standard
    library. A top-level import that the path finder cannot find, or finds only as a namespace
    package (a folder of the same name in the working directory would hide an installed
    package), runs site, as the start would have, and is looked for again; so does the first
    look for installed distributions (importlib.metadata). Names the standard library probes
    for on other platforms never run it: site would run in the middle of that import."""

    lock = _thread.RLock()   # re-entered by the imports site itself makes
    state = None             # None, "running", then the folders site added
    site_dirs = ()           # the user's folders of packages (--site-dir), after the system's

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
                    for d in cls.site_dirs:
                        site.addsitedir(d)
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
    imports os, which the start otherwise does without. Used, it has site set the real one and acts as it."""

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
    if "--site-dir" in opts:
        SiteOnDemand.site_dirs = (opts["--site-dir"],)
    if sys.flags.no_site:
        defer_site()
    else:
        import site
        for d in SiteOnDemand.site_dirs:
            site.addsitedir(d)
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
    except BaseException:
        report = stdlib_modules("traceback")[0].format_exc()
        write_all(real_err, ("rlm driver crashed:\n" + report).encode("utf-8", "replace"))
        transport.close()
        return 70


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
