"""``--json``: stdout holds the one JSON document and nothing else, for every command that has it.

What Ray's driver prints while a run is on Ray (its task workers' lines, "(raylet) ... marked dead",
"Task ... will be retried") goes to stderr: ``test_lost_host.py`` parses ``raydp estimate --json`` on a
real cluster while Ray prints both kinds. Here the commands that never start Ray — show, plan,
release, ledger show — in process, on a small stored estimate.
"""

from __future__ import annotations

import json

import numpy as np

from raydp.cli import main


def test_every_json_command_prints_only_json(tmp_path, capsys):
    store, ledger, data = tmp_path / "store", tmp_path / "budget.json", tmp_path / "private.npy"
    np.save(data, np.random.default_rng(0).exponential(1.0, 50))
    target = ["--target", "raydp.targets:mean"]
    assert main(["estimate", *target, "--oracle", "raydp.oracles:exponential", "--oracle-args", '{"rate": 1.0}',
                 "--n", "50", "--m", "200", "--seed", "1", "--backend", "local", "--store", str(store), "--json",
                 "--quiet"]) == 0
    gamma = json.loads(capsys.readouterr().out)["plan"]["gamma"]
    assert main(["ledger", "create", str(ledger), "--epsilon-total", "2"]) == 0
    capsys.readouterr()
    for argv in (["show", str(store), "--json", "--gamma", "0.5"], ["plan", "--gamma", "0.05", "--json"],
                 ["release", "--store", str(store), "--data", str(data), *target, "--gamma", repr(gamma),
                  "--epsilon", "0.5", "--ledger", str(ledger), "--json"],
                 ["ledger", "show", str(ledger), "--json"]):
        assert main(argv) == 0, argv
        json.loads(capsys.readouterr().out)  # nothing but the JSON document
