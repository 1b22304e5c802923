"""Replay with measured power: a reused Δ̂ is checked on pairs drawn afresh at every release.

Before, only ≤ 5 fixed witness pairs were replayed, and a target whose configuration file changed so
that 10 % of databases give 1000× was accepted with the stale Δ̂ for 9 of 20 seeds. Now r pairs
(at least min(30, m)) are drawn at release time, from OS entropy, uniformly from all the run's pairs
with a finite G, their records drawn again by the oracle, and the pair that set Δ̂ is added.

Most tests run the replay through ``release._replay`` with the sealed process's ``replay`` done in this
process (:class:`InProcess`: :func:`raydp.engine.witness.replay`, the very function the sealed process
runs), so they stay in the unit tier and a target may read a file under ``tmp_path`` (the sandbox of
``raydp/seal.py`` empties ``/tmp``). The tests named ``..._through_a_release`` go the whole way through
``sample_then_respond`` and the sealed process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import re

import numpy as np
import pytest

import raydp
from raydp import oracles, targets
from raydp.engine import witness
from raydp.engine.witness import (MIN_REPLAY, REPLAY_SHARE, TOLERANCE, Witnesses, choose, compare, draw_chunks,
                                  records_of, replay_count)
from raydp.errors import EstimateMismatchError
from raydp.release import _replay

N = 50
DATA = np.random.default_rng(0).exponential(1.0, N)


def _estimate(target, seed=1, **kw):
    kw.setdefault("gamma", 0.1)  # m = 285, k = m
    return raydp.estimate_sensitivity(target, oracles.exponential(1.0), N, seed=seed, progress=False,
                                      backend="local", **kw)


class InProcess:
    """The sealed process's ``replay``, evaluated here (the same function it runs there)."""

    def __init__(self, target, est):
        self.target, self.est, self.sent = target, est, []

    def replay(self, records, pairs):
        self.sent.append((np.asarray(records).shape, list(pairs)))
        return witness.replay(self.target, raydp.Laplace(1.0), self.est.n, self.est.output_dim, records, pairs)


def _in_share(d, share: float) -> bool:
    """Whether a database is among the ``share`` of databases a hostile change picks: by its bytes' hash."""
    h = hashlib.sha256(np.ascontiguousarray(d).tobytes()).digest()
    return int.from_bytes(h[:8], "little") / 2.0**64 < share


def _config_target(path):
    """A mean scaled by a factor read from a configuration file at every call: ``factor`` alone scales every
    database; ``factor share`` scales only the ``share`` of databases whose hash falls below it. The file is
    not code: the target's fingerprint is the same whatever it holds."""

    def f(d):
        words = open(path).read().split()
        factor = float(words[0])
        if len(words) > 1 and not _in_share(d, float(words[1])):
            factor = 1.0
        return np.array([factor * float(np.mean(d))])

    return f


# ----------------------------------------------------------------------------- (a) fresh, not from the seed


def test_the_pairs_replayed_are_drawn_afresh_at_each_release_not_from_the_stored_seed():
    """Two replays of one estimate, and replays of two estimates with the same seed, look at different pairs.

    With the OS's entropy, two draws of 30 of the 285 pairs coincide with probability 1 / C(285, 30) < 1e-40;
    were the indices a function of the stored seed (or of anything stored), they would coincide always.
    """
    est = _estimate(targets.mean())
    twin = _estimate(targets.mean())  # the same seed, the same run
    plans = [est.replay_plan(), est.replay_plan(), twin.replay_plan()]
    sets = [frozenset(p.pairs.pairs[1:]) for p in plans]
    assert all(p.fresh and p.drawn == 30 for p in plans)
    assert sets[0] != sets[1] and sets[0] != sets[2] and sets[1] != sets[2]
    # every one from all m pairs (not a subset fixed in advance): 3 draws of 30 cover more than 30 pairs
    assert len(sets[0] | sets[1] | sets[2]) > 30 and max(max(s) for s in sets) < est.plan.m
    # the pair that set Δ̂ is always replayed, first
    assert all(p.pairs.pairs[0] == est.delta_pair() and p.pairs.g[0] == est.sensitivity for p in plans)


