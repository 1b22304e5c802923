"""`.ci/run` runs exactly the README's two set-up commands, in order."""


from paths import REPO as ROOT


def test_ci_runs_the_readme_test_command():
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    readme = (ROOT / "README.md").read_text().split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert len(readme) == 2, "the README opens with exactly two set-up commands"
    assert ci[-2:] == readme  # both, verbatim, the main job first
    assert "jobs/svm_sensitivity.py" in readme[0] and "[test]" not in readme[0]  # the base install alone
    assert "set -euo pipefail" in ci  # a failing command fails CI
