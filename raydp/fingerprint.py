"""Content fingerprints: what a callable or object *computes*, not what it is called.

A stored Δ̂ is reused only for the function it was computed for. Naming that function by its
qualified name is not enough: every lambda is ``<lambda>``, every ``functools.partial`` is
``functools:partial``, and two instances of one class differ by their attributes — a Δ̂ sampled for
``lambda d: d.mean()`` must never be accepted for ``lambda d: 1000 * d.mean()``.
:func:`content_digest` hashes what fixes the behaviour:

- a function defined outside the installed libraries: its bytecode, constants (nested code
  included), names, defaults, keyword defaults, closure cells and the module globals its code reads;
- ``functools.partial``: the function, its arguments and keywords; a bound method: the function and
  the object it is bound to;
- any other object: its class and its state as ``pickle`` sees it (``__reduce_ex__``), so a callable
  object's attributes, a fitted model's arrays, a generator's state all count;
- arrays by dtype, shape and bytes; containers element by element; an object that defines
  ``identity()`` by that identity (it names what matters itself);
- what lives in an installed library (numpy, scikit-learn, the standard library): by reference
  (``module:qualname``) *and* the library's distribution name and version (the standard library:
  the Python version), so an upgrade changes the fingerprint; a module of the user's own (not the
  standard library, not an installed distribution) by the SHA-256 of its source file, so an edit of
  a helper module the target calls changes it too;
- the modules a function imports *in its body* (``def f(d): import mylib; from . import helper``,
  code nested in it included, and ``importlib.import_module("name")`` / ``__import__("name")`` with a
  constant name) by the same rules as a module it reads as a global: each module the import runs
  (``import a.b.c``: ``a``, ``a.b`` and ``a.b.c``; ``from a.b import c``: ``a``, ``a.b``, and
  ``a.b.c`` when ``c`` is a submodule), relative imports resolved against the function's package. A
  module not imported yet is located without importing it; one that cannot be found makes the
  function not statically verifiable (below). A function without such imports keeps the fingerprint
  it had before they counted;
- a function's attributes (``f.k = 3``), what a wrapper wraps (``functools.lru_cache``,
  ``functools.wraps``), an ndarray subclass's full pickled state (a masked array's mask), and an
  object of a user's class by its own attributes (``vars``) rather than what its ``__getstate__``
  chooses to pickle.

Not part of a fingerprint: file names and line numbers (moving a function in its file changes
nothing), object ids, dict insertion order. The bytecode is the interpreter's, so a new Python minor
version gives new fingerprints: a stored run is then refused, never wrongly accepted.

What cannot be read — an object that refuses to be pickled (a lock, an open file, a live
connection), a ufunc made by ``numpy.frompyfunc`` (its Python function is out of reach), a user
module without a source file, a module a function imports in its body that cannot be found — gives
``None``: the target is then *not statically verifiable*, and
a stored Δ̂ is matched to it only after its witness pairs were replayed (see
:func:`raydp.identity.check_reusable` and :mod:`raydp.engine.witness`). A static fingerprint of
arbitrary Python always has holes; the replay is the check that has none for the pairs it looks at.

>>> content_digest(lambda d: d.mean()) == content_digest(lambda d: d.mean())
True
>>> content_digest(lambda d: d.mean()) == content_digest(lambda d: 1000 * d.mean())
False
"""

from __future__ import annotations

import dis
import functools
import hashlib
import importlib.util
import os
import sys
import sysconfig
import types

import numpy as np

__all__ = ["content_digest", "Unfingerprintable"]


class Unfingerprintable(Exception):
    """Raised inside the walk for an object whose content cannot be read; ``content_digest`` gives None."""


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {os.path.dirname(os.__file__)}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


_LIBRARY_ROOTS = _library_roots()
_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME"})
# raydp's own objects are fixed by raydp's version, which every run identity records.
_BY_REFERENCE_PACKAGES = ("raydp",)
# Modules imported in a function's body count (module docstring). Internal switch, for tests: off gives
# the fingerprints of before they counted (a function without inner imports has those anyway).
_INNER_IMPORTS = True
_SKIPPED_OPS = frozenset({"EXTENDED_ARG", "NOP", "CACHE"})
_CONST_OPS = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})
_DYNAMIC_IMPORTS = frozenset({"import_module", "__import__"})


