# ---------------------------------------------------------------------------------------------
# Listing (lua/rlm/driver/listing.py): the variables of a done event and of SHOW_VARS().

PREVIEW_CHARS = 100
PREVIEW_ITEMS = 8
# Variables listed in each done event; the rest are counted (variables_more). A turn's prompt
# names as many, and building rows is the costly part: with many globals, listing them all
# would grow every execute; the listing stops after these and the count is len() arithmetic.
MAX_VARIABLES = 50
# The names a module starts with: skipped by the variables listing without slicing each one.
MODULE_NAMES = frozenset(vars(ModuleType("__main__"))) | {"__builtins__"}

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




# A variables row by format, quicker than the encoder's walk of a dict per row. A scalar's type
# name and repr (digits, True, None, inf) need no escaping.
ROW = '{"name":%s,"type":%s,"size":%s,"preview":%s}'
SCALAR_ROW = '{"name":%s,"type":"%s","size":null,"preview":"%s"}'


def summary(ns, limit=None):
    """(rows, more): the user's globals in ns, in definition order, as a JSON list of {name,
    type, size, preview}, at most limit of them, and how many names of the namespace come
    after the last one looked at."""
    try:   # without a copy of the whole namespace: the listing stops early
        rows, seen = summarise(ns.items(), limit)
    except RuntimeError:   # a thread of the code changed the globals meanwhile
        rows, seen = summarise(list(ns.items()), limit)
    return "[" + ",".join(rows) + "]", len(ns) - seen


def summarise(items, limit):
    """The rows' JSON texts and how many items were looked at; see summary."""
    rows, seen = [], 0
    for name, value in items:
        seen += 1
        if name in MODULE_NAMES or name[:2] == "__" == name[-2:]:
            continue
        kind = type(value)
        if kind in SCALARS and (kind is not int or -SHORT_INT < value < SHORT_INT):
            # the common case, without the general walk: its repr is plain ASCII
            rows.append(SCALAR_ROW % (escape(name), kind.__name__, repr(value)))
        elif not isinstance(value, ModuleType):
            size = size_of(value)
            rows.append(ROW % (escape(name), escape(kind.__name__),
                               "null" if size is None else size, escape(preview(value))))
        if len(rows) == limit:
            break
    return rows, seen
