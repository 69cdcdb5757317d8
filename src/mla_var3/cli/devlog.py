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


def previous_rows(path: Path, version: str) -> list[tuple[str, str, str]]:
    """(kernel, problem, the line verbatim) of each row of the table in `version`'s generated
    block of the devlog at `path`; [] without a block or a table. UsageError when the table has
    other columns than the report's (its lines could not be kept beside new ones)."""
    from mla_var3 import report
    from mla_var3.runtime import records
    body = records.devlog_block(path, version)
    if body is None:
        return []
    lines = body.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if start is None:
        return []
    header = [c.strip() for c in lines[start].strip().strip("|").split("|")]
    if header != list(report.BENCH_COLUMNS):
        raise UsageError(f"--devlog: the table of {version} in {path} has columns {', '.join(header)}, "
                         f"not the report's; rebuild it from records with --compare=<the kernels to show>")
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) >= 2:
            rows.append((cells[0], cells[1], ln))
    return rows


def write_devlog(entry, names: list[str], recs: list[dict], docs: Path, compare: bool = True) -> Path:
    """Put the table of `entry` (a registry entry) and the kernels compared with it into its
    design's devlog between generated markers; prose around them stays.

    With `compare` (the run named its kernels: --compare) the table is exactly what the records
    say. Without it, the kernels are those of the table already there plus `entry`: each
    (kernel, problem) row comes from the records when they have it, else its old line is kept
    verbatim, and a note under the table names the kept rows."""
    from mla_var3 import report
    from mla_var3.runtime import records
    path = docs / "kernels" / f"{entry.design}.md"
    old = [] if compare else previous_rows(path, entry.name)
    names = list(dict.fromkeys([*names, *(k for k, _, _ in old)]))
    recs = [r for r in recs if r["kernel"] in names]
    if not any(r["kernel"] == entry.name and r["kind"] == "bench" for r in recs):
        raise UsageError(f"--devlog: no bench records of {entry.name} in the records given")
    recs = recs + report.peer_rows(recs)
    rows = report.bench_rows(recs, baseline=entry.name, order=names)
    table = report.markdown_table(rows)
    fresh = {(r["kernel"], r["problem"]) for r in rows}
    kept = [o for o in dict((o[:2], o) for o in old).values() if o[:2] not in fresh]
    if kept:
        lines = [(r["problem"], r["kernel"], report.markdown_row(r)) for r in rows] + [(p, k, ln) for k, p, ln in kept]
        problems = list(dict.fromkeys([*(p for _, p, _ in old), *(r["problem"] for r in rows)]))
        kernels = merged_order([*names, *(r["kernel"] for r in rows)],
                               [[k for k, p, _ in old if p == pk] for pk in problems]
                               + [[r["kernel"] for r in rows if r["problem"] == pk] for pk in problems])
        lines.sort(key=lambda t: (problems.index(t[0]), kernels.index(t[1])))
        table = "\n".join(table.splitlines()[:2] + [ln for _, _, ln in lines]) + "\n\n" + kept_note(entry.name, kept, kernels)
    notes = report.table_notes(recs)
    if notes:                          # mixed schedule contracts, the old interleave order: say so under the table
        table += "\n\n" + "\n".join(f"- {n}" for n in notes)
    body = report.run_context(records.latest_records(recs)) + "\n\n" + table
    changed = records.update_devlog(path, entry.name, body)
    print(f"devlog: {path} {'updated' if changed else 'unchanged'}"
          + (f" ({len(kept)} rows kept from the previous table)" if kept else ""))
    return path


def merged_order(names: list[str], sequences: list[list[str]]) -> list[str]:
    """`names` ordered so that every sequence (the kernels of one problem, as a table listed
    them) keeps its order; ties (and any contradiction) go by the order of `names`."""
    names = list(dict.fromkeys(names))
    before = {k: set() for k in names}
    for seq in sequences:
        for a, b in zip(seq, seq[1:]):
            if a != b:
                before[b].add(a)
    out: list[str] = []
    while len(out) < len(names):
        left = [k for k in names if k not in out]
        out.append(next((k for k in left if before[k] <= set(out)), left[0]))
    return out


def kept_note(version: str, kept: list[tuple[str, str, str]], kernels: list[str]) -> str:
    counts = {k: sum(1 for o in kept if o[0] == k) for k in kernels}
    which = ", ".join(f"{k} ({n})" for k, n in counts.items() if n)
    return (f"Rows kept from the previous table (no records of them here): {which}; the measurement line "
            f"above is not theirs, and their 'vs first' compares with the {version} run of that table.")
