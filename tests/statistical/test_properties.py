"""Property-based bad input (issue 6): no input yields a traceback, a NaN, or a plan breaking Theorem 15.

Five properties, each over arbitrary values (NaN, ±inf, subnormals, negatives, huge ints, numpy
scalars, strings, unicode, lists, None) mixed with valid ranges:

(i)   ``raydp.make_plan(gamma=, m=, k=)``: a :class:`PlanError`, or a plan with no NaN whose (m, k, γ, ρ)
      satisfy both inequalities of Theorem 15 — checked here independently, in 50-digit decimal
      arithmetic, plus Table 1's ρ via ``scipy.special.lambertw``.
(ii)  ``raydp plan`` with arbitrary flag strings: exit 0 with a valid plan (``--json`` parses, no
      NaN, Theorem 15 holds) or exit 2 with one line on stderr; never a traceback.
(iii) ``raydp estimate`` with arbitrary flags on tiny runs (local backend, n ≤ 12, m ≤ ~70), and the
      mechanism constructors and oracle/target factories: only :mod:`raydp.errors` exceptions.

Deterministic (``derandomize=True``, no example database). ``EXAMPLES`` fixes how many inputs each
property tries (12 500 in all); after the module the totals actually run are printed on the terminal.
"""

from __future__ import annotations

import contextlib
import decimal
import io
import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scipy.special import lambertw

import raydp
from raydp import mechanisms, oracles, targets
from raydp.cli import main
from raydp.errors import MechanismError, OracleError, PlanError, RaydpError, TargetError
from raydp.plan import Plan

EXAMPLES = {"plan_api": 5000, "plan_cli": 2000, "estimate_cli": 500, "mechanisms": 3000, "factories": 2000}
TRIED: Counter = Counter()


