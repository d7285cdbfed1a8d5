"""Proof of concurrency for the stand-ins: counts the requests being handled at once and can hold
each one until a number of them are in flight together. A test that asserts the peak, instead of
how long a batch took, holds however slow or loaded the machine is."""
import threading
import time


class InFlight:
    """`with in_flight:` around a request's handling counts it; peak is the most seen at once.
    wait_for(n) holds a request until n were in flight at the same moment, or for at most
    `limit` seconds: past that the gate stays open for good (a client that sends one request at
    a time must not wait `limit` seconds per request), and the peak tells the test what came."""

    def __init__(self, limit=30):
        self.cond = threading.Condition()
        self.limit = limit
        self.reset()

    def reset(self):
        with self.cond:
            self.now = self.peak = 0
            self.busy, self.busy_since = 0.0, None   # seconds with a request in flight
            self.expired = False
            self.cond.notify_all()

    def admit(self, most=0):
        """Counts a request in, as `with` does, unless `most` (0: no limit) are in flight
        already: then False, and nothing is counted."""
        with self.cond:
            if most and self.now >= most:
                return False
            self.now += 1
            self.peak = max(self.peak, self.now)
            if self.now == 1:
                self.busy_since = time.monotonic()
            self.cond.notify_all()
        return True

    def leave(self):
        with self.cond:
            self.now -= 1
            if self.now == 0:
                self.busy += time.monotonic() - self.busy_since

    def busy_seconds(self):
        """Seconds during which at least one request was in flight."""
        with self.cond:
            ongoing = time.monotonic() - self.busy_since if self.now else 0
            return self.busy + ongoing

    def __enter__(self):
        self.admit()
        return self

    def __exit__(self, *exc):
        self.leave()

    def wait_for(self, n):
        with self.cond:
            if not self.cond.wait_for(lambda: self.peak >= n or self.expired, self.limit):
                self.expired = True
                self.cond.notify_all()
