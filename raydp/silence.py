"""Nothing a target prints while it sees private data reaches a terminal, a log file or a pipe.

:func:`silenced` is entered around every evaluation on the private data (the release). Inside it:

- file descriptors 1 and 2 point at ``/dev/null`` (``dup2``), so C and Fortran code that writes to
  them — liblinear's ``iter … f … |g|`` lines under ``verbose=1``, ``printf``, ``os.write(1, …)`` —
  writes nowhere. C's stdio buffers are flushed (``fflush(NULL)``) before the descriptors are put
  back, so a line the target left in a buffer is discarded rather than printed afterwards;
- ``sys.stdout``/``sys.stderr`` are a null writer and warnings are ignored;
- ``logging`` is disabled (``logging.disable(CRITICAL)``), whatever handlers were configured.

Everything is restored on the way out, also when the target raises. It works in whatever process
runs the release: the driver, or a Ray worker (whose descriptors 1 and 2 are its log files, which Ray
streams to the driver). While a release runs, other threads' output in the same process is
discarded too (e.g. Ray's forwarding of worker logs in the driver): the descriptors are per process.
Entering is re-entrant and serialised by a lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import threading
import warnings

__all__ = ["silenced"]

_lock = threading.RLock()
_depth = 0


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: write out every C stdio buffer of this process (to wherever fd 1/2 now point)."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # pragma: no cover - no C library to reach (not POSIX)
        pass


def _flush_python() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            if stream is not None:
                stream.flush()


class _NullWriter:
    """A text stream that discards everything (``io.StringIO`` would keep a chatty target's output)."""

    encoding = "utf-8"

    def write(self, text) -> int:
        return len(text)

    def writelines(self, lines) -> None:
        pass

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def silenced():
    """Discard every kind of output of this process for the duration of the block (module docstring)."""
    global _depth
    with _lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        _flush_python()  # what was printed before belongs to the caller: let it out first
        _flush_c_stdio()
        saved: dict[int, int] = {}
        devnull = os.open(os.devnull, os.O_WRONLY)
        previous_disable = logging.root.manager.disable
        _depth = 1
        try:
            for fd in (1, 2):
                try:
                    saved[fd] = os.dup(fd)
                except OSError:  # not open in this process: nothing to silence there
                    continue
                os.dup2(devnull, fd)
            logging.disable(logging.CRITICAL)
            null = _NullWriter()
            with warnings.catch_warnings(), contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                warnings.simplefilter("ignore")
                try:
                    yield
                finally:
                    _flush_python()  # buffered private text goes to /dev/null, not out after the block
                    _flush_c_stdio()
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            os.close(devnull)
            logging.disable(previous_disable)
            _depth = 0
