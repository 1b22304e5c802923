"""Progress of a sampling run, shown wherever the user looks.

- On a terminal or in a notebook: a live bar (``tqdm.auto``: a text bar on a terminal, a widget in
  Jupyter) with pairs done, pairs/s, ETA, failures so far and the lower bound on Δ̂ so far.
- Anywhere else — a log file, ``ray job logs``, a CI console — one plain line every ``interval``
  seconds (default 30; ``RAYDP_PROGRESS_INTERVAL`` sets it) and one at the end::

      raydp: 1,234,567/5,486,187 pairs (22.5%), 41,203 pairs/s, ETA 1:43, 0 failed, Δ̂ ≥ 0.00412 so far

A run shorter than ``delay`` seconds (default 2; ``RAYDP_PROGRESS_DELAY`` sets it) shows nothing at
all, so that progress can be on by default everywhere — the library, a release, a scikit-learn fit —
and only long runs say so. ``enabled=False`` (``progress=False``, ``--quiet``) shows nothing.

"Δ̂ ≥ x so far": Δ̂ = G_(k) is the (m − k + 1)-th largest of all m values; among the values seen so
far that order statistic can only grow as more values arrive, so it is a lower bound on the final Δ̂.

Never silent. A display that is showing is the *current* one of its thread (:func:`current`), so the
engine can reach it without the sampler passing it down. While results are outstanding the engine
calls :meth:`Progress.waiting` about once a second: when nothing has come back for a while it says
what is outstanding, where and for how long, and the periodic lines keep coming every ``interval``
even with no result in between::

    raydp: 1,200/4,000 pairs (30.0%), 40 pairs/s, ETA 01:10, 0 failed, Δ̂ ≥ 0.0127 so far; nothing back
    for 31 s: 96 blocks outstanding in 6 tasks; 198.18.0.2: 3 tasks running 31 s; 198.18.0.3: 3 tasks
    running 12 s

Events worth a line of their own — a host lost, backup copies started — go through :func:`note`:
printed at once (above the bar on a terminal), and to the ``raydp.engine`` logger (a warning) when
no display is showing (``progress=False``, ``--quiet``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
import time
from typing import Callable

DEFAULT_INTERVAL = 30.0
DEFAULT_DELAY = 2.0
QUIET = 5.0  # seconds without a result after which the display says what is outstanding

log = logging.getLogger("raydp.engine")
_showing = threading.local()  # the displays open in this thread, innermost last


def current() -> "Progress | None":
    """The display showing in this thread (the innermost open one), or None."""
    stack = getattr(_showing, "stack", None)
    return stack[-1] if stack else None


def note(text: str) -> None:
    """An event the user must see even without a display: on the current display, else a warning."""
    display = current()
    if display is not None:
        display.note(text)
    else:
        log.warning("raydp: %s", text)


def _seconds(variable: str, default: float) -> float:
    try:
        value = float(os.environ.get(variable, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


def _interval() -> float:
    return _seconds("RAYDP_PROGRESS_INTERVAL", DEFAULT_INTERVAL)


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    try:
        return shell is not None and type(shell.get_ipython()).__name__ == "ZMQInteractiveShell"
    except Exception:  # pragma: no cover - exotic IPython
        return False


def _has_widgets() -> bool:
    """ipywidgets present: tqdm's notebook bar works (without it tqdm.auto warns and falls back)."""
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def _eta(seconds: float) -> str:
    from tqdm import tqdm

    return tqdm.format_interval(seconds) if math.isfinite(seconds) else "?"