def _settings(name):
    return settings(max_examples=EXAMPLES[name], deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module", autouse=True)
def _print_totals(request):
    yield
    line = (f"bad-input properties: {dict(TRIED)} = {sum(TRIED.values())} inputs tried; "
            "a traceback would have failed its test")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\n" + line)


# ----------------------------------------------------------------------------- Theorem 15, independently

_REL = 1e-13  # the plan is computed in binary floating point; allow that rounding and no more


def theorem15_problems(p) -> list[str]:
    """What is wrong with plan ``p``: NaN or non-integer fields, ranges, or either inequality of
    Theorem 15 (docs/method.md), evaluated in 50-digit decimal arithmetic on the plan's exact values."""
    problems = [f"{f}={getattr(p, f)!r} is not an int" for f in ("m", "k") if type(getattr(p, f)) is not int]
    problems += [f"{f}={getattr(p, f)!r} is not a finite float" for f in ("gamma", "rho")
                 if not (isinstance(getattr(p, f), float) and math.isfinite(getattr(p, f)))]
    if problems:
        return problems
    if not 1 <= p.k <= p.m:
        problems.append(f"k={p.k} not in [1, m={p.m}]")
    if not 0.0 < p.gamma < 1.0:
        problems.append(f"gamma={p.gamma} not in (0, 1)")
    if not 0.0 < p.rho < min(p.gamma, 0.5):
        problems.append(f"rho={p.rho} not in (0, min(gamma, 1/2))")
    if problems:
        return problems
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        D = decimal.Decimal
        g, r, m, k = D(p.gamma), D(p.rho), D(p.m), D(p.k)
        log_inv_rho = (1 / r).ln()
        m_bound = log_inv_rho / (2 * (g - r) ** 2)
        k_bound = m * (1 - g + r + (log_inv_rho / (2 * m)).sqrt())
        slack = 1 - D(_REL)
        if m < m_bound * slack:
            problems.append(f"m={p.m} < log(1/rho)/(2(gamma-rho)^2) = {m_bound:.6e}")
        if k < k_bound * slack:
            problems.append(f"k={p.k} < m(1 - gamma + rho + sqrt(log(1/rho)/(2m))) = {k_bound:.6e}")
    return problems


def table1_problems(p, gamma, m, k) -> list[str]:
    """Table 1: ρ from the lower Lambert branch, and the given inputs kept as they were."""
    if p.mode == "m":
        rho = math.exp(lambertw(-float(gamma) / (2 * math.sqrt(math.e)), k=-1).real + 0.5)
        kept = p.gamma == float(gamma)
    else:
        rho = math.exp(lambertw(-1.0 / (4 * p.m), k=-1).real / 2)
        kept = p.m == int(m)
        if p.mode == "gamma":
            kept = kept and p.k == p.m
        elif p.mode == "k":
            kept = kept and p.gamma == float(gamma)
        else:
            kept = kept and p.mode == "manual" and p.k == int(k)
    problems = [] if kept else [f"mode {p.mode} did not keep its inputs (gamma={gamma!r}, m={m!r}, k={k!r})"]
    if not math.isclose(p.rho, rho, rel_tol=1e-9):
        problems.append(f"rho={p.rho} is not Table 1's {rho}")
    return problems


def test_the_checker_catches_broken_plans():
    good = raydp.make_plan(m=2000, gamma=0.05)  # docs/method.md, Table 1: k = 1983
    assert theorem15_problems(good) == [] and table1_problems(good, 0.05, 2000, None) == []
    assert theorem15_problems(Plan(2000, 1982, good.gamma, good.rho, "k"))[0].startswith("k=1982 <")
    tight = raydp.make_plan(gamma=0.05)  # m = 1305 is the fewest pairs
    assert theorem15_problems(Plan(tight.m - 1, tight.k - 1, 0.05, tight.rho, "m"))[0].startswith("m=1304 <")
    assert theorem15_problems(Plan(10, 10, float("nan"), 0.1, "m")) == ["gamma=nan is not a finite float"]
    assert theorem15_problems(Plan(10, 11, 0.5, 0.1, "manual")) == ["k=11 not in [1, m=10]"]
    assert table1_problems(Plan(1305, 1305, 0.05, 0.004, "m"), 0.05, None, None) != []


# ----------------------------------------------------------------------------- strategies

_SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 5e-324, 1e-320, 2.2250738585072014e-308, 1e-9, 3.49e-8, 1 - 1e-16,
                   1e308, math.inf, -math.inf, math.nan]