def test_the_fresh_generator_is_seeded_by_the_os(monkeypatch):
    """The indices come from fresh_rng(), which takes no seed: replacing it changes them, the estimate does not."""
    est = _estimate(targets.mean())
    monkeypatch.setattr(witness, "fresh_rng", lambda: np.random.default_rng(7))
    a, b = est.replay_plan(), est.replay_plan()
    assert a.pairs.pairs == b.pairs.pairs  # a fixed generator gives fixed pairs: fresh_rng is the only source
    monkeypatch.undo()
    assert est.replay_plan().pairs.pairs != a.pairs.pairs  # 1 / C(285, 30) to coincide


def test_two_releases_replay_different_pairs_through_a_release():
    est = _estimate(targets.mean())
    a = raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=est).replay
    b = raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=est).replay
    assert a.ok and b.ok and a.fresh and b.fresh and a.drawn == b.drawn == 30
    assert a.indices[0] == b.indices[0] == est.delta_pair()
    assert set(a.indices) != set(b.indices)  # 1 / C(285, 30) < 1e-40 to coincide


# ----------------------------------------------------------------------------- (b) the configuration file


SEEDS = range(20)


@pytest.mark.parametrize("share, most_accepted", [(0.1, 1), (0.3, 0)])
def test_a_config_file_change_on_a_share_of_databases_is_refused(tmp_path, monkeypatch, share, most_accepted):
    """The issue's hostile case: after Δ̂ was sampled, the configuration file changes so that ``share`` of
    databases (picked by a hash of their bytes) give 1000×. Over 20 seeds, the stale Δ̂ is refused.

    Each release replays r = 30 pairs drawn at random (and the Δ̂ pair): 60+ databases, each in the changed
    share with probability q independently (the hash), so a stale Δ̂ is accepted with probability
    ≤ (1 − q)^60: 0.0018 at q = 0.1, 5e-10 at q = 0.3. Over 20 seeds more than ``most_accepted``
    acceptances happen with probability 6.0e-4 (q = 0.1: Binomial(20, 0.0018) > 1) and 1.0e-8 (q = 0.3:
    > 0) for a random choice of seeds; the seeds here are fixed (the estimate's and the replay's), so the
    test is deterministic. The fixed witnesses of before (≤ 5 pairs, 10 databases) accept a stale Δ̂ with
    probability ≈ 0.9^10 = 0.35 at q = 0.1: counted too, the difference is the point.
    """
    config = tmp_path / "config.txt"
    f = _config_target(str(config))
    accepted, accepted_before, replayed = 0, 0, []
    for seed in SEEDS:
        config.write_text("1")
        est = _estimate(f, seed=seed)
        assert _replay(InProcess(f, est), est).ok  # unchanged: accepted
        config.write_text(f"1000 {share}")
        monkeypatch.setattr(witness, "fresh_rng", lambda s=seed: np.random.default_rng(10_000 + s))
        try:
            r = _replay(InProcess(f, est), est)
            accepted += 1
            replayed.append(r.pairs)
        except EstimateMismatchError as exc:
            assert "G was" in str(exc)
        fixed = witness.fixed(est.witnesses, est.plan.m, "emulating the rule of before")
        accepted_before += witness.run(fixed, InProcess(f, est).replay, scale=est.sensitivity).ok
    assert accepted <= most_accepted, (accepted, replayed)
    if share == 0.1:
        assert accepted_before >= 3  # ~7 expected of 20; deterministic with these seeds


# ----------------------------------------------------------------------------- (c) the tolerance


def test_a_last_bit_change_is_accepted_and_a_thousandth_is_refused_with_both_numbers(tmp_path):
    """The tolerance is relative to Δ̂ (1e-6 · max(Δ̂, |G then|)): a G moved by 1e-9 — what a BLAS thread count
    does (a ridge target's G moved 1.4e-9 when OPENBLAS_NUM_THREADS went 1 → 2) — passes; 1e-3 does not."""
    config = tmp_path / "config.txt"
    config.write_text("1")
    f = _config_target(str(config))
    est = _estimate(f)
    config.write_text("1.000000001")
    r = _replay(InProcess(f, est), est)
    assert r.ok and r.exact < r.pairs and 1e-10 < r.max_rel < 1e-8
    assert "within 1e-06 of max(Δ̂, G) (largest difference 1e-09)" in r.words()
    config.write_text("1.001")
    with pytest.raises(EstimateMismatchError) as info:
        _replay(InProcess(f, est), est)
    text = str(info.value)
    then, now = (float(x) for x in re.search(r"G was (\S+) when Δ̂ was sampled, (\S+) now", text).groups())
    assert now == pytest.approx(1.001 * then, rel=1e-9) and then != now
    assert re.search(r"a difference of 0\.001 relative to max\(Δ̂, G then\), more than the 1e-06 tolerated", text)
    assert "a configuration or data file it reads" in text and "edited" not in text


