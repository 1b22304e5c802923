"""Shared plumbing for the Ray jobs in this directory (flags, engine options, printing, exit codes).

Every job runs the same two ways:

    python jobs/X.py ...                                   # in process, or an embedded Ray when worth it
    ray job submit --working-dir . -- python jobs/X.py ... # RAY_ADDRESS is set: joins that cluster

With ``--backend auto`` (the default) raydp uses the cluster at ``--address`` or ``RAY_ADDRESS`` when
one is given; otherwise it times the first blocks of each run and finishes in process when the run
is small, or starts a local Ray inside the job when it is large (``--num-cpus`` caps it).
``--backend local`` always runs in the job's own process, ``--backend ray`` always on Ray. Every
choice gives the same results bit for bit.

Jobs import only ``raydp`` and the modules of this directory (this one, ``_plots`` for tables and
figures, ``svm_sensitivity`` for the SVM bound). They are found because a script's own directory is
``sys.path[0]`` (``python jobs/X.py``, and the same under ``ray job submit``); the tests put
``jobs/`` on ``sys.path`` through pytest's ``pythonpath`` setting (pyproject.toml).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable

BACKENDS = ("auto", "ray", "local")


def add_common_flags(parser: argparse.ArgumentParser, *, out_default: str) -> None:
    """--backend --address --num-cpus --seed --out --quiet."""
    g = parser.add_argument_group("engine and output")
    g.add_argument("--backend", choices=BACKENDS, default="auto",
                   help="auto: the Ray cluster at --address/RAY_ADDRESS, else an embedded local Ray; "
                        "ray: same, always through Ray; local: in this process, no Ray (default: auto)")
    g.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, set by `ray job submit`)")
    g.add_argument("--num-cpus", type=int, metavar="N",
                   help="CPUs of the embedded Ray started when there is no cluster (default: all)")
    g.add_argument("--seed", type=int, default=0, help="sampler seed; fixes every G value (default: 0)")
    g.add_argument("--out", default=out_default, metavar="DIR", help=f"output directory (default: {out_default})")
    g.add_argument("--quiet", action="store_true", help="no progress display and no per-step messages")


def engine_options(args: argparse.Namespace) -> dict:
    """The backend options (fields of :class:`raydp.RayBackend`) that go with ``backend=args.backend``."""
    from raydp.errors import InvalidArgumentError

    if args.backend == "local":
        if args.address:
            raise InvalidArgumentError("--address needs --backend auto or ray")
        return {}
    options = {}
    if args.address:
        options["address"] = args.address
    if args.num_cpus is not None:
        if args.num_cpus < 1:
            raise InvalidArgumentError("--num-cpus must be >= 1")
        options["num_cpus"] = args.num_cpus  # RayBackend(num_cpus=): only used when an embedded Ray is started
    return options


def where(args: argparse.Namespace) -> str:
    """One phrase saying where the pairs run, for the job's log."""
    if args.backend == "local":
        return "in-process (backend local)"
    address = args.address or os.environ.get("RAY_ADDRESS")
    if address:
        return f"Ray cluster at {address}"
    if args.backend == "auto":
        return "in process or an embedded local Ray, whichever the run's size calls for (backend auto)"
    return "embedded local Ray on 127.0.0.1"


def say(args: argparse.Namespace, message: str) -> None:
    if not args.quiet:
        print(message, file=sys.stderr, flush=True)


def fmt(x: float) -> str:
    return f"{x:.6g}" if math.isfinite(x) else str(x)


def print_summary(est, *, uri: str | None = None, stream=None, as_json: bool = False) -> None:
    """Print an estimate the way ``raydp estimate`` does."""
    from raydp.cli import print_estimate

    print_estimate(est, as_json=as_json, uri=uri, stream=stream)


def run_main(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run a job's ``main``: raydp errors end in one line on stderr and exit status 2."""
    from raydp.errors import RaydpError

    name = os.path.basename(sys.argv[0]) or "job"
    try:
        return int(main(argv) or 0)
    except (RaydpError, ValueError) as exc:
        print(f"{name}: error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130


def store_uri(root: str, name: str) -> str:
    """``root/name`` for a local path or a filesystem URI (keeping any ``?query`` at the end)."""
    if "://" in root:
        base, _, query = root.partition("?")
        return f"{base.rstrip('/')}/{name}" + (f"?{query}" if query else "")
    return os.path.join(root, name)