junk = st.one_of(
    st.none(), st.booleans(), st.text(max_size=6), st.binary(max_size=3), st.lists(st.integers(), max_size=2),
    st.just(0.1j), st.just(object()), st.builds(decimal.Decimal, st.sampled_from(["0.1", "NaN", "1e3"])),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
numbers = st.one_of(
    st.floats(), st.sampled_from(_SPECIAL_FLOATS), st.integers(), st.integers(min_value=2**50, max_value=2**80),
    st.integers(min_value=-2**80, max_value=0), st.floats(allow_nan=True).map(np.float64),
    st.integers(min_value=-2**62, max_value=2**62).map(np.int64), st.integers(1, 10**6).map(float),
    st.sampled_from([np.float32("nan"), np.float32(0.25), np.int32(300), np.bool_(True), np.uint64(2**63)]),
)
gammas = st.one_of(st.none(), st.floats(0, 1, exclude_min=True, exclude_max=True),
                   st.floats(1e-9, 0.3), numbers, junk)
counts = st.one_of(st.none(), st.integers(1, 10**9), st.integers(1, 300), st.integers(2**52, 2**54), numbers, junk)


def pick(draw, valid, bad, p_valid=0.7):
    """A value from ``valid`` with probability about ``p_valid``, else from ``bad``."""
    return draw(valid if draw(st.floats(0, 1)) < p_valid else bad)


_valid_m = st.one_of(st.integers(2, 300), st.integers(2, 10**9), st.integers(2**50, 2**53),
                     st.integers(2, 10**6).map(np.int64), st.integers(2, 10**6).map(float))


@st.composite
def plan_args(draw):
    """(gamma, m, k): one of Table 1's four modes, or any mix, each value valid with probability pv."""
    pv = draw(st.sampled_from([1.0, 0.9, 0.6, 0.2]))
    mode = draw(st.sampled_from([("gamma",), ("m",), ("m", "gamma"), ("m", "k"), "any"]))
    if mode == "any":
        return draw(gammas), draw(counts), draw(counts)
    gamma = m = k = None
    if "m" in mode:
        m = pick(draw, _valid_m, counts, pv)
    m_ok = isinstance(m, (int, float, np.integer)) and not isinstance(m, bool) and 2 <= m <= 2**53 and m == int(m)
    if "gamma" in mode:
        valid = st.one_of(st.floats(0, 1, exclude_min=True, exclude_max=True), st.floats(3.49e-8, 1e-3))
        if m_ok and draw(st.booleans()):  # at or above the smallest γ that m certifies
            valid = st.floats(min(0.999, raydp.make_plan(m=int(m)).gamma), 0.999)
        gamma = pick(draw, valid, gammas, pv)
    if "k" in mode:
        valid = st.integers(0, int(m) // 2).map(lambda d: int(m) - d) if m_ok else st.integers(1, 10**9)
        k = pick(draw, valid, counts, pv)
    return gamma, m, k


# ----------------------------------------------------------------------------- (i) the plan, API


@_settings("plan_api")
@given(plan_args())
def test_plan_refuses_or_satisfies_theorem15(args):
    TRIED["plan_api"] += 1
    gamma, m, k = args
    try:
        p = raydp.make_plan(gamma=gamma, m=m, k=k)
    except PlanError as exc:
        assert str(exc)
        return
    assert isinstance(p, Plan)
    assert theorem15_problems(p) == []
    assert table1_problems(p, gamma, m, k) == []


# ----------------------------------------------------------------------------- (ii) the plan, CLI

_NUMBER_TEXT = st.one_of(
    st.floats().map(repr), st.floats().map(str), st.integers().map(str),
    st.integers(min_value=2**50, max_value=2**80).map(str), st.floats(0, 1).map(lambda x: f"{x:.3g}"),
    st.integers(1, 5000).map(str),
    st.sampled_from(["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "+1", "1_000", "0x10", "1e3", "1e-320",
                     "5e-324", "0.05", "1305", " 0.1 ", "٣٠٠", "١", "1e308", "-0", "0.0", "2000", "1983"]),
)
_JUNK_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "-", "--", "--json", "--m", "\ud800", "abc", "0.1.2", "1,5", "∞", "½", "\x00",
                     "\u2028", "\x1c1", "1\n2", "é", "🙂", "--gamma=0.1"]),
)
_FLAG_TEXT = st.one_of(_NUMBER_TEXT, _JUNK_TEXT)


def run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _no_nan(const):
    raise AssertionError(f"JSON output holds {const}")


def check_cli_outcome(code, out, err):
    assert code in (0, 2), (code, out, err)
    assert "Traceback" not in out + err
    if code == 2:
        assert out == "" and err.startswith("raydp: error: ")
        assert len(err.splitlines()) == 1, err


_VALID_PLAN_TEXT = {
    "--gamma": st.one_of(st.floats(1e-3, 0.999).map(repr), st.floats(3.49e-8, 1e-3).map(lambda x: f"{x:.4g}")),
    "--m": st.one_of(st.integers(2, 10**7), st.integers(10**7, 2**53)).map(str),
    "--k": st.one_of(st.integers(1, 10**7), st.integers(10**7, 2**53)).map(str),
}


