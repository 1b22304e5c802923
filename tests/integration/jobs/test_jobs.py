"""The jobs under jobs/ as real processes (tiny sizes, in-process backend), and raydp.plots."""

import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import raydp
from job_util import load_job, run_job
from raydp import oracles, targets
from raydp.errors import InvalidArgumentError

from paths import REPO as ROOT
JOBS = ROOT / "jobs"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVM_COLUMNS = ["d", "gamma", "m", "k", "sensitivity", "global_bound", "failures", "seconds"]






# ----------------------------------------------------------------------------- svm_sensitivity


def test_svm_job_tiny_end_to_end_and_figure5_direction(tmp_path):
    out = tmp_path / "svm"
    # m=150 certifies gamma >= 0.133: 0.15 is kept, 0.05 and 0.1 are skipped with a note
    code, stdout, err = run_job("svm_sensitivity.py", "--dims", 8, 16, "--m", 150, "--backend", "local",
                                "--out", out, "--quiet", cwd=tmp_path)
    assert code == 0, err
    assert "gamma=0.05 skipped" in stdout and "gamma=0.1 skipped" in stdout
    for suffix in (".parquet", ".md", ".png"):
        assert (out / f"svm_sensitivity{suffix}").is_file()
    assert (out / "svm_sensitivity.png").read_bytes()[:8] == PNG_MAGIC
    for d in (8, 16):
        assert (out / f"d={d}" / "meta.json").is_file()  # one store per d

    table = pq.read_table(out / "svm_sensitivity.parquet")
    assert table.column_names == SVM_COLUMNS
    rows = table.to_pylist()
    assert [(r["d"], r["gamma"]) for r in rows] == [(8, 0.15), (16, 0.15)]
    for r in rows:
        assert r["m"] == 150 and r["k"] == raydp.make_plan(m=150, gamma=0.15).k
        assert r["failures"] == 0 and math.isfinite(r["sensitivity"]) and r["sensitivity"] > 0
        # Figure 5: the sampled sensitivity is far below the analytic global bound
        assert r["global_bound"] == pytest.approx(2 + 2 * 3 * math.sqrt(r["d"]))
        assert r["global_bound"] / r["sensitivity"] > 100
    md = (out / "svm_sensitivity.md").read_text()
    assert md.startswith("Made ") and " from commit " in md.splitlines()[0]  # the report's stamp
    assert md.splitlines()[4] == "| " + " | ".join(SVM_COLUMNS) + " |" and len(md.splitlines()) == 8
    assert md in stdout  # the table is printed

    # a re-run reuses the stored samples: same numbers, no new pairs
    code, stdout2, err = run_job("svm_sensitivity.py", "--dims", 8, 16, "--m", 150, "--backend", "local",
                                 "--out", out, "--quiet", "--no-plot", cwd=tmp_path)
    assert code == 0, err
    again = pq.read_table(out / "svm_sensitivity.parquet").to_pylist()
    assert [r["sensitivity"] for r in again] == [r["sensitivity"] for r in rows]


def test_svm_job_gammas_come_from_one_stored_sample(tmp_path):
    out = tmp_path / "svm"
    code, _, err = run_job("svm_sensitivity.py", "--dims", 2, "--m", 120, "--gammas", 0.3, 0.2, "--backend",
                           "local", "--out", out, "--quiet", "--no-plot", cwd=tmp_path)
    assert code == 0, err
    rows = pq.read_table(out / "svm_sensitivity.parquet").to_pylist()
    assert [r["gamma"] for r in rows] == [0.3, 0.2]
    full = raydp.load_estimate(str(out / "d=2"))
    assert full.plan.m == 120 and full.sample.size == 120
    for r in rows:  # Δ̂(γ) is the k-th smallest of the same 120 G values
        assert r["sensitivity"] == np.sort(full.sample)[r["k"] - 1]
    assert rows[0]["sensitivity"] <= rows[1]["sensitivity"]  # smaller γ, larger order statistic


def test_svm_job_refuses_when_no_gamma_is_admissible(tmp_path):
    code, out, err = run_job("svm_sensitivity.py", "--dims", 2, "--m", 60, "--backend", "local",
                             "--out", tmp_path / "svm", cwd=tmp_path)
    assert code == 2
    assert "no requested gamma is admissible with m=60" in err and "Traceback" not in err


def test_global_bound_readings():
    job = load_job("svm_sensitivity")
    assert job.global_bound(8) == pytest.approx(2 + 6 * math.sqrt(8))  # ≈ 18.97
    assert job.global_bound(64) == pytest.approx(50.0)
    for d in (2, 8, 16, 32, 64, 1000):  # the paper reading dominates our derivation for C=3, n=1000
        assert job.global_bound(d, reading="derived") <= job.global_bound(d)
    with pytest.raises(ValueError):
        job.global_bound(8, reading="nope")


# ----------------------------------------------------------------------------- precompute_delta


def test_precompute_job_writes_a_reusable_store(tmp_path):
    store = tmp_path / "st"
    args = ["--m", 200, "--n", 50, "--backend", "local", "--store", store, "--quiet"]
    code, out, err = run_job("precompute_delta.py", *args, "--plot", tmp_path / "cdf.png", cwd=tmp_path)
    assert code == 0, err
    assert f"store        {store}" in out and "m=200 k=200" in out
    assert (tmp_path / "cdf.png").read_bytes()[:8] == PNG_MAGIC
    est = raydp.load_estimate(str(store))
    assert est.plan.m == 200 and est.n == 50 and est.target["name"] == "mean"
    assert est.oracle == {"name": "exponential", "params": {"rate": 1.0}}

    code, _, err = run_job("precompute_delta.py", *args, cwd=tmp_path)  # store exists, no --resume
    assert code == 2 and "--resume" in err and "Traceback" not in err
    code, out, err = run_job("precompute_delta.py", *args, "--resume", cwd=tmp_path)
    assert code == 0, err
    assert f"{est.sensitivity:.6g}" in out


