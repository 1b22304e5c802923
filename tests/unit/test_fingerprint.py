"""A Δ̂ is matched to its target by content, not by name (issue 19, item 1).

Before: a lambda, a ``functools.partial`` or a callable object was described by its qualified name
only, so a Δ̂ sampled for ``lambda d: d.mean()`` was accepted for ``lambda d: 1000 * d.mean()``
(measured: Δ̂ 0.0406 used where 40.6 was due). Every test below fails on that code.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import raydp
from raydp import SamplerOptions, oracles, targets
from raydp.errors import EstimateMismatchError, StoreError, TargetError
from raydp.fingerprint import content_digest
from raydp.identity import check_reusable, describe

N = 200
DATA = np.random.default_rng(0).exponential(1.0, N)  # the private data


def _estimate(target, **kw):
    kw.setdefault("gamma", 0.1)
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, seed=1, progress=False, **kw)


def _release(target, est):
    return raydp.sample_then_respond(DATA, target, raydp.Laplace(1.0), estimate=est)


# ----------------------------------------------------------------------------- the three cases


def test_an_estimate_for_one_lambda_is_refused_for_another():
    est = _estimate(lambda d: np.array([d.mean()]))
    big = lambda d: np.array([1000 * d.mean()])  # noqa: E731 - the point is a second lambda
    assert _estimate(big).sensitivity == pytest.approx(1000 * est.sensitivity)  # what was at stake
    with pytest.raises(EstimateMismatchError, match="other code, constants, arguments or state"):
        _release(big, est)
    same = lambda d: np.array([d.mean()])  # noqa: E731 - the same code: the same function
    assert _release(same, est).sensitivity == est.sensitivity


def stat(d, scale=1.0):
    return np.array([scale * np.mean(d)])


def test_a_store_made_for_one_partial_is_refused_for_another(tmp_path):
    uri = str(tmp_path / "s")
    _estimate(functools.partial(stat, scale=1), gamma=None, m=300, store=uri)
    with pytest.raises(StoreError, match="holds a different run .*functools:partial with other code"):
        _estimate(functools.partial(stat, scale=1000), gamma=None, m=600, store=uri, resume=True)
    stored = raydp.load_estimate(uri)
    with pytest.raises(EstimateMismatchError, match="functools:partial"):
        _release(functools.partial(stat, scale=1000), stored)
    assert _release(functools.partial(stat, scale=1), stored).sensitivity == stored.sensitivity
    resumed = _estimate(functools.partial(stat, scale=1), gamma=None, m=600, store=uri, resume=True)
    assert resumed.plan.m == 600


def test_private_estimator_refuses_an_estimate_made_for_another_transform():
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.linear_model import Ridge

    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)

    def rows(k):
        X = rng.normal(size=(k, 2))
        return np.column_stack([X, X @ [1.0, -1.0] + 0.1 * rng.normal(size=k)])

    public, private = rows(400), rows(100)

    def model(func, inverse, estimate=None):
        est = TransformedTargetRegressor(Ridge(), func=func, inverse_func=inverse, check_inverse=False)
        return PrivateEstimator(est, oracle=oracles.bootstrap(public), epsilon=1.0, gamma=0.25, m=60, estimate=estimate, options=SamplerOptions(seed=0, backend="local"))

    first = model(lambda y: y, lambda y: y).fit(private[:, :2], private[:, 2])
    with pytest.raises(EstimateMismatchError, match=r"estimator\.func\.content"):
        model(lambda y: 1000 * y, lambda y: y / 1000, first.estimate_).fit(private[:, :2], private[:, 2])
    again = model(lambda y: y, lambda y: y, first.estimate_).fit(private[:, :2], private[:, 2])
    assert again.estimate_ is first.estimate_


# ----------------------------------------------------------------------------- what the content covers

SCALE = 1.0


def test_a_global_the_code_reads_is_part_of_it():
    global SCALE
    f = lambda d: np.array([SCALE * d.mean()])  # noqa: E731
    est = _estimate(f)
    SCALE = 1000.0
    try:
        with pytest.raises(EstimateMismatchError):
            _release(f, est)  # the very same function object, now computing something else
    finally:
        SCALE = 1.0
    assert _release(f, est).sensitivity == est.sensitivity


class Scaled:
    def __init__(self, scale):
        self.scale = scale

    def __call__(self, d):
        return np.array([self.scale * np.mean(d)])


def _scaled_closure(scale):
    return lambda d: np.array([scale * np.mean(d)])


@pytest.mark.parametrize("make", [Scaled, _scaled_closure, lambda s: functools.partial(stat, scale=s),
                                  lambda s: (lambda d, k=s: np.array([k * np.mean(d)]))],
                         ids=["callable object", "closure cell", "partial", "default argument"])
def test_state_arguments_closures_and_defaults_count(make):
    assert content_digest(make(1.0)) == content_digest(make(1.0))
    assert content_digest(make(1.0)) != content_digest(make(1000.0))
    est = _estimate(make(1.0))
    with pytest.raises(EstimateMismatchError):
        _release(make(1000.0), est)
    assert _release(make(1.0), est).sensitivity == est.sensitivity


def test_moving_a_function_in_its_file_changes_nothing():
    src = "import numpy as np\ndef f(d):\n    return np.array([d.mean()])\n"
    a, b = {}, {}
    exec(compile(src, "one.py", "exec"), a)
    exec(compile("\n" * 40 + src, "other.py", "exec"), b)
    assert content_digest(a["f"]) == content_digest(b["f"])
    c = {}
    exec(compile(src.replace("d.mean()", "d.sum()"), "one.py", "exec"), c)
    assert content_digest(a["f"]) != content_digest(c["f"])


def test_library_functions_are_named_not_hashed_and_builtins_keep_their_identity():
    assert content_digest(np.mean) == content_digest(np.mean) is not None
    assert content_digest(np.mean) != content_digest(np.median)
    # built-in targets and oracles describe themselves: stores and estimates made before keep working
    assert describe(targets.mean()) == {"name": "mean", "params": {}}
    assert describe(oracles.exponential(2.0)) == {"name": "exponential", "params": {"rate": 2.0}}


HELPER = """
import functools, json, sys
import numpy as np
from raydp.identity import describe
sys.path.insert(0, {tests!r})
import test_fingerprint as t
print(json.dumps([describe(t.stat), describe(functools.partial(t.stat, scale=3)), describe(t.Scaled({{"b", "a", "c"}}))]))
"""


@pytest.mark.subprocess
def test_the_description_is_the_same_in_every_process():
    """What a store or a ledger records must be recomputable elsewhere: two fresh interpreters with
    different hash seeds (set order) give the same descriptions, and they equal this process's."""
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", HELPER.format(tests=str(Path(__file__).parent))],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1]
    assert '"content": null' not in outs[0]


