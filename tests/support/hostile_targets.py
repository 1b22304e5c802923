"""Hostile targets for the sandbox tests (``tests/integration/faults/test_sandbox.py``, ``children/sandbox_child.py``).

Each behaves as the mean of the records on public data (the oracle never draws ``MARK``) and tries a
leak only when it sees ``MARK``, which is planted in the private data alone: any trace of the marker
outside the sandbox, or any effect of the attempt the caller can see, is a leak. Module-level functions
travel to the sandbox by reference (this directory is on the caller's ``sys.path``, which the sandbox
shows read-only); the factories return closures, which cloudpickle sends by value.
"""

from __future__ import annotations

import os
import pickle
import stat
import struct
import time

import numpy as np

MARK = 61803.39887
MARKER = "PRIVATE-61803.39887"
N = 40
# what the sandbox's environment may hold (raydp/seal.py: _ENV_KEEP, _ENV_KEEP_PREFIXES, _sandbox_env);
# PWD is set by bubblewrap's --chdir
ENV_ALLOWED = {"PATH", "HOME", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONNOUSERSITE", "LANG", "LC_ALL",
               "LC_CTYPE", "TZ", "PYTHONHASHSEED", "PWD"}
# KMP_*: set inside the sandbox by scikit-learn's and joblib's own import (KMP_DUPLICATE_LIB_OK, KMP_INIT_AT_FORK)
ENV_ALLOWED_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_", "NUMEXPR_", "VECLIB_", "BLIS_", "GOTO_", "KMP_")


def private(d) -> bool:
    return bool(np.any(np.abs(np.asarray(d, dtype=float) - MARK) < 1e-6))


def private_data(seed: int = 5) -> np.ndarray:
    d = np.random.default_rng(seed).normal(size=N)
    d[3] = MARK
    return d


def _mean(d) -> np.ndarray:
    return np.array([float(np.mean(np.asarray(d, dtype=float)))])


# ---- 1. forged answers on every socket the evaluation holds ----------------------------------------------

def _write_every_socket(message: bytes) -> None:
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, message)
        except (OSError, ValueError):
            pass


def _framed(payload: bytes) -> bytes:
    """A message as multiprocessing.connection.Connection frames it (4-byte big-endian length)."""
    return struct.pack("!i", len(payload)) + payload


def forge_pickle(d):
    """The records, as a pickled ``("released", records)`` (what raydp's sealed process once answered)."""
    if private(d):
        _write_every_socket(_framed(pickle.dumps(("released", np.asarray(d, dtype=float).tolist()))))
    return _mean(d)


def forge_wrong_size(d):
    """A well-framed value message of the public shape (1,) carrying two coordinates, the marker among them."""
    if private(d):
        body = np.asarray(d, dtype="<f8")[3:5].tobytes()
        _write_every_socket(_framed(b"V" + bytes([1]) + struct.pack("<q", 1) + body))
    return _mean(d)


def forge_wrong_shape(d):
    """A well-framed value message of shape () (the public shape is (1,)) carrying the marker."""
    if private(d):
        _write_every_socket(_framed(b"V" + bytes([0]) + np.asarray(d, dtype="<f8")[3:4].tobytes()))
    return _mean(d)


def forge_nan(d):
    """A well-framed value message of the public shape, not finite."""
    if private(d):
        _write_every_socket(_framed(b"V" + bytes([1]) + struct.pack("<q", 1) + np.array([np.nan], "<f8").tobytes()))
    return _mean(d)


FORGERS = {"pickle": forge_pickle, "wrong-size": forge_wrong_size, "wrong-shape": forge_wrong_shape,
           "nan": forge_nan}


# ---- 2. an exception class named after the data ---------------------------------------------------------

def hex_name(d) -> str:
    return "E" + np.asarray(d, dtype=float).tobytes().hex()[:60]


def hex_name_raiser(d):
    if private(d):
        raise type(hex_name(d), (Exception,), {})(hex_name(d))
    return _mean(d)


# ---- 3. the caller's descriptors through /proc ----------------------------------------------------------

def proc_fd_writer(pid: int, fd: int):
    def target(d):
        if private(d):
            try:
                with open(f"/proc/{pid}/fd/{fd}", "w") as f:
                    f.write(MARKER)
            except OSError:
                pass
        return _mean(d)

    return target


# ---- 4. descendants that leave the session --------------------------------------------------------------

SLEEP_ARG = "31.4159"


