"""docs/reliability.md names a test for every row; every test it names must exist, so the table
cannot drift from the suite (`file.py::test`, or `::test` meaning the file named before it in the
same row; a trailing `[...]` parameter id is ignored)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "reliability.md"


def _named_tests():
    names = []
    for line in TABLE.read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| ---") or line.startswith("| bad input"):
            continue
        current = None
        for file, test in re.findall(r"([A-Za-z0-9_]+\.py)?::([A-Za-z0-9_]+)", line):
            current = file or current
            if current:
                names.append((current, test))
    return names


def test_every_test_the_reliability_table_names_exists():
    names = _named_tests()
    assert len(names) > 50, "the table lost its test references"
    missing = []
    for file, test in names:
        path = ROOT / "tests" / file
        if not path.is_file() or not re.search(rf"^\s*def {re.escape(test)}\(", path.read_text(), re.M):
            missing.append(f"{file}::{test}")
    assert not missing, "docs/reliability.md names tests that do not exist: " + ", ".join(sorted(set(missing)))