@functools.lru_cache(maxsize=None)
def _distributions() -> dict:
    import importlib.metadata

    try:
        return importlib.metadata.packages_distributions()
    except Exception:  # pragma: no cover - a broken environment: versions unknown
        return {}


@functools.lru_cache(maxsize=1024)
def library_version(module: str) -> str:
    """What fixes a library module's code: ``python-3.11.7`` for the standard library, ``numpy==2.4.6``
    for an installed distribution, ``raydp==...`` for raydp's own modules; ``?`` when unknown."""
    import importlib.metadata

    top = (module or "").split(".")[0]
    if top in _BY_REFERENCE_PACKAGES:
        from ._version import __version__

        return f"raydp=={__version__}"
    if top in getattr(sys, "stdlib_module_names", ()) or top in sys.builtin_module_names:
        return "python-" + ".".join(map(str, sys.version_info[:3]))
    versions = []
    for dist in sorted(set(_distributions().get(top, ()))):
        try:
            versions.append(f"{dist}=={importlib.metadata.version(dist)}")
        except Exception:  # pragma: no cover - metadata gone between the two calls
            versions.append(f"{dist}==?")
    return ",".join(versions) or "?"


def is_library(obj) -> bool:
    """True for a class or function of the standard library or an installed package."""
    return _is_library_module(getattr(obj, "__module__", None))


def _is_library_module(name: str | None) -> bool:
    """True for a module of the standard library or an installed package (by reference, not by value)."""
    if not name or name == "__main__":
        return False
    if name.split(".")[0] in _BY_REFERENCE_PACKAGES or name in sys.builtin_module_names:
        return True
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if module is None or path is None:  # a builtin or frozen module, or one never imported here
        return module is not None
    return os.path.realpath(path).startswith(_LIBRARY_ROOTS)


