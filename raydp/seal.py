"""The private evaluation, sealed in a process of its own.

The target runs on the private data in a process that inherits nothing of the caller's: no worker
pools (joblib/loky executors started by an earlier public fit keep the caller's stdout), no threads,
no logging handlers, no warning filters or ``catch_warnings(record=True)`` lists, no ``atexit``
hooks, no open files. Its descriptors 0, 1 and 2 are ``/dev/null`` and every other descriptor is
closed except the one socket that carries the conversation; only the released value comes back,
and a failure comes back as its kind and exception type alone (never its message, never the
exception object, so no ``__context__`` holds the data either). When the conversation ends the
process and its whole process group are killed, so a thread or a child process the target left
running dies with it.

How the process is made. Starting a fresh interpreter for every release costs a second or more
(numpy, scikit-learn, OpenDP are imported again), so one *template* process is started per calling
process, by ``exec`` of a new interpreter (:func:`_template_main`): it inherits no descriptor but its
control socket and imports the libraries the caller has loaded. Each sealed evaluation is a
``fork`` of that template (a few milliseconds), which becomes a session leader, points 0-2 at
``/dev/null`` and closes every other descriptor before it reads anything. The template exits when
the calling process does (its control socket closes).

The conversation (:class:`Sealed`): ``load`` sends the target and the mechanism (cloudpickle) and
the caller's ``sys.path`` and working directory; ``replay`` sends oracle records of the estimate's witness pairs and gets
their G back (public data: the caller compares them); ``release`` sends the private data and gets
the mechanism's noisy output back. The witnesses are replayed by the very process, and so the very
code, that then evaluates the private data: a module edited on disk after the caller imported it
is what both see.

What it does not cover: a target that writes to files or sockets it opens itself, or a descendant
that leaves the process group (``setsid``).
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

import numpy as np

from .errors import EstimateMismatchError, MechanismError, RaydpError, TargetError

__all__ = ["Sealed", "warm"]

# Libraries whose modules the template imports when the caller has them loaded: a forked evaluation
# then finds them ready instead of importing them again for every release.
_PRELOAD = ("numpy", "scipy", "sklearn", "pandas", "opendp", "pyarrow", "joblib", "threadpoolctl",
            "cloudpickle", "raydp")
_MAX_MESSAGE = 1 << 20
_MAX_REQUEST = 1 << 16


class _Template:
    """The template process of this calling process, and what it has been asked to import."""

    def __init__(self):
        self.pid = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs.set_inheritable(True)
        env = dict(os.environ)
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from raydp.seal import _template_main; _template_main(int(sys.argv[1]))",
                 str(theirs.fileno())], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        finally:
            theirs.close()
        self.ctl = ours
        self.sent: set[str] = set()
        self.lock = threading.Lock()
        atexit.register(self.close)  # the template sees EOF and exits; reaped here, without a warning

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None

    def fork(self) -> socket.socket:
        """A new sealed process; returns the caller's end of its socket."""
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                loaded = sorted(name for name in list(sys.modules)
                                if name.split(".")[0] in _PRELOAD and name not in self.sent
                                and not name.split(".")[-1].startswith("test"))
                self.sent.update(loaded)
                request = pickle.dumps(loaded)
                if len(request) > _MAX_REQUEST:  # a datagram must fit the socket's buffer
                    request = pickle.dumps(loaded[: len(loaded) * _MAX_REQUEST // len(request) // 2])
                socket.send_fds(self.ctl, [request], [its.fileno()])
        finally:
            its.close()
        return mine

    def close(self) -> None:
        if self.pid != os.getpid():
            return  # a forked copy of the caller: the template is its parent's
        try:
            self.ctl.close()
        finally:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_template: _Template | None = None
_template_lock = threading.Lock()


def _fork() -> socket.socket:
    global _template
    with _template_lock:
        for attempt in (0, 1):
            if _template is None or not _template.alive():
                _template = _Template()
            try:
                return _template.fork()
            except OSError:
                if attempt:
                    raise
                _template = None  # it died (killed from outside): start another once
    raise AssertionError("unreachable")


class Sealed:
    """One private evaluation in its own sealed process (module docstring). Use as a context manager."""

    def __init__(self):
        self.sock = _fork()
        self.conn = Connection(self.sock.detach())
        kind, self.pid = self._recv()
        if kind != "ready":
            raise TargetError("the sealed process did not start")

    def _recv(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            raise TargetError("the sealed process running the target ended without answering (it crashed or "
                              "was killed)") from None

    def load(self, target, mechanism, n: int, out_dim: int) -> None:
        """Send the target and the mechanism; the target's ``setup()`` runs there (it sees no data)."""
        import cloudpickle

        try:
            payload = cloudpickle.dumps((target, mechanism))
        except Exception as exc:
            raise TargetError(f"the target cannot be sent to the sealed process that evaluates it on the private "
                              f"data ({type(exc).__name__}: {exc}); a target must be picklable (cloudpickle)"
                              .splitlines()[0]) from None
        self.conn.send(("load", (list(sys.path), os.getcwd()), payload, int(n), int(out_dim)))
        answer = self._recv()
        if answer[0] != "loaded":
            _, _, name, text = answer
            raise TargetError(f"the target could not be loaded in the sealed process ({name}: {text})")

    def replay(self, records: np.ndarray, pairs) -> np.ndarray:
        """G of each witness recomputed there (oracle records only)."""
        self.conn.send(("replay", np.asarray(records), [int(p) for p in pairs]))
        answer = self._recv()
        if answer[0] != "replayed":
            _, _, name, text = answer
            raise TargetError(f"replaying the witness pairs failed ({name}: {text})")
        return np.asarray(answer[1], dtype=np.float64)

    def release(self, data, sensitivity: float):
        """The mechanism's output on ``target(data)`` at ``sensitivity``; a failure raises with its kind and
        exception type only."""
        self.conn.send(("release", data, float(sensitivity)))
        answer = self._recv()
        if answer[0] == "released":
            return answer[1]
        _, kind, name = answer[:3]
        raise _failure(kind, name, answer[3] if len(answer) > 3 else None)

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            try:
                os.killpg(self.pid, signal.SIGKILL)  # the process and whatever it left running
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> "Sealed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def warm() -> None:
    """Start this process's template now (it imports in the background), so that the first sealed
    evaluation does not wait for it. Cheap when it is running already."""
    global _template
    with _template_lock:
        if _template is None or not _template.alive():
            _template = _Template()


def _failure(kind: str, name: str, detail) -> RaydpError:
    if kind == "read":
        return TargetError("the private data file could not be read as finite numbers")
    if kind == "rows":
        return EstimateMismatchError(f"the data has {detail[0]} records; the estimate was for n={detail[1]}")
    if kind == "target":
        return TargetError(f"the target raised {name} on the private data; its message is withheld because it may "
                           "quote the data")
    if kind == "embed":
        return MechanismError(f"the target's output on the private data does not fit the mechanism ({name}; message "
                              "withheld: it may quote the output)")
    if kind == "size":
        return EstimateMismatchError(f"the target's output on the private data has another number of coordinates "
                                     f"than the estimate's {detail}")
    return MechanismError(f"the mechanism raised {name} on the private answer; its message is withheld because it "
                          "may quote the answer")


# ------------------------------------------------------------------------------------ the processes


def _template_main(fd: int) -> None:
    """The template: import, then fork one sealed process per request until the caller goes away."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the sealed processes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctl = socket.socket(fileno=fd)
    for name in ("numpy", "cloudpickle", "raydp.engine.witness", "raydp.mechanisms", "raydp.tables"):
        _try_import(name)
    try:  # OpenDP's samplers, loaded and enabled once here rather than in every release (~1 s)
        from .noise import _opendp

        _opendp()
    except Exception:  # noqa: BLE001 - the release will say what is wrong
        pass
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, _MAX_MESSAGE, 1)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the calling process is gone
        try:
            for name in pickle.loads(msg):
                _try_import(name)
        except Exception:  # noqa: BLE001 - an import that fails here fails again, visibly, in the child
            pass
        for child_fd in fds[:1]:
            if os.fork() == 0:
                try:
                    _child_main(child_fd, ctl.fileno())
                finally:
                    os._exit(0)
            os.close(child_fd)
        for extra in fds[1:]:
            os.close(extra)


def _try_import(name: str) -> None:
    try:
        __import__(name)
    except BaseException:  # noqa: BLE001 - optional: the child imports what it needs
        pass


def _open_fds() -> list[int]:
    try:
        return [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, os.sysconf("SC_OPEN_MAX")))


def _child_main(fd: int, ctl_fd: int) -> None:
    os.setsid()  # its own process group: killed whole when the conversation ends
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    for other in _open_fds():
        if other > 2 and other != fd:
            try:
                os.close(other)
            except OSError:
                pass
    conn = Connection(fd)
    conn.send(("ready", os.getpid()))
    _serve(conn)


def _serve(conn: Connection) -> None:
    kind, (path, cwd), payload, n, out_dim = conn.recv()
    sys.path[:] = path  # the caller's: its modules import here as they did there
    try:
        os.chdir(cwd)  # and its working directory: a target's relative paths mean the same
    except OSError:
        pass
    try:
        import cloudpickle

        from .engine.blocks import set_up_here

        target, mechanism = cloudpickle.loads(payload)
        _, target = set_up_here(target)
    except BaseException as exc:  # noqa: BLE001 - no private data has been seen: the message is public
        conn.send(("error", "load", type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""))
        return
    conn.send(("loaded",))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "replay":
            try:
                from .engine.witness import replay

                g = replay(target, mechanism, n, out_dim, msg[1], msg[2])
            except BaseException as exc:  # noqa: BLE001 - oracle records: public
                conn.send(("error", "replay", type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""))
                return
            conn.send(("replayed", g))
        elif msg[0] == "release":
            conn.send(_release(target, mechanism, n, out_dim, msg[1], msg[2]))
            return
        else:
            return


def _release(target, mechanism, n: int, out_dim: int, data, sensitivity: float):
    """target(data), embedded and noised: the only code that touches the private data."""
    from .tables import PrivateTable

    if isinstance(data, PrivateTable):
        try:
            data = data.load()
        except BaseException:  # noqa: BLE001
            return ("error", "read", "")
        if data.shape[0] != n:
            return ("error", "rows", "", (int(data.shape[0]), n))
    try:
        value = target(data)
    except BaseException as exc:  # noqa: BLE001 - SystemExit(data) is a failure like any other
        return ("error", "target", type(exc).__name__)
    try:
        embedded = np.asarray(mechanism.embed(value))
    except BaseException as exc:  # noqa: BLE001
        return ("error", "embed", type(exc).__name__)
    if embedded.size != out_dim:
        return ("error", "size", "", out_dim)
    try:
        return ("released", mechanism.release(value, sensitivity))
    except BaseException as exc:  # noqa: BLE001
        return ("error", "mechanism", type(exc).__name__)

