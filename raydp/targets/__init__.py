"""Built-in targets f : 𝒟ⁿ → B: the statistics and models of the paper's examples and experiments.

A target is any callable ``target(database)`` with ``database`` of shape ``(n, *record_shape)``.
The ones here are plain picklable classes with ``identity()``; the cheap ones also offer
``batch(databases)`` mapping ``(B, n, *record_shape) -> (B, *out_shape)`` with the same values as
calling the target on each database (up to float rounding of vectorised numpy).

Argument problems and databases a target cannot handle raise :class:`raydp.errors.TargetError`.

The package's modules:

* :mod:`raydp.targets.statistics` — :func:`mean`, :func:`median`, :func:`quantile`;
* :mod:`raydp.targets.svm` — :func:`svm`, the linear SVM (libsvm fits);
* :mod:`raydp.targets.svm_pair` — the exact warm-started active-set solver behind ``SVM.pair``;
* :mod:`raydp.targets.kde` — :func:`kde`, the kernel density estimate.

Use the names exported here (``targets.svm(...)``, ``targets.SVM``). The factories ``svm`` and
``kde`` share their names with their modules, and here the attribute is the factory: reach the
modules with ``from raydp.targets.svm import ...`` (``import raydp.targets.svm as m`` would give
the function).
"""

from __future__ import annotations

from typing import Any

from raydp.errors import TargetError

from .kde import KDE, KDEFunction, kde
from .statistics import Mean, Median, Quantile, mean, median, quantile
from .svm import DEFAULT_SVM_MAX_ITER, DEFAULT_SVM_TOL, SVM, svm  # noqa: F401  (DEFAULT_* named on the CLI)

__all__ = [
    "mean",
    "median",
    "quantile",
    "svm",
    "kde",
    "as_target",
    "Mean",
    "Median",
    "Quantile",
    "SVM",
    "KDE",
    "KDEFunction",
]


def as_target(obj: Any) -> Any:
    """Check ``obj`` is callable (``target(database) -> value``) and return it unchanged."""
    if not callable(obj):
        raise TargetError(
            f"a target must be callable as target(database) -> value, got {type(obj).__name__}"
        )
    return obj
