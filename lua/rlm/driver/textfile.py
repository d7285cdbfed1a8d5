# ---------------------------------------------------------------------------------------------
# Text files (lua/rlm/driver/textfile.py): a long context read without a second copy.

TEXT_CHUNK_BYTES = 1 << 20


def text_chunks(path):
    """The file's text a chunk at a time, decoded as UTF-8 with undecodable bytes kept as
    surrogates (errors="surrogateescape"), never splitting a character."""
    import codecs
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    with open(path, "rb") as f:
        while True:
            data = f.read(TEXT_CHUNK_BYTES)
            text = decoder.decode(data, final=not data)
            if text:
                yield text
            if not data:
                return


def widest_char(text, compact_header=sys.getsizeof("\xe9") - 2):
    """The largest code point text's storage can hold (127, 255, 0xFFFF or 0x10FFFF): a str is
    stored 1, 2 or 4 bytes a character, the least its widest character needs."""
    if text.isascii():
        return 127
    width = (sys.getsizeof(text) - compact_header) // (len(text) + 1)
    return {1: 0xFF, 2: 0xFFFF}.get(width, 0x10FFFF)


def read_text(path):
    """The file's text, as open(path, errors="surrogateescape").read() gives it, but built in
    place: the str is made at its final length and filled a chunk at a time, so the driver
    holds the text once, where read() holds the bytes and the decoded text together (2x)."""
    length, widest, chunks = 0, 0, 0
    for text in text_chunks(path):
        length, widest, chunks = length + len(text), max(widest, widest_char(text)), chunks + 1
    if chunks <= 1:
        return "".join(text_chunks(path))
    try:
        import ctypes
    except ImportError:   # a Python without ctypes: the plain way, at twice the memory
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    api = ctypes.pythonapi
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_ssize_t, ctypes.c_uint32)(
        ("PyUnicode_New", api))
    # the target by address: an argument reference would make it look shared, and CPython
    # writes only into a str no one else holds
    copy = ctypes.PYFUNCTYPE(ctypes.c_ssize_t, ctypes.c_void_p, ctypes.c_ssize_t,
                             ctypes.py_object, ctypes.c_ssize_t, ctypes.c_ssize_t)(
        ("PyUnicode_CopyCharacters", api))
    result = new(length, widest)
    at = 0
    for text in text_chunks(path):
        if at + len(text) > length:
            raise OSError(f"{path} grew while it was read")
        copy(id(result), at, text, 0, len(text))
        at += len(text)
    if at != length:
        raise OSError(f"{path} shrank while it was read")
    return result
