# ---------------------------------------------------------------------------------------------
# Capture (lua/rlm/driver/capture.py): fd 1 and fd 2 of the code, into files read after each
# block, losing nothing of writers that outlive their block.

READ_CHUNK = 1 << 20
# A capture file keeps growing (Capture.let_go): what was taken is freed once it reaches this
# many bytes, and the file starts again from empty past CAPTURE_REWIND (or half of
# limits.file_size, if smaller).
CAPTURE_PUNCH = 16 << 10
CAPTURE_REWIND = 256 << 20
PAGE_SIZE = posix.sysconf("SC_PAGE_SIZE")
UTF8_CONTINUATION = bytes(range(0x80, 0xC0))


def punch_hole(fd, begin, end):
    """Frees bytes [begin, end) of a file (whole pages) without changing its size or any
    offset: MADV_REMOVE on a shared mapping of them (tmpfs, and the file systems that punch
    holes). False where that cannot be done. mmap is imported only when needed."""
    if end <= begin:
        return True
    try:
        import mmap
        with mmap.mmap(fd, end - begin, offset=begin) as m:
            m.madvise(mmap.MADV_REMOVE)
        return True
    except (ImportError, OSError, ValueError, AttributeError):
        return False


def rewind_limit():
    """Where a capture file starts again from empty: CAPTURE_REWIND, or half of the largest
    file the code may write (RLIMIT_FSIZE) when that is smaller."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY and soft >= 0:
            return min(CAPTURE_REWIND, soft // 2)
    except (ImportError, OSError, ValueError):
        pass
    return CAPTURE_REWIND


class Capture:
    """A temp file that fd `target` writes into; unlinked at once so it never outlives us."""

    def __init__(self, target, directory):
        self.target, self.directory = target, directory
        self.renew()

    def renew(self):
        """A new file for fd `target`: at the start, and after the code closed the old one. Its
        own descriptor sits high (moved_high): one of the code's files taking its number
        would be read and emptied."""
        name = f"rlm-driver-{posix.getpid()}-{self.target}-{posix.urandom(4).hex()}"
        path = f"{self.directory}/{name}"
        # O_APPEND: every write lands at the end, where take looks, even after the code moved
        # fd 1's offset (the file is not emptied after each block: let_go)
        fd = posix.open(path, posix.O_RDWR | posix.O_APPEND | posix.O_CREAT | posix.O_EXCL, 0o600)
        posix.unlink(path)
        self.fd = moved_high(fd)
        self.start = self.freed = 0   # bytes taken; bytes of them freed (let_go)
        self.rewind_at = None
        posix.dup2(self.fd, self.target)

    def take(self, limit):
        """(text, total characters) written since the last take."""
        # The bytes written since the last take end at the file's size, which fd `target`
        # writes into unless the code moved or closed it (`reattach` puts it back after each
        # block). Its end is where the next write goes in any case: an lseek, with no stat.
        try:
            size = posix.lseek(self.fd, 0, io.SEEK_END)
        except OSError:   # the code closed the file's descriptor: what it held went with it
            self.renew()
            return "", 0
        start = self.start
        if size == start:
            return "", 0
        if size < start:   # the code cut the file (os.ftruncate(1, 0)): what is there is new
            start = self.start = self.freed = 0
        if size - start <= limit:  # never more characters than bytes
            text = posix.pread(self.fd, size - start, start).decode("utf-8", "replace")
            total = len(text)
        else:
            total = self.count_chars(start, size)
            if total <= limit:
                text = posix.pread(self.fd, size - start, start).decode("utf-8", "replace")
                if len(text) > limit:   # stray continuation bytes: each one a U+FFFD
                    total = len(text)
                    text = cut_text(text[:limit // 2], text[len(text) - (limit - limit // 2):],
                                    total)
            else:
                text = self.head_and_tail(start, size, limit, total)
        self.let_go(size)
        return text, total

    def let_go(self, size):
        """Marks the file's first `size` bytes taken. It is emptied when nothing seems to be
        writing into it any more: no thread of the code's runs (a Python thread writes just
        when the driver's own system calls let it) and nothing came since `size` was read.
        Otherwise what was written between the take and the emptying would be lost: the file
        grows instead, and the pages taken are freed (a hole punched, CAPTURE_PUNCH bytes or
        more at a time); past half of the largest file the code may write (limits.file_size),
        it is emptied after all."""
        if _thread._count() == OWN_THREADS and posix.lseek(self.fd, 0, io.SEEK_END) == size:
            self.clear()
            return
        self.start = size
        if size - self.freed < CAPTURE_PUNCH:
            return
        if self.rewind_at is None:
            self.rewind_at = rewind_limit()
        end = size - size % PAGE_SIZE
        if size >= self.rewind_at or not punch_hole(self.fd, self.freed, end):
            self.clear()
        else:
            self.freed = end

    def clear(self):
        posix.ftruncate(self.fd, 0)
        posix.lseek(self.fd, 0, io.SEEK_SET)  # the offset is shared with fd 1/2 and others
        self.start = self.freed = 0

    def reattach(self):
        """Points fd `target` at the file (again: the code may have moved or closed it)."""
        try:
            posix.dup2(self.fd, self.target)
        except OSError:   # the file's own descriptor is gone too
            self.renew()

    def discard(self):
        """Forgets what was written; fd `target` points at the file again."""
        self.reattach()
        self.clear()

    def count_chars(self, start, size):
        total, offset = 0, start
        while offset < size:
            chunk = posix.pread(self.fd, READ_CHUNK, offset)
            if not chunk:
                break
            offset += len(chunk)
            total += len(chunk.translate(None, UTF8_CONTINUATION))
        return total

    def head_and_tail(self, start, size, limit, total):
        # A character is at most 4 bytes; 3 more bytes cover a character split at the tail's start.
        head_n = limit // 2
        tail_n = limit - head_n
        head = posix.pread(self.fd, min(4 * head_n, size - start), start).decode(
            "utf-8", "replace")[:head_n]
        tail_bytes = min(size - start, 4 * tail_n + 3)
        tail = posix.pread(self.fd, tail_bytes, size - tail_bytes).decode("utf-8", "replace")
        return cut_text(head, tail[-tail_n:], total)


def cut_text(head, tail, total):
    """head and tail of a text of `total` characters, around a line that counts the rest."""
    return f"{head}\n... [{total - len(head) - len(tail)} characters cut] ...\n{tail}"