def setsid_sleepers(d):
    if private(d):
        import subprocess

        subprocess.Popen(["sleep", SLEEP_ARG], start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = os.fork()
        if pid == 0:  # double fork: the grandchild is re-parented, in a session of its own
            try:
                os.setsid()
                if os.fork() == 0:
                    os.execvp("sleep", ["sleep", SLEEP_ARG])
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    return _mean(d)


# ---- 5. the network ---------------------------------------------------------------------------------------

def tcp_sender(port: int):
    def target(d):
        if private(d):
            import socket

            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(MARKER.encode())
            except OSError:
                pass
        return _mean(d)

    return target


def unix_sender(address):
    """``address``: a path, or an abstract name (a str starting with NUL)."""
    def target(d):
        if private(d):
            import socket

            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(0.5)
                    s.connect(address)
                    s.sendall(MARKER.encode())
            except OSError:
                pass
        return _mean(d)

    return target


# ---- 6. the environment -----------------------------------------------------------------------------------

def env_checker(d):
    """Raises when the sandbox's environment holds anything but the allow-list (a credential above all)."""
    if private(d):
        extra = [k for k in os.environ if k not in ENV_ALLOWED and not k.startswith(ENV_ALLOWED_PREFIXES)]
        if extra or "AWS_SECRET_ACCESS_KEY" in os.environ:
            raise RuntimeError("environment not scrubbed")
    return _mean(d)


def proc_environ_checker(d):
    """Raises when any process the sandbox can see has the credential in its environment (/proc/*/environ)."""
    if private(d):
        for name in os.listdir("/proc"):
            if name.isdigit() or name == "self":
                try:
                    with open(f"/proc/{name}/environ", "rb") as f:
                        text = f.read()
                except OSError:
                    continue
                if b"AWS_SECRET_ACCESS_KEY" in text:
                    raise RuntimeError("a credential is readable in /proc")
    return _mean(d)


# ---- 7. what one evaluation leaves for the next -------------------------------------------------------------

def tmp_writer(token: str):
    """Writes the marker into /tmp and /dev/shm; raises if a write into the working directory succeeds."""
    def target(d):
        if private(d):
            for place in ("/tmp", "/dev/shm"):
                with open(os.path.join(place, f"leak-{token}"), "w") as f:
                    f.write(MARKER)
            try:
                with open(os.path.join(os.getcwd(), f"leak-{token}"), "w") as f:
                    f.write(MARKER)
            except OSError:
                pass
            else:
                raise RuntimeError("the working directory is writable")
        return _mean(d)

    return target


def tmp_checker(token: str):
    def target(d):
        if private(d):
            for place in ("/tmp", "/dev/shm"):
                if os.path.exists(os.path.join(place, f"leak-{token}")):
                    raise RuntimeError("an earlier evaluation's file is here")
        return _mean(d)

    return target


KEY_SPEC_USER_KEYRING = -4
KEYCTL_SEARCH, KEYCTL_INVALIDATE = 10, 21
# (add_key, keyctl) system call numbers; None where not known (the keyring test is skipped there)
KEY_SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(__import__("platform").machine())


def keyctl():
    """(ctypes, libc) with libc.syscall returning a long."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def key_search(description: str) -> int:
    """The id of the user key ``description`` in this process's user keyring, or -1."""
    ctypes, libc = keyctl()
    return libc.syscall(KEY_SYSCALLS[1], ctypes.c_int(KEYCTL_SEARCH), ctypes.c_int(KEY_SPEC_USER_KEYRING), b"user",
                        description.encode(), ctypes.c_int(0))


def key_adder(description: str):
    """Adds a kernel key ``description`` (named after the marker) to the user keyring (add_key(2))."""
    def target(d):
        if private(d):
            ctypes, libc = keyctl()
            libc.syscall(KEY_SYSCALLS[0], b"user", description.encode(), b"x", ctypes.c_size_t(1),
                         ctypes.c_int(KEY_SPEC_USER_KEYRING))
        return _mean(d)

    return target


def key_finder(description: str):
    """Raises when the key an earlier evaluation added is found (keyctl(KEYCTL_SEARCH))."""
    def target(d):
        if private(d) and key_search(description) >= 0:
            raise RuntimeError("an earlier evaluation's key is here")
        return _mean(d)

    return target


# ---- 8. limits ----------------------------------------------------------------------------------------------

def allocator(d):
    if private(d):
        x = np.ones((2 << 30) // 8)  # 2 GiB, touched
        return np.array([float(x.sum())])
    return _mean(d)


FORK_ARG = "27.1828"


def fork_bomb(d):
    """Starts up to 500 sleeping children; returns the mean plus how many it started (so a cap shows)."""
    if private(d):
        import subprocess

        started = 0
        for _ in range(500):
            try:
                subprocess.Popen(["sleep", FORK_ARG], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            except OSError:
                break
            started += 1
        return _mean(d) + started
    return _mean(d)


def busy(d):
    if private(d):
        end = time.monotonic() + 20
        while time.monotonic() < end:
            pass
    return _mean(d)


def sleeper(seconds: float):
    def target(d):
        if private(d):
            time.sleep(seconds)
        return _mean(d)

    return target


# ---- 9. timing ----------------------------------------------------------------------------------------------

def mean_paced(d):
    """Sleeps 0.02 s per unit of the mean (a data-dependent running time), then returns the mean. Public
    databases (the oracle's, mean about 0 ± 0.16) run at full speed: below a mean of 0.5 it does not
    sleep, so the witness pairs replayed before each release take no time worth counting."""
    m = float(np.mean(np.asarray(d, dtype=float)))
    if m >= 0.5:
        time.sleep(0.02 * m)
    return np.array([m])
