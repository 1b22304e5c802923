"""What a job's report is made of, shared by every job that writes one.

A report is a JSON document (``NAME.json``: the command, the date, the machine, the code version, every
figure) and the Markdown made from it (``NAME.md``). Every Markdown report starts with its stamp
(:func:`stamp`): when it was made, from which commit of this repository, on what machine, and the
command that makes it again. The documentation build reads the commit to say which reports are older
than the engine they describe. Figures of a shared, noisy VM are medians over repeats with their
range: :func:`spread`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from importlib import metadata


def table(headers, rows) -> str:
    """A Markdown table (cells as ``str``)."""
    out = ["| " + " | ".join(str(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def spread(values) -> dict:
    """Median, min and max of per-repeat values (ratios taken within one repeat)."""
    values = sorted(values)
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "values": values}


def spread_text(values, fmt: str = "{:.2f}") -> str:
    """``median [min–max]``, or the one value, or ``–`` when there is none."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    s = spread(values)
    if len(values) == 1:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}–{fmt.format(s['max'])}]"


def machine() -> dict:
    """This machine: cores, CPU model, memory, operating system, its load when the job started (other users'
    work is in every figure of a shared machine), and the versions that change what a benchmark measures.

    Every report a job writes records it: :func:`start` puts it in the JSON document, :func:`stamp` in the
    first line of the Markdown."""
    import numpy as np

    import raydp

    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = round(int(f.readline().split()[1]) / 1024**2, 1)
    except OSError:
        pass
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": mem, "load_at_start": round(os.getloadavg()[0], 2),
            "os": _os_name(), "python": platform.python_version(), "numpy": np.__version__, "ray": _version("ray"),
            "raydp": raydp.__version__, "platform": platform.platform()}


def _os_name() -> str:
    """The distribution's name and version (``/etc/os-release``), else the system and its release."""
    try:
        with open("/etc/os-release") as f:
            fields = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
        return fields["PRETTY_NAME"].strip('"')
    except (OSError, KeyError, ValueError):
        return f"{platform.system()} {platform.release()}".strip()


def machine_line(m) -> str:
    if isinstance(m, str):  # a machine given as one line of text
        return m
    load = f" · load average {m['load_at_start']} at the start" if "load_at_start" in m else ""
    system = f" · {m['os']}" if m.get("os") else ""
    return (f"{m['cores']} cores · {m['cpu']} · {m['memory_gib']} GiB{system} · Python {m['python']} · "
            f"numpy {m['numpy']} · Ray {m['ray']}{load}")


def _version(package: str) -> str:
    try:
        return metadata.version(package)  # without importing it: a small job need not load Ray
    except metadata.PackageNotFoundError:
        return "absent"


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_version() -> str:
    """The commit of this checkout (12 hex digits), ``+local changes`` when ``raydp/`` or ``jobs/`` differ
    from it, or ``unknown`` outside a git checkout."""
    def git(*args):
        return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return "unknown"
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", "raydp", "jobs").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + (" +local changes" if dirty else "")


def start(job: str, argv) -> dict:
    """A new report: the command that makes it again, the date (UTC), the machine and the code version."""
    args = list(sys.argv[1:] if argv is None else argv)
    return {"command": (f"python jobs/{job}.py " + " ".join(str(a) for a in args)).strip(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "commit": code_version()}


def stamp(report: dict) -> str:
    """The first lines of every Markdown report: date, code version, machine, command.

    ``Made DATE from commit HASH on MACHINE`` — the documentation build finds ``commit HASH`` there.
    """
    return (f"Made {report['date']} from commit {report.get('commit', 'unknown')} on "
            f"{machine_line(report['machine'])}.\n\nCommand: `{report['command']}`\n")


def stamped(job: str, argv, markdown: str, report: dict | None = None) -> str:
    """``markdown`` with a stamp at its top (under its title, if it has one): for the jobs that write their
    Markdown themselves. The stamp is ``report``'s (a job that also writes a JSON document passes the one
    it records there), else a fresh one."""
    report = start(job, argv) if report is None else report
    if markdown.startswith("# "):
        title, _, rest = markdown.partition("\n")
        return f"{title}\n\n{stamp(report)}\n{rest.lstrip()}"
    return stamp(report) + "\n" + markdown


def header(title: str, report: dict) -> str:
    return f"# {title}\n\n{stamp(report)}"


def write(out: str, name: str, report: dict, markdown: str) -> tuple[str, str]:
    """``out/NAME.json`` and ``out/NAME.md``; returns their paths."""
    os.makedirs(out, exist_ok=True)
    paths = os.path.join(out, f"{name}.json"), os.path.join(out, f"{name}.md")
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=1, default=float)
    with open(paths[1], "w") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return paths


def publish(out: str, name: str, report: dict, markdown: str) -> tuple[str, str]:
    """:func:`write`, then the report on stdout and where it went (every job ends this way)."""
    paths = write(out, name, report, markdown)
    print(markdown)
    print(f"\nwrote {paths[0]} and {paths[1]}")
    return paths
