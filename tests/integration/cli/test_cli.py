"""The raydp command line: one-line errors, JSON output, estimate → show → release."""

import json
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydp.cli import main


def run_cli(*args):
    proc = subprocess.run([sys.executable, "-m", "raydp.cli", *args], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("args, fragment", [
    (["plan", "--gamma", "1.5"], "real number in (0, 1)"),
    (["plan", "--gamma", "abc"], "invalid float value"),
    (["plan", "--m", "0"], "positive integer"),
    (["plan", "--m", "100", "--k", "200"], "at most m"),
    (["plan", "--m", "1000", "--gamma", "0.05"], "use gamma >= 0.0564678"),
    (["plan"], "give gamma"),
    (["frobnicate"], "invalid choice"),
    (["estimate", "--target", "nomodule:f", "--oracle", "raydp.oracles:exponential", "--n", "5", "--m", "50"],
     "cannot import module 'nomodule'"),
    (["estimate", "--target", "raydp.targets:nothere", "--oracle", "raydp.oracles:exponential", "--n", "5",
      "--m", "50"], "has no attribute"),
    (["estimate", "--target", "raydp.targets", "--oracle", "raydp.oracles:exponential", "--n", "5", "--m", "50"],
     "MODULE:ATTRIBUTE"),
    (["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
      "--oracle-args", "{bad", "--n", "5", "--m", "50"], "JSON object"),
    (["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
      "--oracle-args", '{"rate": -1}', "--n", "5", "--m", "50"], "rate"),
    (["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
      "--oracle-args", '{"rate": 1}', "--n", "0", "--m", "50"], "n must be"),
    (["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential", "--n", "5",
      "--m", "50"], "missing 1 required positional argument: 'rate'"),
    (["show", "/nonexistent/store"], "no raydp store"),
])
def test_bad_input_is_one_line_without_traceback(args, fragment, capsys):
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert fragment in err


def test_plan_json_in_a_real_process():
    code, out, err = run_cli("plan", "--m", "2000", "--gamma", "0.05", "--json")
    assert code == 0, err
    assert json.loads(out) == {"m": 2000, "k": 1983, "gamma": 0.05, "rho": pytest.approx(0.0033080, abs=1e-7),
                               "mode": "k"}
    code, out, err = run_cli("plan", "--gamma", "1.5")
    assert code == 2 and err.strip() == "raydp: error: gamma must be a real number in (0, 1), got 1.5"


def test_estimate_show_release_round_trip(tmp_path, capsys):
    store = str(tmp_path / "est")
    code = main(["estimate", "--target", "raydp.targets:mean", "--oracle", "raydp.oracles:exponential",
                 "--oracle-args", '{"rate": 1.0}', "--n", "200", "--gamma", "0.1", "--seed", "5",
                 "--store", store, "--json", "--quiet"])
    est = json.loads(capsys.readouterr().out)
    assert code == 0 and est["plan"]["m"] == 285 and est["failures"] == 0 and est["sensitivity"] > 0
    code = main(["show", store, "--json", "--gamma", "0.2"])
    shown = json.loads(capsys.readouterr().out)
    assert code == 0 and shown["plan"]["gamma"] == 0.2 and shown["sensitivity"] <= est["sensitivity"]
    data = tmp_path / "private.parquet"
    pq.write_table(pa.table({"x": np.random.default_rng(0).exponential(1.0, 200)}), data)
    code = main(["release", "--store", store, "--data", str(data), "--target", "raydp.targets:mean",
                 "--epsilon", "0.5", "--gamma", "0.1", "--json"])
    rel = json.loads(capsys.readouterr().out)
    assert code == 0 and (rel["epsilon"], rel["delta"], rel["gamma"]) == (0.5, 0.0, 0.1)
    assert rel["sensitivity"] == est["sensitivity"]
    # the estimate was for n=200: a file of another size is refused, one line
    pq.write_table(pa.table({"x": np.ones(50)}), tmp_path / "small.parquet")
    code = main(["release", "--store", store, "--data", str(tmp_path / "small.parquet"),
                 "--target", "raydp.targets:mean", "--epsilon", "0.5", "--gamma", "0.1"])
    err = capsys.readouterr().err
    assert code == 2 and "n=200" in err and len(err.strip().splitlines()) == 1
    # and so is another target
    code = main(["release", "--store", store, "--data", str(data), "--target", "raydp.targets:median",
                 "--epsilon", "0.5", "--gamma", "0.1"])
    assert code == 2 and "target" in capsys.readouterr().err
    # and so is a store whose plan gives another gamma than the one asked for
    code = main(["release", "--store", store, "--data", str(data), "--target", "raydp.targets:mean",
                 "--epsilon", "0.5", "--gamma", "0.05"])
    err = capsys.readouterr().err
    assert code == 2 and "gives gamma=0.1, not the gamma=0.05" in err and len(err.strip().splitlines()) == 1


def test_cluster_subcommand_is_the_local_cluster_command_line(capsys):
    """`raydp cluster ...` hands its arguments to raydp.local_cluster (usage errors: exit 2, no traceback)."""
    assert main(["cluster", "no-such-verb"]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "raydp cluster up [WORKERS]" in out.out + out.err
    assert main(["cluster", "help"]) == 0
    assert "kill-worker" in capsys.readouterr().out