def _importable_as(obj) -> str | None:
    """``module:qualname`` when importing that name gives ``obj`` back (so a reference names it)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        return None
    found = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return f"{module}:{qualname}" if found is obj else None


class _Hasher:
    def __init__(self):
        self.h = hashlib.sha256()
        self.memo: dict[int, int] = {}
        self.keep: list = []  # objects seen, kept alive so that their ids stay unique during the walk

    def tag(self, *parts) -> None:
        for p in parts:
            data = p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogatepass")
            self.h.update(len(data).to_bytes(8, "little"))
            self.h.update(data)

    def sub(self, obj) -> str:
        """A digest of ``obj`` alone (to order set elements and dict keys)."""
        other = _Hasher()
        other.feed(obj)
        return other.h.hexdigest()

    def feed(self, obj) -> None:  # noqa: C901 - one dispatch over kinds of objects
        if obj is None or isinstance(obj, (bool, int, float, complex)):
            self.tag(type(obj).__name__, repr(obj))
            return
        if isinstance(obj, (str, bytes, bytearray)):
            self.tag(type(obj).__name__, bytes(obj) if not isinstance(obj, str) else obj)
            return
        key = id(obj)
        if key in self.memo:  # a cycle or a shared object: a back-reference by order of first sight
            self.tag("ref", self.memo[key])
            return
        self.memo[key] = len(self.memo)
        self.keep.append(obj)
        if type(obj) is np.ndarray:  # a subclass (a masked array) goes by its pickled state: its mask counts
            self._array(obj)
        elif isinstance(obj, np.generic):
            self.tag("npscalar", obj.dtype.str, obj.tobytes())
        elif isinstance(obj, (list, tuple)):
            self.tag(type(obj).__name__, len(obj))
            for item in obj:
                self.feed(item)
        elif isinstance(obj, (set, frozenset)):
            self.tag(type(obj).__name__, *sorted(self.sub(item) for item in obj))
        elif isinstance(obj, (dict, types.MappingProxyType)):
            self.tag("dict", len(obj))
            for k, v in sorted(obj.items(), key=lambda kv: self.sub(kv[0])):
                self.feed(k)
                self.feed(v)
        elif isinstance(obj, types.ModuleType):
            self._module(obj)
        elif isinstance(obj, types.CodeType):
            self._code(obj)
        elif isinstance(obj, functools.partial):
            self.tag("partial")
            self.feed(obj.func)
            self.feed(obj.args)
            self.feed(obj.keywords)
        elif isinstance(obj, types.MethodType):
            self.tag("method")
            self.feed(obj.__func__)
            self.feed(obj.__self__)
        elif isinstance(obj, types.FunctionType):
            self._function(obj)
        elif isinstance(obj, type):
            self._class(obj)
        elif isinstance(obj, np.ufunc) and _importable_as(obj) is None and getattr(np, obj.__name__, None) is not obj:
            raise Unfingerprintable(f"the ufunc {obj.__name__!r} was made by numpy.frompyfunc (or is not numpy's): "
                                    "its Python function cannot be read")
        elif isinstance(obj, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType,
                              np.ufunc)):
            module = getattr(obj, "__module__", None) or ("numpy" if isinstance(obj, np.ufunc) else "")
            self.tag("builtin", module, getattr(obj, "__qualname__", repr(obj)), library_version(module))
            owner = getattr(obj, "__self__", None)
            if owner is not None and not isinstance(owner, types.ModuleType):
                self.feed(owner)  # a bound builtin method, e.g. rng.normal: its object's state counts
        elif obj is _EMPTY_CELL:
            self.tag("empty-cell")
        elif callable(getattr(obj, "__wrapped__", None)) and not _is_library_module(getattr(obj, "__module__", None)):
            self.tag("wrapper", type(obj).__module__, type(obj).__qualname__)  # lru_cache & co.: what it wraps
            self.feed(obj.__wrapped__)
            self.feed(getattr(obj, "cache_parameters", lambda: None)())
        elif (ref := _importable_as(obj)) is not None and _is_library_module(getattr(obj, "__module__", None)):
            # e.g. numpy's dispatching functions (np.mean): named by the library and its version
            self.tag("named", ref, library_version(obj.__module__))
        elif callable(getattr(obj, "identity", None)):
            ident = obj.identity()
            self.tag("identity")
            self.feed(ident)
        else:
            self._object(obj)

    def _array(self, a: np.ndarray) -> None:
        if a.dtype.hasobject:
            self.tag("objarray", a.shape)
            for item in a.ravel(order="C"):
                self.feed(item)
            return
        self.tag("array", a.dtype.str, a.shape, np.ascontiguousarray(a).tobytes())

    def _code(self, code: types.CodeType) -> None:
        # No co_filename, co_firstlineno, line tables or names of the code itself: moving a function
        # changes nothing it computes.
        self.tag("code", code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags,
                 code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
        self.feed(tuple(code.co_consts))

    def _globals_read(self, code: types.CodeType) -> list[str]:
        """Names the code (and code nested in it) loads as globals: not attribute names, which share
        co_names with them (``self.fail`` must not pull in a module-level function ``fail``)."""
        names = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_OPS}
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names |= set(self._globals_read(const))
        return sorted(names)

    def _module(self, module: types.ModuleType) -> None:
        name = module.__name__
        if _is_library_module(name):
            self.tag("module", name, library_version(name))
            return
        self.tag(*_module_source(name, getattr(module, "__file__", None)))

    def _function(self, fn: types.FunctionType) -> None:
        ref = _importable_as(fn)
        if ref is not None and _is_library_module(fn.__module__):
            self.tag("function-ref", ref, library_version(fn.__module__))
            return
        self.tag("function")
        self._code(fn.__code__)
        self.feed(fn.__defaults__)
        self.feed(fn.__kwdefaults__)
        self.feed(dict(vars(fn)))  # f.k = 3: a function's attributes are state its code may read
        cells = []
        for cell in fn.__closure__ or ():
            try:
                cells.append(cell.cell_contents)
            except ValueError:  # an empty cell (a name assigned later in the enclosing function)
                cells.append(_EMPTY_CELL)
        self.feed(tuple(cells))
        # The module globals the code reads: a lambda reading SCALE computes something else when SCALE
        # changes. Builtins and names the module does not define are not state.
        g = fn.__globals__
        for name in self._globals_read(fn.__code__):
            if name in g:
                self.tag("global", name)
                self.feed(g[name])
        # The modules its body imports: ``import mylib`` inside the function reads mylib as surely as a
        # global would. Tagged by name, not fed (no memo entry): a module imported in one process and
        # not yet in another gives the same tags, and the back-references after it the same numbers.
        if _INNER_IMPORTS:
            for module in _modules_imported(fn):
                self.tag("import", *_module_tags(module))

    def _class(self, cls: type) -> None:
        ref = _importable_as(cls)
        if ref is not None and _is_library_module(cls.__module__):
            self.tag("class-ref", ref, library_version(cls.__module__))
            return
        self.tag("class", cls.__qualname__)
        self.feed(tuple(b for b in cls.__bases__ if b is not object))
        own = {k: v for k, v in vars(cls).items() if k not in _CLASS_BOOKKEEPING}
        for name in sorted(own):
            self.tag("attr", name)
            self.feed(_unwrap_member(own[name]))

    def _object(self, obj) -> None:
        cls = type(obj)
        self.tag("object")
        self.feed(cls)
        if not _is_library_module(cls.__module__) and (hasattr(obj, "__dict__") or _slot_names(cls)):
            # A user's class: its own attributes, not what its __getstate__ chooses to pickle (a field
            # left out of the pickle may still scale what it computes).
            self.tag("attributes")
            self.feed(dict(getattr(obj, "__dict__", {})))
            self.feed({name: getattr(obj, name, _EMPTY_CELL) for name in _slot_names(cls)})
            return
        try:
            reduced = obj.__reduce_ex__(4)
        except Exception as exc:  # locks, files, sockets, live connections: no content to read
            raise Unfingerprintable(f"{cls.__module__}.{cls.__qualname__} cannot be pickled "
                                    f"({type(exc).__name__})") from None
        if isinstance(reduced, str):  # a global singleton, pickled by name
            self.tag("global-object", reduced)
            return
        # (callable, args[, state[, list items[, dict items[, setstate]]]]); iterators are drained
        parts = list(reduced[:3])
        for extra in reduced[3:5]:
            parts.append(None if extra is None else list(extra))
        self.feed(tuple(parts))


# Class attributes that are Python's bookkeeping, not behaviour; some are caches filled in later
# (pickle's __slotnames__, the ABC registry), which would change a class's digest after first use.
_CLASS_BOOKKEEPING = frozenset({
    "__dict__", "__weakref__", "__module__", "__doc__", "__qualname__", "__annotations__", "__slotnames__",
    "_abc_impl", "__abstractmethods__", "__parameters__", "__orig_bases__", "__firstlineno__",
    "__static_attributes__", "__match_args__", "__dataclass_params__",
})


class _EmptyCell:
    def __repr__(self) -> str:
        return "<empty cell>"


_EMPTY_CELL = _EmptyCell()


def _slot_names(cls: type) -> list[str]:
    names = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots if n not in ("__dict__", "__weakref__")]
    return names


def _unwrap_member(value):
    if isinstance(value, (staticmethod, classmethod)):
        return ("descriptor", type(value).__name__, value.__func__)
    if isinstance(value, property):
        return ("property", value.fget, value.fset, value.fdel)
    return value


def _module_source(name: str, path) -> tuple:
    """The tags of a user's own module: its name and the SHA-256 of its source file."""
    try:
        with open(path, "rb") as f:  # the user's own module: what it computes is its source
            source = f.read()
    except (OSError, TypeError):
        raise Unfingerprintable(f"module {name} has no source file to read") from None
    return ("module-source", name, hashlib.sha256(source).hexdigest())


