"""What a benchmark job's report is made of, shared by ``bench.py`` and ``scale_sim.py``.

A report is a JSON document (``NAME.json``: the command, the date, the machine, every figure) and the
Markdown made from it (``NAME.md``: one header line naming the machine, then tables). Figures of a
shared, noisy VM are medians over repeats with their range: :func:`spread`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import sys


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
    """This machine: cores, CPU model, memory, and the versions that change what a benchmark measures."""
    import numpy as np
    import ray

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
    return {"cores": os.cpu_count(), "cpu": cpu, "memory_gib": mem, "python": platform.python_version(),
            "numpy": np.__version__, "ray": ray.__version__, "raydp": raydp.__version__, "platform": platform.platform()}


def machine_line(m) -> str:
    if isinstance(m, str):  # a report written before the machine was recorded as fields
        return m
    return (f"{m['cores']} cores · {m['cpu']} · {m['memory_gib']} GiB · Python {m['python']} · numpy {m['numpy']} · "
            f"Ray {m['ray']} · shared VM (other users' load included)")


def start(job: str, argv) -> dict:
    """A new report: the command that makes it again, the date (UTC) and the machine."""
    args = list(sys.argv[1:] if argv is None else argv)
    return {"command": f"python jobs/{job}.py " + " ".join(str(a) for a in args),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine()}


def header(title: str, report: dict) -> str:
    return f"# {title}\n\n{report['date']} · {machine_line(report['machine'])}\n\nCommand: `{report['command']}`\n"


def write(out: str, name: str, report: dict, markdown: str) -> tuple[str, str]:
    """``out/NAME.json`` and ``out/NAME.md``; returns their paths."""
    os.makedirs(out, exist_ok=True)
    paths = os.path.join(out, f"{name}.json"), os.path.join(out, f"{name}.md")
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=1, default=float)
    with open(paths[1], "w") as f:
        f.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return paths
