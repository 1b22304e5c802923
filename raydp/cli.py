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


def build_mechanism(name: str, args_json: str | None, epsilon: float | None = None, delta: float | None = None, *,
                    budget: bool = False):
    """The mechanism ``--mechanism NAME`` gives with ``--mechanism-args`` (responses, lattice, calibration),
    ``--epsilon`` and ``--delta``: :func:`raydp.mechanisms.as_mechanism`, as every entry point takes one.
    ``budget=False`` (a sampling run): ε and δ may be left out, they do not change how G is measured."""
    from .mechanisms.spec import as_mechanism

    params = _json_arg(args_json, "--mechanism-args") if args_json else {}
    return as_mechanism(name, epsilon, delta, params=params, budget=budget)


# ---------------------------------------------------------------------------------------------------
# The sampler's options on a command line: the same flags for `raydp estimate` and every job, each made
# from its option's own definition (raydp.options: the fields' Flag metadata and RAY_FLAGS).

_STORE_FIELDS = ("store", "resume")  # left out for a job that keeps its results elsewhere (store=False)


def _add_flag(group, field: str, flag, option_default, *, default, note: str = "") -> None:
    """``flag`` on ``group``; ``default`` is what argparse keeps when a value flag is not given."""
    text = flag.help.format(default=option_default) if "{default" in flag.help else flag.help
    if flag.type is None:  # a switch: given, the option takes the opposite of its default
        stored = True if flag.dest is not None else not option_default
        group.add_argument(flag.name, dest=flag.dest or field,
                           action="store_true" if stored else "store_false", help=text + note)
    else:
        group.add_argument(flag.name, dest=flag.dest or field, type=flag.type, metavar=flag.metavar,
                           choices=flag.choices, default=default, help=text + note)


def add_sampler_flags(parser, *, store: bool = True, seed_default: int | None = None) -> None:
    """The flags of :class:`raydp.SamplerOptions` (and of the Ray backend it may use): one definition for
    ``raydp estimate`` and every job. ``store=False`` leaves out --store and --resume; ``seed_default``
    is the seed when --seed is not given (a job's fixed default)."""
    from .options import option_flags, ray_flags

    g = parser.add_argument_group("how the pairs are sampled (raydp.SamplerOptions)")
    for field, flag, option_default in option_flags():
        if field in _STORE_FIELDS and not store:
            continue
        if field == "seed" and seed_default is not None:
            _add_flag(g, field, flag, option_default, default=seed_default, note=f" (default: {seed_default})")
        else:
            _add_flag(g, field, flag, option_default, default=option_default)
        if field == "backend":  # the Ray backend's flags, next to the choice of backend; None: not given
            for ray_field, ray_flag, ray_default in ray_flags():
                _add_flag(g, ray_field, ray_flag, ray_default, default=None)


def sampler_options(a, **changes):
    """The :class:`raydp.SamplerOptions` the flags of :func:`add_sampler_flags` give (``changes`` on top)."""
    from .options import SamplerOptions, option_flags, ray_flags

    given = [(field, flag) for field, flag, _ in ray_flags() if getattr(a, flag.dest or field, None) is not None]
    if a.backend == "local" and given:
        flags = ", ".join(flag.name for _, flag in given)
        raise InvalidArgumentError(f"{flags} {'needs' if len(given) == 1 else 'need'} --backend auto or ray "
                                   "(in process there is no Ray; "
                                   "use --pair-timeout for a time limit)")
    backend = {field: getattr(a, flag.dest or field) for field, flag in given}
    fields = {field: flag.value(getattr(a, flag.dest or field), option_default)
              for field, flag, option_default in option_flags() if hasattr(a, flag.dest or field)}
    fields.update(changes)
    return SamplerOptions.of(**fields, **backend)


def _plan_kwargs(a) -> dict:
    return {"gamma": a.gamma, "m": a.m, "k": a.k}


def _add_plan_flags(p):
    p.add_argument("--gamma", type=float, help="privacy confidence γ in (0, 1)")
    p.add_argument("--m", type=int, help="number of neighbouring pairs")
    p.add_argument("--k", type=int, help="order statistic index (needs --m)")


def cmd_plan(a) -> int:
    from .plan import make_plan

    p = make_plan(**_plan_kwargs(a))
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
    mech = build_mechanism(a.mechanism, a.mechanism_args, epsilon=a.epsilon, delta=a.delta)
    if a.time_budget is not None and (a.m is not None or a.k is not None):
        raise InvalidArgumentError("--time-budget chooses m from --gamma; give --gamma alone with it (no --m or --k)")
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


