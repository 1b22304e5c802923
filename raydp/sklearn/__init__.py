"""Any scikit-learn estimator, private in one line: :class:`PrivateEstimator`.

The fitted float parameters of an estimator (a linear model's ``coef_`` and ``intercept_``, a
pipeline's scaler statistics, k-means centres, ...) are a black-box function of the training data.
:class:`PrivateEstimator` samples their sensitivity from a public oracle (Algorithm 1), fits the
wrapped estimator once on the private data and releases those parameters with Sample-Then-Respond
(Algorithm 2): ``raydp.sample_then_respond``, so the ledger, the checks of a stored Δ̂ and the
(ε, δ, γ) statement are the ones every other release has. No sensitivity is derived by hand.

>>> import numpy as np
>>> from sklearn.linear_model import LogisticRegression
>>> from raydp import SamplerOptions, oracles
>>> from raydp.sklearn import PrivateEstimator
>>> rng = np.random.default_rng(0)
>>> def data(size):                                    # rows [x_1, x_2 | label]
...     y = rng.integers(0, 2, size)
...     return np.column_stack([rng.normal(y[:, None] - 0.5, 0.5, (size, 2)), y])
>>> public, private = data(400), data(200)
>>> model = PrivateEstimator(LogisticRegression(), oracle=oracles.bootstrap(public),
...                          epsilon=1.0, gamma=0.2, m=100, options=SamplerOptions(seed=0))
>>> model = model.fit(private[:, :2], private[:, 2])
>>> model.released_params_
['coef_', 'intercept_']
>>> model.release_.statement().startswith("(1, 0, 0.2")
True

What is released, and what is not
---------------------------------
Records are rows ``[X | y]`` (label last) for a supervised estimator, rows of ``X`` otherwise; the
oracle must draw records of that width. Before anything private is touched, the estimator is fitted
once on a *public* sample of n oracle records (the "skeleton"). Every fitted attribute of the released
model ``estimator_`` is either one of the released parameters (noised) or the skeleton's (public):
iteration counts, ``classes_``, unused statistics (``StandardScaler.var_``, ``LinearRegression.singular_``)
never come from the private data. By default the released parameters are the fitted float arrays (and
float scalars) that predictions use, found on the skeleton by setting each to NaN and watching
``predict``/``predict_proba``/``decision_function``/``transform`` change; ``params=`` (a list of
attribute paths such as ``"logisticregression.coef_"``, or a callable taking the fitted skeleton and
returning one) overrides that. A ``random_state`` left at None is fixed to 0, so that the fit is a
function of the data, as the sampler requires.

Parameters that are not identified
----------------------------------
Parameters that can permute or flip between two fits on neighbouring data would make Δ̂ as large as
the parameters themselves. raydp canonicalises the common ones against the skeleton's fit: k-means
centres (``KMeans``, ``MiniBatchKMeans``) are matched to the skeleton's by an optimal assignment,
principal axes (``PCA``, ``IncrementalPCA``, ``TruncatedSVD``) get the sign of the skeleton's.
Estimators whose parameters are unidentified in other ways (mixtures, ICA/NMF-like factorisations,
neural networks) or are training records themselves (kernel SVMs, nearest neighbours) are refused
unless ``params=`` names what to release. Tested: ``LogisticRegression`` (binary and multinomial),
``LinearSVC``, ``Ridge``, ``LinearRegression``, pipelines with ``StandardScaler``, ``KMeans``, ``PCA``.

Useful by default
-----------------
Preprocessing that leads a pipeline (scalers, encoders, imputers: :data:`PUBLIC_BY_DEFAULT`) is fitted
on public oracle records and frozen (``public_steps="auto"``; a list of step names chooses, ``None``
opts out): its statistics cost no privacy and are not released, and the model behind it sees features
on a public scale. ``preview(n)`` plays the release on public records before any private one is read
and reports the expected score per ε next to the non-private and a trivial one; ``fit`` does the same
at its ε and warns — with a ``PrivateSearchCV(...)`` line over regularisation and public clipping that
previews better — (``on_useless="refuse"``: refuses, before any charge) when the release is expected to be no
better than the trivial predictor. :class:`PrivateSearchCV` picks hyperparameters by that previewed
private score and releases once.

The package's modules, one job each: :mod:`~raydp.sklearn.params` (which fitted attributes are
parameters, which of them predictions use), :mod:`~raydp.sklearn.canonical` (aligning unidentified
parameters), :mod:`~raydp.sklearn.target` (the estimator as a sampler target),
:mod:`~raydp.sklearn.fast` (a block of databases fitted at once: cheaper pairs, the same parameters),
:mod:`~raydp.sklearn.inputs` (checks of X, y and the estimator), :mod:`~raydp.sklearn.public` (steps
fitted on public records), :mod:`~raydp.sklearn.utility` (the preview), :mod:`~raydp.sklearn.estimator`
(the meta-estimator, whose ``fit`` is a sequence of named steps) and :mod:`~raydp.sklearn.search`
(model selection on public data).
"""

from .estimator import PrivateEstimator
from .params import REFUSED, fitted_float_params, prediction_params
from .public import PUBLIC_BY_DEFAULT
from .search import PrivateSearchCV
from .suggest import PublicClip, grid_for, suggest

PrivateEstimator._suggest = staticmethod(suggest)  # the warning's PrivateSearchCV line (see PrivateEstimator)
PrivateEstimator._grid = staticmethod(grid_for)  # the candidates of tune=True (see PrivateEstimator)
from .target import EstimatorTarget, estimator_params
from .utility import UtilityPreview, UtilityWarning
from ..errors import UtilityError

__all__ = ["PrivateEstimator", "PrivateSearchCV", "PublicClip", "UtilityPreview", "UtilityWarning", "UtilityError",
           "EstimatorTarget",
           "estimator_params", "fitted_float_params", "prediction_params", "REFUSED", "PUBLIC_BY_DEFAULT"]