@st.composite
def plan_argv(draw):
    argv = ["plan"]
    flags = draw(st.one_of(st.sampled_from([["--gamma"], ["--m"], ["--m", "--gamma"], ["--m", "--k"]]),
                           st.lists(st.sampled_from(["--gamma", "--m", "--k"]), max_size=4)))
    m_value = None
    for flag in flags:
        valid = _VALID_PLAN_TEXT[flag]
        if flag == "--k" and m_value is not None and m_value.isascii() and m_value.isdigit() and draw(st.booleans()):
            valid = st.integers(0, int(m_value) // 2).map(lambda d, m=int(m_value): str(m - d))  # k near m
        value = pick(draw, valid, _FLAG_TEXT)
        m_value = value if flag == "--m" else m_value
        argv += [f"{flag}={value}"] if draw(st.booleans()) else [flag, value]
    if draw(st.integers(0, 9)) == 0:
        argv.append(draw(_JUNK_TEXT))
    if draw(st.integers(0, 4)) > 0:
        argv.insert(draw(st.integers(1, len(argv))), "--json")
    return argv


@_settings("plan_cli")
@given(plan_argv())
def test_cli_plan_exits_0_or_2_and_never_breaks_theorem15(argv):
    TRIED["plan_cli"] += 1
    code, out, err = run_cli(argv)
    check_cli_outcome(code, out, err)
    if code != 0:
        return
    assert err == ""
    if "--json" in argv:
        p = Plan(**json.loads(out, parse_constant=_no_nan))
        assert theorem15_problems(p) == []
    else:
        assert "nan" not in out.lower() and "inf" not in out.lower(), out


# ----------------------------------------------------------------------------- (iii) estimate, CLI


class _NanOracle:
    def sample(self, rng, size):
        return np.full(size, np.nan)


nan_oracle = _NanOracle()


def returns_str(db):
    return "x"


def returns_nan(db):
    return float("nan")


_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(), st.integers(-3, 12), st.integers(),
              st.sampled_from([2**70, 1e308, -1, 0, 0.5, 1e-6]), st.text(max_size=4)),
    lambda inner: st.lists(inner, max_size=4), max_leaves=6)
_MECH_KEYS = ["epsilon", "delta", "calibration", "responses", "lattice", "dims", "order", "foo"]
_mech_args = st.one_of(
    st.dictionaries(st.sampled_from(_MECH_KEYS), _json_values, max_size=4).map(json.dumps),
    st.fixed_dictionaries({"lattice": st.integers(-1, 12), "dims": st.integers(0, 2)},
                          optional={"order": st.integers(-1, 45)}).map(json.dumps),
    st.fixed_dictionaries({"responses": st.lists(st.integers(0, 3) | st.text(max_size=2), max_size=4)}).map(json.dumps),
    _JUNK_TEXT,
)
_small_int_text = st.one_of(st.integers(-3, 12).map(str), _JUNK_TEXT, st.sampled_from([str(2**70), "1e3", "nan"]))
_m_text = st.one_of(st.integers(-3, 60).map(str), _JUNK_TEXT, st.sampled_from([str(2**70), str(2**53 + 1), "1.5"]))
# γ ≥ 0.2 keeps m below ~70 pairs; tinier valid γ would be a long run, not bad input.
_gamma_text = st.one_of(st.floats(0.2, 1.5).map(repr), st.sampled_from(["nan", "inf", "-1", "0", "1", "1e-320"]),
                        _JUNK_TEXT.filter(lambda s: not _is_float(s)))
_not_a_backend = _JUNK_TEXT.filter(lambda s: s.strip() not in ("ray", "auto"))


def _is_float(s):
    try:
        float(s)
    except (ValueError, TypeError):
        return False
    return True


_TARGETS = [("raydp.targets:mean", None), ("raydp.targets:median", None), ("raydp.targets:quantile", '{"q": 0.5}'),
            ("raydp.targets:quantile", '{"q": NaN}'), ("raydp.targets:svm", '{"C": -1}'), ("math:pi", None),
            ("raydp.targets:nothere", None), ("nocolon", None), ("test_properties:returns_str", None),
            ("test_properties:returns_nan", None), ("raydp.targets:DEFAULT_SVM_TOL", None)]
