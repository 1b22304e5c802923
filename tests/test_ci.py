"""`.ci/run` runs exactly the README's test command."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    readme = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(readme) == 2, "the README opens with exactly two set-up commands"
    assert readme[1] == ci[-1]
    assert "jobs/svm_sensitivity.py" in readme[0]
