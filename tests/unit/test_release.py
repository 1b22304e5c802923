"""Sample-Then-Respond: the estimate never sees the data, mismatched estimates are refused."""

import io
import re

import numpy as np
import pytest
from scipy import stats

import raydp
from raydp import oracles, targets
from raydp.errors import EstimateMismatchError, InvalidArgumentError
from raydp.engine.progress import Progress
from paths import REPO

N = 200


@pytest.fixture(scope="module")
def est():
    return raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), N, gamma=0.1, seed=3,
                                      progress=False)


def test_sampled_sensitivity_does_not_depend_on_the_private_data():
    rng = np.random.default_rng(0)
    a = raydp.sample_then_respond(rng.exponential(1.0, N), targets.mean(), raydp.Laplace(1.0),
                                  oracle=oracles.exponential(1.0), gamma=0.1, seed=9)
    b = raydp.sample_then_respond(rng.exponential(50.0, N) + 1e6, targets.mean(), raydp.Laplace(1.0),
                                  oracle=oracles.exponential(1.0), gamma=0.1, seed=9)
    assert a.sensitivity == b.sensitivity
    assert (a.epsilon, a.delta, a.gamma) == (1.0, 0.0, 0.1)


@pytest.mark.slow
def test_release_is_value_plus_laplace_noise(est):
    data = np.random.default_rng(1).exponential(1.0, N)
    mech = raydp.Laplace(2.0)
    draws = np.array([float(raydp.sample_then_respond(data, targets.mean(), mech, estimate=est).value)
                      for _ in range(300)])
    scale = est.sensitivity / 2.0
    # KS test of the noise against Laplace(0, Δ̂/ε); false-alarm rate 1e-4 (OpenDP noise is not seedable)
    assert stats.kstest(draws - data.mean(), "laplace", args=(0, scale)).pvalue > 1e-4


def test_one_estimate_serves_any_epsilon_and_calibration():
    est = raydp.estimate_sensitivity(targets.mean(), oracles.normal(0, 1, dim=3), 50, gamma=0.1, seed=1,
                                     mechanism=raydp.Gaussian(0.5, 1e-5), progress=False)
    data = np.random.default_rng(2).normal(size=(50, 3))
    r = raydp.sample_then_respond(data, targets.mean(), raydp.Gaussian(2.0, 1e-6, calibration="analytic"),
                                  estimate=est)
    assert r.value.shape == (3,) and (r.epsilon, r.delta) == (2.0, 1e-6)


def test_mismatched_estimates_are_refused(est):
    data = np.random.default_rng(1).exponential(1.0, N)
    with pytest.raises(EstimateMismatchError, match="l1"):
        raydp.sample_then_respond(data, targets.mean(), raydp.Gaussian(0.5, 1e-5), estimate=est)
    with pytest.raises(EstimateMismatchError, match="n=200"):
        raydp.sample_then_respond(data[:100], targets.mean(), raydp.Laplace(1.0), estimate=est)
    with pytest.raises(EstimateMismatchError, match="target"):
        raydp.sample_then_respond(data, targets.median(), raydp.Laplace(1.0), estimate=est)
    resp = [0.0, 0.5, 1.0]
    score = lambda db: -np.abs(np.median(db) - np.array(resp))  # noqa: E731
    e3 = raydp.estimate_sensitivity(score, oracles.uniform(0, 1), 21, gamma=0.2, seed=0, progress=False,
                                    mechanism=raydp.Exponential(1.0, resp))
    with pytest.raises(EstimateMismatchError, match="responses"):
        raydp.sample_then_respond(np.linspace(0, 1, 21), score, raydp.Exponential(1.0, [0.0, 0.25, 1.0]),
                                  estimate=e3)


def test_estimate_xor_sampling_arguments(est):
    data = np.ones(N)
    with pytest.raises(InvalidArgumentError, match="do not also give"):
        raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est, m=285)
    with pytest.raises(InvalidArgumentError, match="do not also give"):
        raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est, seed=3)
    with pytest.raises(InvalidArgumentError, match="either estimate"):
        raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0))


def test_gamma_next_to_an_estimate_is_the_gamma_expected(est):
    """An estimate whose plan gives another γ than the caller expects is refused (an edited plan gave a
    Δ̂ 7x smaller, visible only in the statement); the expected γ is accepted."""
    data = np.ones(N)
    r = raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est, gamma=0.1)
    assert r.gamma == 0.1
    with pytest.raises(EstimateMismatchError, match="gamma=0.1.*not the gamma=0.05"):
        raydp.sample_then_respond(data, targets.mean(), raydp.Laplace(1.0), estimate=est, gamma=0.05)


def test_statement_names_the_guarantee(est):
    r = raydp.sample_then_respond(np.ones(N), targets.mean(), raydp.Laplace(0.5), estimate=est)
    assert r.statement().startswith("(0.5, 0, 0.1)-random differential privacy")


def test_progress_lines_in_a_log_and_a_bar_on_a_terminal():
    log = io.StringIO()  # not a terminal: a line per interval and one at the end
    bar = Progress(total=1000, stream=log, interval=0, status=lambda: (3, 0.25))
    bar.update(250)
    bar.update(750)
    bar.close()
    lines = log.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert re.search(r"raydp: 250/1,000 pairs \(25\.0%\), [\d,]+ pairs/s, ETA [\d:]+, 3 failed, Δ̂ ≥ 0\.25 so far",
                     lines[0]), lines[0]
    assert re.search(r"raydp: 1,000/1,000 pairs \(100\.0%\).* 3 failed, Δ̂ = 0\.25$", lines[1]), lines[1]
    slow = io.StringIO()  # the default interval is 30 s: nothing before it but the final line
    bar = Progress(total=10, stream=slow, delay=0)
    bar.update(5)
    assert slow.getvalue() == ""
    bar.close()
    assert slow.getvalue().count("\n") == 1
    short = io.StringIO()  # a run shorter than the default delay (2 s) shows nothing at all
    bar = Progress(total=10, stream=short)
    bar.update(10)
    bar.close()
    assert short.getvalue() == ""
    off = io.StringIO()
    Progress(total=10, stream=off, enabled=False, interval=0).update(5)
    assert off.getvalue() == ""

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    bar = Progress(total=100, stream=tty, status=lambda: (0, None), delay=0)
    bar.update(100)
    bar.close()
    assert "100/100" in tty.getvalue() and "\r" in tty.getvalue()  # tqdm's live bar


def test_readme_python_example_runs():
    text = (REPO / "README.md").read_text()
    code = re.search(r"## Python in ten lines\n\n```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, "README.md", "exec"), {})


def test_statement_and_ledger_name_the_gaussian_calibration(tmp_path):
    data = np.random.default_rng(0).exponential(1.0, 100)
    est = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 100, mechanism=raydp.Gaussian(2.0, 1e-6),
                                     gamma=0.1, seed=1, progress=False)
    ledger = raydp.Ledger.create(tmp_path / "l.json", epsilon_total=5.0, delta_total=1e-5)
    for calibration in ("analytic", "classic"):
        eps = 2.0 if calibration == "analytic" else 0.5
        r = raydp.sample_then_respond(data, targets.mean(), raydp.Gaussian(eps, 1e-6, calibration=calibration),
                                      estimate=est, ledger=ledger)
        assert f"gaussian mechanism ({calibration} calibration)" in r.statement()
    assert [e["calibration"] for e in ledger.entries()] == ["analytic", "classic"]
