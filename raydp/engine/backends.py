"""Choosing a backend: an object (:class:`LocalBackend`, :class:`RayBackend`) or a string shortcut.

Every backend has one interface, ``run(job, blocks, *, compact=None) -> iterator of BlockResult``,
and a ``name``. The strings are shortcuts: ``"local"`` is ``LocalBackend()``, ``"ray"`` is
``RayBackend()``, and ``"auto"`` is the Ray backend today. Options given next to a string are the
fields of the backend it names (``backend="ray", address=...`` is ``RayBackend(address=...)``);
anything else is refused with the list of what is allowed.

>>> as_backend("local")
LocalBackend(group_size=1, shuffle_seed=None)
>>> as_backend("ray", {"task_timeout": 30}).task_timeout
30.0
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import InvalidArgumentError
from .local import LocalBackend
from .ray import RayBackend

BACKENDS = ("local", "ray", "auto")
_CLASSES = {"local": LocalBackend, "ray": RayBackend, "auto": RayBackend}


def option_names(backend) -> list[str]:
    cls = backend if isinstance(backend, type) else type(backend)
    return [f.name for f in fields(cls)]


def as_backend(backend, options: dict | None = None):
    """The backend object for ``backend`` (an object, or one of :data:`BACKENDS` plus its ``options``)."""
    options = dict(options or {})
    if isinstance(backend, (LocalBackend, RayBackend)):
        if options:
            raise InvalidArgumentError(f"option(s) {', '.join(sorted(options))} given next to a backend object; "
                                       f"set them on the object ({type(backend).__name__}(...)) instead")
        return backend
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise InvalidArgumentError(f"backend must be one of {', '.join(BACKENDS)} or a backend object "
                                   f"(LocalBackend(), RayBackend(...)); got {backend!r}")
    cls = _CLASSES[backend]
    if cls is LocalBackend and "task_timeout" in options:
        raise InvalidArgumentError("task_timeout needs the Ray backend (it kills the worker running the task); "
                                   "in process use pair_timeout")
    allowed = option_names(cls)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise InvalidArgumentError(f"unknown option(s) {', '.join(unknown)} for the {backend} backend; "
                                   f"allowed: {', '.join(sorted(allowed))}")
    return cls(**options)