def test_precompute_job_any_target_and_oracle(tmp_path):
    code, out, err = run_job(
        "precompute_delta.py", "--target", "raydp.targets:quantile", "--target-args", '{"q": 0.9}',
        "--oracle", "raydp.oracles:uniform", "--oracle-args", '{"low": 0, "high": 1}', "--n", 30,
        "--m", 150, "--gamma", 0.2, "--backend", "local", "--out", tmp_path / "o", "--json", "--quiet",
        cwd=tmp_path)
    assert code == 0, err
    import json

    summary = json.loads(out)
    assert summary["plan"]["k"] < 150 and summary["plan"]["gamma"] == 0.2
    assert summary["store"].endswith("precompute-quantile")
    assert raydp.load_estimate(summary["store"]).target == {"name": "quantile", "params": {"q": 0.9}}


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.subprocess
def test_precompute_job_backend_ray_starts_an_embedded_ray(tmp_path):
    code, out, err = run_job("precompute_delta.py", "--m", 100, "--n", 20, "--num-cpus", 1, "--out",
                             tmp_path, "--backend", "ray", cwd=tmp_path, timeout=240)
    assert code == 0, err
    assert "embedded local Ray on 127.0.0.1" in err
    local = raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 20, m=100, seed=0,
                                       progress=False)
    assert f"{local.sensitivity:.6g}" in out  # same G values whatever the backend


def test_precompute_job_default_backend_keeps_a_small_run_in_process(tmp_path):
    code, out, err = run_job("precompute_delta.py", "--m", 100, "--n", 20, "--out", tmp_path, "--json",
                             cwd=tmp_path, timeout=240)
    assert code == 0, err
    assert "backend auto" in err
    assert json.loads(out.strip().splitlines()[-1])["backend"].startswith("local (auto")


# ----------------------------------------------------------------------------- raydp.plots


@pytest.fixture(scope="module")
def small_estimate():
    return raydp.estimate_sensitivity(targets.mean(), oracles.exponential(1.0), 100, gamma=0.1, seed=3,
                                      keep_sample=True, progress=False)


def test_plot_cdf_writes_a_png(small_estimate, tmp_path):
    from raydp.plots import plot_cdf

    path = plot_cdf(small_estimate, tmp_path / "sub" / "cdf.png")
    assert Path(path).read_bytes()[:8] == PNG_MAGIC
    # failures (+inf) are noted, not drawn; an infinite Δ̂ still plots
    g = small_estimate.sample.copy()
    g[:50] = np.inf
    broken = replace(small_estimate, sample=g, failures=50, sensitivity=float("inf"))
    assert Path(plot_cdf(broken, tmp_path / "fail.png")).read_bytes()[:8] == PNG_MAGIC


def test_plot_cdf_needs_the_sample(small_estimate, tmp_path):
    from raydp.plots import plot_cdf

    bare = replace(small_estimate, sample=None, top=small_estimate.top[:1])
    with pytest.raises(InvalidArgumentError, match="keep_sample=True"):
        plot_cdf(bare, tmp_path / "x.png")


def test_plot_cdf_without_matplotlib_says_how_to_install(small_estimate, tmp_path, monkeypatch):
    from raydp.plots import plot_cdf

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(InvalidArgumentError, match=r"plotting needs matplotlib \(a raydp dependency\): pip install matplotlib"):
        plot_cdf(small_estimate, tmp_path / "x.png")


def test_save_table_markdown(tmp_path):
    save_table_markdown = load_job("_plots").save_table_markdown

    rows = [{"d": 8, "gamma": 0.05, "sensitivity": 0.0083187, "note": "a|b"},
            {"d": 16, "gamma": 0.1, "sensitivity": float("inf")}]
    text = save_table_markdown(rows, tmp_path / "t" / "table.md")
    assert (tmp_path / "t" / "table.md").read_text() == text
    assert text.splitlines() == [
        "| d | gamma | sensitivity | note |",
        "|---:|---:|---:|---|",
        "| 8 | 0.05 | 0.008319 | a\\|b |",
        "| 16 | 0.1 | ∞ |  |",
    ]


def test_bench_job_quick_checks_every_row_against_the_serial_loop(tmp_path):
    """The benchmark's plumbing at tiny sizes: every runner returns the serial loop's Δ̂ bit for bit
    (the goals on speed are the benchmark's to measure, not this test's)."""
    import json

    code, out, err = run_job("bench.py", "--quick", "--sections", "cheap,svm", "--out", tmp_path, "--quiet",
                             cwd=tmp_path, timeout=300)
    assert code == 0, err
    report = json.loads((tmp_path / "bench_cheap_svm.json").read_text())  # some sections: never bench.json
    assert not (tmp_path / "bench.json").exists()
    rows = report["sections"]["cheap"]["rows"]
    assert {(r["n"], r["m"]) for r in rows} >= {(10, 41971), (100, 41971)}
    assert all(r["equal"] for r in rows)
    assert all(r[key] > 0 for r in rows for key in ("a_pairs_per_s", "b_pairs_per_s", "c_pairs_per_s",
                                                     "d_pairs_per_s"))
    svm = report["sections"]["svm"]["result"]
    assert svm["equal"] and svm["warm_abs_diff"] < 1e-5
    assert report["machine"]["cores"] >= 1 and (tmp_path / "bench_cheap_svm.md").read_text().count("|") > 20
