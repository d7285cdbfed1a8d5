# ---------------------------------------------------------------------------------------------
# Cells (lua/rlm/driver/cells.py): error texts and tracebacks of the code's exceptions, and
# compiling a cell with its trailing expression apart.

DRIVER_GLOBALS = globals()   # the joined file's: a frame with other globals is the code's
# The standard library's folders: what sys.path holds at start, but the working directory
# ("" under -c), which main() puts first for the code's imports.
STDLIB_PATH = [p for p in sys.path if p]

def error_text(e):
    """"Type: message" for an exception of the code's. An exception whose __str__ raises (a
    message made from an attribute that is missing, say) shows that instead."""
    kind = type(e)
    name = kind.__qualname__
    if kind.__module__ not in ("builtins", "__main__"):
        name = f"{kind.__module__}.{name}"
    try:
        if isinstance(e, SyntaxError) and type(e.lineno) is int:
            return f"{name}: {e.msg} (line {e.lineno})"
        message = str(e)
    except Exception:
        message = "<the exception's str() failed>"
    return f"{name}: {message}" if message else name


def format_traceback(e, cells):
    """The traceback of an exception of the code's, from its own frames, the lines of the
    cells (cells[K - 1] is <rlm-cell-K>) quoted."""
    drop_driver_frames(e, set())
    traceback, linecache = stdlib_modules("traceback", "linecache")
    for number, source in enumerate(cells, 1):
        filename = f"<rlm-cell-{number}>"
        if filename not in linecache.cache:
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


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
    trailing expression through a syntax tree compiled a cell twice (about twice the work of a plain
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


