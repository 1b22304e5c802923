"""Plan arithmetic that never understates (issue 15, items 14–16): Theorem 15's bounds in exact
arithmetic, γ printed rounded up, the smallest valid k in the hint.
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import numpy as np
import pytest

import raydp
from raydp import targets
from raydp.errors import PlanError
from raydp.ledger import Ledger

from runs import mean_run as _est


def _bounds(m, k, gamma, rho):
    getcontext().prec = 60
    m, k, g, r = Decimal(m), Decimal(k), Decimal(gamma), Decimal(rho)
    m_min = (Decimal(1) / r).ln() / (2 * (g - r) ** 2)
    k_min = m * (1 - g + r + ((Decimal(1) / r).ln() / (2 * m)).sqrt())
    return m_min, k_min


@pytest.mark.parametrize("kw", [dict(m=874106907987335, gamma=0.3), dict(m=2 ** 50, gamma=0.01),
                                dict(m=2 ** 53, gamma=0.2), dict(gamma=3.5e-8), dict(m=2 ** 52 + 1)])
def test_plans_meet_theorem15_exactly(kw):
    p = raydp.make_plan(**kw)
    m_min, k_min = _bounds(p.m, p.k, p.gamma, p.rho)
    assert Decimal(p.m) >= m_min and Decimal(p.k) >= k_min, (p, m_min, k_min)
    assert p.satisfies_theorem15()


def test_satisfies_theorem15_has_no_tolerance():
    p = raydp.make_plan(m=2 ** 50, gamma=0.01)
    short = raydp.Plan(m=p.m, k=p.k - 1000, gamma=p.gamma, rho=p.rho, mode="k")
    assert not short.satisfies_theorem15()
    _, k_min = _bounds(p.m, p.k, p.gamma, p.rho)
    just = raydp.Plan(m=p.m, k=int(k_min.to_integral_value(rounding="ROUND_CEILING")) - 1, gamma=p.gamma, rho=p.rho,
                      mode="k")
    assert not just.satisfies_theorem15()


def test_statements_never_understate_gamma(tmp_path):
    p = raydp.make_plan(m=1000)
    est = _est(n=50, m=1000, gamma=None, block_size=None)
    r = raydp.sample_then_respond(np.ones(50), targets.mean(), raydp.Laplace(1.0), estimate=est)
    text = r.statement()
    shown = float(text.split(", ")[2].split(")")[0])
    assert shown >= p.gamma and shown - p.gamma < 1e-6
    assert "sampler" in text
    ledger = Ledger.create(tmp_path / "l.json", epsilon_total=2.0)
    raydp.sample_then_respond(np.ones(50), targets.mean(), raydp.Laplace(1.0), estimate=est, ledger=ledger)
    g = ledger.guarantee().statement()
    assert float(g.split(", ")[2].split(")")[0]) >= p.gamma


def test_the_k_hint_is_the_smallest_valid_k():
    with pytest.raises(PlanError, match=r"use k >= 11\b"):
        raydp.make_plan(m=50, k=10)
    assert raydp.make_plan(m=50, k=11).gamma < 1
    for m in (40, 50, 77, 300, 1000):
        try:
            raydp.make_plan(m=m, k=1)
        except PlanError as exc:
            hint = int(str(exc).split("use k >= ")[1].split()[0].rstrip(";,."))
            assert raydp.make_plan(m=m, k=hint).gamma < 1
            with pytest.raises(PlanError):
                raydp.make_plan(m=m, k=hint - 1)
