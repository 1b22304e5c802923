"""The paper-figure jobs (Figure 4: jobs/example6.py, Figure 7: jobs/kde_bernstein.py) as real
processes at tiny sizes (in-process backend), the direction of each paper claim, and their plots."""

import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import raydp
from job_util import load_job, run_job
from raydp.plan import min_gamma

from paths import REPO as ROOT
JOBS = ROOT / "jobs"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
EX6_COLUMNS = ["m", "gamma", "k", "repeats", "sensitivity_mean", "sensitivity_sd", "delta_star", "abs_err_mean"]
KDE_COLUMNS = ["curve", "gamma", "m", "k", "sensitivity", "epsilon", "repeats", "tv_mean", "tv_sd", "tv_se",
               "approx_tv"]






# ----------------------------------------------------------------------------- Figure 4


@pytest.fixture(scope="module")
def example6_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ex6")
    out = tmp / "out"
    code, stdout, err = run_job("example6.py", "--ms", 500, 2000, 8000, "--repeats", 5, "--points", 6,
                                "--backend", "local", "--out", out, "--quiet", cwd=tmp)
    assert code == 0, err
    return out, stdout


def test_example6_outputs_and_table_shape(example6_run):
    out, stdout = example6_run
    for suffix in (".parquet", ".md", ".png"):
        assert (out / f"example6{suffix}").is_file()
    assert (out / "example6.png").read_bytes()[:8] == PNG_MAGIC
    table = pq.read_table(out / "example6.parquet")
    assert table.column_names == EX6_COLUMNS and table.num_rows == 3 * 6
    rows = table.to_pylist()
    for m in (500, 2000, 8000):
        mine = [r for r in rows if r["m"] == m]
        gammas = [r["gamma"] for r in mine]
        # each m's grid runs from its own smallest certifiable γ up to 0.08
        assert gammas[0] == pytest.approx(min_gamma(m), rel=1e-6) and gammas[-1] == pytest.approx(0.08)
        assert gammas == sorted(gammas)
        for r in mine:
            assert r["repeats"] == 5 and r["k"] == raydp.make_plan(m=m, gamma=r["gamma"]).k
            assert r["delta_star"] == pytest.approx(math.log(1 / r["gamma"]) / 100)  # n = 100, λ = 1
            assert r["sensitivity_mean"] > 0 and r["sensitivity_sd"] >= 0
        # a larger γ is a smaller order statistic of the same samples
        means = [r["sensitivity_mean"] for r in mine]
        assert all(x >= y for x, y in zip(means, means[1:]))
    md = (out / "example6.md").read_text()
    assert "| " + " | ".join(EX6_COLUMNS) + " |" in md and md in stdout


def test_example6_figure4_claim_estimates_approach_exact_sensitivity(example6_run):
    out, stdout = example6_run
    rows = pq.read_table(out / "example6.parquet").to_pylist()
    at_max = {r["m"]: r for r in rows if r["gamma"] == pytest.approx(0.08)}
    errs = [at_max[m]["abs_err_mean"] for m in (500, 2000, 8000)]
    assert errs[0] > errs[1] > errs[2]  # Δ̂ → Δ* as m grows
    assert at_max[8000]["abs_err_mean"] / at_max[8000]["delta_star"] < 0.3
    assert "decreases as m grows" in stdout


def test_example6_plot_redraws_from_parquet(example6_run, tmp_path):
    plot_example6 = load_job("_plots").plot_example6

    out, _ = example6_run
    path = plot_example6(pq.read_table(out / "example6.parquet"), tmp_path / "again.png")
    assert Path(path).read_bytes()[:8] == PNG_MAGIC


def test_example6_helpers_and_bad_flags(tmp_path):
    job = load_job("example6")
    assert job.delta_star(0.01, 100) == pytest.approx(math.log(100) / 100)
    grid = job.gamma_grid(2000, 0.08, 15)
    assert len(grid) == 15 and grid[0] >= min_gamma(2000) and grid[-1] == pytest.approx(0.08)
    for g in grid:
        raydp.make_plan(m=2000, gamma=g)  # every grid point is admissible
    assert job.gamma_grid(300, 0.08, 15) == []  # m=300 certifies only γ ≥ 0.10
    assert len({job.repeat_seed(0, 500, r) for r in range(50)}) == 50
    code, _, err = run_job("example6.py", "--ms", 300, "--backend", "local", "--out", tmp_path, cwd=tmp_path)
    assert code == 2 and "no m certifies any gamma <= 0.08" in err and "Traceback" not in err


# ----------------------------------------------------------------------------- Figure 7


