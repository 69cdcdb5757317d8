"""The README's two commands are what CI and users run."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_opens_with_two_commands_and_ci_runs_the_test_one():
    lines = (ROOT / "README.md").read_text().splitlines()
    block = lines[lines.index("```bash") + 1: lines.index("```bash") + 3]
    assert block[0].endswith("python -m mla_var3") and block[1].endswith("python -m pytest -q -n auto")
    assert all("pip install torch==2.13.0 && pip install -e" in c for c in block)
    assert block[1] in (ROOT / ".ci" / "run").read_text()


def test_the_test_command_has_its_parallel_runner():
    """`-n auto` needs pytest-xdist: it is in the dev extra the test command installs."""
    import pytest
    tomllib = pytest.importorskip("tomllib")          # Python 3.11+
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    assert "pytest-xdist" in dev
