"""Numeric tables from Parquet and CSV files: the bootstrap oracle's public data and the CLI's private data.

Two ways to read a file:

- :func:`read_table` reads it whole and checks its values (numeric columns, no missing cells, finite
  numbers), with messages that count the bad cells per column but never quote one;
- :class:`PrivateTable` reads only its *schema* when it is made — column names and count, and for
  Parquet the type of each column and the row count from the footer — and its values only in
  :meth:`PrivateTable.load`. With a privacy ledger, a release loads the table inside the charged
  evaluation: whether a cell is missing, NaN or text is then answered only by the one uniform
  refusal, never by a free error before the charge. A CSV file has no types of its own (they would be
  inferred from the cells), so up front only its header is read.

Hostile files: only a *regular* file is opened (a FIFO, a device, a socket or a directory is refused
from its ``stat`` alone, and the file is opened non-blocking and checked again), a CSV file's header
line is read with a bound (:data:`HEADER_LIMIT`) and its rows in blocks of :data:`ROW_LIMIT` bytes, so
a file with no newline is refused after reading a few MB whatever its size. A CSV file's column names
are its first line, which is a record when the file has no header: a private table's messages name
CSV columns by position, never by name, and a first line that reads as numbers is refused as
"no header" without being quoted.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import numpy as np

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")
_COMPRESSION = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}
#: A CSV file's first line (its header), at most this many bytes: a longer one is refused unread.
HEADER_LIMIT = 1 << 20
#: A CSV file is parsed in blocks of this many bytes (pyarrow's ``block_size``): a row longer than this
#: (a file with no newline, say) is refused after reading a block or a few, not the whole file.
ROW_LIMIT = 1 << 20

__all__ = ["read_table", "table_to_array", "PrivateTable", "file_format", "check_regular", "open_regular",
           "record_shape", "HEADER_LIMIT", "ROW_LIMIT"]


def _kind(mode: int) -> str | None:
    """None for a regular file; what it is otherwise (words for a message)."""
    if stat.S_ISREG(mode):
        return None
    for test, words in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return words
    return "a special file"


def _not_regular(error: type[Exception], where: str, kind: str) -> Exception:
    return error(f"{where} is {kind}, not a regular file; give a regular file (nothing was read)")


def check_regular(path: str, error: type[Exception], where: str) -> None:
    """Refuse ``path`` unless it is a regular file (after symbolic links), from its ``stat`` alone.

    Nothing is opened: a FIFO would block the open (and then the read) until a writer came, a device
    such as ``/dev/zero`` never ends. ``where`` starts the message; ``OSError`` (``FileNotFoundError``
    ...) from ``os.stat`` propagates.
    """
    kind = _kind(os.stat(path).st_mode)
    if kind is not None:
        raise _not_regular(error, where, kind)


def open_regular(path: str, error: type[Exception], where: str):
    """``path`` opened for binary reading, refused unless it is a regular file (checked before and after).

    ``where`` starts every message (``"--data 'x.csv'"``).
    """
    try:
        kind = _kind(os.stat(path).st_mode)
        if kind is None:
            # non-blocking: should the path have become a FIFO since the stat, the open does not wait for a writer
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise error(f"{where} does not exist") from None
    except OSError as exc:
        raise error(f"{where} cannot be opened ({exc.strerror or type(exc).__name__})") from None
    if kind is None:
        try:
            kind = _kind(os.fstat(fd).st_mode)
            if kind is None:
                os.set_blocking(fd, True)
                return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise _not_regular(error, where, kind)


def file_format(path: str, error: type[Exception], what: str) -> str:
    """``"parquet"`` or ``"csv"`` from the suffix (or Parquet's magic bytes); ``error`` otherwise.

    Only a regular file is accepted (:func:`check_regular`); its magic bytes are read non-blocking.
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise error(f"{what} file {path!r} does not exist") from None
    except OSError as exc:
        raise error(f"{what} {path!r} cannot be read ({exc.strerror or type(exc).__name__})") from None
    kind = _kind(mode)
    if kind is not None:
        raise _not_regular(error, f"{what} {path!r}", kind)
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lower.endswith(CSV_SUFFIXES):
        return "csv"
    with open_regular(path, error, f"{what} {path!r}") as fh:
        if fh.read(4) == b"PAR1":
            return "parquet"
    raise error(f"{what} {path!r}: cannot tell the format; allowed are Parquet ({', '.join(PARQUET_SUFFIXES)}) "
                f"and CSV ({', '.join(CSV_SUFFIXES)}) files")


def _compression(path: str) -> str | None:
    """A CSV file's compression, from its suffix (``.csv.gz`` ...): what pyarrow's "detect" would say."""
    return _COMPRESSION.get(os.path.splitext(path.lower())[1])


def _numeric_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _label(name: str, i: int, names: bool) -> str:
    return name if names else f"column {i + 1}"


def _non_numeric(schema, names: bool = True) -> list[str]:
    return [f"{_label(f.name, i, names)} ({f.type})" for i, f in enumerate(schema) if not _numeric_type(f.type)]


def table_to_array(table: Any, where: str, error: type[Exception], *,
                   names: bool = True) -> tuple[np.ndarray, list[str]]:
    """A pyarrow table as a float64 array (rows x columns) and its column names, values checked.

    ``names=False``: messages name columns by position ("column 2"), not by name — a CSV file's names are
    its first line, which is a record when it has no header.
    """
    import pyarrow as pa

    if table.num_columns == 0:
        raise error(f"{where} has no columns")
    if table.num_rows == 0:
        raise error(f"{where} has no rows; need at least one record")
    bad = _non_numeric(table.schema, names)
    if bad:
        raise error(f"{where} has non-numeric columns: {', '.join(bad)}; only integer, floating-point and decimal "
                    "columns are allowed (drop or encode the others)")
    nulls = [f"{_label(name, i, names)} ({table.column(i).null_count})" for i, name in enumerate(table.column_names)
             if table.column(i).null_count]
    if nulls:
        raise error(f"{where} has missing values in columns: {', '.join(nulls)}")
    cols = [np.asarray(table.column(i).cast(pa.float64()).to_numpy(), dtype=np.float64)
            for i in range(table.num_columns)]
    return np.column_stack(cols), list(table.column_names)


def _parse(source, fmt: str, compression: str | None):
    """The pyarrow table in ``source`` (a path or an open binary file), CSV rows parsed in bounded blocks."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(source)
    import pyarrow as pa
    import pyarrow.csv as pcsv

    return pcsv.read_csv(pa.input_stream(source, compression=compression),
                         read_options=pcsv.ReadOptions(block_size=ROW_LIMIT))


def _own_copy(source, where: str, error: type[Exception]):
    """A file of our own to read ``source`` (an open binary file) from its start, closed by the caller
    without closing ``source`` (pyarrow's decompressing stream closes what it reads from).

    A descriptor is duplicated (refused unless a regular file's: a pipe, a socket, a device); an
    in-memory file (no descriptor) is read into a buffer, as it is in memory already.
    """
    import io

    try:
        fd = source.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        if getattr(source, "seekable", lambda: False)():
            source.seek(0)
        return io.BytesIO(source.read())
    kind = _kind(os.fstat(fd).st_mode)
    if kind is not None:
        raise error(f"{where}: the open file given to read it from is {kind}, not a regular file (nothing was read)")
    copy = os.fdopen(os.dup(fd), "rb")  # shares the offset: the seek below moves source's too
    copy.seek(0)  # the same file, from its start
    return copy


def _read_arrow(path: str, fmt: str, where: str, error: type[Exception], source=None):
    """``path``'s table (or ``source``'s, an open binary file of it, left open); ``error`` for anything wrong."""
    opened = open_regular(path, error, where) if source is None else _own_copy(source, where, error)
    try:
        with opened:
            return _parse(opened, fmt, _compression(path))
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError, ...)
        # pyarrow's message quotes the row it choked on: the type and a hint only
        rows = f", a row longer than {ROW_LIMIT >> 20} MiB (no newline?)" if fmt == "csv" else ""
        raise error(f"{where} could not be read ({type(exc).__name__}: a malformed row{rows}, or not a Parquet/CSV "
                    "file; the parser's message is withheld because it quotes the data)") from None


def read_table(path: str, error: type[Exception], what: str) -> tuple[np.ndarray, list[str]]:
    """The whole file as float64 (rows x columns) and its column names; ``error`` for anything wrong.

    For public data (the bootstrap oracle's): its messages name the columns. Private data: :class:`PrivateTable`.
    """
    fmt = file_format(path, error, what)
    where = f"{what} {path!r}"
    return table_to_array(_read_arrow(path, fmt, where, error), where, error)


class _HeaderTooLong(Exception):
    pass


def _csv_header(fh, path: str) -> list[str]:
    """The column names on a CSV file's first line (decompressed if need be), nothing below it.

    ``fh``: the file, open. At most :data:`HEADER_LIMIT` + 1 bytes are read: a longer first line is refused.
    """
    import csv

    import pyarrow as pa

    raw = pa.input_stream(fh, compression=_compression(path)).read(HEADER_LIMIT + 1)
    ends = [i for i in (raw.find(b"\n"), raw.find(b"\r")) if i >= 0]
    if not ends and len(raw) > HEADER_LIMIT:
        raise _HeaderTooLong
    line = raw[:min(ends)] if ends else raw
    return next(csv.reader([line.decode("utf-8-sig")]), [])


def _reads_as_number(cell: str) -> bool:
    try:
        float(cell.strip())
    except ValueError:
        return False
    return True


def record_shape(estimate=None, oracle=None) -> tuple[int, ...] | None:
    """The shape of one of the oracle's records, or None when nothing public tells it.

    From the estimate's witness records (``witnesses.records``, shaped ``(pairs, n + 1, *record_shape)``)
    when it has them, else from ``oracle``: one record drawn with a fixed seed (public, like every
    oracle draw). An oracle that fails here is left for the sampling to report.
    """
    records = getattr(getattr(estimate, "witnesses", None), "records", None)
    if records is not None and np.ndim(records) >= 2:
        return tuple(int(s) for s in np.shape(records)[2:])
    sample = getattr(oracle, "sample", None)
    if callable(sample):
        try:
            one = np.asarray(sample(np.random.default_rng(0), 1))
        except Exception:  # noqa: BLE001 - its own error comes, with its message, when Δ̂ is sampled
            return None
        if one.ndim >= 1 and one.shape[0] == 1:
            return tuple(int(s) for s in one.shape[1:])
    return None


class PrivateTable:
    """A private data file whose values are read only by :meth:`load` (module docstring).

    Made from a path, it checks what the file's *schema* says and nothing its values say: that it
    is a regular file and Parquet or CSV, its column names (kept, never printed for CSV), and for
    Parquet that every column has a numeric type and how many rows it holds (``rows``; None for CSV,
    whose rows are counted by parsing). A CSV file must have a header line: a first line that reads
    as numbers is refused, without quoting it.
    """

    def __init__(self, path: str | os.PathLike, *, error: type[Exception], what: str = "--data"):
        self.path = os.fspath(path)
        self.error = error
        self.what = what
        self.format = file_format(self.path, error, what)
        where = f"{what} {self.path!r}"
        fh = open_regular(self.path, error, where)
        try:
            with fh:
                if self.format == "parquet":
                    import pyarrow.parquet as pq

                    meta = pq.ParquetFile(fh).metadata
                    schema = meta.schema.to_arrow_schema()
                    self.rows: int | None = int(meta.num_rows)
                    bad = _non_numeric(schema)
                    names = list(schema.names)
                else:  # the header line alone: any cell below it is a value
                    names, self.rows, bad = _csv_header(fh, self.path), None, []
        except _HeaderTooLong:
            raise error(f"{where}: its first line (a CSV file's header) is longer than {HEADER_LIMIT >> 20} MiB "
                        "(no newline?); refused without reading further") from None
        except Exception as exc:
            raise error(f"{where} could not be read ({type(exc).__name__}: not a Parquet/CSV file, or no header; "
                        "the parser's message is withheld because it may quote the data)") from None
        self.columns = names
        if not self.columns:
            raise error(f"{where} has no columns")
        if bad:
            raise error(f"{where} has non-numeric columns: {', '.join(bad)}; only integer, floating-point and "
                        "decimal columns are allowed (drop or encode the others)")
        if self.format == "csv":
            self._check_header(self.columns)

    @property
    def _where(self) -> str:
        return f"{self.what} {self.path!r}"

    def _check_header(self, names) -> None:
        """A CSV header whose cells read as numbers is a record: refused, never quoted."""
        numbers = sum(_reads_as_number(name) for name in names)
        if numbers:
            raise self.error(f"{self._where} has no header line: {numbers} of the {len(names)} cells of its first "
                             "line read as numbers, so it is a record, not column names (not shown: it may be "
                             "private); add a header line of column names")

    #: the shape of one oracle record, from an estimate's witness records or the oracle (:func:`record_shape`)
    record_shape = staticmethod(record_shape)

    def check_fields(self, shape) -> None:
        """Refuse a table whose column count is not the oracle's record fields (``shape``: one record's).

        One column holds scalar records (shape ``()``), ``c`` columns records of ``c`` fields (``(c,)``);
        a record with more axes cannot be a table's row. ``shape`` None (not known): nothing is checked.
        Schema only: nothing about a value is read or said.
        """
        if shape is None:
            return
        shape = tuple(int(s) for s in shape)
        cols = len(self.columns)
        if len(shape) > 1:
            raise self.error(f"{self._where}: the oracle's records have shape {shape}; a table's row holds a scalar "
                             "record (one column) or a record of fields (one column each), not that")
        fields = shape[0] if shape else 1
        if fields != cols:
            what = "scalar records (one column)" if not shape else f"records of {fields} fields ({fields} columns)"
            raise self.error(f"{self._where} has {cols} column{'s' if cols != 1 else ''}, but the oracle draws "
                             f"{what}: one column per record field, in the oracle's order (nothing was charged)")

    def load(self, source=None) -> np.ndarray:
        """Every value, checked (numeric, no missing cell, finite); ``error`` otherwise. One column: 1-D.

        ``source``: an open binary file of this same file (read from its start, left open), for a
        process that cannot open ``path`` itself; by default ``path`` is opened.
        """
        where = self._where
        csv = self.format == "csv"
        table = _read_arrow(self.path, self.format, where, self.error, source)
        if table.num_columns != len(self.columns):
            raise self.error(f"{where} has {table.num_columns} columns now, {len(self.columns)} when it was opened: "
                             "the file changed")
        if csv:
            self._check_header(table.column_names)
        data, _ = table_to_array(table, where, self.error, names=not csv)
        if not np.all(np.isfinite(data)):
            raise self.error(f"{where} contains NaN or infinite values; records must be finite")
        return data[:, 0] if data.shape[1] == 1 else data

    def __repr__(self) -> str:
        return f"PrivateTable({self.path!r}, columns={len(self.columns)}, rows={self.rows})"