@pytest.fixture(scope="module")
def kde_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kde")
    out = tmp / "out"
    # n = 500 keeps the noise (∝ 1/n) well above the approximation error, so 200 cheap releases
    # separate the curves clearly; m = 2000 certifies γ = 0.1 but not 0.01 (γ_lo = 0.041).
    code, stdout, err = run_job("kde_bernstein.py", "--m", 2000, "--n", 500, "--gammas", 0.01, 0.1,
                                "--repeats", 200, "--epsilons", 0.05, 0.2, "--grid", 501, "--backend", "local",
                                "--out", out, "--quiet", cwd=tmp)
    assert code == 0, err
    return out, stdout


def test_kde_outputs_and_table_shape(kde_run):
    out, stdout = kde_run
    assert "gamma=0.01 skipped" in stdout
    for suffix in (".parquet", ".md", ".png"):
        assert (out / f"kde_bernstein{suffix}").is_file()
    assert (out / "kde_bernstein.png").read_bytes()[:8] == PNG_MAGIC
    table = pq.read_table(out / "kde_bernstein.parquet")
    assert table.column_names == KDE_COLUMNS
    rows = table.to_pylist()
    assert [(r["curve"], r["gamma"], r["epsilon"]) for r in rows] == [
        ("global", None, 0.05), ("global", None, 0.2), ("sampled", 0.1, 0.05), ("sampled", 0.1, 0.2)]
    job = load_job("kde_bernstein")
    bound = job.global_sensitivity(500, 0.2)
    assert bound == pytest.approx(1 / (500 * 0.2 * math.sqrt(2 * math.pi)))
    for r in rows:
        assert r["repeats"] == 200 and r["tv_mean"] > r["approx_tv"] > 0
        assert r["tv_se"] == pytest.approx(r["tv_sd"] / math.sqrt(200))
        if r["curve"] == "global":
            assert r["sensitivity"] == bound and r["m"] is None
        else:
            assert r["m"] == 2000 and r["k"] == raydp.make_plan(m=2000, gamma=0.1).k
    md = (out / "kde_bernstein.md").read_text()
    assert "| epsilon | global | gamma=0.1 | bernstein_approx |" in md and md in stdout


def test_kde_sample_is_stored_and_below_the_global_bound(kde_run):
    out, _ = kde_run
    (store,) = [p for p in out.iterdir() if p.name.startswith("store-")]
    est = raydp.load_estimate(str(store), gamma=0.1)
    assert est.plan.m == 2000 and est.failures == 0 and est.target["params"]["bandwidth"] == 0.2
    bound = load_job("kde_bernstein").global_sensitivity(500, 0.2)
    # every sampled G respects the derived bound, and the concentrated records keep Δ̂ well below it
    assert est.sample.max() <= bound * (1 + 1e-12)
    assert est.sensitivity < 0.9 * bound


def test_kde_figure7_claim_sampled_beats_global_at_small_epsilon(kde_run):
    out, stdout = kde_run
    rows = {(r["curve"], r["epsilon"]): r for r in pq.read_table(out / "kde_bernstein.parquet").to_pylist()}
    glob, samp = rows[("global", 0.05)], rows[("sampled", 0.05)]
    gap = glob["tv_mean"] - samp["tv_mean"]
    assert gap > 3 * math.hypot(glob["tv_se"], samp["tv_se"])
    # with less privacy every curve moves toward the Bernstein approximation error
    for curve in ("global", "sampled"):
        assert rows[(curve, 0.2)]["tv_mean"] < rows[(curve, 0.05)]["tv_mean"]
    assert "(< global" in stdout


def test_kde_refuses_when_no_gamma_is_admissible(tmp_path):
    code, _, err = run_job("kde_bernstein.py", "--m", 500, "--gammas", 0.01, "--backend", "local",
                           "--out", tmp_path / "o", cwd=tmp_path)
    assert code == 2 and "no requested gamma is admissible with m=500" in err and "Traceback" not in err


def test_kde_tv_helper():
    job = load_job("kde_bernstein")
    grid = np.linspace(0, 1, 1001)
    assert job.total_variation(np.ones_like(grid), np.zeros_like(grid), grid) == pytest.approx(0.5)
    assert job.total_variation(2 * grid, 2 * grid, grid) == 0.0


def test_kde_plot_redraws_from_parquet(kde_run, tmp_path):
    plot_kde_tv = load_job("_plots").plot_kde_tv

    out, _ = kde_run
    path = plot_kde_tv(pq.read_table(out / "kde_bernstein.parquet"), tmp_path / "again.png")
    assert Path(path).read_bytes()[:8] == PNG_MAGIC
