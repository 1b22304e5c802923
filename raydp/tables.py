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
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

PARQUET_SUFFIXES = (".parquet", ".pq", ".parq")
CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")

__all__ = ["read_table", "table_to_array", "PrivateTable", "file_format"]


def file_format(path: str, error: type[Exception], what: str) -> str:
    """``"parquet"`` or ``"csv"`` from the suffix (or Parquet's magic bytes); ``error`` otherwise."""
    if not os.path.isfile(path):
        raise error(f"{what} file {path!r} does not exist")
    lower = path.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if lower.endswith(CSV_SUFFIXES):
        return "csv"
    with open(path, "rb") as fh:
        if fh.read(4) == b"PAR1":
            return "parquet"
    raise error(f"{what} {path!r}: cannot tell the format; allowed are Parquet ({', '.join(PARQUET_SUFFIXES)}) "
                f"and CSV ({', '.join(CSV_SUFFIXES)}) files")


def _numeric_type(t) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _non_numeric(schema) -> list[str]:
    return [f"{f.name} ({f.type})" for f in schema if not _numeric_type(f.type)]


def table_to_array(table: Any, where: str, error: type[Exception]) -> tuple[np.ndarray, list[str]]:
    """A pyarrow table as a float64 array (rows x columns) and its column names, values checked."""
    import pyarrow as pa

    if table.num_columns == 0:
        raise error(f"{where} has no columns")
    if table.num_rows == 0:
        raise error(f"{where} has no rows; need at least one record")
    bad = _non_numeric(table.schema)
    if bad:
        raise error(f"{where} has non-numeric columns: {', '.join(bad)}; only integer, floating-point and decimal "
                    "columns are allowed (drop or encode the others)")
    nulls = [f"{name} ({table.column(i).null_count})" for i, name in enumerate(table.column_names)
             if table.column(i).null_count]
    if nulls:
        raise error(f"{where} has missing values in columns: {', '.join(nulls)}")
    cols = [np.asarray(table.column(i).cast(pa.float64()).to_numpy(), dtype=np.float64)
            for i in range(table.num_columns)]
    return np.column_stack(cols), list(table.column_names)


def _read_arrow(path: str, fmt: str, where: str, error: type[Exception]):
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path)
    except Exception as exc:  # pyarrow raises several types (ArrowInvalid, OSError, ...)
        # pyarrow's message quotes the row it choked on: the type and a hint only
        raise error(f"{where} could not be read ({type(exc).__name__}: a malformed row, or not a Parquet/CSV "
                    "file; the parser's message is withheld because it quotes the data)") from None


def read_table(path: str, error: type[Exception], what: str) -> tuple[np.ndarray, list[str]]:
    """The whole file as float64 (rows x columns) and its column names; ``error`` for anything wrong."""
    fmt = file_format(path, error, what)
    where = f"{what} {path!r}"
    return table_to_array(_read_arrow(path, fmt, where, error), where, error)


def _csv_header(path: str) -> list[str]:
    """The column names on a CSV file's first line (decompressed if need be), nothing below it."""
    import csv
    import io

    import pyarrow as pa

    with pa.input_stream(path, compression="detect") as raw:
        text = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8-sig", newline="")
        return next(csv.reader(text), [])


class PrivateTable:
    """A private data file whose values are read only by :meth:`load` (module docstring).

    Made from a path, it checks what the file's *schema* says and nothing its values say: that it
    exists and is Parquet or CSV, its column names, and for Parquet that every column has a numeric
    type and how many rows it holds (``rows``; None for CSV, whose rows are counted by parsing).
    """

    def __init__(self, path: str | os.PathLike, *, error: type[Exception], what: str = "--data"):
        self.path = os.fspath(path)
        self.error = error
        self.what = what
        self.format = file_format(self.path, error, what)
        where = f"{what} {self.path!r}"
        try:
            if self.format == "parquet":
                import pyarrow.parquet as pq

                meta = pq.ParquetFile(self.path).metadata
                schema = meta.schema.to_arrow_schema()
                self.rows: int | None = int(meta.num_rows)
                bad = _non_numeric(schema)
                names = list(schema.names)
            else:  # the header line alone: any cell below it is a value
                names, self.rows, bad = _csv_header(self.path), None, []
        except Exception as exc:
            raise error(f"{where} could not be read ({type(exc).__name__}: not a Parquet/CSV file, or no header; "
                        "the parser's message is withheld because it may quote the data)") from None
        self.columns = names
        if not self.columns:
            raise error(f"{where} has no columns")
        if bad:
            raise error(f"{where} has non-numeric columns: {', '.join(bad)}; only integer, floating-point and "
                        "decimal columns are allowed (drop or encode the others)")

    def load(self) -> np.ndarray:
        """Every value, checked (numeric, no missing cell, finite); ``error`` otherwise. One column: 1-D."""
        where = f"{self.what} {self.path!r}"
        data, _ = table_to_array(_read_arrow(self.path, self.format, where, self.error), where, self.error)
        if not np.all(np.isfinite(data)):
            raise self.error(f"{where} contains NaN or infinite values; records must be finite")
        return data[:, 0] if data.shape[1] == 1 else data

    def __repr__(self) -> str:
        return f"PrivateTable({self.path!r}, columns={len(self.columns)}, rows={self.rows})"
