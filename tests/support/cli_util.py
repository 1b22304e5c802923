"""Running the ``raydp`` command line inside a test, and what every refusal of it must look like."""

from __future__ import annotations

from raydp.cli import main


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """``raydp ARGV`` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_exit_2(code: int, out: str, err: str) -> None:
    """A refusal: exit status 2 and one line on stderr, ``raydp: error: ...``, no traceback."""
    assert code == 2, out + err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("raydp: error: "), err
