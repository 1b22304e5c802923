"""A store cannot be fooled into a too-small Δ̂ (issue 15, items 1–3 and 9): foreign shards,
racing creators, tampered metadata and shards, concurrent resumers of torn shards.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys

import pytest

import raydp
from raydp import oracles
from raydp.engine.blocks import BlockResult
from raydp.errors import StoreError
from raydp.store import Store

from cli_util import assert_one_line_exit_2 as _one_line_exit_2
from cli_util import run_cli as _cli
from paths import CHILDREN
from runs import EST_ARGS
from runs import mean_run as _est


def test_reset_store_with_shards_is_refused_not_adopted(tmp_path, capsys):
    uri = tmp_path / "s"
    assert _cli([*EST_ARGS, "--oracle-args", '{"rate": 1.0}', "--store", uri], capsys)[0] == 0
    os.unlink(uri / "meta.json")
    os.unlink(uri / "result.json")  # a user "resetting" the store; the shards stay
    code, out, err = _cli([*EST_ARGS, "--oracle-args", '{"rate": 10.0}', "--store", uri], capsys)
    _one_line_exit_2(code, out, err)
    assert "not a raydp store" in err or "no meta.json" in err
    code, out, err = _cli([*EST_ARGS, "--oracle-args", '{"rate": 10.0}', "--store", uri, "--resume"], capsys)
    _one_line_exit_2(code, out, err)
    assert not (uri / "meta.json").exists()


def test_a_shard_of_another_run_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _est(store=str(a))
    _est(oracles.exponential(10.0), store=str(b))
    for p in (b / "shards").glob("shard-*.parquet"):  # move b's shards into a, as a careless copy would
        shutil.copy(p, a / "shards" / p.name.replace("shard-", "shard-9"))
    with pytest.raises(StoreError, match="another run"):
        raydp.load_estimate(str(a))
    with pytest.raises(StoreError, match="another run"):
        _est(store=str(a), resume=True)


def _create(uri, rate, barrier, out):
    barrier.wait()
    try:
        _est(oracles.exponential(rate), store=uri, m=400)
        out.put("ok")
    except StoreError as exc:
        out.put("refused: " + str(exc))


def _race(uri, trials_dir, n_trials):
    ctx = multiprocessing.get_context("fork")
    outcomes = []
    for t in range(n_trials):
        u = uri(t)
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(u, rate, barrier, out)) for rate in (1.0, 10.0)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        outcomes.append(sorted(out.get(timeout=5)[:7] for _ in procs))
        est = raydp.load_estimate(u)  # exactly one run's sample, never a mixture
        clean = _est(oracles.exponential(est.oracle["params"]["rate"]), m=400)
        assert est.sensitivity == clean.sensitivity
    return outcomes


@pytest.mark.subprocess
def test_two_local_creators_exactly_one_proceeds(tmp_path):
    outcomes = _race(lambda t: str(tmp_path / f"s{t}"), tmp_path, 6)
    assert all(o == ["ok", "refused"] for o in outcomes), outcomes


@pytest.mark.subprocess
def test_two_s3_creators_exactly_one_proceeds(s3_server):
    def uri(t):
        return (f"s3://raydp/race{t}?endpoint_override=127.0.0.1:{s3_server}&scheme=http&region=us-east-1")

    outcomes = _race(uri, None, 3)
    assert all(o == ["ok", "refused"] for o in outcomes), outcomes


def test_provenance_must_match_identity(tmp_path):
    uri = tmp_path / "s"
    _est(store=str(uri))
    meta = json.loads((uri / "meta.json").read_text())
    meta["provenance"]["oracle"]["params"]["rate"] = 10.0  # identity still says rate 1
    (uri / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreError, match="provenance"):
        raydp.load_estimate(str(uri))


@pytest.mark.parametrize("bad", [-2e-6, float("nan"), -float("inf")])
def test_negative_or_nan_g_is_refused(tmp_path, bad):
    uri = str(tmp_path / "s")
    _est(store=uri)
    st = Store(uri)
    st.load()
    shards = sorted((tmp_path / "s" / "shards").glob("shard-*.parquet"))
    blocks, g = _shard_block0(st, shards)
    shards[0].unlink()
    g = g.copy()
    g[3] = bad
    st.write_shard([BlockResult(index=0, start=0, g=g, failures=0)] + blocks[1:])
    with pytest.raises(StoreError, match="G"):
        raydp.load_estimate(uri)


def _shard_block0(st, shards):
    meta, blocks, pairs, g = st.read_shard(shards[0].name)
    out = []
    for b in sorted(set(blocks.tolist())):
        sel = blocks == b
        info = meta[str(b)]
        out.append(BlockResult(index=b, start=int(pairs[sel][0]), g=g[sel], failures=info["failures"],
                               failure_kinds=info["kinds"]))
    return out, out[0].g


def test_failure_counts_are_covered_by_the_shard_hash(tmp_path):
    import pyarrow.parquet as pq

    uri = tmp_path / "s"
    _est(store=str(uri))
    shard = sorted((uri / "shards").glob("shard-*.parquet"))[0]
    table = pq.read_table(shard)
    meta = json.loads(table.schema.metadata[b"raydp"])
    first = next(iter(meta["blocks"]))
    meta["blocks"][first]["failures"] = 3  # edit the counts, keep the data and its digest
    meta["blocks"][first]["kinds"] = {"target raised": 3}
    pq.write_table(table.replace_schema_metadata({"raydp": json.dumps(meta)}), shard)
    with pytest.raises(StoreError):
        raydp.load_estimate(str(uri))


def test_duplicate_shards_must_agree(tmp_path):
    uri = str(tmp_path / "s")
    _est(store=uri)
    st = Store(uri)
    st.load()
    shards = sorted((tmp_path / "s" / "shards").glob("shard-*.parquet"))
    blocks, g = _shard_block0(st, shards)
    g = g * 0.5  # a second "valid" shard for block 0 with smaller G
    st.write_shard([BlockResult(index=0, start=0, g=g, failures=0)])
    with pytest.raises(StoreError, match="disagree"):
        raydp.load_estimate(uri)
    with pytest.raises(StoreError, match="disagree"):
        _est(store=uri, resume=True)


@pytest.mark.subprocess
def test_two_resumers_of_a_store_with_torn_shards(tmp_path):
    uri = tmp_path / "s"
    clean = _est(store=str(uri), flush_rows=100)
    for p in sorted((uri / "shards").glob("shard-*.parquet"))[::3]:
        p.write_bytes(p.read_bytes()[:100])  # torn
    procs = [subprocess.Popen([sys.executable, str(CHILDREN / "resume_store.py"), str(uri)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert float.fromhex(out.strip()) == clean.sensitivity
    assert raydp.load_estimate(str(uri)).sensitivity == clean.sensitivity