# ----------------------------------------------------------------------------- what cannot be read


class Locked:
    """A target holding a lock: its content cannot be read (a lock does not pickle), so it is not
    statically verifiable. It pickles without the lock (a fresh one on the other side), so it can be
    sent to the sealed process that evaluates it on the private data."""

    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, d):
        with self.lock:
            return np.array([np.mean(d)])

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self.lock = threading.Lock()


class Unpicklable(Locked):
    def __getstate__(self):
        return {"lock": self.lock}


def test_a_target_without_a_fingerprint_is_reused_only_after_its_witnesses_were_replayed(tmp_path):
    r = raydp.sample_then_respond(DATA, Locked(), raydp.Laplace(1.0), oracle=oracles.exponential(1.0),
                                  gamma=0.1, seed=1)
    assert np.isfinite(r.sensitivity)
    est = _estimate(Locked())
    assert "unfingerprintable" in est.target
    assert _release(Locked(), est).replay.pairs >= 1  # replay decided, and accepted: the same function
    with pytest.raises(EstimateMismatchError, match=r"not statically verifiable .*replay is off"):
        raydp.sample_then_respond(DATA, Locked(), raydp.Laplace(1.0), estimate=est, replay=False)
    with pytest.raises(StoreError, match=r"not statically verifiable .*replay is off"):
        _estimate(Locked(), store=str(tmp_path / "s"), replay=False)
    assert not (tmp_path / "s").exists()


