"""The exponential mechanism over a finite response set: ℓ∞ sensitivity over responses, ε-DP."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from scipy import special

from raydp import noise
from raydp.errors import MechanismError, TargetError

from .base import Mechanism, as_float_array, check_sensitivity, epsilon_at, require_finite

__all__ = ["Exponential"]


def _same(a, b) -> bool:
    try:
        eq = a == b
        if isinstance(eq, np.ndarray):
            return bool(np.array_equal(a, b))
        return bool(eq)
    except Exception:  # noqa: BLE001 - incomparable objects are distinct
        return False


class Exponential(Mechanism):
    """Exponential mechanism over a finite response set; ℓ∞ sensitivity over responses; ε-DP.

    The target returns scores over ``responses``: either an array of ``len(responses)`` scores, or a
    callable ``r -> score`` that :meth:`embed` evaluates on each response. :meth:`release` returns one
    response with probability ``∝ exp(ε s(r) / (2Δ))``, sampled as report-noisy-max with Gumbel noise of
    scale ``2Δ/ε`` (OpenDP), i.e. in log space: no score range underflows. Δ = 0 gives the argmax.

    Parameters
    ----------
    epsilon : float
        Finite and > 0.
    responses : sequence
        Non-empty, distinct candidates (a list, tuple, range or 1-D array; order matters).

    >>> mech = Exponential(1.0, ["low", "mid", "high"])
    >>> mech.release([0.0, 1.0, 5.0], sensitivity=0.0)
    'high'
    >>> mech.embed(lambda r: len(r))
    array([3., 3., 4.])
    >>> mech.release([0.0, 1e6, 1e6 + 1], sensitivity=1.0) in ("mid", "high")
    True
    """

    name = "exponential"
    norm = "linf"

    def __init__(self, epsilon: float, responses: Sequence[Any]):
        super().__init__(epsilon)
        if isinstance(responses, (str, bytes)):
            raise MechanismError(
                "responses must be a sequence of candidates, got a string; wrap it in a list"
            )
        if isinstance(responses, (set, frozenset, dict)):
            raise MechanismError(
                f"responses must be an ordered sequence (list, tuple, range, 1-D array), got "
                f"{type(responses).__name__}; pass sorted(...) or list(...)"
            )
        if isinstance(responses, np.ndarray):
            if responses.ndim != 1:
                raise MechanismError(f"a responses array must be 1-D, got shape {responses.shape}")
            responses = responses.tolist()
        try:
            items = tuple(responses)
        except TypeError:
            raise MechanismError(
                f"responses must be a non-empty sequence, got {type(responses).__name__}"
            ) from None
        if len(items) == 0:
            raise MechanismError("responses must be non-empty: the mechanism needs something to select")
        try:
            distinct = len(set(items)) == len(items)
        except TypeError:  # unhashable responses: compare pairwise
            distinct = not any(
                _same(items[i], items[j]) for i in range(len(items)) for j in range(i)
            )
        if not distinct:
            raise MechanismError("responses must be distinct; found a repeated response")
        self._responses = items

    @property
    def responses(self) -> tuple:
        """The candidate responses, in order."""
        return self._responses

    def embed(self, value) -> np.ndarray:
        """Scores over the responses: from an array of ``len(responses)`` or a callable ``r -> score``."""
        k = len(self._responses)
        if callable(value):
            out = np.empty(k, dtype=np.float64)
            for i, r in enumerate(self._responses):
                s = value(r)
                try:
                    out[i] = float(np.asarray(s, dtype=np.float64).reshape(()))
                except (TypeError, ValueError):
                    raise TargetError(
                        f"the score function must return one real number per response; "
                        f"for response {r!r} it returned {s!r}"
                    ) from None
            return out
        vec = as_float_array(value, "scores").ravel()
        if vec.size != k:
            raise TargetError(
                f"expected {k} scores (one per response), got {vec.size}; return an array of "
                "len(responses) scores or a callable response -> score"
            )
        return vec

    def noise_scale(self, sensitivity: float) -> float:
        """Gumbel noise scale ``2Δ/ε``."""
        return 2.0 * check_sensitivity(sensitivity) / self._epsilon

    def probabilities(self, value, sensitivity: float) -> np.ndarray:
        """Exact selection probabilities ``softmax(ε s / (2Δ))`` (one-hot argmax for Δ = 0)."""
        scale = self.noise_scale(sensitivity)
        scores = self.embed(value)
        require_finite(scores, "scores")
        if scale == 0.0:
            p = np.zeros(scores.size)
            p[int(np.argmax(scores))] = 1.0
            return p
        with np.errstate(over="ignore"):  # shift first: the top score maps to 0, so no inf - inf = NaN
            return special.softmax((scores - scores.max()) / scale)

    def release(self, value, sensitivity: float):
        """One response, chosen with probability ∝ ``exp(ε s(r) / (2Δ))``."""
        scale = self.noise_scale(sensitivity)
        scores = self.embed(value)
        require_finite(scores, "scores")
        return self._responses[noise.noisy_max_index(scores, scale)]

    def exact_privacy(self, value, value_prime, sensitivity: float, *, claim=None) -> dict:
        """Exact δ(ε) and ε(δ) on a pair of score vectors, from the exact selection probabilities p, q.

        ``δ(ε) = max(Σ_r (p_r − e^ε q_r)_+, Σ_r (q_r − e^ε p_r)_+)`` (the worse direction); ε(δ) by bisection.

        >>> Exponential(1.0, ["a", "b"]).exact_privacy([0.0, 0.0], [0.0, 1.0], 1.0)["delta"]
        0.0
        """
        eps, dlt, u, v, _, scale = self._privacy_inputs(value, value_prime, sensitivity, claim)
        p, q = special.softmax(u / scale), special.softmax(v / scale)

        def delta_of(e):
            return float(max(np.sum(np.maximum(p - math.exp(e) * q, 0.0)),
                             np.sum(np.maximum(q - math.exp(e) * p, 0.0))))

        return {"epsilon": epsilon_at(delta_of, dlt), "delta": delta_of(eps)}

    def _params(self) -> dict:
        return {"epsilon": self._epsilon, "responses": list(self._responses)}
