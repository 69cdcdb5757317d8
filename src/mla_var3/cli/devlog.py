"""--devlog: the measured table of a version into docs/kernels/<design>.md, from records only.

Where the docs live is never derived from the package's location (an installed package has no
repository above it): `--docs-dir DIR` says it, else the git checkout of the current directory
(its docs/), else a clear error - checked before any work runs.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from mla_var3.errors import UsageError


def git_toplevel(cwd: Path | None = None) -> Path | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=cwd or Path.cwd(),
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def docs_dir(explicit: str | None) -> Path:
    """The docs directory devlogs are written under (DIR/kernels/<design>.md)."""
    if explicit:
        path = Path(explicit)
        if path.exists() and not path.is_dir():
            raise UsageError(f"--docs-dir: {path} is a file, expected a directory")
        return path
    top = git_toplevel()
    if top is not None and (top / "docs").is_dir():
        return top / "docs"
    raise UsageError("--devlog: the current directory is not in a git checkout with a docs/ folder; "
                     "give --docs-dir DIR (the devlog goes to DIR/kernels/<design>.md)")


def write_devlog(entry, names: list[str], recs: list[dict], docs: Path) -> Path:
    """Put the table of `entry` (a registry entry) and the kernels compared with it into its
    design's devlog between generated markers; prose around them stays."""
    from mla_var3 import report
    from mla_var3.runtime import records
    recs = [r for r in recs if r["kernel"] in names]
    if not any(r["kernel"] == entry.name and r["kind"] == "bench" for r in recs):
        raise UsageError(f"--devlog: no bench records of {entry.name} in the records given")
    recs = recs + report.peer_rows(recs)
    body = (report.run_context(records.latest_records(recs)) + "\n\n"
            + report.markdown_table(report.bench_rows(recs, baseline=entry.name, order=names)))
    path = docs / "kernels" / f"{entry.design}.md"
    changed = records.update_devlog(path, entry.name, body)
    print(f"devlog: {path} {'updated' if changed else 'unchanged'}")
    return path