def _read_npy(path: str):
    """A .npy file's array; its header's shape and dtype are checked against the file's size first, so a
    header that claims terabytes is refused before numpy allocates them."""
    import numpy as np
    from numpy.lib import format as npformat

    from .tables import open_regular

    with open_regular(path, InvalidArgumentError, f"--data {path!r}") as fh:
        version = npformat.read_magic(fh)
        readers = {(1, 0): npformat.read_array_header_1_0, (2, 0): npformat.read_array_header_2_0}
        if version in readers:
            shape, _, dtype = readers[version](fh)
        elif hasattr(npformat, "_read_array_header"):  # 3.0 (a UTF-8 header): no public reader for it
            shape, _, dtype = npformat._read_array_header(fh, version)
        else:
            raise InvalidArgumentError(f"--data {path!r}: .npy format version {version} is not supported here")
        if dtype.hasobject:
            raise InvalidArgumentError(f"--data {path!r} holds Python objects; only numeric arrays are read")
        if math.prod(shape) * dtype.itemsize > os.fstat(fh.fileno()).st_size - fh.tell():
            raise InvalidArgumentError(f"--data {path!r}: its header's shape and dtype need more bytes than "
                                       "the file holds (refused before allocating them)")
        fh.seek(0)
        return np.load(fh, allow_pickle=False)


def _read_data(path: str, *, schema_only: bool = False):
    """The private data: .npy, or a Parquet/CSV file (numeric columns; errors never quote a row).

    ``schema_only`` (with a ledger): a Parquet/CSV file is opened as a :class:`~raydp.tables.PrivateTable`
    whose values the release reads inside its charge, so nothing about them is answered before it.
    A .npy file's dtype and shape are its header, read by ``np.load`` (no value is checked).
    Only a regular file is opened (a FIFO, a device, a directory are refused from their ``stat``).
    """
    from .tables import PrivateTable

    if path.endswith(".npy"):
        return _read_npy(path)
    table = PrivateTable(path, error=InvalidArgumentError, what="--data")
    return table if schema_only else table.load()


