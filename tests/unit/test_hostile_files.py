"""Hostile data files (issue: a user's list of holes in the private-data path), in process.

- a FIFO, a device, a socket or a directory given as data is refused from its ``stat``, unopened, and a
  path that became one after the schema was read is refused by ``load`` without blocking;
- a table whose column count is not the oracle's record fields is refused before any ledger charge;
- a CSV file's column names are its first line, a record when it has no header: no message quotes
  them (a first line of numbers is "no header"; bad columns are named by position);
- a CSV file with no newline is refused after a bounded read (the header line at most 1 MiB);
- ``PrivateTable.load(source)`` reads an open binary file of the same file;
- ``PrivateEstimator`` after ``preview()`` and before ``fit`` raises scikit-learn's ``NotFittedError``.

The CLI as a command (a FIFO given to ``raydp release``, a broken pipe, memory measured in a child):
``integration/cli/test_hostile_input_cli.py``.
"""

from __future__ import annotations

import gzip
import io
import os
import socket
import threading
import time
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import raydp
from raydp import mechanisms, oracles, targets
from raydp.cli import main
from raydp.errors import InvalidArgumentError
from raydp.ledger import Ledger
from raydp.tables import PrivateTable

MIB = 1 << 20

GAMMA = "0.1"  # the small_store fixture's plan (conftest): mean of n = 50 Exp(1) records


def _table(path):
    return PrivateTable(path, error=InvalidArgumentError, what="--data")


def _one_line_exit_2(code, out, err):
    assert code == 2, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("raydp: error: "), err


# ----------------------------------------------------------------------------- 1. not a regular file

def _special_files(tmp_path):
    """(path, the words the refusal must use) for each kind of file that is not a regular one."""
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    fifo_pq = tmp_path / "fifo.parquet"
    os.mkfifo(fifo_pq)
    zero = tmp_path / "zero.csv"
    zero.symlink_to("/dev/zero")  # a CSV by its name, an endless device by what it is
    sock_path = tmp_path / "sock.csv"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    folder = tmp_path / "folder.parquet"
    folder.mkdir()
    return sock, [(fifo, "a FIFO"), (fifo_pq, "a FIFO"), (zero, "a character device"), (sock_path, "a socket"),
                  (folder, "a directory"), ("/dev/zero", "a character device")]


def test_a_file_that_is_not_regular_is_refused_at_once_and_unopened(tmp_path):
    sock, files = _special_files(tmp_path)
    with sock:
        for path, kind in files:
            start = time.monotonic()
            with pytest.raises(InvalidArgumentError) as info:
                _table(path)
            msg = str(info.value)
            assert f"is {kind}" in msg and "not a regular file" in msg and len(msg.splitlines()) == 1, msg
            assert time.monotonic() - start < 2


