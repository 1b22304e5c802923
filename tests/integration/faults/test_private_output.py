"""Nothing private in any message (issue 15, item 7): parser errors, SystemExit, warnings and prints
of a target, credentials in URIs.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from raydp.cli import main

from cli_util import assert_one_line_exit_2 as _one_line_exit_2
from cli_util import run_cli as _cli
from runs import EST_ARGS, MARK, MARK_TEXT


class SystemExitWithData:
    """The mean, except on the private data (it holds the mark): there it exits, quoting the data."""

    def __call__(self, db):
        db = np.asarray(db, dtype=float)
        if db.max() >= MARK:
            raise SystemExit(f"data: {db.max()}")
        return float(db.mean())

    def identity(self):
        return {"name": "mean", "params": {}}


class ChattyMean:
    def __call__(self, db):
        db = np.asarray(db, dtype=float)
        warnings.warn(f"max is {db.max()}")
        print(f"max is {db.max()}")
        print(f"max is {db.max()}", file=sys.stderr)
        return float(db.mean())

    def identity(self):
        return {"name": "mean", "params": {}}


def _private_data(tmp_path):
    data = np.random.default_rng(0).exponential(1.0, 50)
    data[7] = MARK
    path = tmp_path / "private.npy"
    np.save(path, data)
    return path


def test_malformed_private_csv_row_is_not_echoed(tmp_path, small_store, capsys):
    store, _ = small_store
    rows = ["x"] + [f"{v}" for v in np.random.default_rng(0).exponential(1.0, 49)] + [f"{MARK},{MARK}"]
    csv = tmp_path / "private.csv"
    csv.write_text("\n".join(rows) + "\n")
    code, out, err = _cli(["release", "--store", store, "--data", csv, "--target", "raydp.targets:mean",
                           "--epsilon", "0.5", "--gamma", "0.1"], capsys)
    _one_line_exit_2(code, out, err)
    assert MARK_TEXT not in out + err


@pytest.mark.parametrize("target", ["SystemExitWithData", "ChattyMean"])
def test_target_exits_warnings_and_prints_do_not_leak(tmp_path, small_store, capfd, target):
    store, _ = small_store
    data = _private_data(tmp_path)
    code = main(["release", "--store", str(store), "--data", str(data), "--target", f"test_private_output:{target}",
                 "--target-args", "{}",
                 "--epsilon", "0.5", "--gamma", "0.1"])
    out, err = capfd.readouterr()
    assert MARK_TEXT not in out + err
    assert code == (2 if target == "SystemExitWithData" else 0), err


def test_s3_secret_in_uri_is_never_echoed(s3_server, capsys):
    secret = "TOPSECRETKEY123"
    base = f"endpoint_override=127.0.0.1:{s3_server}&scheme=http&region=us-east-1"
    uri = f"s3://testing:{secret}@raydp/creds?{base}"
    code, out, err = _cli([*EST_ARGS, "--store", uri], capsys)
    assert code == 0, err
    assert secret not in out + err
    code, out, err = _cli([*EST_ARGS, "--store", uri], capsys)  # already holds a run: an error naming the store
    _one_line_exit_2(code, out, err)
    assert secret not in out + err and "raydp/creds" in err
    code, out, err = _cli([*EST_ARGS, "--store", f"s3://raydp/x?{base}&secret_key={secret}&access_key=testing"],
                          capsys)
    assert secret not in out + err
