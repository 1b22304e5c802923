"""A privacy budget ledger: every release's (ε, δ, γ), recorded before its noise is drawn.

A stored Δ̂ can be reused for any number of releases, but each release spends its own ε and δ.
A :class:`Ledger` is a JSON file (one per private dataset) that fixes a total ε and δ when it is
created, records each release, and refuses a release that would take the spend past a total under
basic composition (ε and δ add up).

>>> import os, tempfile
>>> from raydp.ledger import Ledger
>>> path = os.path.join(tempfile.mkdtemp(), "ledger.json")
>>> ledger = Ledger.create(path, epsilon_total=1.0)        # creating a ledger fixes its totals
>>> with ledger.charge(0.25, 0.0, 0.05, mechanism="laplace", sensitivity=0.01) as entry:
...     pass                                               # draw the noise here
>>> ledger.spent(), ledger.remaining()
((0.25, 0.0), (0.75, 0.0))

What γ means across releases
----------------------------
(ε, δ, γ)-random DP (Hall et al. 2012; Definition 4 of Rubinstein & Aldà) asks that, with
probability ≥ 1 − γ over neighbouring databases D, D′ drawn from the oracle P, the outputs on D and
D′ be (ε, δ)-indistinguishable. In Sample-Then-Respond that probability is also over the sampler's
own draw G_1..G_m: the proof of Theorem 15 bounds Pr_{D,D′,G_1..G_m}[G(D,D′) ≤ Δ̂] ≥ 1 − γ, and a
sensitivity-induced mechanism run with Δ̂ is (ε, δ)-DP on every pair with G(D,D′) ≤ Δ̂.

* **Releases that reuse one Δ̂** share that single event. On a pair with G(D,D′) ≤ Δ̂, release i is
  (ε_i, δ_i)-indistinguishable for every i at once, so by basic composition the k releases together
  are (Σε_i, Σδ_i)-indistinguishable. Put differently, the k releases form one sensitivity-induced
  (Σε, Σδ)-DP mechanism and Theorem 15 applies to it as it stands: they are (Σε, Σδ, γ)-RDP.
  γ does not add up. The failures are correlated, though: on the γ-fraction of pairs where Δ̂ is
  too small, it is too small for every release that used it.
* **Releases that use different Δ̂s** fail on different events. By the union bound (no independence
  needed) the releases together are (Σε, Σδ, Σγ)-RDP, summing γ once per Δ̂.
* **Several Δ̂s read from one G sample** (``load_estimate(uri, gamma=...)`` and ``raydp show
  --gamma`` re-derive Δ̂ = G_(k) for another γ from the same m pairs) sit in between. If they are
  computed for the same target, norm, n and oracle from the same sample, then on a pair where
  G(D,D′) is at most the smallest of them (the one with the smallest k), every release is covered. That
  happens with probability ≥ 1 − γ of that estimate, which is at most the largest γ in the group. So
  such a group contributes max γ, not Σγ.

The ledger reports the composed guarantee (Σε, Σδ, Σ_groups max γ), where a *group* is one G
sample. It is identified by a SHA-256 of the estimate's provenance without the order-statistic
choice (k, γ, ρ, mode): same target, oracle, mechanism measure, n, seed, block size, m and version.
An entry without provenance is its own group. This relies on the provenance that raydp already
uses to refuse mismatched estimates. A target whose code changed under the same import path looks
like the same target. The ledger does not cap γ; a composed γ ≥ 1 means no guarantee. All
releases recorded in one ledger are assumed to be on the same private dataset.

Durability and concurrency
--------------------------
A release is charged in two phases. :meth:`Ledger.reserve` (or entering :meth:`Ledger.charge`)
runs read → check → append → write while holding an exclusive ``fcntl.flock`` on the ledger's
(resolved) directory — not on a lock file, which could be deleted mid-spend or differ by the
path's spelling. The write goes to a temporary file in the same directory that takes the ledger's
owner and mode, is fsynced, moved over the ledger with ``os.replace`` and followed by an fsync of
the directory; a read-only ledger is refused, and so is one with several hard links (replacing it
would fork the budget). The entry is on disk, marked ``reserved``, before the target sees the
private data and before any noise is drawn (:func:`raydp.sample_then_respond`). A crash after that point leaves the spend counted and never
under-counts. After a successful release the entry becomes ``released``. If the release raises, it
becomes ``failed`` and stays counted: the ledger cannot tell whether noise was drawn, and the
exception itself may depend on the private data. A caller that *knows* no noise was drawn may
call :meth:`Reservation.cancel`; a cancelled entry is kept for the record and not counted. A refused
release writes nothing. A ledger is created only by :meth:`Ledger.create`; it is never recreated or
reset, and a file it cannot read is an error.

Sums and rounding
-----------------
Sums are exact. Each amount is read as the shortest decimal that round-trips its float
(``repr``), and these are added as :class:`fractions.Fraction`. So 0.1 + 0.2 fits a total of 0.3
exactly, and anything past the total, however small, is refused. No tolerance is used. Relative to
the binary floats that calibrate the noise, the decimals differ by at most one rounding (≈1.1e-16
relative) per amount, so the float spend can exceed the total by at most about 2.3e-16 relative,
far below 1e-12.

The ledger never stores a released value or any private data: only (ε, δ, γ), the mechanism name,
Δ̂ (computed from the public oracle), fingerprints of the estimate's provenance, a time, a status
and an optional user label. Do not put private data in the label.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import logging
import os
import stat
import sys
import uuid

try:
    import fcntl
except ImportError:  # not a POSIX system (Windows): say what raydp runs on instead of a bare module name
    raise ImportError(f"raydp runs on Linux (its sandbox) and other POSIX systems (without the sandbox), not on "
                      f"{sys.platform}: its privacy ledger serialises writers with POSIX file locks (fcntl)") from None
from dataclasses import dataclass
from fractions import Fraction
from urllib.parse import unquote, urlparse

from .errors import BudgetError, InvalidArgumentError, InvalidTypeError
from .identity import estimate_fingerprint, sample_fingerprint
from .plan import format_up
from .validation import check_delta, check_epsilon, check_gamma, check_nonnegative

log = logging.getLogger("raydp.ledger")

KIND = "raydp-privacy-ledger"
FORMAT = 1
COUNTED = ("reserved", "released", "failed")
STATUSES = COUNTED + ("cancelled",)


def _exact(x: float) -> Fraction:
    return Fraction(repr(float(x)))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _local_path(path) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"ledger must be a local file path or a file:// URI, got {path!r}")
    if "://" in path:
        url = urlparse(path)
        if url.scheme != "file":
            raise InvalidArgumentError(
                f"ledger must be a local file (path or file:// URI), got {path!r}: its lock needs a local "
                "filesystem"
            )
        if url.netloc not in ("", "localhost"):
            raise InvalidArgumentError(f"ledger URI {path!r} names host {url.netloc!r}; only local files are supported")
        path = unquote(url.path)
    return os.path.abspath(os.path.expanduser(path))


def _check_total(value, what: str) -> float:
    if what.startswith("epsilon"):
        return check_epsilon(value, what, error=InvalidArgumentError)
    return check_delta(value, what, error=InvalidArgumentError)


# What a ledger entry records, each checked as every other ε, δ, γ and Δ in raydp (raydp.validation).
_AMOUNT_CHECKS = {
    "epsilon": lambda v: check_epsilon(v, error=InvalidArgumentError),
    "delta": lambda v: check_delta(v, error=InvalidArgumentError),
    "gamma": lambda v: check_gamma(v, allow_zero=True, error=InvalidArgumentError),
    "sensitivity": lambda v: check_nonnegative(v, "sensitivity", error=InvalidArgumentError),
}


def _check_amount(value, what: str) -> float:
    return _AMOUNT_CHECKS[what](value)


@dataclass(frozen=True)
class Guarantee:
    """The composed (ε, δ, γ)-random DP statement of every counted release in a ledger."""

    epsilon: float
    delta: float
    gamma: float
    releases: int
    estimates: int
    samples: int

    def to_dict(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "gamma": self.gamma, "releases": self.releases,
                "estimates": self.estimates, "samples": self.samples}

    def statement(self) -> str:
        if self.releases == 0:
            return "no releases yet"
        vacuous = " (γ ≥ 1: no random-DP guarantee)" if self.gamma >= 1 else ""
        return (f"({format_up(self.epsilon)}, {format_up(self.delta)}, {format_up(self.gamma)})-random "
                f"differential privacy over "
                f"{self.releases} release(s) using {self.estimates} estimate(s) from {self.samples} "
                f"G sample(s){vacuous}")


class Reservation:
    """A charge that is on disk; :meth:`commit` after the release, :meth:`cancel` only if no noise was drawn."""

    def __init__(self, ledger: Ledger, entry: dict, guarantee: Guarantee):
        self.ledger = ledger
        self.entry = dict(entry)
        self.id = int(entry["id"])
        self.guarantee = guarantee  # composed over every counted entry, this one included
        self.status = "reserved"

    def commit(self) -> None:
        self._finish("released")

    def fail(self) -> None:
        self._finish("failed")

    def cancel(self) -> None:
        """Give the budget back. Only correct if no noise was drawn for this reservation."""
        self._finish("cancelled")

    def _finish(self, status: str) -> None:
        if self.status != "reserved":
            raise BudgetError(f"ledger entry {self.id} is already {self.status}")
        self.ledger._set_status(self.id, status)
        self.status = status


class Ledger:
    """A privacy budget ledger stored as a JSON file at ``path`` (a local path or ``file://`` URI).

    ``Ledger.create(path, epsilon_total=E, delta_total=D)`` creates a new ledger (``delta_total``
    defaults to 0: pure-DP releases only) and refuses if the file exists. ``Ledger(path)`` opens an
    existing one; totals given there are checked against the stored ones. A ledger is **never**
    created implicitly: a ledger that was deleted must not come back with a full budget.

    The path is resolved (a symbolic link names the file it points to, so every spelling is one
    budget); a ledger with more than one hard link is refused (a spend would fork it). Spends are
    serialised by an ``fcntl`` lock on the ledger's directory, written to a temporary file that takes
    the ledger's owner and mode, fsynced and moved into place. A read-only ledger is never written.
    Mismatched totals, a missing or damaged file raise :class:`~raydp.errors.BudgetError`.
    """

    def __init__(self, path, epsilon_total: float | None = None, delta_total: float | None = None):
        self.path = os.path.realpath(_local_path(path))
        eps = None if epsilon_total is None else _check_total(epsilon_total, "epsilon_total")
        dlt = None if delta_total is None else _check_total(delta_total, "delta_total")
        if os.path.isdir(self.path):
            raise InvalidArgumentError(f"ledger path {self.path!r} is a directory; give a file name")
        if not os.path.exists(self.path):
            raise BudgetError(f"no ledger at {self.path!r}; a ledger is never created implicitly (a missing one must "
                              "not come back with a full budget) — create it once with Ledger.create(path, "
                              "epsilon_total=...) or `raydp ledger create PATH --epsilon-total E`")
        doc = self._read()  # writes are atomic replaces: reading needs no lock (nor write access)
        stored = (doc["epsilon_total"], doc["delta_total"])
        asked = (eps, dlt)
        diffs = [f"{name} stored {s!r}, given {a!r}" for name, s, a in
                 zip(("epsilon_total", "delta_total"), stored, asked) if a is not None and a != s]
        if diffs:
            raise BudgetError(f"ledger {self.path!r} was created with other totals ({'; '.join(diffs)}); "
                              "a ledger's totals are fixed when it is created — omit them or use a new ledger")
        self.epsilon_total, self.delta_total = stored

    @classmethod
    def create(cls, path, epsilon_total: float, delta_total: float = 0.0) -> "Ledger":
        """Create a new ledger with its totals; :class:`BudgetError` if one exists at ``path``."""
        real = os.path.realpath(_local_path(path))
        eps = _check_total(epsilon_total, "epsilon_total")
        dlt = _check_total(delta_total, "delta_total")
        if os.path.isdir(real):
            raise InvalidArgumentError(f"ledger path {real!r} is a directory; give a file name")
        parent = os.path.dirname(real)
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as exc:
            raise BudgetError(f"cannot create ledger {real!r}: {exc.strerror or exc}") from None
        doc = {"kind": KIND, "format": FORMAT, "epsilon_total": eps, "delta_total": dlt, "created": _now(),
               "entries": []}
        tmp = _write_tmp(real, doc, like=None)
        try:
            os.link(tmp, real)  # atomic create-if-absent
        except FileExistsError:
            raise BudgetError(f"a ledger already exists at {real!r}; it is never overwritten — open it with "
                              "Ledger(path) or choose another path") from None
        except OSError as exc:
            raise BudgetError(f"cannot create ledger {real!r}: {exc.strerror or exc}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _fsync_dir(parent)
        return cls(real)

    # ---- files -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        """An exclusive ``flock`` on the ledger's directory: no lock file that can be deleted or differ by
        spelling (the path is resolved), and every process that spends from this ledger takes it."""
        parent = os.path.dirname(self.path)
        try:
            fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError as exc:
            raise BudgetError(f"cannot lock ledger {self.path!r}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the other process has written
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _gone(self) -> BudgetError:
        return BudgetError(f"ledger {self.path!r} has disappeared; it is not recreated (that would reset the "
                           "budget) — restore it or start a new ledger deliberately")

    def _stat(self) -> os.stat_result:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise self._gone() from None
        except OSError as exc:
            raise BudgetError(f"cannot read ledger {self.path!r}: {exc.strerror or exc}") from None
        if st.st_nlink > 1:
            raise BudgetError(f"ledger {self.path!r} has {st.st_nlink} hard links; a spend would replace the file "
                              "under one name only and fork the budget — keep one name (a symbolic link is fine)")
        return st

    def _read(self) -> dict:
        self._stat()
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise self._gone() from None
        except OSError as exc:
            raise BudgetError(f"cannot read ledger {self.path!r}: {exc.strerror or exc}") from None
        try:
            doc = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
            _validate(doc)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            raise BudgetError(f"ledger {self.path!r} is corrupt ({str(exc)[:200]}); it was left untouched and is "
                              "never reset — restore it from a backup") from None
        return doc

    def _write(self, doc: dict) -> None:
        """Replace the ledger by ``doc``: same owner and mode, fsynced; refused if the ledger is read-only."""
        st = self._stat()
        if not st.st_mode & stat.S_IWUSR or not os.access(self.path, os.W_OK):
            raise BudgetError(f"ledger {self.path!r} is read-only; nothing was spent or changed (make it writable "
                              "to release from it)")
        parent = os.path.dirname(self.path)
        tmp = _write_tmp(self.path, doc, like=st)
        try:
            os.replace(tmp, self.path)
            _fsync_dir(parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise BudgetError(f"cannot write ledger {self.path!r}: {exc.strerror or exc}") from None

    # ---- accounting ------------------------------------------------------------------------------
    def entries(self) -> list[dict]:
        """Every entry, oldest first (cancelled ones included, with their status)."""
        return [dict(e) for e in self._read()["entries"]]

    def spent(self) -> tuple[float, float]:
        """(Σε, Σδ) over counted entries (reserved, released, failed): basic composition."""
        eps, dlt = _sums(self._read()["entries"])
        return float(eps), float(dlt)

    def remaining(self) -> tuple[float, float]:
        eps, dlt = _sums(self._read()["entries"])
        return float(_exact(self.epsilon_total) - eps), float(_exact(self.delta_total) - dlt)

    def guarantee(self) -> Guarantee:
        """The composed (Σε, Σδ, Σ over G samples of max γ) guarantee; see the module docstring."""
        return _compose(self._read()["entries"])

    def summary(self) -> dict:
        doc = self._read()
        eps, dlt = _sums(doc["entries"])
        return {"path": self.path, "epsilon_total": doc["epsilon_total"], "delta_total": doc["delta_total"],
                "spent": {"epsilon": float(eps), "delta": float(dlt)},
                "remaining": {"epsilon": float(_exact(doc["epsilon_total"]) - eps),
                              "delta": float(_exact(doc["delta_total"]) - dlt)},
                "guarantee": _compose(doc["entries"]).to_dict(), "entries": doc["entries"]}

    def reserve(self, epsilon: float, delta: float, gamma: float, *, mechanism: str, sensitivity: float,
                estimate: dict | None = None, label: str | None = None,
                calibration: str | None = None) -> Reservation:
        """Record a spend durably (status ``reserved``) or raise :class:`BudgetError` and write nothing.

        ``estimate`` is the provenance of the Δ̂ used (``SensitivityEstimate.provenance()``); it is
        only fingerprinted. ``calibration`` names how the noise was calibrated (the Gaussian's
        "analytic" or "classic"). Call this before drawing any noise.
        """
        eps = _check_amount(epsilon, "epsilon")
        dlt = _check_amount(delta, "delta")
        gam = _check_amount(gamma, "gamma")
        sens = _check_amount(sensitivity, "sensitivity")
        if not isinstance(mechanism, str) or not mechanism:
            raise InvalidArgumentError(f"mechanism must be a non-empty name, got {mechanism!r}")
        if label is not None and not isinstance(label, str):
            raise InvalidArgumentError(f"label must be a string, got {type(label).__name__}")
        if calibration is not None and not isinstance(calibration, str):
            raise InvalidArgumentError(f"calibration must be a name or None, got {calibration!r}")
        if estimate is not None and not isinstance(estimate, dict):
            raise InvalidArgumentError(f"estimate must be a provenance dict, got {type(estimate).__name__}")
        with self._locked():
            doc = self._read()
            spent_eps, spent_dlt = _sums(doc["entries"])
            problems = []
            if spent_eps + _exact(eps) > _exact(doc["epsilon_total"]):
                problems.append(f"ε: spent {float(spent_eps):g} + requested {eps:g} > total {doc['epsilon_total']:g}")
            if spent_dlt + _exact(dlt) > _exact(doc["delta_total"]):
                problems.append(f"δ: spent {float(spent_dlt):g} + requested {dlt:g} > total {doc['delta_total']:g}")
            if problems:
                raise BudgetError(f"privacy budget exceeded in ledger {self.path!r} ({'; '.join(problems)}); "
                                  "nothing was released")
            entry = {
                "id": 1 + max((e["id"] for e in doc["entries"]), default=0),
                "time": _now(), "status": "reserved",
                "epsilon": eps, "delta": dlt, "gamma": gam, "mechanism": mechanism, "sensitivity": sens,
                "estimate": None if estimate is None else estimate_fingerprint(estimate, sens),
                "sample": None if estimate is None else sample_fingerprint(estimate),
                "label": label, "calibration": calibration,
            }
            doc["entries"].append(entry)
            self._write(doc)
            return Reservation(self, entry, _compose(doc["entries"]))

    @contextlib.contextmanager
    def charge(self, epsilon: float, delta: float, gamma: float, *, mechanism: str, sensitivity: float,
               estimate: dict | None = None, label: str | None = None, calibration: str | None = None):
        """Reserve on entry (before the noise), mark ``released`` on success, ``failed`` (still counted) on error.

        >>> with ledger.charge(eps, delta, gamma, mechanism="laplace", sensitivity=s) as r:   # doctest: +SKIP
        ...     value = mech.release(f_of_data, s)
        """
        res = self.reserve(epsilon, delta, gamma, mechanism=mechanism, sensitivity=sensitivity,
                           estimate=estimate, label=label, calibration=calibration)
        try:
            yield res
        except BaseException:
            if res.status == "reserved":
                _finish_quietly(res, "failed")
            raise
        if res.status == "reserved":
            _finish_quietly(res, "released")

    def _set_status(self, entry_id: int, status: str) -> None:
        with self._locked():
            doc = self._read()
            for e in doc["entries"]:
                if e["id"] == entry_id:
                    if e["status"] != "reserved":
                        raise BudgetError(f"ledger entry {entry_id} is already {e['status']}")
                    e["status"] = status
                    e["finished"] = _now()
                    break
            else:
                raise BudgetError(f"ledger {self.path!r} has no entry {entry_id}")
            self._write(doc)

    def __repr__(self) -> str:
        return f"Ledger({self.path!r}, epsilon_total={self.epsilon_total!r}, delta_total={self.delta_total!r})"


def _write_tmp(path: str, doc: dict, like: os.stat_result | None) -> str:
    """``doc`` in a fsynced temporary file next to ``path``, with ``like``'s owner and mode when given."""
    parent = os.path.dirname(path)
    tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    data = json.dumps(doc, indent=1, sort_keys=True, allow_nan=False).encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if like is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode))
                if (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                    os.fchown(f.fileno(), like.st_uid, like.st_gid)
            os.fsync(f.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        what = "keep the owner of" if isinstance(exc, PermissionError) and like is not None else "write"
        raise BudgetError(f"cannot {what} ledger {path!r}: {exc.strerror or exc}; nothing was spent") from None
    return tmp


def _finish_quietly(res: Reservation, status: str) -> None:
    # The spend is already on disk as "reserved" (counted); failing to update its status must not
    # lose a release that has been drawn, so only log.
    try:
        res._finish(status)
    except Exception as exc:  # noqa: BLE001
        log.warning("ledger entry %d stays 'reserved' (counted): %s", res.id, exc)


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name}")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems cannot fsync a directory
        if exc.errno not in (errno.EINVAL, errno.EBADF, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def _sums(entries: list[dict]) -> tuple[Fraction, Fraction]:
    counted = [e for e in entries if e["status"] in COUNTED]
    return (sum((_exact(e["epsilon"]) for e in counted), Fraction(0)),
            sum((_exact(e["delta"]) for e in counted), Fraction(0)))


def _compose(entries: list[dict]) -> Guarantee:
    counted = [e for e in entries if e["status"] in COUNTED]
    eps, dlt = _sums(entries)
    groups: dict[str, float] = {}
    for e in counted:
        key = e["sample"] if e.get("sample") else f"entry:{e['id']}"
        groups[key] = max(groups.get(key, 0.0), float(e["gamma"]))
    gamma = float(sum((_exact(g) for g in groups.values()), Fraction(0)))
    estimates = len({e["estimate"] if e.get("estimate") else f"entry:{e['id']}" for e in counted})
    return Guarantee(epsilon=float(eps), delta=float(dlt), gamma=gamma, releases=len(counted),
                     estimates=estimates, samples=len(groups))


def _validate(doc) -> None:
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise TypeError("not a raydp privacy ledger")
    if doc.get("format") != FORMAT:
        raise ValueError(f"format {doc.get('format')!r}, this raydp reads {FORMAT}")
    _check_total(doc["epsilon_total"], "epsilon_total")
    _check_total(doc["delta_total"], "delta_total")
    if not isinstance(doc["entries"], list):
        raise TypeError("entries is not a list")
    ids = set()
    for e in doc["entries"]:
        if not isinstance(e, dict):
            raise TypeError("an entry is not an object")
        if type(e["id"]) is not int or e["id"] in ids:
            raise ValueError(f"bad or repeated entry id {e.get('id')!r}")
        ids.add(e["id"])
        for key in ("time", "mechanism"):
            if not isinstance(e[key], str):
                raise TypeError(f"entry {e['id']}: {key} is not a string")
        for key in ("estimate", "sample", "label", "calibration"):
            if not isinstance(e.get(key), (str, type(None))):
                raise TypeError(f"entry {e['id']}: {key} is not a string or null")
        if e["status"] not in STATUSES:
            raise ValueError(f"entry {e['id']} has unknown status {e['status']!r}")
        try:
            _check_amount(e["epsilon"], "epsilon")
            _check_amount(e["delta"], "delta")
            _check_amount(e["gamma"], "gamma")
            _check_amount(e["sensitivity"], "sensitivity")
        except (InvalidArgumentError, InvalidTypeError) as exc:
            raise ValueError(f"entry {e['id']}: {exc}") from None
