"""The private evaluation: the target runs on the private data in a sandbox, and nothing it makes is trusted.

The target is treated as an adversary (it may be someone else's code). Three layers:

**The sandbox** (:func:`sandbox_status`). Where bubblewrap (``bwrap``, the Debian package
``bubblewrap``) can make Linux namespaces, every private evaluation runs in one: its own user, PID,
mount, network, IPC, UTS and cgroup namespaces; no network (a loopback of its own, so no socket reaches
the host, abstract Unix sockets included); the filesystem read-only, with an empty private ``/tmp``,
``/run`` and ``/dev/shm`` and the caller's Ray directory (``~/.ray``, its token) hidden; its own
``/proc``, so no other process of the machine is seen (``/proc/<caller>/fd/1`` does not exist there);
an environment scrubbed to a fixed allow-list (no credentials); every capability dropped and
``no_new_privs`` set; limits on memory, CPU seconds, processes and wall time (:class:`Limits`); and
everything in it killed when the evaluation ends, including a descendant that left its session
(``setsid`` does not leave a PID namespace). Where bubblewrap cannot be had (not installed, not Linux,
no user namespaces) the evaluation runs *sealed, not sandboxed* — the process below, without the
namespaces — raydp says so once (a warning), and every statement says so.

**The process** (:class:`Sealed`). Starting an interpreter per release costs a second or more (numpy,
scikit-learn and OpenDP are imported again), so a *template* process is started once — inside the
sandbox — and imports the libraries the caller has loaded; each evaluation is a ``fork`` of it (a
few milliseconds) that becomes a session leader, points 0-2 at ``/dev/null``, closes every other
descriptor but its channel, sets its resource limits and then reads what it is sent. A template
serves one evaluation at a time: when the evaluation ends the template kills every other process in
its sandbox, empties ``/tmp``, ``/run``, ``/dev/shm`` and the IPC objects, and only then takes the
next, so no evaluation finds what an earlier one left. The template itself cannot be traced or read
by its children (it is not dumpable). A pool holds at most :data:`POOL_SIZE` templates.

**The channel**. The caller sends the target, the mechanism, public witness records and the private
data (pickled: the sandbox trusts the caller). The answers come back as raw bytes in a fixed format —
never unpickled — and are checked: one expected message per request, its size bounded, a tag from a
fixed set, the value's number of coordinates the target's output dimension, every coordinate finite,
its shape the one the target gave on public records. Anything else is a failure of kind ``target``.
A failure comes back as a kind from a fixed set alone (``load``, ``read``, ``rows``, ``target``):
never an exception's name, text or object, so the raised raydp error holds nothing the target made.
The noise is added *here*, in the caller, to the checked value: code in the sandbox cannot change
the noise it is released with.

**Code the caller does not trust to load** (:class:`Submitted`). An analyst's own function, as the
cloudpickle bytes they sent: this process never unpickles them (unpickling is running their code).
Called on a public database here — the sampler, a Ray worker, the output-dimension probe — it is
evaluated in a *session*: one fork of a template of its own, in the sandbox, that loads the raw bytes
once and then answers public evaluations one after another, each answer raw bytes checked here (a
float64 array of at most :data:`MAX_COORDINATES` coordinates, finite). The private evaluation loads the
object itself into a fresh fork (never a session's), where calling it unpickles the bytes there and
calls the function directly.
"""

from __future__ import annotations

import atexit
import functools
import math
import os
import pickle
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np

from .errors import EstimateMismatchError, InvalidArgumentError, RaydpError, TargetError

__all__ = ["Sealed", "Limits", "warm", "sandbox_status", "SandboxUnavailableWarning", "POOL_SIZE", "hide_always",
           "Submitted", "close_sessions", "check_pickle", "hidden_always"]

# Libraries whose modules the template imports when the caller has them loaded: a forked evaluation
# then finds them ready instead of importing them again for every release.
# (Not OpenDP: the noise is drawn in the caller, which loads it in the background: warm().)
_PRELOAD = ("numpy", "scipy", "sklearn", "pandas", "pyarrow", "joblib", "threadpoolctl", "cloudpickle", "raydp")
_MAX_MESSAGE = 1 << 20
_MAX_REQUEST = 1 << 16
POOL_SIZE = 2  # templates (sandboxes) alive at once per calling process; more callers wait
# Environment variables the sandbox keeps (numerical libraries' threading and CPU settings): no
# credential, token or path of the caller's goes in.
_ENV_KEEP_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_", "NUMEXPR_", "VECLIB_", "BLIS_", "GOTO_")
_ENV_KEEP = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED")
_WRITABLE = ("/tmp", "/run", "/dev/shm")  # empty tmpfs in the sandbox, emptied after every evaluation
_KINDS = {b"l": "load", b"r": "read", b"n": "rows", b"t": "target"}
_READY_TIMEOUT = 120.0  # a template that has not imported its libraries by then is not coming
MAX_COORDINATES = 1 << 16  # coordinates of one answer of a submitted function on a public database
SESSION_IDLE = 2.0  # seconds a session of a submitted function stays open without a call
_IN_EVALUATION = False  # True in an evaluation process (a fork of a template): Submitted runs its code directly
_IN_SANDBOX = False  # True in a template (and its forks) inside bubblewrap's namespaces


class SandboxUnavailableWarning(UserWarning):
    """bubblewrap cannot make the sandbox here: the private evaluation runs sealed, not sandboxed."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one private evaluation (the target and everything it starts).

    ``memory`` bytes of address space per process (it counts what the loaded libraries map: numpy, SciPy
    and OpenBLAS take about 0.75 GiB before the target allocates anything), ``cpu_seconds`` of CPU per process, ``processes``
    alive at once in the sandbox, ``wall_seconds`` from the moment the data is sent to the answer
    (the caller kills the sandbox then). A limit hit is a failure of kind ``target``, counted like any
    other. ``processes`` is enforced by a cgroup where raydp can make one (as root), else by
    ``RLIMIT_NPROC`` (which the kernel does not apply to root).
    """

    memory: int | None = 8 << 30
    cpu_seconds: int | None = 3600
    processes: int | None = 256
    wall_seconds: float | None = 3600.0

    def __post_init__(self):
        for name in ("memory", "cpu_seconds", "processes", "wall_seconds"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0
                                  or not math.isfinite(v)):
                raise InvalidArgumentError(f"Limits.{name} must be a positive number or None, got {v!r}")


