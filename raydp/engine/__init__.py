"""The engine: block indices in, block results out. It knows nothing about privacy.

``blocks`` is the block function (the only code that draws databases and evaluates the target),
``local`` and ``ray`` the two backends that run it, ``reduce`` the order statistics, ``progress``
the display, ``loopback`` the switch that keeps Ray on 127.0.0.1. The sampler (:mod:`raydp.sampler`)
orchestrates them; nothing here calls back up.
"""

from .backends import BACKENDS, AutoBackend, as_backend
from .blocks import BlockLayout, BlockResult, PairJob
from .local import LocalBackend
from .protocol import Backend
from .ray import RayBackend

__all__ = ["BACKENDS", "AutoBackend", "Backend", "as_backend", "BlockLayout", "BlockResult", "PairJob",
           "LocalBackend", "RayBackend"]
