"""Filesystem errors are one line with exit 2 and nothing half-written is read later (issue 15, item 8):
a full disk, a read-only remount and an S3 endpoint gone mid-run, bad locations, torn temporary files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import raydp
from raydp.errors import StoreError
from raydp.ledger import Ledger

from cli_util import assert_one_line_exit_2 as _one_line_exit_2
from cli_util import run_cli as _cli
from paths import CHILDREN
from runs import EST_ARGS
from runs import mean_run as _est


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_is_one_line_and_leaves_nothing_readable(tiny_fs, capsys):
    store = tiny_fs / "s"
    code, out, err = _cli([*EST_ARGS, "--m", "60000", "--store", store], capsys)
    _one_line_exit_2(code, out, err)
    assert "store" in err
    assert not list((store / "shards").glob(".*.tmp")) if (store / "shards").exists() else True
    with pytest.raises(StoreError):
        raydp.load_estimate(str(store))


def _run_until_first_shard(store: str, shard_dir: Path | None):
    proc = subprocess.Popen([sys.executable, str(CHILDREN / "slow_cli_run.py"), store], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while shard_dir is not None and time.time() < deadline and not list(shard_dir.glob("shard-*.parquet")):
        time.sleep(0.05)
    return proc


def test_filesystem_remounted_read_only_mid_run(tiny_fs):
    subprocess.run(["mount", "-o", "remount,size=4m", str(tiny_fs)], check=True)
    store = tiny_fs / "s"
    proc = _run_until_first_shard(str(store), store / "shards")
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    out, err = proc.communicate(timeout=120)
    subprocess.run(["mount", "-o", "remount,rw", str(tiny_fs)], check=True)
    assert proc.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "Read-only file system" in err and "store" in err, err


def test_s3_endpoint_gone_mid_run(tmp_path):
    pytest.importorskip("moto")
    from conftest import start_moto

    port, server = start_moto()
    uri = f"s3://raydp/gone?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    try:
        proc = _run_until_first_shard(uri, None)
        time.sleep(7)  # past the first shard flush (every 5 s)
    finally:
        server.kill()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "store" in err, err


@pytest.mark.parametrize("where", ["proc", "long", "bucket", "shards-file"])
def test_bad_store_locations_are_one_line(tmp_path, capsys, where, request):
    if where == "proc":
        store = "/proc/x/raydp"
    elif where == "long":
        store = str(tmp_path / ("d" * 300) / "s")
    elif where == "bucket":
        port = request.getfixturevalue("s3_server")
        store = f"s3://no-such-bucket/x?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
    else:
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "shards").write_text("in the way")
        store = str(tmp_path / "s")
    code, out, err = _cli([*EST_ARGS, "--store", store], capsys)
    _one_line_exit_2(code, out, err)
    if where == "shards-file":
        assert not (tmp_path / "s" / "meta.json").exists()


def test_meta_json_list_and_huge_ledger_total_are_one_line(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "meta.json").write_text("[1, 2, 3]")
    _one_line_exit_2(*_cli(["show", tmp_path / "s"], capsys))
    ledger = tmp_path / "l.json"
    Ledger.create(ledger, epsilon_total=1.0)
    doc = json.loads(ledger.read_text())
    doc["epsilon_total"] = 10 ** 400
    ledger.write_text(json.dumps(doc))
    code, out, err = _cli(["ledger", "show", ledger], capsys)
    _one_line_exit_2(code, out, err)
    assert "corrupt" in err


def test_torn_tmp_shards_are_cleaned(tmp_path):
    uri = tmp_path / "s"
    _est(store=str(uri))
    torn = uri / "shards" / ".shard-0000000000-abc.parquet.tmp"
    torn.write_bytes(b"PAR1 torn")
    old = time.time() - 3600
    os.utime(torn, (old, old))
    _est(store=str(uri), resume=True)
    assert not torn.exists()
