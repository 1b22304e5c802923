"""Canonical forms of parameters that are identified only up to a permutation or a sign.

Two fits on neighbouring data can list k-means centres in another order or flip a principal axis;
G would then be as large as the parameters. They are aligned to the public fit's (the references)
before G is measured and before release: centres by an optimal assignment, axes by sign.
"""

from __future__ import annotations

import numpy as np

from .params import assign, estimators, resolve

__all__ = ["canonical_kinds", "canonicalise"]


def canonical_kinds(model) -> dict:
    """``{path of the attribute: kind}`` for the parameters raydp canonicalises in ``model``."""
    from sklearn.cluster import KMeans, MiniBatchKMeans
    from sklearn.decomposition import PCA, IncrementalPCA, TruncatedSVD

    kinds = {}
    for prefix, est in estimators(model):
        if isinstance(est, (KMeans, MiniBatchKMeans)):
            kinds[prefix + "cluster_centers_"] = "match-rows"
        elif isinstance(est, (PCA, IncrementalPCA, TruncatedSVD)):
            kinds[prefix + "components_"] = "match-signs"
    return kinds


def canonicalise(model, references: dict, kinds: dict) -> None:
    """Align ``model``'s unidentified parameters to ``references`` (the skeleton's), in place."""
    from scipy.optimize import linear_sum_assignment

    for path, kind in kinds.items():
        value = np.asarray(resolve(model, path), dtype=np.float64)
        ref = references[path]
        if value.shape != ref.shape:
            continue  # the shape check of EstimatorTarget reports it
        if kind == "match-rows":  # k-means centres: the assignment to the reference with least total distance
            cost = ((value[None, :, :] - ref[:, None, :]) ** 2).sum(axis=-1)
            _, order = linear_sum_assignment(cost)
            assign(model, path, value[order].copy())
        else:  # principal axes: the sign that agrees with the reference axis
            signs = np.where(np.sum(value * ref, axis=1) < 0, -1.0, 1.0)
            assign(model, path, value * signs[:, None])