def test_the_tolerance_is_relative_to_delta_not_to_the_last_bit():
    w = Witnesses(pairs=(0, 1, 2), g=(2.0, 0.5, 1e-12), roles=("delta", "fresh", "fresh"))
    g = np.array(w.g)
    # a thread-count-like change of every G (1.4e-9 relative: refused by the 1e-9 of before)
    assert compare(w, g * (1 + 1.4e-9), scale=2.0).ok
    assert compare(w, g * (1 + 1.4e-9), rtol=1e-9, scale=2.0).mismatch is not None
    # a tiny G may move by 1e-6 of Δ̂: what cannot change the noise by more than that
    assert compare(w, g + np.array([0, 0, 1.9e-6]), scale=2.0).ok
    bad = compare(w, g + np.array([0, 0, 2.1e-6]), scale=2.0)
    assert f"G was {1e-12!r} when Δ̂ was sampled, {1e-12 + 2.1e-6!r} now" in bad.mismatch  # every digit
    # 1.001× refused on every G that is not tiny beside Δ̂ (the 1e-12 one moved by 1e-15: nothing to the noise)
    assert compare(w, g * 1.001, scale=2.0).mismatch.count("G was") == 2


def test_a_stale_delta_is_refused_and_a_last_bit_one_accepted_through_a_release():
    """The same, the whole way through the sealed process: the stored G are made stale (as if the target of
    then had computed them 1 + 1e-9, then 1.001 times as large)."""
    est = _estimate(targets.mean())

    def scaled(factor):
        return dataclasses.replace(est, sample=est.sample * factor, sensitivity=est.sensitivity * factor)

    ok = raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=scaled(1 + 1e-9))
    assert ok.replay.ok and ok.replay.fresh and ok.replay.exact < ok.replay.pairs
    assert "gave the same G with this target, within 1e-06 of max(Δ̂, G)" in ok.statement()
    with pytest.raises(EstimateMismatchError, match=r"\(the pair that set Δ̂\): G was \S+ when Δ̂ was sampled, \S+ now "
                                                     r"\(a difference of 0\.000999"):
        raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=scaled(1.001))


# ----------------------------------------------------------------------------- (d) the fixed witnesses


def test_without_a_sample_the_fixed_witnesses_are_replayed_and_the_statement_says_so():
    est = _estimate(targets.mean(), keep_sample=False)
    assert est.sample is None
    plan = est.replay_plan()
    assert not plan.fresh and plan.pairs == est.witnesses and "keep_sample=False" in plan.why_fixed
    r = _replay(InProcess(targets.mean(), est), est)
    assert r.ok and not r.fresh and r.pairs == len(est.witnesses) and r.power() is None
    assert r.to_dict()["fresh"] is False and r.to_dict()["power"] is None
    assert ("fixed witness pairs" in r.words() and "no probability of catching a change of the target is claimed"
            in r.words())


def test_without_an_oracle_the_fixed_witnesses_are_replayed_and_the_statement_says_so_through_a_release(tmp_path):
    """A store of a user's oracle (a bootstrap of an array: no file to rebuild it from) loaded without
    ``oracle=``: its G sample is there, but no pair's records can be drawn again."""
    public = np.random.default_rng(3).exponential(1.0, 500)
    uri = str(tmp_path / "s")
    raydp.estimate_sensitivity(targets.mean(), oracles.bootstrap(public), N, gamma=0.1, seed=1, progress=False,
                               backend="local", store=uri)
    loaded = raydp.load_estimate(uri)
    assert loaded.sample is not None and loaded.redraw is None and loaded.drawer() is None
    r = raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=loaded)
    assert r.replay.ok and not r.replay.fresh and r.replay.pairs == len(loaded.witnesses)
    text = r.statement()
    assert f"Δ̂ reused after its {r.replay.pairs} fixed witness pairs" in text
    assert "no oracle to draw its pairs' records" in text and "no probability" in text
    # the oracle given: fresh pairs again
    given = raydp.load_estimate(uri, oracle=oracles.bootstrap(public))
    assert raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=given).replay.fresh