def _find_spec(name: str):
    """The spec of a module not imported yet, found without importing it (nor its parents: their search
    path comes from their own spec), or None when it cannot be found."""
    parent, _, _ = name.rpartition(".")
    path = None
    if parent:
        loaded = sys.modules.get(parent)
        if loaded is not None:
            path = getattr(loaded, "__path__", None)
        else:
            spec = _find_spec(parent)
            path = None if spec is None else spec.submodule_search_locations
        if path is None:  # the parent is not a package (or cannot be found): no submodule of it
            return None
        path = list(path)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, path, None)
        except Exception as exc:
            raise Unfingerprintable(f"looking for module {name} raised {type(exc).__name__}") from None
        if spec is not None:
            return spec
    return None


def _is_submodule(name: str) -> bool:
    return name in sys.modules or _find_spec(name) is not None


def _module_tags(name: str) -> tuple:
    """What fixes module ``name``'s code, as :meth:`_Hasher._module` tags it (a library by its
    distribution's version, a user's module by its source), the same whether it is imported yet or not."""
    module = sys.modules.get(name)
    if module is not None:
        if _is_library_module(name):
            return ("module", name, library_version(name))
        return _module_source(name, getattr(module, "__file__", None))
    spec = _find_spec(name)
    if spec is None:
        raise Unfingerprintable(f"module {name}, imported in a function's body, cannot be found")
    origin = spec.origin if spec.has_location else None
    # as _is_library_module for the module once imported: builtin, frozen, namespace packages (no file)
    # and modules under the library roots are named by their library
    if (name.split(".")[0] in _BY_REFERENCE_PACKAGES or name in sys.builtin_module_names or origin is None
            or os.path.realpath(origin).startswith(_LIBRARY_ROOTS)):
        return ("module", name, library_version(name))
    return _module_source(name, origin)