def test_a_target_that_cannot_be_pickled_is_refused_before_the_private_data_is_read():
    """The private evaluation runs in a sealed process; a target that cannot be sent there is refused
    in one line, and nothing reaches the data."""
    with pytest.raises(TargetError, match=r"cannot be sent to the sealed process .*picklable"):
        raydp.sample_then_respond(DATA, Unpicklable(), raydp.Laplace(1.0), oracle=oracles.exponential(1.0),
                                  gamma=0.1, seed=1)


class LockedWithIdentity(Locked):
    def identity(self):
        return {"name": "locked-mean", "params": {}}


def test_an_identity_method_makes_it_reusable():
    est = _estimate(LockedWithIdentity())
    assert _release(LockedWithIdentity(), est).sensitivity == est.sensitivity


# ----------------------------------------------------------------------------- imports in a function's body
#
# A module imported inside the target's body (``def target(d): import mylib; return mylib.f(d)``) was not
# part of the fingerprint: mylib upgraded, or edited, and the stored Δ̂ was still accepted statically.


@pytest.fixture
def fresh_modules():
    """Restores sys.path after the test, removes the test's modules (``fp_inner_*``) from sys.modules and
    clears the fingerprint's caches of installed distributions (which fake ones entered)."""
    import raydp.fingerprint as fp

    path = list(sys.path)

    def clear():
        importlib.invalidate_caches()
        fp._distributions.cache_clear()
        fp.library_version.cache_clear()

    yield clear
    sys.path[:] = path
    for name in [m for m in sys.modules if m.startswith("fp_inner_")]:
        del sys.modules[name]
    clear()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _installed(site: Path, name: str, version: str) -> None:
    """A distribution ``name`` installed in ``site``: a package and its ``*.dist-info`` (METADATA)."""
    _write(site / name / "__init__.py", "def scale(x):\n    return 1.0 * x\n")
    info = site / f"{name}-1.0.dist-info"  # the directory keeps its name: the METADATA says the version
    _write(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    _write(info / "top_level.txt", f"{name}\n")


def test_an_installed_library_imported_in_the_body_counts_by_its_version(tmp_path, monkeypatch, fresh_modules):
    import raydp.fingerprint as fp

    site = tmp_path / "site"
    _installed(site, "fp_inner_lib", "1.0")
    sys.path.insert(0, str(site))
    monkeypatch.setattr(fp, "_LIBRARY_ROOTS", fp._LIBRARY_ROOTS + (str(site) + os.sep,))  # site-packages
    fresh_modules()

    def target(d):
        import fp_inner_lib

        return np.array([fp_inner_lib.scale(np.mean(d))])

    first = content_digest(target)
    assert first is not None and "fp_inner_lib" not in sys.modules  # found, not imported, to fingerprint it
    import fp_inner_lib  # noqa: F401 - imported or not, the same fingerprint

    assert content_digest(target) == first
    _write(site / "fp_inner_lib-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: fp_inner_lib\nVersion: 1.1\n")
    fresh_modules()
    assert "fp_inner_lib==1.1" in fp.library_version("fp_inner_lib")
    assert content_digest(target) != first  # upgraded 1.0 -> 1.1: another target
    _write(site / "fp_inner_lib-1.0.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: fp_inner_lib\nVersion: 1.0\n")
    fresh_modules()
    assert content_digest(target) == first


USER_MODULE_BODIES = {
    "import": "import fp_inner_user\n    return fp_inner_user.K * d",
    "from-import": "from fp_inner_user import K\n    return K * d",
    "import_module": "import importlib\n    return importlib.import_module('fp_inner_user').K * d",
    "__import__": "return __import__('fp_inner_user').K * d",
    "nested function": "def inner():\n        import fp_inner_user\n        return fp_inner_user.K\n    return inner() * d",
    "class in the body": "class C:\n        from fp_inner_user import K\n    return C.K * d",
}


@pytest.mark.parametrize("body", list(USER_MODULE_BODIES.values()), ids=list(USER_MODULE_BODIES))
def test_a_users_module_imported_in_the_body_counts_by_its_source(tmp_path, body, fresh_modules):
    _write(tmp_path / "fp_inner_user.py", "K = 1.0\n")
    sys.path.insert(0, str(tmp_path))
    fresh_modules()
    ns = {"__name__": "notebook_cell"}
    exec(f"def target(d):\n    {body}\n", ns)
    target = ns["target"]
    first = content_digest(target)
    assert first is not None
    assert target(2.0) == 2.0
    assert content_digest(target) == first  # now imported: the same
    _write(tmp_path / "fp_inner_user.py", "K = 1000.0\n")
    assert content_digest(target) != first  # the helper edited: another target
    _write(tmp_path / "fp_inner_user.py", "K = 1.0\n")
    assert content_digest(target) == first


def _user_package(root: Path) -> None:
    _write(root / "fp_inner_pkg" / "__init__.py", """
        def from_init(d):
            from . import x
            return x.K * d
    """)
    _write(root / "fp_inner_pkg" / "x.py", "K = 1.0\n")
    _write(root / "fp_inner_pkg" / "sub" / "__init__.py", "")
    _write(root / "fp_inner_pkg" / "sub" / "mod.py", """
        def sibling(d):
            from . import y
            return y.K * d

        def parent(d):
            from .. import x
            return x.K * d

        def attribute(d):
            from ..x import K
            return K * d

        def absolute(d):
            import fp_inner_pkg.x
            return fp_inner_pkg.x.K * d
    """)
    _write(root / "fp_inner_pkg" / "sub" / "y.py", "K = 1.0\n")


@pytest.mark.parametrize("name, edited", [("sub.mod:sibling", "sub/y.py"), ("sub.mod:parent", "x.py"),
                                          ("sub.mod:attribute", "x.py"), ("sub.mod:absolute", "x.py"),
                                          (":from_init", "x.py")])
def test_a_relative_import_in_the_body_counts(tmp_path, name, edited, fresh_modules):
    _user_package(tmp_path)
    sys.path.insert(0, str(tmp_path))
    fresh_modules()
    module, _, fn = name.partition(":")
    target = getattr(importlib.import_module("fp_inner_pkg" + (f".{module}" if module else "")), fn)
    first = content_digest(target)
    assert first is not None
    assert target(2.0) == 2.0
    assert content_digest(target) == first
    (tmp_path / "fp_inner_pkg" / edited).write_text("K = 1000.0\n")
    assert content_digest(target) != first
    (tmp_path / "fp_inner_pkg" / edited).write_text("K = 1.0\n")
    assert content_digest(target) == first


def test_a_module_imported_in_the_body_that_cannot_be_found_is_not_statically_verifiable():
    def target(d):
        import fp_inner_no_such_module  # noqa: F401

        return d

    assert content_digest(target) is None
    described = describe(target)
    assert described["content"] is None
    assert "fp_inner_no_such_module" in described["unfingerprintable"]
    with pytest.raises(EstimateMismatchError, match="not statically verifiable"):
        check_reusable(described, "target", EstimateMismatchError, "a stored estimate")


def test_a_relative_import_beyond_the_package_is_not_statically_verifiable():
    ns = {"__name__": "notebook_cell"}
    exec("def target(d):\n    from . import x\n    return x.K * d\n", ns)
    assert content_digest(ns["target"]) is None


# Functions without imports in their body: the fingerprints they had before imports counted (computed
# with raydp/fingerprint.py as it was; bytecode is the interpreter's, so for CPython 3.11 only).
FACTOR = 3


def _no_imports(d, k=2):
    def inner(x):
        return x * FACTOR

    return inner(d) + k


_no_imports_lambda = lambda d: [d, FACTOR, "s", 1.5]  # noqa: E731


class _NoImports:
    def __init__(self, k):
        self.k = k

    def __call__(self, d):
        return self.k * d + FACTOR


BEFORE_INNER_IMPORTS = {  # CPython 3.11
    "function": "e69f5d5393047f0670e9efdec26b6f4b14da795db34936bff9658d64d33c30ae",
    "lambda": "09ba6cea17b137a6bb83db96080a7c8a80683b1767b74474370939f7fa42e6c3",
    "object": "221e4614d0c8c4279d9ec3aceb59569e9b42d1eff000474de33e3e30156edcde",
    "partial": "9ccd878d1c0f80006ac79cdcc6f8a38ac964ede9c5eaedb5b960208de6bac324",
}
NO_IMPORTS = {"function": lambda: _no_imports, "lambda": lambda: _no_imports_lambda,
              "object": lambda: _NoImports(2), "partial": lambda: functools.partial(_no_imports, k=5)}


@pytest.mark.parametrize("kind", list(NO_IMPORTS))
def test_a_function_without_imports_in_its_body_keeps_its_fingerprint(kind, monkeypatch):
    import raydp.fingerprint as fp

    obj = NO_IMPORTS[kind]()
    digest = content_digest(obj)
    if sys.version_info[:2] == (3, 11) and sys.implementation.name == "cpython":
        assert digest == BEFORE_INNER_IMPORTS[kind]
    monkeypatch.setattr(fp, "_INNER_IMPORTS", False)
    assert content_digest(obj) == digest


@pytest.mark.parametrize("obj", [stat, Scaled(2.0), functools.partial(stat, scale=3), describe, np.mean],
                         ids=["function", "object", "partial", "raydp function", "numpy function"])
def test_without_imports_in_the_body_the_switch_changes_nothing(obj, monkeypatch):
    import raydp.fingerprint as fp

    on = content_digest(obj)
    monkeypatch.setattr(fp, "_INNER_IMPORTS", False)
    assert content_digest(obj) == on is not None


INNER_HELPER = """
import json, sys
sys.path.insert(0, {root!r})
from raydp.fingerprint import content_digest
from fp_inner_pkg.sub import mod
names = ("sibling", "parent", "attribute", "absolute")
print(json.dumps([content_digest(getattr(mod, n)) for n in names] + [sorted(m for m in sys.modules if m.startswith("fp_inner_pkg"))]))
"""


@pytest.mark.subprocess
def test_imports_in_the_body_give_the_same_fingerprint_in_every_process(tmp_path, fresh_modules):
    """Fresh interpreters (other hash seeds, the imported modules not imported yet) agree with this process,
    where they are imported."""
    _user_package(tmp_path)
    sys.path.insert(0, str(tmp_path))
    fresh_modules()
    mod = importlib.import_module("fp_inner_pkg.sub.mod")
    here = [content_digest(getattr(mod, n)) for n in ("sibling", "parent", "attribute", "absolute")]
    for n in ("sibling", "parent", "attribute", "absolute"):
        getattr(mod, n)(1.0)  # every module they import is imported here
    assert content_digest(mod.sibling) == here[0]
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", INNER_HELPER.format(root=str(tmp_path))],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        *digests, loaded = json.loads(r.stdout)
        assert digests == here and None not in here
        assert loaded == ["fp_inner_pkg", "fp_inner_pkg.sub", "fp_inner_pkg.sub.mod"]  # x, y not imported there