def test_a_path_that_became_a_fifo_after_the_schema_is_refused_by_load_without_blocking(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("x\n1\n2\n")
    table = _table(path)
    path.unlink()
    os.mkfifo(path)  # no writer will ever come: an open without O_NONBLOCK would wait forever
    outcome = {}

    def load():
        try:
            table.load()
        except Exception as exc:  # noqa: BLE001 - what it raised is the test's
            outcome["error"] = exc

    t = threading.Thread(target=load, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # let the blocked open return (a writer comes and goes) before failing
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        t.join(10)
        pytest.fail("PrivateTable.load() blocked on a FIFO")
    assert isinstance(outcome.get("error"), InvalidArgumentError), outcome
    assert "is a FIFO (named pipe), not a regular file" in str(outcome["error"])


def test_the_cli_refuses_a_directory_and_a_device_in_one_line(tmp_path, small_store, capsys):
    store, _ = small_store
    for data, kind in ((tmp_path, "a directory"), ("/dev/zero", "a character device")):
        code = main(["release", "--store", str(store), "--data", str(data), "--target", "raydp.targets:mean",
                     "--epsilon", "1", "--gamma", GAMMA])
        out, err = capsys.readouterr()
        _one_line_exit_2(code, out, err)
        assert f"--data: cannot read {str(data)!r}: it is {kind}, not a regular file" in err, err


def test_a_npy_header_that_claims_more_than_the_file_holds_is_one_line(tmp_path, small_store, capsys):
    """A .npy header claiming 8 TB: numpy would try to allocate it (a MemoryError traceback before)."""
    from numpy.lib import format as npformat

    store, _ = small_store
    liar = tmp_path / "liar.npy"
    with open(liar, "wb") as f:
        npformat.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
        f.write(b"\0" * 800)
    code = main(["release", "--store", str(store), "--data", str(liar), "--target", "raydp.targets:mean",
                 "--epsilon", "1", "--gamma", GAMMA])
    out, err = capsys.readouterr()
    _one_line_exit_2(code, out, err)
    assert "need more bytes than the file holds" in err


# ----------------------------------------------------------------------------- 2. columns vs record fields

def _two_columns(tmp_path, n=50):
    path = tmp_path / "two.parquet"
    rng = np.random.default_rng(0)
    pq.write_table(pa.table({"x": rng.exponential(1.0, n), "y": rng.exponential(1.0, n)}), path)
    return path


def test_check_fields_compares_the_column_count_with_the_record_shape(tmp_path):
    two = _table(_two_columns(tmp_path))
    two.check_fields((2,))
    two.check_fields(None)  # nothing known: nothing checked
    for shape, words in (((), "scalar records (one column)"), ((3,), "records of 3 fields"),
                         ((2, 2), "have shape (2, 2)")):
        with pytest.raises(InvalidArgumentError, match=None) as info:
            two.check_fields(shape)
        assert words in str(info.value) and "'x'" not in str(info.value), str(info.value)
    one = tmp_path / "one.csv"
    one.write_text("x\n1\n2\n")
    _table(one).check_fields(())
    with pytest.raises(InvalidArgumentError, match="has 1 column, but the oracle draws records of 2 fields"):
        _table(one).check_fields((2,))


def test_the_record_shape_comes_from_the_witnesses_or_one_oracle_draw(small_store):
    store, _ = small_store
    assert PrivateTable.record_shape(raydp.load_estimate(str(store))) == ()
    assert PrivateTable.record_shape(None, oracles.bootstrap(np.ones((5, 3)))) == (3,)
    assert PrivateTable.record_shape(None, oracles.exponential(1.0)) == ()
    assert PrivateTable.record_shape(None, None) is None


def test_a_two_column_table_for_scalar_records_is_refused_before_the_ledger_charge(tmp_path, small_store):
    """The schema shows the mismatch: refused free, the ledger untouched (it was charged ε before)."""
    store, _ = small_store
    est = raydp.load_estimate(str(store))
    ledger = tmp_path / "ledger.json"
    Ledger.create(ledger, epsilon_total=5.0)
    with pytest.raises(InvalidArgumentError, match="has 2 columns, but the oracle draws scalar records"):
        raydp.sample_then_respond(_table(_two_columns(tmp_path)), targets.mean(), mechanisms.Laplace(1.0),
                                  estimate=est, gamma=0.1, ledger=str(ledger))
    assert Ledger(ledger).entries() == [] and Ledger(ledger).spent() == (0.0, 0.0)
    # with an oracle instead of an estimate: refused before Δ̂ is even sampled
    with pytest.raises(InvalidArgumentError, match="has 2 columns, but the oracle draws scalar records"):
        raydp.sample_then_respond(_table(_two_columns(tmp_path)), targets.mean(), mechanisms.Laplace(1.0),
                                  oracle=oracles.exponential(1.0), gamma=0.3, seed=1, backend="local",
                                  progress=False, ledger=str(ledger))
    assert Ledger(ledger).entries() == []


def test_the_cli_refuses_the_mismatch_with_a_ledger_unspent(tmp_path, small_store, capsys):
    store, _ = small_store
    ledger = tmp_path / "ledger.json"
    Ledger.create(ledger, epsilon_total=5.0)
    code = main(["release", "--store", str(store), "--data", str(_two_columns(tmp_path)), "--target",
                 "raydp.targets:mean", "--epsilon", "1", "--gamma", GAMMA, "--ledger", str(ledger)])
    out, err = capsys.readouterr()
    _one_line_exit_2(code, out, err)
    assert "has 2 columns, but the oracle draws scalar records" in err and "nothing was charged" in err
    assert Ledger(ledger).entries() == []


# ----------------------------------------------------------------------------- 3. no CSV name in a message

SECRETS = ("3.25", "alice", "bob", "carol")


def _no_secret(text):
    assert not any(s in text for s in SECRETS), text


def test_a_csv_without_header_is_refused_without_quoting_its_first_line(tmp_path):
    for name, text in (("numbers.csv", "3.25\n1.5\n2.5\n"), ("mixed.csv", "alice,3.25\nbob,2.0\n")):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(InvalidArgumentError) as info:
            _table(path)
        assert "has no header line" in str(info.value)
        _no_secret(str(info.value))


def test_bad_csv_columns_are_named_by_position_not_by_their_first_line(tmp_path):
    """A header-less file whose first line is text: its cells became the names; the refusal names none."""
    path = tmp_path / "headerless.csv"
    path.write_text("alice,bob\n1.0,carol\n2.0,x\n")  # the second column holds a text cell
    with pytest.raises(InvalidArgumentError) as info:
        _table(path).load()
    assert "non-numeric columns: column 2 (string)" in str(info.value)
    _no_secret(str(info.value))
    gaps = tmp_path / "gaps.csv"
    gaps.write_text("alice,bob\n1.0,\n2.0,3.0\n")
    with pytest.raises(InvalidArgumentError) as info:
        _table(gaps).load()
    assert "missing values in columns: column 2 (1)" in str(info.value)
    _no_secret(str(info.value))


def test_the_cli_quotes_no_cell_of_a_headerless_csv(tmp_path, small_store, capsys):
    store, _ = small_store
    numbers = tmp_path / "numbers.csv"
    numbers.write_text("3.25\n" + "\n".join(["1.0"] * 50) + "\n")
    text = tmp_path / "text.csv"
    text.write_text("alice\n" + "\n".join(["1.0"] * 49 + ["carol"]) + "\n")
    for data in (numbers, text):
        code = main(["release", "--store", str(store), "--data", str(data), "--target", "raydp.targets:mean",
                     "--epsilon", "1", "--gamma", GAMMA])
        out, err = capsys.readouterr()
        _one_line_exit_2(code, out, err)
        _no_secret(err)


# ----------------------------------------------------------------------------- 4. bounded reads

def test_a_csv_without_newline_is_refused_after_a_bounded_read(tmp_path):
    """50 MB and no newline: the header read stops after 1 MiB + 1 byte. Before: the whole file was
    read into one line and split into 26 million names (Python's peak about 2 GB, here 0.4 s)."""
    path = tmp_path / "nonewline.csv"
    with open(path, "wb") as f:
        f.write(b"1," * (25 << 20))
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(InvalidArgumentError, match="first line .* is longer than 1 MiB"):
            _table(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB, peak  # the bound: a few MiB of Python memory (measured: ~2 MiB)
    assert time.monotonic() - start < 5


def test_a_compressed_csv_without_newline_is_refused_too(tmp_path):
    path = tmp_path / "nonewline.csv.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"7" * (8 << 20))
    with pytest.raises(InvalidArgumentError, match="longer than 1 MiB"):
        _table(path)


# ----------------------------------------------------------------------------- 5. load(source)

def test_load_reads_an_open_binary_file_of_the_same_file(tmp_path):
    rng = np.random.default_rng(4)
    values = rng.normal(size=(30, 2))
    paths = {"parquet": tmp_path / "d.parquet", "csv": tmp_path / "d.csv", "csv.gz": tmp_path / "d.csv.gz"}
    pq.write_table(pa.table({"a": values[:, 0], "b": values[:, 1]}), paths["parquet"])
    text = "a,b\n" + "".join(f"{float(a)!r},{float(b)!r}\n" for a, b in values)
    paths["csv"].write_text(text)
    with gzip.open(paths["csv.gz"], "wt") as f:
        f.write(text)
    for kind, path in paths.items():
        table = _table(path)
        with open(path, "rb") as fh:
            fh.read(7)  # not at the start: the whole file is read all the same
            moved = tmp_path / f"moved.{kind}"
            os.rename(path, moved)  # the path is gone: only the open file can be read
            got = table.load(fh)
            assert not fh.closed  # the caller's to close
        np.testing.assert_array_equal(got, values)
        os.rename(moved, path)
        np.testing.assert_array_equal(table.load(), values)
        np.testing.assert_array_equal(table.load(io.BytesIO(path.read_bytes())), values)  # no descriptor


def test_load_refuses_an_open_pipe_and_keeps_its_checks(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("x\n1\n2\n")
    table = _table(path)
    r, w = os.pipe()
    with os.fdopen(r, "rb") as fh, os.fdopen(w, "wb"):
        with pytest.raises(InvalidArgumentError, match="is a FIFO .*, not a regular file"):
            table.load(fh)
    bad = tmp_path / "bad.csv"
    bad.write_text("x\n1\ninf\n")
    with open(bad, "rb") as fh:
        with pytest.raises(InvalidArgumentError, match="NaN or infinite"):
            table.load(fh)


# ----------------------------------------------------------------------------- 6. NotFittedError

def test_a_previewed_estimator_is_not_fitted():
    from sklearn.decomposition import PCA
    from sklearn.exceptions import NotFittedError
    from sklearn.linear_model import LogisticRegression

    from raydp import SamplerOptions
    from raydp.sklearn import PrivateEstimator

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    y = (X[:, 0] > 0).astype(float)
    opt = SamplerOptions(seed=3, progress=False, backend="local")
    clf = PrivateEstimator(LogisticRegression(), oracle=oracles.bootstrap(np.column_stack([X, y])), epsilon=1.0,
                           gamma=0.3, time_budget=None, options=opt)
    clf.preview(100, repeats=2)
    assert hasattr(clf, "preview_estimate_")  # a fitted-looking attribute: what fooled check_is_fitted(self)
    for call in (clf.predict, clf.predict_proba, clf.decision_function, lambda X: clf.score(X, y),
                 lambda X: clf.statement()):
        with pytest.raises(NotFittedError):
            call(X)
    pca = PrivateEstimator(PCA(n_components=1), oracle=oracles.bootstrap(X), epsilon=1.0, gamma=0.3,
                           time_budget=None, options=opt)
    pca.preview(100, repeats=2)
    for call in (pca.transform, pca.score):
        with pytest.raises(NotFittedError):
            call(X)


# ----------------------------------------------------------------------------- 8. --respond-after

@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_respond_after_must_be_a_positive_number(small_store, value, capsys):
    store, data = small_store
    code = main(["release", "--store", str(store), "--data", str(data), "--target", "raydp.targets:mean",
                 "--epsilon", "1", "--gamma", GAMMA, f"--respond-after={value}"])
    out, err = capsys.readouterr()
    _one_line_exit_2(code, out, err)
    assert "--respond-after must be a finite number of seconds > 0" in err, err


def test_respond_after_is_passed_only_when_given(small_store, monkeypatch, capsys):
    import raydp.release

    store, data = small_store
    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs)
        raise InvalidArgumentError("stop here")

    monkeypatch.setattr(raydp.release, "sample_then_respond", spy)
    argv = ["release", "--store", str(store), "--data", str(data), "--target", "raydp.targets:mean",
            "--epsilon", "1", "--gamma", GAMMA]
    assert main([*argv, "--respond-after", "0.5"]) == 2 and main(argv) == 2
    assert "stop here" in capsys.readouterr().err
    assert seen[0]["respond_after"] == 0.5 and "respond_after" not in seen[1]


def test_respond_after_reaches_the_release(small_store, capsys):
    """End to end, once the library has the keyword (another change adds it to sample_then_respond)."""
    import inspect

    from raydp.release import sample_then_respond

    if "respond_after" not in inspect.signature(sample_then_respond).parameters:
        pytest.skip("sample_then_respond has no respond_after= yet")
    store, data = small_store
    start = time.monotonic()
    code = main(["release", "--store", str(store), "--data", str(data), "--target", "raydp.targets:mean",
                 "--epsilon", "1", "--gamma", GAMMA, "--respond-after", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert time.monotonic() - start >= 2.0  # the answer came no sooner than asked
