"""Hostile input to ``raydp`` as a command (the in-process side: ``unit/test_hostile_files.py``).

- a FIFO given as ``--data`` is refused at once in one line (a .npy FIFO hung ``np.load`` forever);
- a CSV file of 50 MB with no newline is refused after a bounded read: measured in a child process,
  it reads less than 8 MiB + 1 MiB per CPU, its peak memory grows by less than 32 MiB + 1 MiB per CPU,
  in less than 5 s (before: it read the whole file and the peak grew by about 250 MiB);
- a reader that leaves (``raydp ... | head -1``) ends the command quietly with status 141.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.subprocess

GAMMA = "0.1"  # the small_store fixture's plan (conftest)


def _raydp(*args, timeout=120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "raydp.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=False, **kw)


def _one_line_exit_2(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
    assert len(p.stderr.splitlines()) == 1 and p.stderr.startswith("raydp: error: ") and "Traceback" not in p.stderr


@pytest.mark.parametrize("name", ["fifo.npy", "fifo.csv", "fifo.parquet"])
def test_a_fifo_as_data_is_refused_at_once(tmp_path, small_store, name):
    store, _ = small_store
    fifo = tmp_path / name
    os.mkfifo(fifo)  # nobody ever writes to it
    p = _raydp("release", "--store", store, "--data", fifo, "--target", "raydp.targets:mean", "--epsilon", "1",
               "--gamma", GAMMA, timeout=60)  # before: the .npy one was still waiting when killed here
    _one_line_exit_2(p)
    assert "it is a FIFO (named pipe), not a regular file" in p.stderr, p.stderr


_MEASURE = textwrap.dedent("""
    import json, resource, sys, time
    from raydp.cli import main

    def rchar():  # bytes this process read (Linux); 0 where /proc does not tell
        try:
            with open("/proc/self/io") as f:
                return int(next(l for l in f if l.startswith("rchar:")).split()[1])
        except OSError:
            return 0

    warm_data, argv = sys.argv[1], sys.argv[2:]
    warm = list(argv)
    warm[warm.index("--data") + 1] = warm_data
    main(warm)  # a small refused file first: the command's own imports and start-up are not measured
    rss, read, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rchar(), time.monotonic()
    code = main(argv)
    print(json.dumps({"code": code, "seconds": time.monotonic() - start, "read": rchar() - read,
                      "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss}))
""")


def _measure(tmp_path, argv) -> dict:
    """``raydp ARGV`` in a child, after a first run on a small refused file: its read bytes, peak memory growth
    (KiB) and seconds, and its one stderr line (of the measured run)."""
    warm = tmp_path / "warm.csv"
    warm.write_text("1.5\n2.5\n")  # refused: no header line
    p = subprocess.run([sys.executable, "-c", _MEASURE, str(warm), *map(str, argv)], capture_output=True, text=True,
                       timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 2 and all(x.startswith("raydp: error: ") for x in lines) and "Traceback" not in p.stderr, \
        p.stderr
    return {**json.loads(p.stdout.splitlines()[-1]), "stderr": lines[1]}


# Bounds for a 50 MB file with no newline, the command's start-up excluded. pyarrow reads ahead about one
# block (ROW_LIMIT = 1 MiB) per CPU, hence the CPU count in the bounds. Measured after the fix on 2 cores: the
# header case read 1.1 MB and grew the peak memory by 2 MiB in 0.01 s, the body case 6.3 MB, 6 MiB, 0.02 s;
# before it, the header case read all 50 MB and grew the peak by 250 MiB in 1.3 s (2 GB: 35 s and 4.3 GB).
_CPUS = os.cpu_count() or 1
MAX_READ = (8 + _CPUS) << 20
MAX_RSS_KIB = (32 + _CPUS) << 10
MAX_SECONDS = 5


def test_a_csv_without_newline_is_refused_in_bounded_memory_and_time(tmp_path, small_store):
    store, _ = small_store
    path = tmp_path / "nonewline.csv"
    with open(path, "wb") as f:
        f.write(b"1," * (25 << 20))  # 50 MiB, one line
    m = _measure(tmp_path, ["release", "--store", store, "--data", path, "--target", "raydp.targets:mean",
                            "--epsilon", "1", "--gamma", GAMMA])
    assert m["code"] == 2 and "longer than 1 MiB" in m["stderr"], m
    assert m["read"] < MAX_READ and m["rss_kib"] < MAX_RSS_KIB and m["seconds"] < MAX_SECONDS, m


def test_a_csv_body_without_newline_is_refused_in_bounded_memory_and_time(tmp_path, small_store):
    """A header line, then 50 MB with no newline: pyarrow parses blocks of ROW_LIMIT bytes and stops at the
    first (a guard: pyarrow's default block already stopped it)."""
    store, _ = small_store
    path = tmp_path / "longrow.csv"
    with open(path, "wb") as f:
        f.write(b"x\n" + b"1" * (50 << 20))
    m = _measure(tmp_path, ["release", "--store", store, "--data", path, "--target", "raydp.targets:mean",
                            "--epsilon", "1", "--gamma", GAMMA])
    assert m["code"] == 2 and "could not be read" in m["stderr"], m
    assert m["read"] < MAX_READ and m["rss_kib"] < MAX_RSS_KIB and m["seconds"] < MAX_SECONDS, m


def test_a_reader_that_leaves_ends_the_command_quietly_with_141(tmp_path):
    """``raydp ledger show L | head -1``: 400 KB of output, a reader that takes one line and closes."""
    from raydp.ledger import Ledger

    path = tmp_path / "ledger.json"
    ledger = Ledger.create(path, epsilon_total=100.0)
    for _ in range(20):  # a long label per entry: far more output than a pipe holds
        ledger.reserve(0.1, 0.0, 0.1, mechanism="laplace", sensitivity=1.0, label="x" * 20_000).commit()
    proc = subprocess.Popen([sys.executable, "-m", "raydp.cli", "ledger", "show", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = proc.stdout.readline()
        proc.stdout.close()  # the reader leaves with most of the output unwritten
        err = proc.stderr.read()
        proc.wait(60)
    finally:
        proc.kill()
    assert first.startswith(b"ledger ")
    assert err == b"" and proc.returncode == 141, (proc.returncode, err)


def test_a_reader_that_leaves_before_a_short_output_is_quiet_too():
    """The read end closed before ``raydp plan`` writes its one line (flushed at the end of main)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run([sys.executable, "-m", "raydp.cli", "plan", "--gamma", "0.05"], stdout=w,
                           stderr=subprocess.PIPE, timeout=60, check=False)
    finally:
        os.close(w)
    assert p.stderr == b"" and p.returncode == 141, (p.returncode, p.stderr)