def cmd_release(a) -> int:
    from .release import sample_then_respond
    from .sampler import load_estimate

    if a.respond_after is not None and not (math.isfinite(a.respond_after) and a.respond_after > 0):
        raise InvalidArgumentError(f"--respond-after must be a finite number of seconds > 0, got {a.respond_after:g}")
    ledger = None
    if a.ledger is not None:
        from .ledger import Ledger

        ledger = Ledger(a.ledger, epsilon_total=a.epsilon_total, delta_total=a.delta_total)
    elif a.epsilon_total is not None or a.delta_total is not None or a.ledger_label is not None:
        raise InvalidArgumentError("--epsilon-total, --delta-total and --ledger-label need --ledger PATH")
    from .seal import warm

    warm()
    oracle = None if a.oracle is None else build(a.oracle, a.oracle_args, "--oracle", ("raydp.oracles",))
    if a.oracle is None and a.oracle_args is not None:
        raise InvalidArgumentError("--oracle-args needs --oracle")
    est = load_estimate(a.store, oracle=oracle)
    target = build(a.target, a.target_args, "--target", ("raydp.targets",))
    mech = build_mechanism(a.mechanism, a.mechanism_args, epsilon=a.epsilon, delta=a.delta, budget=True)
    from .tables import check_regular

    try:  # a FIFO, a device, a socket or a directory: refused from its stat, never opened (a FIFO would hang)
        check_regular(a.data, InvalidArgumentError, f"--data: cannot read {a.data!r}: it")
    except FileNotFoundError:
        if a.data.endswith(".npy"):
            raise InvalidArgumentError(f"--data: no such file {a.data!r}") from None
        # a Parquet/CSV path: PrivateTable says so, as it always did
    except OSError as exc:
        raise InvalidArgumentError(f"--data: cannot read {a.data!r} ({exc.strerror or type(exc).__name__})") from None
    try:
        data = _read_data(a.data, schema_only=ledger is not None)
    except FileNotFoundError:
        raise InvalidArgumentError(f"--data: no such file {a.data!r}") from None
    except (OSError, ValueError, EOFError, MemoryError) as exc:  # unreadable, not a .npy array, too large
        why = exc if isinstance(exc, (OSError, RaydpError)) else type(exc).__name__  # numpy's text may quote data
        raise InvalidArgumentError(f"--data: cannot read {a.data!r} as .npy, .parquet or .csv ({why})") from None
    more = {} if a.respond_after is None else {"respond_after": a.respond_after}  # given: the library's keyword
    r = sample_then_respond(data, target, mech, estimate=est, gamma=a.gamma, ledger=ledger, ledger_label=a.ledger_label,
                            replay=a.replay, **more)
    value = r.value.tolist() if hasattr(r.value, "tolist") else r.value
    out = {"value": value, "epsilon": r.epsilon, "delta": r.delta, "gamma": r.gamma,
           "sensitivity": r.sensitivity, "mechanism": r.mechanism,
           "replay": None if r.replay is None else r.replay.to_dict()}
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
    e.add_argument("--mechanism-args", help="JSON kwargs for the mechanism (responses, lattice, dims, calibration); "
                                            "ε and δ have their own flags")
    e.add_argument("--epsilon", type=float, help="the mechanism's ε (optional: it does not change how G is measured)")
    e.add_argument("--delta", type=float, help="the Gaussian mechanism's δ (optional, as --epsilon)")
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
    r.add_argument("--store", required=True, help="store URI written by raydp estimate --store")
    r.add_argument("--data", required=True, help="private data, one row per record: .parquet or .csv with numeric columns only (the oracle's record fields in order; one column = scalar records, no missing cells), or .npy")
    r.add_argument("--target", required=True)
    r.add_argument("--target-args")
    r.add_argument("--gamma", type=float, required=True,
                   help="the γ you release under; refused when the store's plan gives another")
    r.add_argument("--oracle", help="MODULE:ATTR of the store's oracle: only for a store written before raydp kept "
                                    "witness records, to draw them (a built-in oracle is rebuilt without it)")
    r.add_argument("--oracle-args", help="JSON kwargs for --oracle")
    r.add_argument("--no-replay", dest="replay", action="store_false",
                   help="release without recomputing the store's witness pairs with this target (the statement "
                        "says so; not advised)")
    r.add_argument("--mechanism", choices=MECHANISMS, default="laplace")
    r.add_argument("--mechanism-args", help="JSON kwargs for the mechanism (responses, lattice, dims, calibration); "
                                            "ε and δ have their own flags")
    r.add_argument("--epsilon", type=float, required=True)
    r.add_argument("--delta", type=float, help="the Gaussian mechanism's δ (> 0); the others are ε-DP")
    r.add_argument("--ledger", help="privacy budget ledger (JSON file): charge this release, refuse it if over budget")
    r.add_argument("--epsilon-total", type=float, help="check the ledger's total ε (fixed by `raydp ledger create`)")
    r.add_argument("--delta-total", type=float, help="check the ledger's total δ (fixed by `raydp ledger create`)")
    r.add_argument("--ledger-label", help="a note stored with the ledger entry (never private data)")
    r.add_argument("--respond-after", type=float, metavar="SECONDS",
                   help="answer (or fail) exactly SECONDS after the private data was sent, whatever the target's "
                        "time (a number > 0); a target still running then is stopped and the release fails")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_release)

    c = sub.add_parser("cluster", help="a throw-away multi-node Ray cluster on this machine (loopback, token auth): "
                                       "up [WORKERS] | status | env | kill-worker I | down", add_help=False)
    c.add_argument("args", nargs=argparse.REMAINDER)

    led = sub.add_parser("ledger", help="inspect a privacy budget ledger")
    led_sub = led.add_subparsers(dest="ledger_cmd", required=True, parser_class=_Parser)
    lc = led_sub.add_parser("create", help="create a ledger with its total ε and δ (never overwrites one)")
    lc.add_argument("path", help="ledger file (path or file:// URI)")
    lc.add_argument("--epsilon-total", type=float, required=True)
    lc.add_argument("--delta-total", type=float, default=0.0)
    lc.set_defaults(func=cmd_ledger_create)
    ls = led_sub.add_parser("show", help="entries, spend, remaining budget and the composed (ε, δ, γ)")
    ls.add_argument("path", help="ledger file (path or file:// URI)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_ledger_show)
    _add_service_commands(sub)
    return ap


def _add_service_commands(sub) -> None:
    """``raydp serve``, ``raydp admin ...`` and ``raydp remote ...`` (:mod:`raydp.serve.commands`)."""
    from .serve.commands import add_commands

    add_commands(sub, _Parser)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has left: polled, so nothing is written."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR and POLLHUP are always reported
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (not POSIX) or no descriptor: take it as gone
        return True


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["cluster"]:  # its own command line (raydp.local_cluster), passed through whole
        from .local_cluster import main as cluster_main

        return cluster_main(["--prog", "raydp cluster", *argv[1:]])
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that left is a BrokenPipeError below, not a traceback
        return code
    except BrokenPipeError as exc:  # before OSError, its base class
        if not _stdout_gone():  # another pipe than stdout broke: an error like any other
            print(f"raydp: error: {exc.strerror or type(exc).__name__}", file=sys.stderr)
            return 2
        # e.g. `raydp show ... | head`: the reader left, nothing to report; stdout points at /dev/null so
        # that the flush at exit finds no pipe either
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141  # 128 + SIGPIPE, as a Unix tool killed by it ends
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


if __name__ == "__main__":
    sys.exit(main())
