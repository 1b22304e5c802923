"""The ``raydp`` command line: plan, estimate, show, release.

Every error a user can cause ends the process with exit status 2 and one line on stderr that says
what is wrong and what is allowed — never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys

from .errors import InvalidArgumentError, RaydpError
from .plan import format_up

MECHANISMS = ("laplace", "gaussian", "exponential", "bernstein")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise InvalidArgumentError(f"{self.prog}: {message}")


def _json_arg(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"{flag} must be a JSON object, e.g. '{{\"rate\": 1.0}}' ({exc.msg})") from None
    except RecursionError:
        raise InvalidArgumentError(f"{flag} must be a JSON object; this one nests too deeply") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{flag} must be a JSON object, got {type(value).__name__}")
    return value


def resolve(spec: str, flag: str):
    """Import ``MOD:ATTR`` (ATTR may be dotted)."""
    if ":" not in spec:
        raise InvalidArgumentError(f"{flag} must look like MODULE:ATTRIBUTE (e.g. raydp.targets:mean), got {spec!r}")
    mod_name, attr = spec.split(":", 1)
    try:
        obj = importlib.import_module(mod_name)
    except Exception as exc:
        raise InvalidArgumentError(f"{flag}: cannot import module {mod_name!r} ({type(exc).__name__}: {exc})") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InvalidArgumentError(f"{flag}: module {mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def build(spec: str, args_json: str | None, flag: str, factory_modules: tuple[str, ...]):
    """Resolve ``spec``; call it with ``args_json`` kwargs when given or when it is a raydp factory."""
    obj = resolve(spec, flag)
    kwargs = _json_arg(args_json, flag + "-args") if args_json is not None else None
    is_factory = spec.split(":", 1)[0] in factory_modules
    if kwargs is not None or is_factory:
        if not callable(obj):
            raise InvalidArgumentError(f"{flag} {spec} is a {type(obj).__name__}, not a callable factory; "
                                  f"name a function or class (e.g. raydp.targets:mean)")
        try:
            return obj(**(kwargs or {}))
        except RaydpError:
            raise
        except TypeError as exc:
            raise InvalidArgumentError(f"{flag}-args do not fit {spec}: {exc}") from None
        except Exception as exc:  # a user factory's own error: still one line
            raise InvalidArgumentError(f"{flag}: {spec}(**{flag}-args) raised {type(exc).__name__}: {exc}") from None
    return obj


def build_mechanism(name: str, args_json: str | None, epsilon: float | None = None, delta: float | None = None):
    from . import mechanisms

    kwargs = _json_arg(args_json, "--mechanism-args") if args_json else {}
    if epsilon is not None:
        kwargs["epsilon"] = epsilon
    if delta is not None:
        if name != "gaussian":
            raise InvalidArgumentError(f"--delta applies to the gaussian mechanism only; {name} is pure ε-DP (delta = 0)")
        kwargs["delta"] = delta
    kwargs.setdefault("epsilon", 1.0)  # ε does not change how G is measured
    if name == "gaussian":
        kwargs.setdefault("delta", 1e-6)
        kwargs.setdefault("calibration", "analytic")
    cls = {"laplace": mechanisms.Laplace, "gaussian": mechanisms.Gaussian,
           "exponential": mechanisms.Exponential, "bernstein": mechanisms.Bernstein}[name]
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(f"--mechanism-args do not fit the {name} mechanism: {exc}") from None


# ---------------------------------------------------------------------------------------------------
# The sampler's options on a command line: the same flags for `raydp estimate` and every job.

_BACKEND_FLAGS = {"address": "--address", "num_cpus": "--num-cpus", "task_timeout": "--task-timeout",
                  "connect_timeout": "--connect-timeout"}


def add_sampler_flags(parser, *, store: bool = True, seed_default: int | None = None,
                      store_aliases: tuple[str, ...] = ("--out",)) -> None:
    """The flags of :class:`raydp.SamplerOptions` (and of the Ray backend it may use): one definition for
    ``raydp estimate`` and every job."""
    g = parser.add_argument_group("how the pairs are sampled (raydp.SamplerOptions)")
    g.add_argument("--seed", type=int, default=seed_default,
                   help="fixes every G value with the block size" + (f" (default: {seed_default})"
                                                                     if seed_default is not None else ""))
    g.add_argument("--block-size", type=int, help="pairs per block (default: from n, m and the target kind)")
    g.add_argument("--backend", choices=("auto", "local", "ray"), default="auto",
                   help="auto (default): in process for a small run, Ray for a large one or when a cluster is "
                        "at hand (--address, RAY_ADDRESS); local; ray. Every choice gives the same sample")
    g.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, set by `ray job submit`)")
    g.add_argument("--num-cpus", type=int, metavar="N",
                   help="CPUs of the embedded Ray started when there is no cluster (default: all)")
    g.add_argument("--task-timeout", type=float, metavar="SECONDS",
                   help="ray backend: kill a task that runs longer; its pairs count as failures")
    g.add_argument("--connect-timeout", type=float, metavar="SECONDS",
                   help="with --address or RAY_ADDRESS: fail in one line when no Ray cluster answers there "
                        "within this time (default: 30)")
    g.add_argument("--pair-timeout", type=float, metavar="SECONDS",
                   help="a pair whose evaluation takes longer counts as a failure (G = +inf)")
    g.add_argument("--strict", action="store_true", help="stop on the first failing pair")
    g.add_argument("--quiet", action="store_true", help="no progress display")
    if store:
        g.add_argument("--store", *store_aliases, dest="store",
                       help="store URI: local path or pyarrow filesystem URI (s3://...)"
                            + (f" ({', '.join(store_aliases)}: the old name)" if store_aliases else ""))
        g.add_argument("--resume", action="store_true", help="continue the run stored at --store")


def sampler_options(a, **changes):
    """The :class:`raydp.SamplerOptions` the flags of :func:`add_sampler_flags` give (``changes`` on top)."""
    from .options import SamplerOptions

    backend = {field: getattr(a, field) for field in _BACKEND_FLAGS if getattr(a, field, None) is not None}
    if a.backend == "local" and backend:
        flags = ", ".join(_BACKEND_FLAGS[f] for f in backend)
        raise InvalidArgumentError(f"{flags} {'needs' if len(backend) == 1 else 'need'} --backend auto or ray "
                                   "(in process there is no Ray; "
                                   "use --pair-timeout for a time limit)")
    fields = dict(seed=a.seed, block_size=a.block_size, backend=a.backend, store=getattr(a, "store", None),
                  resume=getattr(a, "resume", False), strict=a.strict, progress=not a.quiet,
                  pair_timeout=a.pair_timeout)
    fields.update(changes)
    return SamplerOptions.of(**fields, **backend)


def _plan_kwargs(a) -> dict:
    return {"gamma": a.gamma, "m": a.m, "k": a.k}


def _add_plan_flags(p):
    p.add_argument("--gamma", type=float, help="privacy confidence γ in (0, 1)")
    p.add_argument("--m", type=int, help="number of neighbouring pairs")
    p.add_argument("--k", type=int, help="order statistic index (needs --m)")


def cmd_plan(a) -> int:
    from .plan import plan

    p = plan(**_plan_kwargs(a))
    if a.json:
        print(json.dumps(p.to_dict()))
    else:
        print(f"m = {p.m}  k = {p.k}  gamma = {format_up(p.gamma, 7)}  rho = {p.rho:.7g}  (optimised: {p.mode})")
    return 0


def print_estimate(est, *, as_json: bool = False, uri: str | None = None, stream=None) -> None:
    """Print an estimate: Δ̂, plan and norm, run identity, failures and (if any) its store."""
    from .store import redact

    stream = sys.stdout if stream is None else stream
    finite = math.isfinite(est.sensitivity)
    if as_json:
        d = est.to_dict()
        d["sensitivity"] = est.sensitivity if finite else str(est.sensitivity)
        d["seconds"] = round(est.seconds, 3)
        d["backend"] = est.backend
        if uri is not None:
            d["store"] = redact(uri)
        print(json.dumps(d), file=stream, flush=True)
        return
    p = est.plan
    lines = [
        f"sensitivity  {est.sensitivity:.6g}   ({est.norm} norm, {est.mechanism['name']} mechanism)",
        f"plan         m={p.m} k={p.k} gamma={format_up(p.gamma)} rho={p.rho:.6g} ({p.mode})",
        f"run          n={est.n} seed={est.seed} block_size={est.block_size} seconds={est.seconds:.2f}"
        + (f" backend={est.backend}" if est.backend else ""),
        f"failures     {est.failures}" + (f" {est.failure_kinds}" if est.failures else ""),
        f"target       {est.target['name']} {json.dumps(est.target['params'])}",
        f"oracle       {est.oracle['name']} {json.dumps(est.oracle['params'])}",
    ]
    if uri is not None:
        lines.append(f"store        {redact(uri)}")
    print("\n".join(lines), file=stream, flush=True)


def cmd_estimate(a) -> int:
    from .sampler import estimate_sensitivity

    target = build(a.target, a.target_args, "--target", ("raydp.targets",))
    oracle = build(a.oracle, a.oracle_args, "--oracle", ("raydp.oracles",))
    mech = build_mechanism(a.mechanism, a.mechanism_args)
    est = estimate_sensitivity(target, oracle, a.n, mechanism=mech, options=sampler_options(a), **_plan_kwargs(a))
    print_estimate(est, as_json=a.json, uri=a.store)
    return 0


def cmd_show(a) -> int:
    from .sampler import load_estimate

    est = load_estimate(a.store, gamma=a.gamma)
    if a.plot:  # before printing anything: a plot that cannot be written is the whole error
        from .plots import plot_cdf

        try:
            plot_cdf(est, a.plot)
        except OSError as exc:
            raise InvalidArgumentError(f"--plot: cannot write {a.plot!r} ({exc.strerror or exc})") from None
    print_estimate(est, as_json=a.json)
    if a.plot and not a.json:
        print(f"plot         {a.plot}")
    return 0


def _read_data(path: str, *, schema_only: bool = False):
    """The private data: .npy, or a Parquet/CSV file (numeric columns; errors never quote a row).

    ``schema_only`` (with a ledger): a Parquet/CSV file is opened as a :class:`~raydp.tables.PrivateTable`
    whose values the release reads inside its charge, so nothing about them is answered before it.
    A .npy file's dtype and shape are its header, read by ``np.load`` (no value is checked).
    """
    import numpy as np

    from .tables import PrivateTable

    if path.endswith(".npy"):
        return np.load(path, allow_pickle=False)
    table = PrivateTable(path, error=InvalidArgumentError, what="--data")
    return table if schema_only else table.load()


def cmd_release(a) -> int:
    from .release import sample_then_respond
    from .sampler import load_estimate

    ledger = None
    if a.ledger is not None:
        from .ledger import Ledger

        ledger = Ledger(a.ledger, epsilon_total=a.epsilon_total, delta_total=a.delta_total)
    elif a.epsilon_total is not None or a.delta_total is not None or a.label is not None:
        raise InvalidArgumentError("--epsilon-total, --delta-total (--budget-epsilon, --budget-delta) and --label "
                                   "need --ledger PATH")
    est = load_estimate(a.store)
    target = build(a.target, a.target_args, "--target", ("raydp.targets",))
    mech = build_mechanism(a.mechanism, a.mechanism_args, epsilon=a.epsilon, delta=a.delta)
    try:
        data = _read_data(a.data, schema_only=ledger is not None)
    except FileNotFoundError:
        raise InvalidArgumentError(f"--data: no such file {a.data!r}") from None
    except (OSError, ValueError, EOFError) as exc:  # a directory, unreadable, not a .npy array
        why = exc if isinstance(exc, (OSError, RaydpError)) else type(exc).__name__  # numpy's text may quote data
        raise InvalidArgumentError(f"--data: cannot read {a.data!r} as .npy, .parquet or .csv ({why})") from None
    r = sample_then_respond(data, target, mech, estimate=est, ledger=ledger, ledger_label=a.label)
    value = r.value.tolist() if hasattr(r.value, "tolist") else r.value
    out = {"value": value, "epsilon": r.epsilon, "delta": r.delta, "gamma": r.gamma,
           "sensitivity": r.sensitivity, "mechanism": r.mechanism}
    if r.ledger is not None:
        out["ledger"] = r.ledger
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{value}\n{r.statement()}")
        if r.ledger is not None:
            from .ledger import Guarantee

            g = Guarantee(**r.ledger["composed"])
            print(f"ledger {r.ledger['path']} entry {r.ledger['entry']}; all releases in it: {g.statement()}; "
                  f"remaining ε={ledger.epsilon_total - g.epsilon:.6g} δ={ledger.delta_total - g.delta:.6g}")
    return 0


def cmd_ledger_create(a) -> int:
    from .ledger import Ledger

    ledger = Ledger.create(a.path, epsilon_total=a.epsilon_total, delta_total=a.delta_total)
    print(f"ledger     {ledger.path}\ntotals     epsilon={format_up(ledger.epsilon_total)} "
          f"delta={format_up(ledger.delta_total)} (fixed)")
    return 0


def cmd_ledger_show(a) -> int:
    from .ledger import Guarantee, Ledger

    summary = Ledger(a.path).summary()
    if a.json:
        print(json.dumps(summary))
        return 0
    rows = [("id", "time (UTC)", "status", "epsilon", "delta", "gamma", "mechanism", "sensitivity", "estimate",
             "sample", "label")]
    for e in summary["entries"]:
        mech = e["mechanism"] + (f"/{e['calibration']}" if e.get("calibration") else "")
        rows.append((str(e["id"]), e["time"][:19], e["status"], format_up(e["epsilon"]), format_up(e["delta"]),
                     format_up(e["gamma"]), mech, f"{e['sensitivity']:.6g}", (e.get("estimate") or "-")[:12],
                     (e.get("sample") or "-")[:12], e.get("label") or ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print(f"ledger     {summary['path']}")
    print(f"totals     epsilon={summary['epsilon_total']:g} delta={summary['delta_total']:g}")
    print(f"spent      epsilon={format_up(summary['spent']['epsilon'])} delta={format_up(summary['spent']['delta'])}   "
          f"remaining epsilon={summary['remaining']['epsilon']:g} delta={summary['remaining']['delta']:g}")
    print(f"guarantee  {Guarantee(**summary['guarantee']).statement()}")
    if len(rows) > 1:
        print()
        for row in rows:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


def make_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="raydp", description="Sensitivity sampling and random-DP releases on Ray")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    p = sub.add_parser("plan", help="m, k, gamma, rho from Theorem 15 / Table 1")
    _add_plan_flags(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    e = sub.add_parser("estimate", help="estimate the sensitivity of a target from an oracle")
    e.add_argument("--target", required=True, help="MODULE:ATTR (raydp.targets:svm, mypkg.mod:f)")
    e.add_argument("--target-args", help="JSON kwargs; calls ATTR(**kwargs) to build the target")
    e.add_argument("--oracle", required=True, help="MODULE:ATTR (raydp.oracles:exponential, ...)")
    e.add_argument("--oracle-args", help="JSON kwargs; calls ATTR(**kwargs) to build the oracle")
    e.add_argument("--n", type=int, required=True, help="database size (records)")
    _add_plan_flags(e)
    e.add_argument("--mechanism", choices=MECHANISMS, default="laplace", help="fixes the norm G is measured in")
    e.add_argument("--mechanism-args", help="JSON kwargs for the mechanism (responses, lattice, dims, ...)")
    add_sampler_flags(e)
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_estimate)

    s = sub.add_parser("show", help="summarise a stored estimate (and plot the CDF of G)")
    s.add_argument("store", help="store URI written by raydp estimate --store")
    s.add_argument("--gamma", type=float, help="re-derive Δ̂ for this gamma from the stored sample")
    s.add_argument("--plot", help="write the empirical CDF of G to this PNG")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)

    r = sub.add_parser("release", help="apply a stored estimate to a private data file")
    r.add_argument("--store", "--estimate", dest="store", required=True,
                   help="store URI written by raydp estimate --store (--estimate is the old name)")
    r.add_argument("--data", required=True, help="private data: .parquet, .csv or .npy")
    r.add_argument("--target", required=True)
    r.add_argument("--target-args")
    r.add_argument("--mechanism", choices=MECHANISMS, default="laplace")
    r.add_argument("--mechanism-args")
    r.add_argument("--epsilon", type=float, required=True)
    r.add_argument("--delta", type=float)
    r.add_argument("--ledger", help="privacy budget ledger (JSON file): charge this release, refuse it if over budget")
    r.add_argument("--epsilon-total", "--budget-epsilon", dest="epsilon_total", type=float,
                   help="check the ledger's total ε (fixed by `raydp ledger create`)")
    r.add_argument("--delta-total", "--budget-delta", dest="delta_total", type=float,
                   help="check the ledger's total δ (fixed by `raydp ledger create`)")
    r.add_argument("--label", help="a note stored with the ledger entry (never private data)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_release)

    c = sub.add_parser("cluster", help="a throw-away multi-node Ray cluster on this machine (loopback, token auth): "
                                       "up [WORKERS] | status | env | kill-worker I | down", add_help=False)
    c.add_argument("args", nargs=argparse.REMAINDER)

    led = sub.add_parser("ledger", help="inspect a privacy budget ledger")
    led_sub = led.add_subparsers(dest="ledger_cmd", required=True, parser_class=_Parser)
    lc = led_sub.add_parser("create", help="create a ledger with its total ε and δ (never overwrites one)")
    lc.add_argument("path", help="ledger file (path or file:// URI)")
    lc.add_argument("--epsilon-total", "--budget-epsilon", dest="epsilon_total", type=float, required=True)
    lc.add_argument("--delta-total", "--budget-delta", dest="delta_total", type=float, default=0.0)
    lc.set_defaults(func=cmd_ledger_create)
    ls = led_sub.add_parser("show", help="entries, spend, remaining budget and the composed (ε, δ, γ)")
    ls.add_argument("path", help="ledger file (path or file:// URI)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_ledger_show)
    return ap


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["cluster"]:  # its own command line (raydp.local_cluster), passed through whole
        from .local_cluster import main as cluster_main

        return cluster_main(["--prog", "raydp cluster", *argv[1:]])
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (RaydpError, ValueError) as exc:
        print(f"raydp: error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except OSError as exc:  # a filesystem error outside the store and ledger (which name what failed)
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"raydp: error: {exc.strerror or type(exc).__name__}{where}".splitlines()[0], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("raydp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `raydp show ... | head`: the reader left, nothing to report
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141


if __name__ == "__main__":
    sys.exit(main())