def test_an_oracle_that_draws_other_records_now_falls_back_to_the_witnesses():
    """The records of a fresh pair are drawn again by the oracle object the estimate holds; if it draws other
    records now (the user changed it), its G would say nothing about the target: the witnesses' kept
    records are replayed instead, and the statement says why."""
    est = _estimate(targets.mean())
    moved = dataclasses.replace(est, redraw=dataclasses.replace(est.redraw, oracle=oracles.exponential(2.0)))
    plan = moved.replay_plan()
    assert not plan.fresh and "no longer draws the records" in plan.why_fixed
    assert _replay(InProcess(targets.mean(), moved), moved).ok


# ----------------------------------------------------------------------------- how many, which, how sent


def test_r_is_a_share_of_the_sampling_time_at_least_30_at_most_m():
    assert (REPLAY_SHARE, MIN_REPLAY) == (0.05, 30)
    assert replay_count(285, 0.2, 0.2 / 285) == 30  # 5 % of 285 is 14: the floor
    assert replay_count(10_000, 100.0, 0.01) == 500  # 5 s of 100 s, at 0.01 s a pair
    assert replay_count(10_000, 100.0, 0.5) == 30  # spread over 50 slots: 5 s buys 10 serial pairs
    assert replay_count(10_000, 100.0) == 500  # without a block time: seconds / m a pair
    assert replay_count(12, 1.0) == 12 and replay_count(12) == 12  # all of a small run
    assert replay_count(1000, 0.0) == 30  # a store that recorded no time: the floor
    assert replay_count(100, 1e9, 1e-9) == 100  # never more than m


def test_failed_pairs_are_never_drawn_and_delta_is_added():
    sample = np.arange(100, dtype=float)
    sample[::2] = np.inf
    est = _estimate(targets.mean())
    plan = choose(sample, 99, est.redraw, 50, np.random.default_rng(0))
    drawn = plan.pairs.pairs[1:]
    assert plan.candidates == 50 and plan.drawn == 50 and plan.pairs.pairs[0] == 99
    assert all(p % 2 == 1 for p in drawn) and len(set(drawn)) == len(drawn) == 49  # 99 is not listed twice
    assert plan.pairs.g == tuple(sample[list(plan.pairs.pairs)])


