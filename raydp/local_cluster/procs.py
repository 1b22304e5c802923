"""The processes of a node, read from /proc, and how they are stopped.

A node is one ``ray start --block`` started in a session of its own: its PID is the session id and
the process group id. A ``killpg`` alone does not reach everything a node runs (measured with Ray
2.60): the raylet puts every task worker (``ray::IDLE``, actors, the job supervisor) into a process
group of its own — still in the node's session — and a submitted job's driver runs in a session of
its own (a child of the job supervisor). So the processes of a node are those of its session whose
command line mentions "ray" (the check that guards against a recycled id of a cluster long gone)
plus all their descendants, snapshotted before the first signal (a job driver is re-parented to init
once its supervisor dies). Those outside the node's process group are signalled one by one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Proc", "proc_table", "cmdline", "cluster_procs", "session_pids", "stop_sessions"]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    start: int  # start time (clock ticks after boot): tells a recycled PID apart
    comm: str

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")  # a zombie is dead, only not reaped yet


def proc_table() -> dict[int, Proc]:
    """Every process of the machine, from /proc/<pid>/stat."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        # pid (comm) state ppid pgrp session ... starttime (field 22); comm may hold spaces/parens
        left, right = stat.index("("), stat.rindex(")")
        rest = stat[right + 2:].split()
        out[int(name)] = Proc(int(name), int(rest[1]), int(rest[2]), int(rest[3]), rest[0], int(rest[19]),
                              stat[left + 1:right])
    return out


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def cluster_procs(sids: Collection[int], table: Mapping[int, Proc]) -> dict[int, Proc]:
    """Live processes of the sessions ``sids`` whose command line mentions "ray", plus all their
    live descendants (job drivers run in sessions of their own)."""
    found = {p.pid: p for p in table.values()
             if p.sid in sids and p.alive and b"ray" in cmdline(p.pid).lower()}
    children: dict[int, list[Proc]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child.alive and child.pid not in found:
                found[child.pid] = child
                todo.append(child.pid)
    return found


def session_pids(sids: Iterable[int], *, descendants: bool = False) -> list[int]:
    """Live PIDs whose session id is in ``sids``; with ``descendants``, only those whose command line
    mentions "ray", plus all their descendants (what a cluster's ``down`` stops)."""
    sids = set(sids)
    table = proc_table()
    if descendants:
        return sorted(cluster_procs(sids, table))
    return sorted(p.pid for p in table.values() if p.sid in sids and p.alive)


def stop_sessions(sids: Collection[int], grace: float, *, reap: Callable[[], None] = lambda: None,
                  log: Callable[[str], None] = lambda msg: None) -> tuple[bool, list[int]]:
    """Stop the nodes ``sids``: killpg + the rest of their processes (module docstring); SIGTERM,
    then SIGKILL after ``grace`` seconds (0: SIGKILL at once).

    Returns ``(found, left)``: whether any process of theirs was alive at all, and the PIDs still
    alive 5 s after SIGKILL (warned about through ``log``). ``reap`` collects our own children.
    """
    sids = set(sids)
    seen: dict[int, int] = {}  # pid -> start time: everything found to be ours so far

    def alive() -> list[Proc]:
        table = proc_table()
        for p in cluster_procs(sids, table).values():
            seen[p.pid] = p.start
        return [table[pid] for pid, start in seen.items()
                if pid in table and table[pid].start == start and table[pid].alive]

    def send(sig: int, procs: list[Proc]) -> None:
        for pgid in sids & {p.pgid for p in procs}:  # only groups with a verified live member
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        for p in procs:
            if p.pgid not in sids:  # task workers' own groups, job drivers' sessions
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(p.pid, sig)

    procs = alive()
    if not procs:
        return False, []
    if grace > 0:
        send(signal.SIGTERM, procs)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            time.sleep(0.2)
            reap()
            if not alive():
                return True, []
    for _ in range(50):
        procs = alive()
        if not procs:
            return True, []
        send(signal.SIGKILL, procs)
        time.sleep(0.1)
        reap()
    left = [p.pid for p in alive()]
    if left:
        log(f"warning: still alive after SIGKILL: {' '.join(map(str, sorted(left)))}")
    return True, left