def _package_of(fn: types.FunctionType) -> str | None:
    """The package a relative import in ``fn`` is resolved against, as the interpreter finds it."""
    g = fn.__globals__
    package = g.get("__package__")
    if package is None:
        spec = g.get("__spec__")
        if spec is not None:
            package = spec.parent
        else:
            name = g.get("__name__", fn.__module__)
            if not isinstance(name, str):
                return None
            package = name if "__path__" in g else name.rpartition(".")[0]
    return package if isinstance(package, str) else None


def _resolve(name: str, level: int, fn: types.FunctionType) -> str:
    if not level:
        return name
    package = _package_of(fn)
    bits = package.rsplit(".", level - 1) if package else []
    if len(bits) < level:
        raise Unfingerprintable(f"a relative import in {fn.__qualname__} goes beyond its package "
                                f"({package or 'none'})")
    return f"{bits[0]}.{name}" if name else bits[0]


def _imports_in(code: types.CodeType) -> list[tuple[int, str, tuple]]:
    """``(level, name, fromlist)`` of each import in ``code`` and code nested in it: the import statements
    (IMPORT_NAME, whose level and fromlist the two constants before it give; IMPORT_FROM names are that
    fromlist) and ``import_module("name")`` / ``__import__("name")`` calls with a constant name."""
    found = []
    ops = [ins for ins in dis.get_instructions(code) if ins.opname not in _SKIPPED_OPS]
    for i, ins in enumerate(ops):
        if ins.opname == "IMPORT_NAME":
            before = ops[max(0, i - 2):i]
            if len(before) != 2 or any(b.opname not in _CONST_OPS for b in before):
                raise Unfingerprintable(f"an import of {ins.argval} in {code.co_name} cannot be read")
            level, fromlist = before[0].argval, before[1].argval
            found.append((int(level), ins.argval, tuple(fromlist or ())))
        elif (ins.argval in _DYNAMIC_IMPORTS and ins.opname.startswith("LOAD_") and ins.opname not in _CONST_OPS
              and i + 1 < len(ops) and ops[i + 1].opname == "LOAD_CONST" and isinstance(ops[i + 1].argval, str)):
            name, package = ops[i + 1].argval, None
            if i + 2 < len(ops) and ops[i + 2].opname == "LOAD_CONST" and isinstance(ops[i + 2].argval, str):
                package = ops[i + 2].argval  # import_module(".x", "pkg")
            if name.startswith("."):
                if ins.argval != "import_module" or not package:
                    continue  # an error when called: nothing is imported
                try:
                    name = importlib.util.resolve_name(name, package)
                except (ImportError, ValueError):
                    continue  # beyond the top-level package: an error when called
            if name:
                found.append((0, name, ()))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += _imports_in(const)
    return found


def _modules_imported(fn: types.FunctionType) -> list[str]:
    """The modules the body of ``fn`` imports (each module an import runs), sorted; [] without imports."""
    names = set()
    for level, name, fromlist in _imports_in(fn.__code__):
        module = _resolve(name, level, fn)
        parts = module.split(".")
        names.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
        for item in fromlist:
            if item != "*" and _is_submodule(f"{module}.{item}"):
                names.add(f"{module}.{item}")
    return sorted(names)


def content_digest(obj) -> str | None:
    """SHA-256 (hex) of what ``obj`` computes (module docstring), or None if it cannot be read."""
    hasher = _Hasher()
    try:
        hasher.feed(obj)
    except Unfingerprintable:
        return None
    except RecursionError:
        return None
    return hasher.h.hexdigest()


def why_not(obj) -> str | None:
    """Why ``obj`` has no content digest (None when it has one)."""
    try:
        _Hasher().feed(obj)
    except Unfingerprintable as exc:
        return str(exc)
    except RecursionError:
        return "it nests too deeply"
    return None
