"""A one-line progress display: pairs done, pairs/s, ETA. Quiet unless stderr is a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, enabled: bool = True, stream=None, min_interval: float = 0.25,
                 force: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = bool(enabled) and (force or isatty)
        self.total = int(total)
        self.done = 0
        self.t0 = time.monotonic()
        self._last = 0.0
        self.min_interval = min_interval

    def update(self, pairs: int) -> None:
        self.done += int(pairs)
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last >= self.min_interval or self.done >= self.total:
            self._last = now
            self.stream.write("\r" + self.line(now))
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.t0, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f"{left:6.0f}s" if left != float("inf") else "     ?"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return f"pairs {self.done:>10,}/{self.total:,} {pct:5.1f}%  {rate:10,.0f} pairs/s  ETA {eta}"

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
