"""The docs hold together (CPU): every relative link in README.md and docs/**/*.md resolves to a file
of this repository and carries no #anchor (headings get renamed: cite a section by its quoted name); every registered kernel version has a `## <version>` section in
docs/kernels/<design>.md; every knowledge entry cites a run record under records/ or a numbered
source."""
import re
from pathlib import Path

import pytest

from mla_var3.runtime import registry

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
KNOWLEDGE = [p for p in sorted((ROOT / "docs" / "knowledge").rglob("*.md")) if p.name != "README.md"]
# [text](target) and [text]: target reference definitions; code spans and fences are not links
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^\"']*[\"'])?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)        # https:, mailto:, ...
RECORD = re.compile(r"records/([A-Za-z0-9_.\-]+\.jsonl?(?:\.gz)?)")
NUMBERED_SOURCE = re.compile(r"^\s*\[\d+\]\s+\S", re.M)


def links(path: Path) -> list[str]:
    text = CODE.sub("", FENCE.sub("", path.read_text()))
    return INLINE.findall(text) + REFDEF.findall(text)


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_relative_links_resolve_inside_the_repository(doc):
    bad = []
    for target in links(doc):
        if EXTERNAL.match(target):
            continue                                    # a URL
        if "#" in target:
            bad.append(f"{target}: an #anchor (cite the section by its quoted name instead)")
        path_part = target.split("#", 1)[0].split("?", 1)[0]
        if not path_part:
            continue
        dest = (doc.parent / path_part).resolve()
        if ROOT.resolve() not in (dest, *dest.parents):
            bad.append(f"{target}: leaves the repository")
        elif not dest.exists():
            bad.append(f"{target}: no such file ({rel(dest) if ROOT.resolve() in dest.parents else dest})")
    assert not bad, f"{rel(doc)}:\n  " + "\n  ".join(bad)


def test_the_link_finder_finds_links(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("see [a](x.md), [b](../y.md#z), ![c](img.png 'title'), `[d](code.md)`\n"
                    "```\n[e](fenced.md)\n```\n[f]: ref.md\n[g](https://example.com)\n")
    assert links(page) == ["x.md", "../y.md#z", "img.png", "https://example.com", "ref.md"]


def _versions():
    return sorted(registry.all_entries(), key=lambda e: e.name)


@pytest.mark.parametrize("entry", _versions(), ids=lambda e: e.name)
def test_every_registered_version_has_a_devlog_section(entry):
    """Peers included: an imported or outside kernel is documented where its numbers go."""
    page = ROOT / "docs" / "kernels" / f"{entry.design}.md"
    assert page.is_file(), f"{entry.name}: no devlog docs/kernels/{entry.design}.md"
    headings = re.findall(r"^## (\S+)\s*$", page.read_text(), re.M)
    assert entry.name in headings, f"{entry.name}: no '## {entry.name}' section in {rel(page)}"


@pytest.mark.parametrize("entry", KNOWLEDGE, ids=rel)
def test_every_knowledge_entry_cites_a_record_or_a_numbered_source(entry):
    text = entry.read_text()
    records = RECORD.findall(text)
    missing = [r for r in records if not (ROOT / "records" / r).is_file()]
    assert not missing, f"{rel(entry)} cites records that do not exist: {missing}"
    assert records or NUMBERED_SOURCE.search(text), (
        f"{rel(entry)}: cites no run record (records/<file>.jsonl.gz) and no numbered source ([1] ...)")