_ORACLES = [("raydp.oracles:exponential", '{"rate": 1.0}'), ("raydp.oracles:exponential", '{"rate": -1}'),
            ("raydp.oracles:exponential", None), ("raydp.oracles:normal", "{}"), ("raydp.oracles:uniform", "{}"),
            ("raydp.oracles:normal", '{"dim": 2}'), ("raydp.oracles:bootstrap", '{"source": "/no/such.csv"}'),
            ("test_properties:nan_oracle", None), ("raydp.oracles:exponential", "[1]")]


@st.composite
def estimate_argv(draw):
    pv = draw(st.sampled_from([1.0, 1.0, 0.9, 0.7, 0.3]))  # how likely each flag is valid in this example

    def value(valid, bad):
        return pick(draw, valid, bad, pv)

    target, targs = value(st.sampled_from(_TARGETS[:3]), st.sampled_from(_TARGETS[3:]))
    oracle, oargs = value(st.sampled_from(_ORACLES[:1] + _ORACLES[3:6]), st.sampled_from(_ORACLES))
    argv = ["estimate", "--target", target, "--oracle", oracle, "--quiet"]
    argv += ["--target-args", targs] if targs else []
    argv += ["--oracle-args", oargs] if oargs else []
    if pv == 1.0 or draw(st.integers(0, 19)):
        argv += ["--n", value(st.integers(1, 12).map(str), _small_int_text)]
    mode = draw(st.sampled_from(["m", "gamma", "mk", "mg"] + (["none"] if pv < 1 else [])))
    if "m" in mode:
        argv += ["--m", value(st.integers(2, 60).map(str), _m_text)]
    if "g" in mode or mode == "gamma":
        argv += ["--gamma", value(st.floats(0.2, 0.99).map(repr), _gamma_text)]
    if "k" in mode:
        argv += ["--k", value(st.integers(1, 60).map(str), _m_text)]
    if draw(st.booleans()):
        argv += ["--seed", value(st.integers(0, 2**70).map(str), st.one_of(st.integers(-3, -1).map(str), _JUNK_TEXT))]
    if draw(st.integers(0, 3)) == 0:
        argv += ["--block-size", value(st.integers(1, 64).map(str),
                                       st.one_of(st.integers(-2, 0).map(str), _JUNK_TEXT, st.just(str(2**70))))]
    if draw(st.integers(0, 2)) == 0:
        mech = value(st.sampled_from(["laplace", "gaussian"]),
                     st.sampled_from(["laplace", "gaussian", "exponential", "bernstein", "cauchy"]))
        argv += ["--mechanism", mech]
        if draw(st.booleans()):
            argv += ["--mechanism-args", value(st.just("{}"), _mech_args)]
        if draw(st.booleans()):
            argv += ["--epsilon", value(st.floats(0.01, 10).map(repr), st.sampled_from(["0", "-1", "nan", "inf", "x"]))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--backend", value(st.just("local"), _not_a_backend)]
    if pv < 1 and draw(st.integers(0, 9)) == 0:
        argv += ["--address", draw(_JUNK_TEXT)]
    if draw(st.integers(0, 6)) == 0:
        flag = value(st.just("--pair-timeout"), st.sampled_from(["--pair-timeout", "--task-timeout"]))
        argv += [flag, value(st.just("30"), st.sampled_from(["-1", "0", "nan", "inf", "abc", "5"]))]
    if draw(st.integers(0, 6)) == 0:
        where = value(st.just("new"), st.sampled_from(["new", "scheme", "file", "empty"]))
        argv += ["--out", {"new": f"{{out}}/s{draw(st.integers(0, 10**9))}", "scheme": "foo://x",
                           "file": __file__, "empty": ""}[where]]
        if draw(st.booleans()):
            argv.append("--resume")
    for flag in ("--strict", "--json"):
        if draw(st.booleans()):
            argv.append(flag)
    return argv


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("bad_estimate_stores"))


