"""Exact warm-started SVM fits for neighbouring databases (the engine of :meth:`raydp.targets.SVM.pair`).

The problem is the SVM target's (see :func:`raydp.targets.svm`),

    min_{w, b} ½‖w‖² + c Σᵢ max(0, 1 − yᵢ(w·xᵢ + b)),   c = C/n, b unpenalised,

over a database of rows ``[yᵢ, xᵢ]``. Writing ``v = (w, b)`` and ``YZ[i] = yᵢ·(xᵢ, 1)``
(:func:`_svm_yz`), the margin of record i is ``YZ[i] @ v``, and the records fall into three
*sides* (:func:`_svm_sides`): hinge active (margin < 1, α = c), on the margin (margin = 1,
0 ≤ α ≤ c) and beyond the margin (margin > 1, α = 0).

**Active set.** :func:`_svm_active_set` is an exact primal active-set method. Each iteration
solves the equality-constrained QP of the current partition (a ``(d+1+|W|)``-square KKT system,
W = the records held on the margin), then does an exact line search of the piecewise-quadratic
objective along the step, flipping the sides of the records it crosses; a record whose multiplier
leaves ``[0, c]`` is released from W. The result is certified by the KKT conditions (tolerance
``_AS_KKT_TOL``); anything the solver cannot finish or certify raises :class:`_ActiveSetFailed`,
and the caller then falls back to libsvm, so a pair never gets an unchecked fit.

**Warm start.** Neighbouring databases D, D′ share n − 1 records, so D's partition of the records
is nearly D′'s: D′ is solved from D's exact solution with only the changed record's side guessed
afresh. D itself is solved cold from the all-at-bound start ``w₀ = c·Σ yᵢxᵢ`` when that start
leaves at most ``_AS_COLD_MAX_BEYOND`` of the records beyond the margin (then nearly every α is at
its bound, libsvm's SMO needs ~n/2 iterations — its slowest case — and the active set converges
in a few steps); otherwise D is fitted by libsvm and only polished here.

**Bias.** b is not always unique: when no record is strictly on the margin with 0 < α < c (on
Figure-6 data, d = 2, that is the usual case) every b in an interval ``[t_(n₊), t_(n₊+1)]`` is
optimal (tᵢ = yᵢ − w·xᵢ sorted, n₊ = number of +1 labels). libsvm then returns the interval's
midpoint; :func:`_svm_mid_b` reproduces that rule (and returns the unique b when the interval is a
point), so the answers here agree with libsvm's to its tolerance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# KKT tolerance of the certificate, relative to c.
_AS_KKT_TOL = 1e-9
# Cold active-set solve of D is tried only when the all-at-bound start leaves at most this fraction
# of records beyond the margin (see the module docstring); otherwise D is fitted by libsvm.
_AS_COLD_MAX_BEYOND = 0.2


class _ActiveSetFailed(Exception):
    pass


def _svm_yz(db: np.ndarray) -> np.ndarray:
    """Rows yᵢ·(xᵢ, 1), so that the margin of record i is ``YZ[i] @ (w, b)``."""
    y = db[:, 0]
    return y[:, None] * np.concatenate([db[:, 1:], np.ones((db.shape[0], 1))], axis=1)


def _svm_mid_b(YZ: np.ndarray, w: np.ndarray) -> float:
    """Midpoint of argmin_b of the objective with w fixed (libsvm's choice when b is not unique)."""
    y = YZ[:, -1]
    thr = y - y * (YZ[:, :-1] @ w)  # b at which record i sits on its margin
    npos = int(np.count_nonzero(y > 0))
    part = np.partition(thr, (npos - 1, npos))
    return 0.5 * (float(part[npos - 1]) + float(part[npos]))


def _svm_sides(YZ: np.ndarray, v: np.ndarray, eta: float = 0.0) -> np.ndarray:
    """+1: hinge active (margin < 1), −1: beyond the margin, 0: on the margin within ``eta``."""
    m = YZ @ v
    return np.where(m < 1.0 - eta, 1, np.where(m > 1.0 + eta, -1, 0)).astype(np.int8)


def _svm_active_set(YZ: np.ndarray, c: float, v: np.ndarray, side: np.ndarray, max_iter: int):
    """Exact solution ``(v, side)`` from the start ``(v, side)``; raises _ActiveSetFailed."""
    p = YZ.shape[1]
    v = np.array(v, dtype=np.float64)
    side = np.array(side, dtype=np.int8)
    W = [int(i) for i in np.flatnonzero(side == 0)]
    try:
        if len(W) > p:
            raise _ActiveSetFailed("more records on the margin than dimensions")
        if W:  # put v exactly on the working set's margins (minimum-norm correction)
            A = YZ[W]
            v = v + A.T @ np.linalg.solve(A @ A.T, 1.0 - A @ v)
        P = np.eye(p)
        P[-1, -1] = 0.0
        beta = np.zeros(0)
        for _ in range(max_iter):
            k = len(W)
            if k == 0:  # b is free: minimise over it exactly, then sides from the margins
                v[-1] = _svm_mid_b(YZ, v[:-1])
                side = _svm_sides(YZ, v)
            act = side == 1
            g = act.astype(np.float64) @ YZ
            if k == 0:
                s = np.append(c * g[:-1] - v[:-1], 0.0)
            else:
                A = YZ[W]
                K = np.zeros((p + k, p + k))
                K[:p, :p] = P
                K[:p, p:] = -A.T
                K[p:, :p] = A
                sol = np.linalg.solve(K, np.concatenate([c * g, np.ones(k)]))
                s = sol[:p] - v
                beta = sol[p:]
            m = YZ @ v
            delta = YZ @ s
            d0 = float(v[:-1] @ s[:-1] - c * delta[act].sum())  # slope at t = 0+ (δ = 0 on W)
            if not d0 < -1e-14 * max(1.0, float(v[:-1] @ v[:-1])):
                # no descent left on this partition: optimal unless a multiplier is out of [0, c]
                if k == 0:
                    beta = np.zeros(0)
                    break
                viol = np.maximum(-beta, beta - c)
                a = int(np.argmax(viol))
                if viol[a] <= _AS_KKT_TOL * c:
                    break
                j = W.pop(a)
                side[j] = -1 if beta[a] < 0 else 1
                continue
            # exact line search of the convex piecewise-quadratic objective along s
            a2 = float(s[:-1] @ s[:-1])
            cand = np.flatnonzero(((side == 1) & (delta > 0)) | ((side == -1) & (delta < 0)))
            tb = np.maximum((1.0 - m[cand]) / delta[cand], 0.0)
            order = np.argsort(tb, kind="stable")
            tb, cand = tb[order], cand[order]
            jumps = c * np.abs(delta[cand])
            cum = np.cumsum(jumps)
            before = d0 + a2 * tb + (cum - jumps)  # slope just before each breakpoint
            q = int(np.argmax(before + jumps >= 0)) if cand.size and before[-1] + jumps[-1] >= 0 else cand.size
            if q < cand.size and before[q] <= 0:
                t, stop = float(tb[q]), int(cand[q])
            else:
                if a2 <= 0:
                    raise _ActiveSetFailed("flat direction")
                t, stop = -(d0 + (float(cum[q - 1]) if q else 0.0)) / a2, -1
            crossed = cand[:q]
            side[crossed] = -side[crossed]
            v = v + t * s
            if stop >= 0:
                if len(W) >= p:
                    raise _ActiveSetFailed("working set full")
                side[stop] = 0
                W.append(stop)
        else:
            raise _ActiveSetFailed("iteration budget exhausted")
    except np.linalg.LinAlgError as exc:
        raise _ActiveSetFailed(str(exc)) from None
    if not np.all(np.isfinite(v)):
        raise _ActiveSetFailed("non-finite iterate")
    # certificate: multipliers in [0, c] consistent with the margins, and stationarity
    full = np.where(side == 1, c, 0.0)
    if W:
        full[W] = beta
    v[-1] = _svm_mid_b(YZ, v[:-1])
    m = YZ @ v
    tol = _AS_KKT_TOL
    ok = (np.all(full >= -tol * c) and np.all(full <= c * (1 + tol))
          and np.all(full[m < 1 - tol] >= c * (1 - tol)) and np.all(full[m > 1 + tol] <= tol * c))
    r = full @ YZ
    r[:-1] -= v[:-1]
    if not ok or np.max(np.abs(r)) > 1e-8 * max(1.0, float(np.max(np.abs(v[:-1])))):
        raise _ActiveSetFailed("KKT certificate failed")
    return v, _svm_sides(YZ, v, tol)


def _svm_clean(database: Any) -> np.ndarray | None:
    """The database as float64 if SVM.__call__ would accept it, else None (let __call__ raise)."""
    try:
        db = np.asarray(database, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if db.ndim != 2 or db.shape[0] < 2 or db.shape[1] < 2 or not np.all(np.isfinite(db)):
        return None
    y = db[:, 0]
    pos = y == 1.0
    if not np.all(pos | (y == -1.0)) or pos.all() or not pos.any():
        return None
    return db