class Progress:
    """Pairs done out of ``total``. ``status()`` returns ``(failures, bound or None)`` when asked.

    ``live`` forces the live bar (True) or the periodic lines (False); by default the bar is used on a
    terminal or in a notebook, the lines elsewhere.
    """

    def __init__(self, total: int, enabled: bool = True, *, stream=None, live: bool | None = None,
                 interval: float | None = None, delay: float | None = None,
                 status: Callable[[], tuple[int, float | None]] | None = None):
        self.total = int(total)
        self.done = 0
        self.enabled = bool(enabled) and self.total > 0
        self.stream = sys.stderr if stream is None else stream
        self.interval = _interval() if interval is None else float(interval)
        self.delay = _seconds("RAYDP_PROGRESS_DELAY", DEFAULT_DELAY) if delay is None else float(delay)
        self._wrote = False
        self.status = status or (lambda: (0, None))
        self.t0 = time.monotonic()
        self._last_line = self.t0
        self._last_postfix = 0.0
        self._bar = None
        self._waiting: str | None = None
        if not self.enabled:
            return
        _showing.__dict__.setdefault("stack", []).append(self)
        if live is None:
            live = _in_notebook() or bool(getattr(self.stream, "isatty", lambda: False)())
        if live:
            from tqdm import tqdm

            if _in_notebook() and _has_widgets():
                from tqdm.notebook import tqdm

            self._bar = tqdm(total=self.total, unit="pair", unit_scale=True, file=self.stream, leave=True,
                             dynamic_ncols=True, desc="raydp", delay=self.delay)

    def update(self, pairs: int) -> None:
        self.done += int(pairs)
        if not self.enabled:
            return
        self._waiting = None
        now = time.monotonic()
        if self._bar is not None:
            self._bar.update(int(pairs))
            if now - self._last_postfix >= 1.0:  # Δ̂ so far costs a partition: at most once a second
                self._last_postfix = now
                self._bar.set_postfix_str(self._extra(), refresh=False)
        elif now - self._last_line >= self.interval and self.done < self.total:
            self._last_line = now
            self._write(now)

    def waiting(self, quiet: float, outstanding: Callable[[], str]) -> None:
        """The engine's heartbeat while results are outstanding (about once a second): nothing has come
        back for ``quiet`` seconds; ``outstanding()`` says what has not, where and for how long.

        The periodic lines come every ``interval`` results or not, and say what is outstanding once
        nothing came back for an interval (or :data:`QUIET` seconds); the bar shows it after its counts
        once nothing came back for :data:`QUIET` seconds, and its clock keeps moving.
        """
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < self.delay:
            return
        if self._bar is not None:
            if now - self._last_postfix >= 1.0:
                self._last_postfix = now
                self._waiting = outstanding() if quiet >= QUIET else None
                self._bar.set_postfix_str(self._extra(), refresh=True)  # also moves the elapsed time
        elif now - self._last_line >= self.interval:
            self._last_line = now
            self._waiting = outstanding() if quiet >= min(self.interval, QUIET) else None
            self._write(now)

    def note(self, text: str) -> None:
        """A line of its own, at once: above the bar on a terminal, between the periodic lines elsewhere."""
        line = f"raydp: {text}"
        if self._bar is not None:
            self._bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def _extra(self) -> str:
        failures, bound = self.status()
        text = f"{failures:,} failed"
        if bound is not None:
            text += f", Δ̂ ≥ {bound:.6g} so far" if self.done < self.total else f", Δ̂ = {bound:.6g}"
        if self._waiting and self.done < self.total:
            text += f"; {self._waiting}"
        return text

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.t0, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"raydp: {self.done:,}/{self.total:,} pairs ({pct:.1f}%), {rate:,.0f} pairs/s, "
                f"ETA {_eta(left)}, {self._extra()}")

    def _write(self, now: float) -> None:
        self._wrote = True
        print(self.line(now), file=self.stream, flush=True)

    def close(self, ok: bool = True) -> None:
        """End the display; ``ok=False`` (the run failed) ends it without a final line — the error is the news."""
        if not self.enabled:
            return
        stack = getattr(_showing, "stack", [])
        if self in stack:
            stack.remove(self)
        self._waiting = None
        if self._bar is not None:
            if ok:
                self._bar.set_postfix_str(self._extra(), refresh=False)
            self._bar.close()
        elif ok and (self._wrote or time.monotonic() - self.t0 >= self.delay):
            self._write(time.monotonic())
        self.enabled = False