DEFAULT_LIMITS = Limits()


# ------------------------------------------------------------------------------------ the sandbox tool


_status: tuple[bool, str] | None = None
_status_lock = threading.Lock()


def sandbox_status() -> tuple[bool, str]:
    """``(True, how)`` when the private evaluation can run in a bubblewrap sandbox here, else
    ``(False, why not)``. Tried once per process (a ``bwrap ... true``); ``RAYDP_SANDBOX=off`` turns it
    off (the evaluation then runs sealed, not sandboxed)."""
    global _status
    with _status_lock:
        if _status is None:
            _status = _probe()
            if not _status[0]:
                warnings.warn(f"raydp: {_status[1]}: the private evaluation runs sealed, not sandboxed (no "
                              "namespaces: it can see the machine's files, network and processes). Install "
                              "bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) to sandbox it.",
                              SandboxUnavailableWarning, stacklevel=3)
        return _status


def _probe() -> tuple[bool, str]:
    if os.environ.get("RAYDP_SANDBOX", "").lower() in ("off", "0", "no", "false"):
        return False, "the sandbox is turned off (RAYDP_SANDBOX=off)"
    if not sys.platform.startswith("linux"):
        return False, f"bubblewrap needs Linux namespaces, and this is {sys.platform}"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        done = subprocess.run([bwrap, *_BASE_ARGS, "--setenv", "RAYDP_PROBE", "raydp-sandbox-probe", "--", "/bin/true"], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap could not be started ({type(exc).__name__})"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        return False, f"bubblewrap cannot make namespaces here ({why[0][:200]})"
    return True, "bubblewrap"


# Namespaces, no network, everything read-only, its own /proc and /dev, capabilities dropped, killed
# with its parent. bwrap sets no_new_privs itself.
_BASE_ARGS = ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
              "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev")
_TMPFS_BYTES = 256 << 20  # each writable place's size


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _sandbox_argv(bwrap: str, command: list[str], env: dict, hide=(), seccomp_fd: int | None = None) -> list[str]:
    """bwrap's command line: the base namespaces, the writable places empty, the code the caller runs
    visible read-only (its sys.path and working directory, where they lie under a hidden place), the
    ``hide`` paths empty, the environment ``env`` alone."""
    argv = [bwrap, *_BASE_ARGS]
    for place in _WRITABLE:
        if place == "/dev/shm" or (os.path.isdir(place) and not os.path.islink(place)):
            argv += ["--size", str(_TMPFS_BYTES), "--tmpfs", place]
    argv += ["--mqueue", "/dev/mqueue"]
    for p in _shown_paths():
        argv += ["--ro-bind", p, p]
    home_ray = os.path.join(os.path.expanduser("~"), ".ray")
    for p in [home_ray, *hide]:
        p = os.path.realpath(os.fspath(p))
        if os.path.isdir(p) and p != "/":
            argv += ["--tmpfs", p, "--remount-ro", p]
        elif os.path.isfile(p):
            argv += ["--ro-bind", "/dev/null", p]
    argv += ["--remount-ro", "/dev", "--chdir", os.getcwd() if os.path.isdir(os.getcwd()) else "/", "--clearenv"]
    for k, v in env.items():
        argv += ["--setenv", k, v]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    return argv + ["--", *command]


def _shown_paths() -> tuple:
    """The caller's code, Python and libraries (sys.path, the working directory, the interpreter, raydp)
    where they lie under a place the sandbox empties (/tmp, /run): shown read-only at the same path."""
    code = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
    try:
        code.add(os.path.realpath(os.getcwd()))
    except OSError:
        pass
    code |= {os.path.realpath(sys.prefix), os.path.realpath(sys.exec_prefix),
             os.path.dirname(os.path.realpath(sys.executable)),
             os.path.dirname(os.path.dirname(os.path.realpath(__file__)))}
    return tuple(sorted(p for p in code if any(_under(p, w) and p != w for w in _WRITABLE) and os.path.exists(p)))


# System calls the sandbox refuses (EPERM), on top of bubblewrap's namespaces: kernel keyrings (they
# outlive an evaluation in the user namespace and show in the host's /proc/keys), io_uring (it makes
# sockets and files without the system calls below), tracing and other processes' memory, perf and BPF.
_DENY = ("add_key", "keyctl", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace",
         "process_vm_readv", "process_vm_writev", "perf_event_open", "bpf", "userfaultfd")


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes | None:
    """The sandbox's seccomp filter as a BPF program (libseccomp, through pyseccomp): the calls in
    :data:`_DENY`, and ``socket(AF_UNIX, ...)`` — a Unix socket at a path the read-only view shows would
    reach a server on the host; the evaluation's own channel is inherited, and ``socketpair`` stays
    allowed. None where libseccomp cannot be loaded (the sandbox then runs without the filter)."""
    try:
        import tempfile

        import pyseccomp as sc

        f = sc.SyscallFilter(defaction=sc.ALLOW)
        for name in _DENY:
            try:
                f.add_rule(sc.ERRNO(1), name)
            except Exception:  # noqa: BLE001 - a call this architecture does not have
                pass
        f.add_rule(sc.ERRNO(1), "socket", sc.Arg(0, sc.EQ, socket.AF_UNIX))
        with tempfile.TemporaryFile() as t:
            f.export_bpf(t)
            t.seek(0)
            return t.read()
    except Exception:  # noqa: BLE001 - no libseccomp here
        return None


def _sandbox_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}
    env.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME="/tmp", PYTHONDONTWRITEBYTECODE="1",
               PYTHONNOUSERSITE="1")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here
    return env


def _sweep_cgroups() -> None:
    """Remove the empty cgroups of raydp processes that died without removing theirs (SIGKILL)."""
    for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            if not name.startswith("raydp-sandbox-"):
                continue
            try:
                os.kill(int(name.split("-")[2]), 0)
            except ProcessLookupError:
                try:
                    os.rmdir(os.path.join(root, name))
                except OSError:
                    pass
            except (ValueError, IndexError, PermissionError):
                pass


