"""Bad input to the command line (issue 6): every subcommand and flag, a table of bad arguments.

Exit status 2, exactly one line on stderr (``raydp: error: ...``), no traceback — in process and in
real subprocesses. The API's table: ``unit/test_bad_input_api.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from raydp.cli import main

NAN, INF = float("nan"), float("inf")
HUGE = 2**70


from bad_inputs import make_files


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("bad_input"))


# ----------------------------------------------------------------------------- the CLI table

_T = ["--target", "raydp.targets:mean"]
_O = ["--oracle", "raydp.oracles:exponential", "--oracle-args", '{"rate": 1}']
_EST = ["estimate", *_T, *_O, "--n", "5", "--m", "50", "--quiet", "--backend", "local"]
_G = ["--gamma", "0.2170401390748799"]  # what the small store's plan (m = 50) gives
_REL = ["release", "--store", "{store}", "--data", "{data}", *_T, *_G]
_MOD = "bad_inputs"

CLI = [
    # (id, argv, fragment of the one stderr line)
    ("no-command", [], "the following arguments are required: cmd"),
    ("unknown-command", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("unknown-flag", ["plan", "--bogus"], "unrecognized arguments: --bogus"),
    ("extra-arg", ["plan", "--gamma", "0.1", "extra"], "unrecognized arguments: extra"),
    ("plan-gamma-nan", ["plan", "--gamma", "nan"], "gamma must be a real number in (0, 1), got nan"),
    ("plan-gamma-inf", ["plan", "--gamma", "inf"], "real number in (0, 1), got inf"),
    ("plan-gamma-neg-inf", ["plan", "--gamma=-inf"], "real number in (0, 1), got -inf"),
    ("plan-gamma-1", ["plan", "--gamma", "1"], "real number in (0, 1), got 1.0"),
    ("plan-gamma-empty", ["plan", "--gamma", ""], "argument --gamma: invalid float value: ''"),
    ("plan-gamma-word", ["plan", "--gamma", "abc"], "invalid float value: 'abc'"),
    ("plan-gamma-surrogate", ["plan", "--gamma", "\ud800"], "invalid float value"),
    ("plan-gamma-missing", ["plan", "--gamma"], "argument --gamma: expected one argument"),
    ("plan-gamma-subnormal", ["plan", "--gamma", "1e-320"], "use gamma >= 3.49e-08"),
    ("plan-m-float", ["plan", "--m", "1e3"], "argument --m: invalid int value: '1e3'"),
    ("plan-m-huge", ["plan", "--m", str(HUGE)], "m must be a positive integer at most 2**53"),
    ("plan-m-neg", ["plan", "--m", "-5"], "m must be a positive integer at most 2**53, got -5"),
    ("plan-m-1", ["plan", "--m", "1"], "use m >= 2"),
    ("plan-k-gt-m", ["plan", "--m", "100", "--k", "200"], "at most m"),
    ("plan-k-neg", ["plan", "--m", "100", "--k", "-1"], "k must be a positive integer"),
    ("plan-k-alone", ["plan", "--k", "3"], "k needs m"),
    ("plan-three", ["plan", "--gamma", "0.1", "--m", "100", "--k", "3"], "at most two"),
    ("plan-none", ["plan"], "give gamma"),
    # estimate: numbers
    ("est-n-0", [*_EST, "--n", "0"], "n must be an integer >= 1, got 0"),
    ("est-n-float", [*_EST, "--n", "5.5"], "argument --n: invalid int value: '5.5'"),
    ("est-n-huge", [*_EST, "--n", str(HUGE)], "block_size * (n + 1) must be at most 2**63 - 1"),
    ("est-n-missing", ["estimate", *_T, *_O, "--m", "50"], "the following arguments are required: --n"),
    ("est-seed-neg", [*_EST, "--seed", "-1"], "seed must be a non-negative integer or None, got -1"),
    ("est-seed-float", [*_EST, "--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    ("est-block-0", [*_EST, "--block-size", "0"], "block_size must be an integer >= 1, got 0"),
    ("est-block-huge", [*_EST, "--block-size", str(HUGE)], "block_size * (n + 1)"),
    ("est-gamma-nan", [*_EST[:-3], "--gamma", "nan"], "real number in (0, 1), got nan"),
    ("est-m-0", [*_EST, "--m", "0"], "m must be a positive integer"),
    ("est-pair-timeout-neg", [*_EST, "--pair-timeout", "-1"], "pair_timeout must be a positive number"),
    ("est-pair-timeout-nan", [*_EST, "--pair-timeout", "nan"], "pair_timeout must be a positive number"),
    ("est-task-timeout-local", [*_EST, "--task-timeout", "5"], "--task-timeout needs --backend auto or ray"),
    # estimate: choices, URIs
    ("est-backend", [*_EST, "--backend", "spark"], "invalid choice: 'spark' (choose from 'auto', 'local', 'ray')"),
    ("est-address-local", [*_EST, "--address", "127.0.0.1:6379"], "--address needs --backend auto or ray"),
    ("est-mechanism", [*_EST, "--mechanism", "cauchy"], "invalid choice: 'cauchy'"),
    ("est-out-scheme", [*_EST, "--store", "foo://x"], "cannot open store 'foo://x'"),
    ("est-out-file", [*_EST, "--store", "{file}"], "is a file; a store is a directory"),
    ("est-out-taken", [*_EST, "--store", "{store}"], "already holds a run; pass resume=True (--resume)"),
    ("est-resume-no-out", [*_EST, "--resume"], "resume=True needs a store"),
    # estimate: MOD:ATTR strings and their JSON arguments
    ("target-no-colon", ["estimate", "--target", "raydp.targets", *_O, "--n", "5", "--m", "50"],
     "must look like MODULE:ATTRIBUTE"),
    ("target-no-module", ["estimate", "--target", "nomodule:f", *_O, "--n", "5", "--m", "50"],
     "cannot import module 'nomodule'"),
    ("target-empty-module", ["estimate", "--target", ":mean", *_O, "--n", "5", "--m", "50"],
     "cannot import module ''"),
    ("target-nul", ["estimate", "--target", "a\x00b:c", *_O, "--n", "5", "--m", "50"], "cannot import module"),
    ("target-no-attr", ["estimate", "--target", "raydp.targets:nothere", *_O, "--n", "5", "--m", "50"],
     "has no attribute 'nothere'"),
    ("target-empty-attr", ["estimate", "--target", "raydp.targets:", *_O, "--n", "5", "--m", "50"],
     "has no attribute ''"),
    ("target-dotted-missing", ["estimate", "--target", "raydp.targets:mean.x", *_O, "--n", "5", "--m", "50"],
     "has no attribute 'mean.x'"),
    ("target-not-callable-factory", ["estimate", "--target", "raydp.targets:DEFAULT_SVM_TOL", *_O, "--n", "5",
                                     "--m", "50"], "is a float, not a callable factory"),
    ("target-not-callable", ["estimate", "--target", f"{_MOD}:NOT_CALLABLE", *_O, "--n", "5", "--m", "50"],
     "a target must be callable"),
    ("target-args-not-json", ["estimate", *_T, "--target-args", "{bad", *_O, "--n", "5", "--m", "50"],
     "--target-args must be a JSON object"),
    ("target-args-list", ["estimate", "--target", "raydp.targets:svm", "--target-args", "[1]", *_O, "--n", "5",
                          "--m", "50"], "--target-args must be a JSON object, got list"),
    ("target-args-unknown", ["estimate", "--target", "raydp.targets:svm", "--target-args", '{"c": 3}', *_O,
                             "--n", "5", "--m", "50"], "--target-args do not fit raydp.targets:svm"),
    ("target-args-bad-value", ["estimate", "--target", "raydp.targets:svm", "--target-args", '{"C": NaN}', *_O,
                               "--n", "5", "--m", "50"], "C must be > 0 and finite, got nan"),
    ("target-factory-raises", ["estimate", "--target", f"{_MOD}:raising_factory", "--target-args", "{}", *_O,
                               "--n", "5", "--m", "50"], "raised KeyError: 'factory failed'"),
    ("target-str-output", ["estimate", "--target", f"{_MOD}:returns_str", *_O, "--n", "5", "--m", "50"],
     "does not fit the laplace mechanism"),
    ("target-raises", ["estimate", "--target", f"{_MOD}:raises", *_O, "--n", "5", "--m", "50"],
     "ZeroDivisionError on a probe database"),
    ("target-changing-strict", ["estimate", "--target", f"{_MOD}:changing_shape", "--target-args", "{}", *_O,
                                "--n", "5", "--m", "50", "--strict"], "wrong output shape"),
    ("oracle-args-missing", ["estimate", *_T, "--oracle", "raydp.oracles:exponential", "--n", "5", "--m", "50"],
     "missing 1 required positional argument: 'rate'"),
    ("oracle-args-deep", ["estimate", *_T, "--oracle", "raydp.oracles:exponential", "--oracle-args", "[" * 100_000,
                          "--n", "5", "--m", "50"], "nests too deeply"),
    ("oracle-rate-neg", ["estimate", *_T, "--oracle", "raydp.oracles:exponential", "--oracle-args", '{"rate": -1}',
                         "--n", "5", "--m", "50"], "rate must be > 0"),
    ("oracle-nan", ["estimate", *_T, "--oracle", f"{_MOD}:nan_oracle", "--n", "5", "--m", "50"],
     "oracle returned NaN or infinite values"),
    ("oracle-short", ["estimate", *_T, "--oracle", f"{_MOD}:short_oracle", "--n", "5", "--m", "50"],
     "oracle returned 4 records"),
    ("oracle-raises", ["estimate", *_T, "--oracle", f"{_MOD}:raising_oracle", "--n", "5", "--m", "50"],
     "raised RuntimeError: no data today"),
    ("oracle-not-an-oracle", ["estimate", *_T, "--oracle", "raydp.targets:mean", "--n", "5", "--m", "50"],
     "an oracle must have a callable sample"),
    ("oracle-bootstrap-missing", ["estimate", *_T, "--oracle", "raydp.oracles:bootstrap", "--oracle-args",
                                  '{"source": "/no/such.csv"}', "--n", "5", "--m", "50"], "does not exist"),
    # estimate: mechanisms
    ("mech-args-not-json", [*_EST, "--mechanism-args", "{"], "--mechanism-args must be a JSON object"),
    ("mech-args-unknown", [*_EST, "--mechanism-args", '{"foo": 1}'], "do not fit the laplace mechanism"),
    ("mech-eps-nan", [*_EST, "--epsilon", "nan"], "epsilon must be a finite real number > 0, got nan"),
    ("mech-eps-in-args", [*_EST, "--mechanism-args", '{"epsilon": 1}'],
     "give epsilon as its own argument (--epsilon on the command line"),
    ("mech-delta-in-args", [*_EST, "--mechanism", "gaussian", "--mechanism-args", '{"delta": 1e-5}'],
     "give delta as its own argument (--delta on the command line"),
    ("mech-gauss-delta", [*_EST, "--mechanism", "gaussian", "--delta", "2"],
     "delta must be a real number in (0, 1)"),
    ("mech-laplace-delta", [*_EST, "--delta", "1e-5"], "delta applies to the gaussian mechanism only"),
    ("mech-gauss-calibration", [*_EST, "--mechanism", "gaussian", "--mechanism-args", '{"calibration": "x"}'],
     "calibration must be one of"),
    ("mech-exp-no-responses", [*_EST, "--mechanism", "exponential"],
     "missing 1 required positional argument: 'responses'"),
    ("mech-exp-empty", [*_EST, "--mechanism", "exponential", "--mechanism-args", '{"responses": []}'],
     "responses must be non-empty"),
    ("mech-exp-dup", [*_EST, "--mechanism", "exponential", "--mechanism-args", '{"responses": [1, 2, 1]}'],
     "responses must be distinct"),
    ("mech-exp-str", [*_EST, "--mechanism", "exponential", "--mechanism-args", '{"responses": "ab"}'],
     "got a string"),
    ("mech-exp-dict", [*_EST, "--mechanism", "exponential", "--mechanism-args", '{"responses": {"a": 1}}'],
     "ordered sequence"),
    ("mech-bern-lattice-0", [*_EST, "--mechanism", "bernstein", "--mechanism-args", '{"lattice": 0, "dims": 1}'],
     "lattice (K, the number of lattice steps per dimension) must be an integer >= 1"),
    ("mech-bern-lattice-float", [*_EST, "--mechanism", "bernstein", "--mechanism-args",
                                 '{"lattice": 4.5, "dims": 1}'], "lattice (K"),
    ("mech-bern-dims-huge", [*_EST, "--mechanism", "bernstein", "--mechanism-args",
                             '{"lattice": 4, "dims": 1180591620717411303424}'], "points is too large"),
    ("mech-bern-order", [*_EST, "--mechanism", "bernstein", "--mechanism-args",
                         '{"lattice": 4, "dims": 1, "order": 1000}'], "must be at most 40"),
    ("mech-bern-mean", [*_EST, "--mechanism", "bernstein", "--mechanism-args", '{"lattice": 4, "dims": 1}'],
     "expected (K+1)^ℓ = 5 lattice values"),
    # show
    ("show-missing", ["show", "{tmp}/nothing"], "no raydp store at"),
    ("show-file", ["show", "{file}"], "is a file; a store is a directory"),
    ("show-scheme", ["show", "foo://x"], "cannot open store 'foo://x'"),
    ("show-empty-uri", ["show", ""], "store must be a path or URI string"),
    ("show-no-uri", ["show"], "the following arguments are required: store"),
    ("show-gamma-2", ["show", "{store}", "--gamma", "2"], "real number in (0, 1), got 2.0"),
    ("show-gamma-tiny", ["show", "{store}", "--gamma", "1e-300"], "smallest gamma that m=50 pairs can certify"),
    ("show-gamma-word", ["show", "{store}", "--gamma", "half"], "invalid float value: 'half'"),
    ("show-plot-unwritable", ["show", "{store}", "--plot", "{file}/cdf.png"], "--plot: cannot write"),
    ("show-plot-format", ["show", "{store}", "--plot", "{tmp}/cdf.nosuchformat"],
     "Format 'nosuchformat' is not supported"),
    ("show-bad-meta", ["show", "{tmp}/meta_no_plan"], "malformed meta.json"),
    # release
    ("rel-eps-missing", [*_REL], "the following arguments are required: --epsilon"),
    ("rel-eps-nan", [*_REL, "--epsilon", "nan"], "epsilon must be a finite real number > 0, got nan"),
    ("rel-eps-0", [*_REL, "--epsilon", "0"], "epsilon must be a finite real number > 0, got 0"),
    ("rel-eps-neg", [*_REL, "--epsilon", "-1"], "epsilon must be a finite real number > 0"),
    ("rel-eps-word", [*_REL, "--epsilon", "one"], "invalid float value: 'one'"),
    ("rel-delta-2", [*_REL, "--epsilon", "1", "--mechanism", "gaussian", "--delta", "2"],
     "delta must be a real number in (0, 1)"),
    ("rel-delta-laplace", [*_REL, "--epsilon", "1", "--delta", "0.5"],
     "delta applies to the gaussian mechanism only"),
    ("rel-norm", [*_REL, "--epsilon", "1", "--mechanism", "gaussian", "--delta", "1e-6"],
     "the gaussian mechanism needs l2"),
    ("rel-gaussian-no-delta", [*_REL, "--epsilon", "1", "--mechanism", "gaussian"], 'mechanism="gaussian" needs delta > 0'),
    ("rel-target", ["release", "--store", "{store}", "--data", "{data}", "--target", "raydp.targets:median",
                    "--epsilon", "1", *_G], "computed for target mean"),
    ("rel-data-missing", ["release", "--store", "{store}", "--data", "{tmp}/none.npy", *_T, "--epsilon", "1", *_G],
     "--data: no such file"),
    ("rel-data-dir", ["release", "--store", "{store}", "--data", "{tmp}", *_T, "--epsilon", "1", *_G],
     "--data: cannot read"),
    ("rel-data-garbage", ["release", "--store", "{store}", "--data", "{tmp}/garbage.npy", *_T, "--epsilon", "1", *_G],
     "--data: cannot read"),
    ("rel-data-objects", ["release", "--store", "{store}", "--data", "{tmp}/objects.npy", *_T, "--epsilon", "1", *_G],
     "--data: cannot read"),
    ("rel-data-unknown-format", ["release", "--store", "{store}", "--data", "{file}", *_T, "--epsilon", "1", *_G],
     "cannot tell the format"),
    ("rel-data-text", ["release", "--store", "{store}", "--data", "{tmp}/text.csv", *_T, "--epsilon", "1", *_G],
     "non-numeric columns"),
    ("rel-estimate-file", ["release", "--store", "{file}", "--data", "{data}", *_T, "--epsilon", "1", *_G],
     "is a file; a store is a directory"),
    ("rel-estimate-scheme", ["release", "--store", "foo://x", "--data", "{data}", *_T, "--epsilon", "1", *_G],
     "cannot open store"),
    ("rel-budget-no-ledger", [*_REL, "--epsilon", "1", "--epsilon-total", "1"], "need --ledger PATH"),
    ("rel-ledger-dir", [*_REL, "--epsilon", "1", "--ledger", "{tmp}", "--epsilon-total", "1"], "is a directory"),
    ("rel-ledger-scheme", [*_REL, "--epsilon", "1", "--ledger", "foo://x", "--epsilon-total", "1"],
     "must be a local file"),
    ("rel-ledger-budget-nan", [*_REL, "--epsilon", "1", "--ledger", "{tmp}/ledger.json", "--epsilon-total", "nan"],
     "epsilon_total must be a finite real number > 0, got nan"),
    ("rel-target-no-colon", ["release", "--store", "{store}", "--data", "{data}", "--target", "mean",
                             "--epsilon", "1", *_G], "must look like MODULE:ATTRIBUTE"),
]


def _fill(argv, c):
    """Replace the placeholders {tmp}, {file}, {store}, {data} by the fixture's paths."""
    out = []
    for a in argv:
        for key in ("tmp", "file", "store", "data"):
            a = a.replace("{" + key + "}", getattr(c, key))
        out.append(a)
    return out