@_settings("estimate_cli")
@given(estimate_argv())
def test_cli_estimate_exits_0_or_2_without_traceback(out_dir, argv):
    TRIED["estimate_cli"] += 1
    argv = [a.replace("{out}", out_dir) for a in argv]
    code, out, err = run_cli(argv)
    check_cli_outcome(code, out, err)
    if code == 0 and "--json" in argv:
        est = json.loads(out, parse_constant=_no_nan)
        assert theorem15_problems(Plan.from_dict(est["plan"])) == []
        s = est["sensitivity"]
        assert s == "inf" or (isinstance(s, float) and s >= 0)
    elif code == 0:
        assert "nan" not in out.splitlines()[0].lower(), out


# ----------------------------------------------------------------------------- (iii) mechanisms


_eps = st.one_of(st.floats(1e-3, 10), numbers, junk)
_delta = st.one_of(st.floats(1e-12, 0.5), numbers, junk)
_responses = st.one_of(
    st.lists(st.one_of(st.integers(-2, 3), st.text(max_size=2), st.floats(), st.lists(st.integers(0, 1), max_size=2)),
             max_size=5),
    st.lists(st.integers(0, 2), max_size=5).map(tuple), st.lists(st.integers(0, 9), max_size=4).map(np.array),
    st.just(np.zeros((2, 2))), st.sets(st.integers(0, 3), max_size=3), st.text(max_size=3), numbers, junk,
)
_lattice = st.one_of(st.integers(-2, 12), st.integers(3000, 3200), st.sampled_from([10**7, 2**70]), numbers, junk)
_dims = st.one_of(st.integers(-1, 3), st.integers(20, 30), numbers, junk)
_order = st.one_of(st.integers(-1, 45), numbers, junk)


@st.composite
def mechanism_call(draw):
    """(kind, constructor, args): each argument valid with probability pv, else anything."""
    pv = draw(st.sampled_from([1.0, 0.8, 0.5, 0.0]))

    def value(valid, bad):
        return pick(draw, valid, bad, pv)

    kind = draw(st.sampled_from(["laplace", "gaussian", "gaussian-analytic", "exponential", "bernstein", "sigma"]))
    eps = value(st.floats(1e-3, 0.999) if kind == "gaussian" else st.floats(1e-3, 1e3), _eps)
    delta = value(st.floats(1e-12, 0.5), _delta)
    if kind == "laplace":
        return kind, (lambda a: mechanisms.Laplace(*a)), (eps,) + ((0.0,) if draw(st.booleans()) else ())
    if kind == "gaussian":
        return kind, (lambda a: mechanisms.Gaussian(*a)), (eps, delta)
    if kind == "gaussian-analytic":
        return kind, (lambda a: mechanisms.Gaussian(a[0], a[1], calibration=a[2])), \
            (eps, delta, value(st.just("analytic"), junk))
    if kind == "exponential":
        valid = st.lists(st.one_of(st.integers(), st.text(max_size=3)), min_size=1, max_size=5, unique=True)
        return kind, (lambda a: mechanisms.Exponential(*a)), (eps, value(valid, _responses))
    if kind == "bernstein":
        return kind, (lambda a: mechanisms.Bernstein(*a)), \
            (eps, value(st.integers(1, 12), _lattice), value(st.integers(1, 3), _dims),
             value(st.integers(1, 6), _order))
    return kind, (lambda a: mechanisms.analytic_gaussian_sigma(*a)), (eps, delta, value(st.floats(0, 1e6), numbers))


_sens = st.one_of(st.floats(0, 1e6), st.sampled_from([0.0, 1e-300, 1e300]), numbers, junk)