class _ProcessCap:
    """A cgroup (v1 ``pids`` controller, or v2 with ``pids`` enabled) capping the processes of one
    sandbox; None where none can be made (not root, no such controller)."""

    def __init__(self, limit: int):
        self.path = None
        _sweep_cgroups()
        for root in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
            if not os.path.exists(os.path.join(root, "cgroup.procs")) or not os.access(root, os.W_OK):
                continue
            path = os.path.join(root, f"raydp-sandbox-{os.getpid()}-{id(self):x}")
            try:
                os.mkdir(path)
                with open(os.path.join(path, "pids.max"), "w") as f:
                    f.write(str(int(limit)))
            except OSError:
                try:
                    os.rmdir(path)
                except OSError:
                    pass
                continue
            self.path = path
            return

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` started from inside the cgroup (a shell that enters it, then execs): everything it
        starts is counted, with no window before it is in."""
        if self.path is None:
            return argv
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', os.path.join(self.path, "cgroup.procs"), *argv]

    def remove(self) -> None:
        if self.path is None:
            return
        for _ in range(50):
            try:
                os.rmdir(self.path)
                self.path = None
                return
            except OSError:
                time.sleep(0.02)  # its last processes are still exiting


# ------------------------------------------------------------------------------------ the templates


class _Template:
    """One template process (in its sandbox, when there is one) of this calling process."""

    def __init__(self, sandboxed: bool, limits: Limits, hide=()):
        self.pid = os.getpid()
        self.sandboxed = sandboxed
        self.limits = limits
        self.hide = tuple(hide)
        self.shown = _shown_paths() if sandboxed else ()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        theirs.set_inheritable(True)
        self.cap = _ProcessCap(limits.processes) if sandboxed and limits.processes else None
        capped = self.cap is not None and self.cap.path is not None  # else RLIMIT_NPROC in each evaluation
        command = [sys.executable, "-c", "import sys; from raydp.seal import _template_main; "
                   "_template_main(int(sys.argv[1]), sys.argv[2] == '1', sys.argv[3])",
                   str(theirs.fileno()), "1" if sandboxed else "0", _limits_arg(limits, capped)]
        keep = [theirs.fileno()]
        self.filtered = False
        if sandboxed:
            program = _seccomp_program()
            filter_fd = None
            if program is not None:
                filter_fd = os.memfd_create("raydp-seccomp", 0)
                os.write(filter_fd, program)
                os.lseek(filter_fd, 0, os.SEEK_SET)
                keep.append(filter_fd)
                self.filtered = True
            argv = _sandbox_argv(shutil.which("bwrap"), command, _sandbox_env(), self.hide, filter_fd)
            if self.cap is not None:
                argv = self.cap.wrap(argv)
            env = _sandbox_env()  # bwrap's own too: its /proc/1/environ is readable inside
        else:
            argv = command
            env = dict(os.environ)
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        try:
            self.proc = _popen(argv, pass_fds=tuple(keep), stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True, env=env)
        finally:
            theirs.close()
            for fd in keep[1:]:
                os.close(fd)
        self.ctl = ours
        self.sent: set[str] = set()
        self.ready = False
        self.busy = False
        self.dead = False

    def alive(self) -> bool:
        return not self.dead and self.pid == os.getpid() and self.proc.poll() is None

    def wait_ready(self, timeout: float = _READY_TIMEOUT) -> bool:
        """True once the template has said it is ready (imported, or cleaned after the last evaluation)."""
        if self.ready:
            return True
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.alive():
            r, _, _ = select.select([self.ctl], [], [], min(0.5, max(0.0, end - time.monotonic())))
            if r:
                try:
                    msg = self.ctl.recv(16)
                except OSError:
                    msg = b""
                if msg != b"R":
                    self.kill()
                    return False
                self.ready = True
                return True
        return False

    def fork(self) -> socket.socket:
        """A new evaluation process; returns the caller's end of its socket."""
        mine, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            loaded = sorted(name for name in list(sys.modules)
                            if name.split(".")[0] in _PRELOAD and name not in self.sent
                            and not name.split(".")[-1].startswith("test"))
            self.sent.update(loaded)
            request = pickle.dumps(loaded)
            if len(request) > _MAX_REQUEST:  # a datagram must fit the socket's buffer
                request = pickle.dumps(loaded[: len(loaded) * _MAX_REQUEST // len(request) // 2])
            self.ready = False
            socket.send_fds(self.ctl, [request], [its.fileno()])
        finally:
            its.close()
        return mine

    def end(self) -> None:
        """The evaluation is over: the template kills what is left of it and cleans up."""
        try:
            self.ctl.send(b"E")
        except OSError:
            self.kill()

    def kill(self) -> None:
        """Everything in this template's sandbox, now (a wall limit, a template that misbehaves); what is
        left to wait for (the processes' exit, the cgroup's removal) is waited for in the background, so
        the caller's answer does not wait on it."""
        if getattr(self, "_killed", False):
            return
        self._killed = True
        self.dead = True
        try:
            if self.sandboxed:
                self.proc.kill()  # bwrap: its PID namespace dies with it (--die-with-parent inside)
            else:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            self.ctl.close()
        except OSError:
            pass
        threading.Thread(target=self._reap_killed, daemon=True).start()

    def _reap_killed(self) -> None:
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.cap is not None:
            self.cap.remove()

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
            if self.cap is not None:
                self.cap.remove()


_spawner = None
_spawner_pid = None
_spawner_lock = threading.Lock()


def _popen(argv, **keywords) -> subprocess.Popen:
    """Start a template from one long-lived thread of this process. bubblewrap's ``--die-with-parent``
    (``PR_SET_PDEATHSIG``) follows the *thread* that started it: a template started from a thread that then
    ends — a pool's worker, a web server's request thread — was killed with that thread, in the middle of
    another thread's evaluation if one was using it."""
    global _spawner, _spawner_pid
    from concurrent.futures import ThreadPoolExecutor

    with _spawner_lock:
        if _spawner is None or _spawner_pid != os.getpid():
            _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raydp-seal-start")
            _spawner_pid = os.getpid()
        spawner = _spawner
    return spawner.submit(subprocess.Popen, argv, **keywords).result()


def _limits_arg(limits: Limits, capped: bool) -> str:
    nproc = None if capped else limits.processes
    return ",".join("" if v is None else str(int(v)) for v in (limits.memory, limits.cpu_seconds, nproc))


_always_hidden: tuple[str, ...] = ()


def hide_always(paths) -> None:
    """Show ``paths`` empty in every sandbox this process starts from now on, on top of each evaluation's
    own ``hide``: a process that serves releases (:mod:`raydp.serve`) hides its state directory and the
    private data files from every target, whichever release path (a target, a scikit-learn fit) made the
    sandbox. Templates already running are retired before their next evaluation."""
    global _always_hidden
    _always_hidden = tuple(sorted({*_always_hidden, *(os.path.realpath(os.fspath(p)) for p in paths)}))


def _hidden(hide) -> tuple:
    return tuple(hide) + tuple(p for p in _always_hidden if p not in tuple(hide))


class _Pool:
    """The templates of this calling process: at most POOL_SIZE, each serving one evaluation at a time."""

    def __init__(self):
        self.pid = os.getpid()
        self.templates: list[_Template] = []
        self.cond = threading.Condition()
        atexit.register(self.close)

    def _key(self, t: _Template, limits: Limits, hide) -> bool:
        return t.limits == limits and t.hide == tuple(hide) and (not t.sandboxed or t.shown == _shown_paths())

    def acquire(self, limits: Limits, hide=()) -> _Template:
        sandboxed = sandbox_status()[0]
        hide = _hidden(hide)
        with self.cond:
            while True:
                self.templates = [t for t in self.templates if t.alive()]
                free = [t for t in self.templates if not t.busy and self._key(t, limits, hide)]
                if free:
                    t = free[0]
                    break
                if len(self.templates) < POOL_SIZE:
                    t = _Template(sandboxed, limits, hide)
                    self.templates.append(t)
                    break
                idle_other = [t for t in self.templates if not t.busy]
                if idle_other:  # a template for other limits: retire it
                    idle_other[0].close()
                    idle_other[0].dead = True
                    continue
                self.cond.wait(1.0)
            t.busy = True
        if not t.wait_ready():
            t.kill()
            self.release(t)
            raise TargetError("the sandbox that evaluates the target did not start (bubblewrap or the interpreter "
                              "failed; run a release with RAYDP_SANDBOX=off to tell which)")
        return t

    def release(self, t: _Template) -> None:
        with self.cond:
            t.busy = False
            self.cond.notify_all()

    def warm(self, limits: Limits = DEFAULT_LIMITS, hide=()) -> None:
        sandboxed = sandbox_status()[0]
        hide = _hidden(hide)
        with self.cond:
            self.templates = [t for t in self.templates if t.alive()]
            if not self.templates:
                self.templates.append(_Template(sandboxed, limits, hide))

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        for t in self.templates:
            t.close()
        self.templates = []


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _the_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():
            _pool = _Pool()
        return _pool


_noise_loading: threading.Thread | None = None


def warm() -> None:
    """Start this process's first template now (it imports in the background), and load OpenDP's
    samplers here in a thread (the noise is drawn in this process), so that the first private
    evaluation waits for neither. Cheap when both are under way or done."""
    global _noise_loading
    _the_pool().warm()
    with _pool_lock:
        if _noise_loading is None:
            from .noise import _opendp

            def load():
                try:
                    _opendp()
                except Exception:  # noqa: BLE001 - the release will say what is wrong
                    pass

            _noise_loading = threading.Thread(target=load, name="raydp-load-opendp", daemon=True)
            _noise_loading.start()


# ------------------------------------------------------------------------------------ the channel


class Sealed:
    """One private evaluation in a process of its own, in the sandbox when there is one (module
    docstring). Use as a context manager: leaving it ends the evaluation and everything it started."""

    def __init__(self, limits: Limits | None = None, hide=()):
        self.limits = DEFAULT_LIMITS if limits is None else limits
        if not isinstance(self.limits, Limits):
            raise InvalidArgumentError(f"limits must be a raydp.seal.Limits, got {type(limits).__name__}")
        self.pool = _the_pool()
        self.template = self.pool.acquire(self.limits, hide)
        self.sandboxed = self.template.sandboxed
        self.shape = None  # the target's output shape on public records (probe), when known
        self._closed = False
        try:
            self.sock = self.template.fork()
            self.conn = Connection(self.sock.detach())
            if self._recv_bytes(16, _READY_TIMEOUT) != b"R":
                raise TargetError("the process that evaluates the target did not start")
        except BaseException:
            self.close()
            raise

    @property
    def isolation(self) -> str:
        if not self.sandboxed:
            return "sealed, not sandboxed"
        return "sandboxed" if getattr(self.template, "filtered", False) else "sandboxed without its seccomp filter"

    def _recv_bytes(self, maxlength: int, timeout: float | None) -> bytes:
        """One message of at most ``maxlength`` bytes, within ``timeout`` seconds; anything else ends the
        evaluation as a failure of the target."""
        try:
            if timeout is not None and not self.conn.poll(timeout):
                self.template.kill()
                raise TargetError(f"the target did not answer within its time limit ({timeout:g} s): it was stopped")
            return self.conn.recv_bytes(maxlength)
        except (EOFError, OSError):
            raise TargetError("the process running the target ended without a valid answer (it crashed, was "
                              "killed at a resource limit, or sent something else)") from None

    def _send(self, message) -> None:
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            raise TargetError("the process running the target is gone (it crashed or was killed at a resource "
                              "limit)") from None

    def load(self, target, mechanism, n: int, out_dim: int) -> None:
        """Send the target and the mechanism; the target's ``setup()`` runs there (it sees no data)."""
        import cloudpickle

        try:
            payload = cloudpickle.dumps((target, mechanism))
        except Exception as exc:
            raise TargetError(f"the target cannot be sent to the sealed process that evaluates it on the private "
                              f"data ({type(exc).__name__}: {exc}); a target must be picklable (cloudpickle)"
                              .splitlines()[0]) from None
        self.n, self.out_dim = int(n), int(out_dim)
        self._send(("load", (list(sys.path), os.getcwd()), payload, self.n, self.out_dim))
        answer = self._recv_bytes(2, self.limits.wall_seconds)
        if answer != b"L":
            raise TargetError("the target could not be loaded in the sandbox that evaluates it (it must be importable "
                              "there: its modules on sys.path or the working directory, nothing it needs under /tmp "
                              "of another process; its setup() must not fail); what it raised is withheld")

    def replay(self, records: np.ndarray, pairs) -> np.ndarray:
        """G of each pair of oracle ``records`` recomputed there (public data: the caller compares them)."""
        pairs = [int(p) for p in pairs]
        self._send(("replay", np.asarray(records), pairs))
        answer = self._recv_bytes(1 + 8 * len(pairs), self.limits.wall_seconds)
        if answer[:1] != b"G" or len(answer) != 1 + 8 * len(pairs):
            raise TargetError("replaying pairs of oracle records in the sandbox failed (the target raised or sent "
                              "something else; what it raised is withheld)")
        return np.frombuffer(answer, dtype="<f8", offset=1).astype(np.float64)

    def probe(self, database: np.ndarray) -> tuple:
        """The shape of the target's output on one public database (oracle records): the shape a release
        must have."""
        self._send(("probe", np.asarray(database)))
        answer = self._recv_bytes(2 + 8 * 32, self.limits.wall_seconds)
        shape = _unpack_shape(answer, b"S")
        if shape is None:
            raise TargetError("the target failed on public oracle records in the sandbox (what it raised is withheld)")
        self.shape = shape
        return shape

    def evaluate(self, data, timeout: float | None = None) -> np.ndarray:
        """The target's output on the private ``data``, embedded by the mechanism and checked: a float64
        array of the output dimension, finite, in the public shape (when probed). Raises a raydp error
        of a fixed kind for anything else. ``timeout`` (seconds) shortens the wall-time limit."""
        from .tables import PrivateTable

        table = isinstance(data, PrivateTable)
        fd = None
        if table:
            fd = _open_regular(data.path)
            self._send(("release", ("table", data), None))
            try:
                with socket.fromfd(self.conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    socket.send_fds(s, [b"F"], [fd])
            except OSError:
                raise TargetError("the process running the target is gone") from None
            finally:
                os.close(fd)
        else:
            self._send(("release", ("array", None), data))
        wall = self.limits.wall_seconds
        wall = timeout if wall is None else (wall if timeout is None else min(wall, timeout))
        answer = self._recv_bytes(2 + 8 * 32 + 8 * self.out_dim, wall)
        if answer[:1] == b"F" and len(answer) == 2:
            raise _failure(_KINDS.get(answer[1:2], "target"), self.n)
        return self._check_value(answer)

    def _check_value(self, answer: bytes) -> np.ndarray:
        bad = TargetError("the target's answer on the private data was not a value of its output dimension "
                          "(wrong size, shape or non-finite); what it was is withheld")
        shape = _unpack_shape(answer[: 2 + 8 * answer[1]] if len(answer) >= 2 and answer[:1] == b"V" else b"",
                              b"V")
        if shape is None:
            raise bad
        body = answer[2 + 8 * len(shape):]
        if len(body) != 8 * self.out_dim:
            raise bad
        vec = np.frombuffer(body, dtype="<f8").astype(np.float64)
        if not np.all(np.isfinite(vec)):
            raise bad
        if self.shape is not None:
            if shape != self.shape:
                raise bad
            if math.prod(shape) == self.out_dim:
                return vec.reshape(shape)
        return vec.reshape(()) if self.out_dim == 1 else vec

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            conn = getattr(self, "conn", None)
            if conn is not None:
                conn.close()
        finally:
            self.template.end()
            self.pool.release(self.template)

    def __enter__(self) -> "Sealed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _open_regular(path: str) -> int:
    """A descriptor of the private data file, opened here (the sandbox's /tmp is its own): a regular
    file only (a FIFO, a device or a directory would hang or never end)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise TargetError("the private data file could not be read as finite numbers") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise TargetError("the private data file could not be read as finite numbers")
    os.set_blocking(fd, True)
    return fd


def release_value(mechanism, value: np.ndarray, sensitivity: float):
    """The mechanism's noisy output on a checked value, in the caller: the noise is added here."""
    return mechanism.release(value, sensitivity)


def _unpack_shape(answer: bytes, tag: bytes):
    if len(answer) < 2 or answer[:1] != tag:
        return None
    ndim = answer[1]
    if ndim > 32 or len(answer) < 2 + 8 * ndim:
        return None
    dims = struct.unpack(f"<{ndim}q", answer[2: 2 + 8 * ndim])
    if any(d < 0 for d in dims):
        return None
    if tag == b"S" and len(answer) != 2 + 8 * ndim:
        return None
    return tuple(int(d) for d in dims)


def _failure(kind: str, n: int) -> RaydpError:
    if kind == "read":
        return TargetError("the private data file could not be read as finite numbers")
    if kind == "rows":
        return EstimateMismatchError(f"the private data does not have the n={n} records the estimate was made for")
    return TargetError("the target failed on the private data; what it raised is withheld because it may depend on "
                       "the data")


# ------------------------------------------------------------------------------------ the processes


def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _template_main(fd: int, sandboxed: bool = False, limits: str = ",,") -> None:
    """The template: import, then fork one evaluation at a time until the caller goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    global _IN_SANDBOX
    ctl = socket.socket(fileno=fd)
    in_box = sandboxed and _in_own_pid_namespace()
    _IN_SANDBOX = in_box
    try:
        libc = _libc()
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no child of ours may trace us or read our memory
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of an evaluation come back to us
    except Exception:  # noqa: BLE001 - not Linux: the sealed process alone
        pass
    for name in ("numpy", "cloudpickle", "raydp.engine.witness", "raydp.mechanisms", "raydp.tables"):
        _try_import(name)
    ctl.send(b"R")
    mem, cpu, nproc = (int(x) if x else None for x in limits.split(","))
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, _MAX_MESSAGE, 1)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)  # the calling process is gone
        if msg == b"E":  # an end for an evaluation that never started
            ctl.send(b"R")
            continue
        try:
            for name in pickle.loads(msg):
                _try_import(name)
        except Exception:  # noqa: BLE001 - an import that fails here fails again in the child
            pass
        child = None
        for child_fd in fds[:1]:
            child = os.fork()
            if child == 0:
                try:
                    _child_main(child_fd, ctl.fileno(), mem, cpu, nproc)
                finally:
                    os._exit(0)
            os.close(child_fd)
        for extra in fds[1:]:
            os.close(extra)
        # One evaluation at a time: wait for the caller's end, then leave nothing of it behind.
        try:
            end = ctl.recv(16)
        except OSError:
            end = b""
        _end_evaluation(child, in_box)
        if not end:
            os._exit(0)
        ctl.send(b"R")


def _in_own_pid_namespace() -> bool:
    """True inside bubblewrap's PID namespace (its init is pid 1): only there may everything be killed."""
    try:
        with open("/proc/1/comm") as f:
            return f.read().strip() == "bwrap" and os.getpid() < 100
    except OSError:
        return False


def _end_evaluation(child: int | None, in_box: bool) -> None:
    if in_box:
        # Every process of the sandbox but its init and this template: the evaluation, its threads'
        # processes, anything that called setsid. Repeated until nothing is left (a fork can race a kill).
        for _ in range(100):
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _reap()
            if not _others():
                break
            time.sleep(0.005)
        for place in _WRITABLE + ("/dev/mqueue",):
            _empty(place)
        if _ipc_objects():
            try:
                subprocess.run(["ipcrm", "--all"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
            _reap()
    elif child is not None:
        try:
            os.killpg(child, signal.SIGKILL)  # its process group: what did not leave it
        except (ProcessLookupError, PermissionError):
            pass
        _reap()


def _ipc_objects() -> bool:
    """Whether the sandbox's IPC namespace holds a System V message queue, semaphore set or shared memory."""
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                if len(f.read().splitlines()) > 1:
                    return True
        except OSError:
            return True  # cannot tell: clean
    return False


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others() -> list[int]:
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, me):
            try:
                with open(f"/proc/{name}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                out.append(int(name))
    return out


def _empty(place: str) -> None:
    try:
        names = os.listdir(place)
    except OSError:
        return
    for name in names:
        path = os.path.join(place, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                for root, dirs, _ in os.walk(path):
                    for d in dirs:
                        try:
                            os.chmod(os.path.join(root, d), 0o700)
                        except OSError:
                            pass
                os.chmod(path, 0o700)
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


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


def _child_main(fd: int, ctl_fd: int, mem, cpu, nproc) -> None:
    global _IN_EVALUATION
    _IN_EVALUATION = True  # a Submitted called here is in the sandbox already: it runs its code directly
    os.setsid()  # its own session and process group
    for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    import resource

    for which, value in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_NPROC, nproc),
                         (resource.RLIMIT_CORE, 0)):
        if value is not None:
            try:
                resource.setrlimit(which, (value, value))
            except (ValueError, OSError):
                pass
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
    conn.send_bytes(b"R")
    _serve(conn, fd)


def _serve(conn: Connection, fd: int) -> None:
    kind, (path, cwd), payload, n, out_dim = conn.recv()
    sys.path[:] = path  # the caller's: its modules import here as they did there
    try:
        os.chdir(cwd)  # and its working directory: a target's relative paths mean the same
    except OSError:
        pass
    if kind == "session":
        _serve_session(conn, payload)
        return
    try:
        import cloudpickle

        from .engine.blocks import set_up_here

        target, mechanism = cloudpickle.loads(payload)
        _, target = set_up_here(target)
    except BaseException:  # noqa: BLE001 - a kind alone goes back
        conn.send_bytes(b"Fl")
        return
    conn.send_bytes(b"L")
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "replay":
            try:
                from .engine.witness import replay

                g = np.asarray(replay(target, mechanism, n, out_dim, msg[1], msg[2]), dtype="<f8")
            except BaseException:  # noqa: BLE001
                conn.send_bytes(b"Ft")
                return
            conn.send_bytes(b"G" + g.tobytes())
        elif msg[0] == "probe":
            try:
                shape = _shape_of(target(msg[1]))
            except BaseException:  # noqa: BLE001
                conn.send_bytes(b"Ft")
                return
            conn.send_bytes(b"S" + bytes([len(shape)]) + struct.pack(f"<{len(shape)}q", *shape))
        elif msg[0] == "release":
            conn.send_bytes(_release(target, mechanism, n, out_dim, msg[1], msg[2], fd))
            return
        else:
            return


def _shape_of(value) -> tuple:
    try:
        shape = tuple(int(s) for s in np.shape(value))
    except BaseException:  # noqa: BLE001 - a value without a shape
        return ()
    return shape if len(shape) <= 32 else ()


def _release(target, mechanism, n: int, out_dim: int, how, data, fd: int) -> bytes:
    """target(data), embedded: the only code that touches the private data. Bytes in a fixed format."""
    if how[0] == "table":
        try:
            _, fds, _, _ = socket.recv_fds(socket.socket(fileno=os.dup(fd)), 1, 1)
            with os.fdopen(fds[0], "rb") as fh:
                data = how[1].load(fh)
        except BaseException:  # noqa: BLE001
            return b"Fr"
        if data.shape[0] != n:
            return b"Fn"
    try:
        value = target(data)
        embedded = np.asarray(mechanism.embed(value), dtype=np.float64).ravel()
        shape = _shape_of(value)
    except BaseException:  # noqa: BLE001 - SystemExit(data) is a failure like any other
        return b"Ft"
    if embedded.size != out_dim:
        return b"Ft"
    return b"V" + bytes([len(shape)]) + struct.pack(f"<{len(shape)}q", *shape) + embedded.astype("<f8").tobytes()


# ------------------------------------------------------------------------------------ submitted code


def check_pickle(payload: bytes) -> None:
    """Raise :class:`~raydp.errors.InvalidArgumentError` unless ``payload`` is one whole pickle stream. Read with
    :func:`pickletools.genops`, which walks the opcodes and runs none of them: nothing is unpickled."""
    import pickletools

    end = None
    try:
        for op, _, pos in pickletools.genops(payload):
            if op.name == "STOP":
                end = pos + 1
                break
    except Exception:  # noqa: BLE001 - whatever the walk tripped on: not a pickle
        end = None
    if end is None or end != len(payload):
        raise InvalidArgumentError("the code is not one whole pickle stream (send cloudpickle.dumps(function))")


class Submitted:
    """An analyst's own target: ``payload`` (the bytes of ``cloudpickle.dumps(function)``, as they were sent)
    and ``source`` (its text, kept with the release), run only in the sandbox.

    This process never unpickles ``payload``. Called on a public database (the sampler, a Ray worker, the
    probe of the output dimension) it is evaluated in this process's *session* for it: one fork of a
    template of its own, in the sandbox with ``limits`` and ``hide`` (shown empty, on top of
    :func:`hide_always`), which loads the raw bytes once and answers every later call; each answer comes back
    as raw bytes, checked here (a float64 array of at most :data:`MAX_COORDINATES` coordinates, every one
    finite), never unpickled. A session closes after :data:`SESSION_IDLE` seconds without a call, or at
    :func:`close_sessions`. ``cpu_seconds`` of ``limits`` counts the whole session's CPU time in one process.

    The object itself pickles as its bytes, its source, its limits and its hide list, so all of them travel
    to Ray workers. Loaded into the private evaluation (:meth:`Sealed.load`), calling it unpickles the
    payload *there* and calls the function directly: that process is already the sandbox, a fresh fork that
    never served a session.

    A failure on public data — the function raised, a limit stopped it, it answered something that is not
    finite numbers — raises :class:`~raydp.errors.TargetError` with a fixed message (a failed pair). A
    session stopped by a limit is not started again for the same code in this process until
    :func:`close_sessions`. Where bubblewrap cannot make the sandbox, every call fails: the code is never
    run outside it. Its identity (what a stored Δ̂ is matched by) is the SHA-256 of ``payload`` and of
    ``source``.
    """

    def __init__(self, payload: bytes, source: str = "", limits: Limits | None = None, hide=()):
        if not isinstance(payload, (bytes, bytearray)) or not payload:
            raise InvalidArgumentError("payload must be the non-empty bytes of cloudpickle.dumps(function)")
        if not isinstance(source, str):
            raise InvalidArgumentError(f"source must be a str, got {type(source).__name__}")
        limits = DEFAULT_LIMITS if limits is None else limits
        if not isinstance(limits, Limits):
            raise InvalidArgumentError(f"limits must be a raydp.seal.Limits, got {type(limits).__name__}")
        self.payload = bytes(payload)
        self.source = source
        self.limits = limits
        self.hide = tuple(sorted({os.path.realpath(os.fspath(p)) for p in hide}))
        import hashlib

        self.sha256 = hashlib.sha256(self.payload).hexdigest()
        self.source_sha256 = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        self._function = None

    def __reduce__(self):
        return Submitted, (self.payload, self.source, self.limits, self.hide)

    def __repr__(self) -> str:
        return f"Submitted(sha256={self.sha256[:16]}, {len(self.payload)} bytes)"

    def identity(self) -> dict:
        return {"name": "raydp.seal:Submitted", "params": {"sha256": self.sha256, "source_sha256": self.source_sha256}}

    def _loaded(self):
        if not (_IN_EVALUATION and _IN_SANDBOX):  # the one place the payload is unpickled: a sandboxed evaluation
            raise TargetError("submitted code is unpickled only inside the sandbox")
        if self._function is None:
            import cloudpickle

            self._function = cloudpickle.loads(self.payload)
        return self._function

    def __call__(self, database):
        if _IN_EVALUATION:
            return self._loaded()(database)
        return _evaluate(self, [database])[0]

    def pair(self, database, neighbour):
        """The values on a pair of neighbouring databases: one round trip to the session."""
        if _IN_EVALUATION:
            f = self._loaded()
            return f(database), f(neighbour)
        a, b = _evaluate(self, [database, neighbour])
        return a, b

    def _key(self) -> tuple:
        return self.sha256, self.limits, _hidden(self.hide)


_SESSION_FAILED = ("the submitted code failed on a public database in the sandbox (it raised, was stopped at a limit, "
                   "or answered something other than finite numbers); what it did is withheld")


class _Closed(Exception):
    """The session was closed (idle, or :func:`close_sessions`) between being handed out and being used."""


def _evaluate(sub: Submitted, databases: list) -> list:
    while True:
        try:
            return _session_for(sub).evaluate(databases)
        except _Closed:
            continue  # another session is started: a closed one is not a failure of the code


class _Session:
    """One sandboxed process that loaded a :class:`Submitted`'s raw bytes and answers public evaluations."""

    def __init__(self, sub: Submitted, key: tuple):
        self.key = key
        self.limits = sub.limits
        self.lock = threading.Lock()
        self.used = time.monotonic()
        self.dead = False
        self.failed = False
        self.conn = None
        self.template = _Template(True, sub.limits, key[2])
        try:
            if not self.template.wait_ready():
                raise TargetError("the sandbox that evaluates the submitted code did not start")
            # No preloading of this process's libraries: the session imports what the code imports, nothing more
            self.template.sent.update(sys.modules)
            self.conn = Connection(self.template.fork().detach())
            if self._recv(16, _READY_TIMEOUT) != b"R":
                raise TargetError("the process that evaluates the submitted code did not start")
            self._send(("session", (list(sys.path), os.getcwd()), sub.payload, 0, 0))
            if self._recv(2, self.limits.wall_seconds) != b"L":
                raise TargetError("the submitted code could not be loaded in the sandbox (what it raised is withheld)")
        except BaseException:
            self.close()
            raise

    def _recv(self, maxlength: int, timeout: float | None) -> bytes:
        try:
            if timeout is not None and not self.conn.poll(timeout):
                raise TargetError(_SESSION_FAILED)
            return self.conn.recv_bytes(maxlength)
        except (EOFError, OSError):
            raise TargetError(_SESSION_FAILED) from None

    def _send(self, message) -> None:
        try:
            self.conn.send(message)
        except (OSError, ValueError):
            raise TargetError(_SESSION_FAILED) from None

    def evaluate(self, databases) -> list:
        with self.lock:
            if self.dead:
                if self.failed:
                    raise TargetError(_SESSION_FAILED)
                raise _Closed()
            self.used = time.monotonic()
            try:
                self._send(("eval", [np.asarray(d) for d in databases]))
                answer = self._recv(1 + len(databases) * (1 + 8 * 32 + 8 * MAX_COORDINATES), self.limits.wall_seconds)
            except TargetError:
                self._kill()
                raise
            finally:
                self.used = time.monotonic()
            if answer == b"Ft":  # the function raised: this call failed, the session goes on
                raise TargetError(_SESSION_FAILED)
            values = _parse_answers(answer, len(databases))
            if values is None:  # not the format the session's own code writes: something wrote on the channel
                self._kill()
                raise TargetError(_SESSION_FAILED)
            return values

    def _kill(self) -> None:
        self.dead = self.failed = True
        with _sessions_lock:
            _broken.add(self.key)
            if _sessions.get(self.key) is self:
                del _sessions[self.key]
        self.close()

    def close(self) -> None:
        self.dead = True
        try:
            if self.conn is not None:
                self.conn.close()
        except OSError:
            pass
        self.template.kill()  # its whole sandbox: whatever the code left running goes with it


def _parse_answers(answer: bytes, count: int):
    """The values of a session's answer (``b"A"`` then, per value, its number of dimensions, its dimensions
    and its float64 coordinates), checked; None for anything else."""
    if answer[:1] != b"A":
        return None
    at, out = 1, []
    for _ in range(count):
        if at >= len(answer):
            return None
        ndim = answer[at]
        at += 1
        if ndim > 32 or len(answer) < at + 8 * ndim:
            return None
        dims = struct.unpack_from(f"<{ndim}q", answer, at)
        at += 8 * ndim
        if any(d < 0 for d in dims):
            return None
        size = math.prod(dims)
        if size > MAX_COORDINATES or len(answer) < at + 8 * size:
            return None
        vec = np.frombuffer(answer, dtype="<f8", count=size, offset=at).astype(np.float64)
        at += 8 * size
        if not np.all(np.isfinite(vec)):
            return None
        out.append(vec.reshape(dims))
    return out if at == len(answer) else None


def _encode_answer(value) -> bytes:
    """In the session: one value as the caller reads it (:func:`_parse_answers`), or raise."""
    a = np.asarray(value)
    if a.dtype.kind not in "biuf" or a.ndim > 32 or a.size > MAX_COORDINATES:
        raise ValueError("not an answer")
    a = np.asarray(a, dtype="<f8")
    if not np.all(np.isfinite(a)):
        raise ValueError("not finite")
    return bytes([a.ndim]) + struct.pack(f"<{a.ndim}q", *a.shape) + a.tobytes()


def _serve_session(conn: Connection, payload: bytes) -> None:
    """In the sandbox: load the submitted function from its raw bytes, then answer public evaluations."""
    try:
        if not _IN_SANDBOX:
            raise RuntimeError("not in the sandbox")
        import cloudpickle

        function = cloudpickle.loads(payload)
        if not callable(function):
            raise TypeError("not callable")
    except BaseException:  # noqa: BLE001 - a kind alone goes back
        conn.send_bytes(b"Fl")
        return
    conn.send_bytes(b"L")
    while True:
        try:
            msg = conn.recv()
        except BaseException:  # noqa: BLE001 - the caller is gone
            return
        if not isinstance(msg, tuple) or msg[0] != "eval":
            return
        try:
            answer = b"A" + b"".join(_encode_answer(function(d)) for d in msg[1])
        except BaseException:  # noqa: BLE001 - SystemExit too: a failed call, the session goes on
            answer = b"Ft"
        conn.send_bytes(answer)


_sessions: dict = {}
_broken: set = set()
_sessions_lock = threading.Lock()
_sessions_pid: int | None = None


def _session_for(sub: Submitted) -> _Session:
    global _sessions_pid
    if not sandbox_status()[0]:
        raise TargetError("submitted code runs only in the sandbox, and bubblewrap cannot make one here")
    key = sub._key()
    with _sessions_lock:
        if _sessions_pid != os.getpid():  # a forked copy: the sessions are the parent's
            _sessions.clear()
            _broken.clear()
            _sessions_pid = os.getpid()
            threading.Thread(target=_close_idle, name="raydp-session-reaper", daemon=True).start()
            atexit.register(close_sessions)
        if key in _broken:
            raise TargetError(_SESSION_FAILED)
        session = _sessions.get(key)
        if session is None or session.dead:
            try:
                session = _sessions[key] = _Session(sub, key)
            except TargetError:
                _broken.add(key)  # it did not load, or its sandbox did not start: not tried again here
                raise
        return session


def close_sessions(submitted: Submitted | None = None) -> None:
    """Close this process's sessions of ``submitted`` (every session: None), waiting for a call in progress,
    and forget that its code was stopped at a limit here."""
    with _sessions_lock:
        keys = [k for k in set(_sessions) | _broken if submitted is None or k[0] == submitted.sha256]
        sessions = [_sessions.pop(k) for k in keys if k in _sessions]
        _broken.difference_update(keys)
    for s in sessions:
        with s.lock:
            s.close()


def _close_idle() -> None:
    me = os.getpid()
    while os.getpid() == me:
        time.sleep(1.0)
        now = time.monotonic()
        with _sessions_lock:
            idle = [k for k, s in _sessions.items() if now - s.used > SESSION_IDLE and not s.lock.locked()]
            sessions = [_sessions.pop(k) for k in idle]
        for s in sessions:
            with s.lock:
                s.close()


def hidden_always() -> tuple[str, ...]:
    """The paths :func:`hide_always` hides in every sandbox of this process (e.g. to give a :class:`Submitted`
    the same list, for the sandboxes it starts in other processes)."""
    return _always_hidden