def test_records_are_redrawn_as_the_blocks_drew_them_and_sent_in_bounded_chunks():
    est = _estimate(targets.mean(), block_size=7)
    pairs = [5, 6, 7, 50, 51, 284]
    chunks = list(draw_chunks(est.redraw, pairs, max_bytes=2 * (N + 1) * 8))
    assert [c for c, _ in chunks] == [[5, 6], [7, 50], [51, 284]]
    np.testing.assert_array_equal(np.concatenate([r for _, r in chunks]), records_of(est.redraw, pairs))
    np.testing.assert_array_equal(records_of(est.redraw, est.witnesses.pairs), est.witnesses.records)
    # a whole replay in chunks: each message bounded, every pair replayed once, G equal bit for bit
    sealed = InProcess(targets.mean(), est)
    plan = est.replay_plan()
    result = witness.run(plan, sealed.replay, scale=est.sensitivity, max_bytes=4 * (N + 1) * 8)
    assert result.ok and result.exact == result.pairs == len(plan.pairs)
    assert all(shape[0] <= 4 for shape, _ in sealed.sent) and len(sealed.sent) == -(-len(plan.pairs) // 4)
    assert [p for _, ps in sealed.sent for p in ps] == list(plan.pairs.pairs)


def test_the_first_chunk_with_a_difference_ends_the_replay():
    est = _estimate(targets.mean())
    wrong = lambda d: np.array([2.0 * float(np.mean(d))])  # noqa: E731
    sealed = InProcess(wrong, est)
    result = witness.run(est.replay_plan(), sealed.replay, scale=est.sensitivity, max_bytes=4 * (N + 1) * 8)
    assert result.mismatch is not None and len(sealed.sent) == 1 and result.pairs == 4


# ----------------------------------------------------------------------------- what the estimate keeps


def test_an_estimate_keeps_its_sample_and_what_redraws_its_pairs_by_default(tmp_path):
    est = _estimate(targets.mean())
    assert est.sample is not None and est.sample.shape == (est.plan.m,) and np.isfinite(est.sample).all()
    assert est.sample[est.delta_pair()] == est.sensitivity and est.block_seconds > 0 and est.seconds > 0
    assert est.redraw is not None and est.redraw.target is None and "redraw" not in repr(est)
    assert est == dataclasses.replace(est, redraw=None)  # not part of what the estimate is
    # a store: the sample from its shards, the oracle rebuilt (built-in), the sampling time from result.json
    uri = str(tmp_path / "s")
    stored = _estimate(targets.mean(), store=uri)
    loaded = raydp.load_estimate(uri)
    assert loaded.redraw is not None and loaded.seconds == pytest.approx(stored.seconds)
    assert loaded.block_seconds == pytest.approx(stored.block_seconds)
    plan = loaded.replay_plan()
    assert plan.fresh and plan.pairs.pairs[0] == stored.delta_pair()


def test_a_pickled_estimate_keeps_its_oracle_when_it_pickles_and_drops_it_otherwise():
    est = _estimate(targets.mean())
    again = pickle.loads(pickle.dumps(est))
    assert again.redraw is not None and again.replay_plan().fresh

    class Local:  # a class pickle cannot find by name
        def sample(self, rng, size):
            return rng.exponential(1.0, size)

    odd = dataclasses.replace(est, redraw=dataclasses.replace(est.redraw, oracle=Local()))
    with pytest.raises(Exception):
        pickle.dumps(odd.redraw)
    back = pickle.loads(pickle.dumps(odd))  # the estimate still pickles
    assert back.redraw is None and back.sensitivity == est.sensitivity
    # its oracle's description names a built-in one here, so it is rebuilt: fresh pairs all the same
    assert back.drawer() is not None and back.replay_plan().fresh


def test_the_statement_reports_r_m_and_the_power_through_a_release():
    est = _estimate(targets.mean())
    r = raydp.sample_then_respond(DATA, targets.mean(), raydp.Laplace(1.0), estimate=est)
    d = r.replay.to_dict()
    assert d["fresh"] and d["drawn"] == 30 and d["m"] == d["candidates"] == est.plan.m
    assert d["power"]["0.1"] == pytest.approx(1 - 0.9**30) and d["power"]["0.3"] == pytest.approx(1 - 0.7**30)
    assert d["tolerance"] == TOLERANCE
    # the Δ̂ pair is among the 30 with probability 30/285: then it is not added
    delta = "the pair that set Δ̂ among them" if r.replay.pairs == 30 else "and the pair that set Δ̂"
    assert (f"30 drawn at random at this release from all 285 pairs of its run, {delta}; a change of the target "
            "that moves G on ≥ 10% of pairs would have been caught with probability ≥ 0.957") in r.statement()


def test_a_config_file_change_is_refused_through_a_release(tmp_path, monkeypatch):
    """The configuration-file case the whole way through the sealed process (``tmp_path`` put on ``sys.path``:
    the sandbox shows the caller's code directories, and empties the rest of ``/tmp``). 30 % of databases
    give 1000×: refused (a stale Δ̂ passes 60+ databases with probability ≤ 0.7^60 = 5e-10)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "config.txt"
    config.write_text("1")
    f = _config_target(str(config))
    est = _estimate(f, seed=3)
    assert raydp.sample_then_respond(DATA, f, raydp.Laplace(1.0), estimate=est).replay.ok
    config.write_text("1000 0.3")
    with pytest.raises(EstimateMismatchError, match=r"computes something else .* G was \S+ when Δ̂ was sampled"):
        raydp.sample_then_respond(DATA, f, raydp.Laplace(1.0), estimate=est)


def test_the_printed_power_is_never_overstated():
    from raydp.engine.witness import Replay, _power_text

    assert _power_text(30) == "0.957" and 1 - 0.9**30 >= 0.957  # rounded down
    assert _power_text(100) == "1 − 2.7e-05" and 0.9**100 <= 2.7e-05  # the miss rounded up
    words = Replay(pairs=30, exact=30, fresh=True, drawn=30, m=285, candidates=280).words()
    assert "30 drawn at random at this release from all 280 pairs of its run with a finite G (of m = 285), the pair " \
           "that set Δ̂ among them" in words
