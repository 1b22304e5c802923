"""Shared plumbing for the Ray jobs in this directory (flags, engine options, printing, exit codes).

Every job runs the same two ways:

    python jobs/X.py ...                                   # in process, or an embedded Ray when worth it
    ray job submit --working-dir . -- python jobs/X.py ... # RAY_ADDRESS is set: joins that cluster

With ``--backend auto`` (the default) raydp uses the cluster at ``--address`` or ``RAY_ADDRESS`` when
one is given; otherwise it times the first blocks of each run and finishes in process when the run
is small, or starts a local Ray inside the job when it is large (``--num-cpus`` caps it).
``--backend local`` always runs in the job's own process, ``--backend ray`` always on Ray. Every
choice gives the same results bit for bit. The flags are the library's own
(``raydp.cli.add_sampler_flags``) and become one :class:`raydp.SamplerOptions` (:func:`options`).

Jobs call raydp's public API only, and the modules of this directory (this one, ``_plots`` for
figures, ``_report`` for benchmark reports, ``svm_sensitivity`` for the SVM bound). They are found
because a script's own directory is ``sys.path[0]`` (``python jobs/X.py``, and the same under
``ray job submit``); the tests run the jobs as scripts, or load one by path (``tests/support/job_util.py``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable

def add_common_flags(parser: argparse.ArgumentParser, *, out_default: str, store: bool = False) -> None:
    """The sampler's flags (``raydp.cli.add_sampler_flags``, made from ``raydp.SamplerOptions``'s fields:
    --seed --block-size --backend --address --num-cpus --task-timeout --connect-timeout --strict --quiet
    --pair-timeout --time-budget --no-replay, and --store --resume with ``store``) and --out."""
    from raydp.cli import add_sampler_flags

    add_sampler_flags(parser, store=store, seed_default=0)
    parser.add_argument("--out", default=out_default, metavar="DIR", help=f"output directory (default: {out_default})")


def options(args: argparse.Namespace, **changes):
    """The :class:`raydp.SamplerOptions` of the job's flags, with ``changes`` (a run's own seed, store, ...)."""
    from raydp.cli import sampler_options

    return sampler_options(args, **changes)


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