@_settings("mechanisms")
@given(mechanism_call(), _sens, st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=4))
def test_mechanism_constructors_raise_only_raydp_errors(call, sensitivity, value):
    TRIED["mechanisms"] += 1
    kind, build, args = call
    try:
        mech = build(args)
    except RaydpError as exc:
        assert isinstance(exc, MechanismError), exc
        return
    if kind == "sigma":
        assert isinstance(mech, float) and not math.isnan(mech) and mech >= 0
        return
    assert mech.identity()["params"]["epsilon"] > 0
    try:
        scale = mech.noise_scale(sensitivity)
    except RaydpError as exc:
        assert isinstance(exc, MechanismError), exc
        return
    assert not math.isnan(scale) and scale >= 0
    if hasattr(mech, "variance"):
        assert not math.isnan(mech.variance(sensitivity))
    if kind == "exponential":
        scores = np.resize(np.asarray(value), len(mech.responses))
        assert not np.isnan(mech.probabilities(scores, sensitivity)).any()
        out = mech.release(scores, sensitivity) if math.isfinite(scale) else None
        assert out is None or any(out is r for r in mech.responses) or out in mech.responses
    elif kind == "bernstein":
        if mech.size <= 2000 and mech.order <= 6 and math.isfinite(scale):
            poly = mech.release(lambda y: y[:, 0], sensitivity)
            assert not np.isnan(poly.coefficients).any()
    elif math.isfinite(scale):
        try:
            released = mech.release(value, sensitivity)
        except MechanismError:  # value + noise beyond float range: refused, not NaN
            return
        assert not np.isnan(released).any()


# ----------------------------------------------------------------------------- (iii) oracle and target factories

_FACTORIES = {
    "exponential": (oracles.exponential, OracleError, 1), "normal": (oracles.normal, OracleError, 3),
    "uniform": (oracles.uniform, OracleError, 3), "gaussian_mixture": (oracles.gaussian_mixture, OracleError, 4),
    "svm_two_class": (oracles.svm_two_class, OracleError, 1), "bootstrap": (oracles.bootstrap, OracleError, 1),
    "quantile": (targets.quantile, TargetError, 1), "svm": (targets.svm, TargetError, 3),
    "kde": (targets.kde, TargetError, 2),
}
# Integers stay below 10**4 or at/above 2**63: a valid dim of 10**9 is a memory request, not bad input.
_factory_arg = st.one_of(
    st.floats(), st.sampled_from(_SPECIAL_FLOATS), st.integers(-10, 10**4), st.sampled_from([2**63, 2**70, -2**70]),
    st.floats().map(np.float64), st.sampled_from([np.int64(3), np.uint64(2**63), np.bool_(True), np.float32("nan")]),
    junk, st.lists(st.floats(), max_size=3), st.floats(0, 1), st.integers(1, 4), st.just("var"), st.just("gaussian"),
)


@_settings("factories")
@given(st.sampled_from(sorted(_FACTORIES)), st.lists(_factory_arg, max_size=4), st.integers(1, 6))
def test_oracle_and_target_factories_raise_only_their_error(name, args, size):
    TRIED["factories"] += 1
    factory, error, arity = _FACTORIES[name]
    try:
        obj = factory(*args[:arity])
    except RaydpError as exc:  # a wrong type too: its TypeError is still the factory's own error family
        assert isinstance(exc, error), exc
        return
    except TypeError as exc:  # missing required positional arguments: Python's own call check
        assert "required positional argument" in str(exc)
        return
    if error is OracleError:
        json.dumps(obj.identity(), allow_nan=False)
        records = obj.sample(np.random.default_rng(0), size)
        try:  # e.g. normal(mean=1e308): draws overflow; the sampler's probe refuses them the same way
            assert oracles.check_records(records, size).shape[0] == size
        except OracleError as exc:
            assert "NaN or infinite" in str(exc)