@pytest.mark.parametrize("argv, fragment", [pytest.param(a, f, id=i) for i, a, f in CLI])
def test_cli_bad_input_is_one_line(ctx, argv, fragment, capsys):
    code = main(_fill(argv, ctx))
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in err and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("raydp: error: ") and err.endswith("\n")
    assert fragment in err


def test_cli_ids_are_unique():
    assert len({row[0] for row in CLI}) == len(CLI)


def test_cli_counts_failed_pairs_instead_of_failing(capsys):
    code = main(["estimate", "--target", f"{_MOD}:changing_shape", "--target-args", "{}", *_O, "--n", "5",
                 "--m", "50", "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["failures"] == 50 and out["sensitivity"] == "inf"


# A handful in a real process: the exit status, the stream and no traceback as a user sees them.
SUBPROCESS = [
    (["plan", "--gamma", "nan"], "raydp: error: gamma must be a real number in (0, 1), got nan"),
    (["plan", "--m", str(HUGE)], f"raydp: error: m must be a positive integer at most 2**53, got {HUGE}"),
    ([*_EST, "--store", "{file}"], "is a file; a store is a directory"),
    (["estimate", "--target", "raydp.targets:nothere", *_O, "--n", "5", "--m", "50"], "has no attribute 'nothere'"),
    (["show", "foo://x"], "cannot open store 'foo://x'"),
    (["release", "--store", "{store}", "--data", "{tmp}", *_T, "--epsilon", "1", *_G], "--data: cannot read"),
]


def test_cli_bad_input_in_real_processes(ctx):
    procs = [(subprocess.Popen([sys.executable, "-m", "raydp.cli", *_fill(argv, ctx)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True), fragment) for argv, fragment in SUBPROCESS]
    for proc, fragment in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and out == "", err
        assert len(err.splitlines()) == 1 and "Traceback" not in err and fragment in err, err

