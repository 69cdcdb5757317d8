"""Bad records and bad report/devlog arguments: a warning per bad line, one-line errors, no lost rows."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_runtime import _record

from mla_var3 import report
from mla_var3.cli.kernel import main as kernel_main
from mla_var3.runtime import devices, records

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
ROOT = Path(__file__).resolve().parents[1]


def one_error(capsys, start: str) -> str:
    """The one `error:` line on stderr (nothing else there), which starts with `start`."""
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + start), cap.err
    assert "Traceback" not in cap.err
    return lines[0]


def corrupt_file(path: Path) -> tuple[list[dict], list[str]]:
    """A records file with two good records around four kinds of bad line; the warnings expected."""
    good = [_record(), _record(time_us={"median": 20.0, "min": 19.0, "max": 21.0, "n": 10})]
    bench = _record()
    del bench["tflops"]
    lines = [json.dumps(good[0]), '{"kind": "bench", "tim', "", "[1, 2]", '{"a": 1}', json.dumps(bench),
             json.dumps(good[1])]
    path.write_text("\n".join(lines) + "\n")
    return good, [f"warning: records: {path}:2: not a JSON record, skipped",
                  f"warning: records: {path}:4: not a JSON record (a JSON list, expected an object with 'kind' "
                  f"and 'kernel'), skipped",
                  f"warning: records: {path}:5: not a record (no 'kind' or 'kernel' string), skipped",
                  f"warning: records: {path}:6: bench record: missing field 'tflops', skipped"]


# --- records.load ----------------------------------------------------------------------------

def test_load_skips_bad_lines_with_one_warning_each(tmp_path, capsys):
    good, warnings = corrupt_file(tmp_path / "records.jsonl")
    for source in (tmp_path, tmp_path / "records.jsonl"):
        assert records.load(source) == json.loads(json.dumps(good))
        assert capsys.readouterr().err.splitlines() == warnings


def test_report_keeps_good_records_of_a_corrupt_file(tmp_path, capsys):
    _, warnings = corrupt_file(tmp_path / "records.jsonl")
    assert report.main(["--records", str(tmp_path)]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == warnings
    assert "| torch_mla_decode_v1 | b=2," in cap.out and "Traceback" not in cap.err


def test_devlog_keeps_good_records_of_a_corrupt_file(tmp_path, monkeypatch, capsys):
    _, warnings = corrupt_file(tmp_path / "records.jsonl")
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    assert kernel_main(["torch_mla_decode", "--devlog", f"--records={tmp_path}", f"--docs-dir={tmp_path / 'docs'}"]) == 0
    assert capsys.readouterr().err.splitlines() == warnings
    text = (tmp_path / "docs" / "kernels" / "torch_mla_decode.md").read_text()
    assert "| torch_mla_decode_v1 |" in text and "| 20.0 |" in text          # the newer good record


def test_gzipped_records_load_like_plain_ones_and_a_broken_archive_is_one_warning(tmp_path, capsys):
    """The repository keeps its records gzipped (records/*.jsonl.gz: every GPU call ships the
    tree); a directory's .jsonl and .jsonl.gz files load alike, a truncated archive is skipped
    with one warning naming it, and named directly it is a one-line error."""
    import gzip
    records.append(_record(), tmp_path)
    good = _record(time_us={"median": 20.0, "min": 19.0, "max": 21.0, "n": 10})
    (tmp_path / "old.jsonl.gz").write_bytes(gzip.compress((json.dumps(good) + "\n").encode()))
    assert len(records.load(tmp_path)) == 2 and records.load(tmp_path / "old.jsonl.gz") == [json.loads(json.dumps(good))]
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "bench"}\n' * 50)[:20])
    assert len(records.load(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"warning: records: cannot read {tmp_path / 'cut.jsonl.gz'}") and err.endswith("skipped")
    with pytest.raises(records.RecordError, match="cannot read"):
        records.load(tmp_path / "cut.jsonl.gz")
    assert len(records.load(ROOT / "records")) > 1000      # the committed archive reads


def test_load_non_text_file_in_a_directory_is_skipped_with_a_warning(tmp_path, capsys):
    records.append(_record(), tmp_path)
    (tmp_path / "image.jsonl").write_bytes(PNG)
    assert len(records.load(tmp_path)) == 1
    assert capsys.readouterr().err.strip() == (f"warning: records: {tmp_path / 'image.jsonl'} is not a text file "
                                               f"(expected JSON lines, one record per line), skipped")


@pytest.mark.parametrize("what", ["png", "text", "missing dir", "empty dir", "unmerged sweep"])
def test_report_bad_records_argument_is_one_line(tmp_path, capsys, what):
    path = tmp_path / "x"
    if what == "png":
        path = tmp_path / "plot.png"
        path.write_bytes(PNG)
        expect = f"error: records: {path} is not a text file (expected JSON lines, one record per line)"
    elif what == "text":
        path = ROOT / "README.md"
        expect = (f"error: records: {path} holds no record (line 1: not a JSON record; expected JSON lines, "
                  f"one object with 'kind' and 'kernel' each)")
    elif what == "missing dir":
        path = tmp_path / "nowhere"
        expect = f"error: records: {path} does not exist (expected a records.jsonl file or a directory of them)"
    else:
        path.mkdir()
        (path / "notes.txt").write_text("x")
        expect = (f"error: records: {path} has no *.jsonl file (expected records.jsonl or other JSON-lines "
                  f"record files in it)")
        if what == "unmerged sweep":
            records.append(_record(), path / "workers")
            expect += (f"; its subfolders hold 1 (a sweep's workers/? merge them with "
                       f"python -m mla_var3.sweep merge records={path})")
    assert report.main(["--records", str(path)]) == 2
    assert one_error(capsys, "records: ") == expect


# --- --devlog without --compare keeps the other kernels' rows ---------------------------------

OLD_TABLE = """\
Measured on an old run.

| kernel | problem | time (us) | TFLOP/s | GB/s | % roofline | % datasheet | bound | vs first |
|---|---|---|---|---|---|---|---|---|
| torch_mla_decode_v1 | {pk} | 10.0 | 1.0 | 2 | 3.0 | 2.0 | memory | 1.00x |
| flash_mla_decode_v1 | {pk} | 5.0 | 2.0 | 4 | 6.0 | 4.0 | memory | 2.00x |
| ct_flash_mla_decode_v1 | {pk} | 8.0 | 1.2 | 3 | 4.0 | 3.0 | memory | 1.25x |
| torch_mla_decode_v1 | b=4,s_q=1,h_q=16,seqlen=64 | 12.0 | 1.0 | 2 | 3.0 | 2.0 | memory | 1.00x |
| flash_mla_decode_v1 | b=4,s_q=1,h_q=16,seqlen=64 | 6.0 | 2.0 | 4 | 6.0 | 4.0 | memory | 2.00x |
"""


def _devlog_with_old_table(tmp_path, pk: str) -> Path:
    path = tmp_path / "docs" / "kernels" / "torch_mla_decode.md"
    path.parent.mkdir(parents=True)
    begin, end = records.devlog_markers("torch_mla_decode_v1")
    path.write_text(f"# torch_mla_decode\n\n## torch_mla_decode_v1\n\nProse stays.\n\n{begin}\n"
                    f"{OLD_TABLE.format(pk=pk)}{end}\n\nAfter.\n")
    return path


def test_devlog_without_compare_updates_this_version_and_keeps_the_rest(tmp_path, monkeypatch, capsys):
    mine = _record(time_us={"median": 40.0, "min": 39.0, "max": 41.0, "n": 10})
    pk = mine["problem_key"]
    ct = dict(_record(time_us={"median": 80.0, "min": 79.0, "max": 81.0, "n": 10}), kernel="ct_flash_mla_decode_v1",
              design="ct_flash_mla_decode", language="cutile")
    records.append(mine, tmp_path / "runs")
    records.append(ct, tmp_path / "runs")
    path = _devlog_with_old_table(tmp_path, pk)
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    argv = ["torch_mla_decode", "--devlog", f"--records={tmp_path / 'runs'}", f"--docs-dir={tmp_path / 'docs'}"]
    assert kernel_main(argv) == 0, capsys.readouterr().err
    assert "(3 rows kept from the previous table)" in capsys.readouterr().out
    text = path.read_text()
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and "kernel |" not in ln]
    assert table == [
        f"| torch_mla_decode_v1 | {pk} | 40.0 | 1.0 | 2 | 3.0 | 2.0 | memory | 1.00x |",        # updated
        f"| flash_mla_decode_v1 | {pk} | 5.0 | 2.0 | 4 | 6.0 | 4.0 | memory | 2.00x |",         # kept
        f"| ct_flash_mla_decode_v1 | {pk} | 80.0 | 1.0 | 2 | 3.0 | 2.0 | memory | 0.50x |",     # from records
        "| torch_mla_decode_v1 | b=4,s_q=1,h_q=16,seqlen=64 | 12.0 | 1.0 | 2 | 3.0 | 2.0 | memory | 1.00x |",
        "| flash_mla_decode_v1 | b=4,s_q=1,h_q=16,seqlen=64 | 6.0 | 2.0 | 4 | 6.0 | 4.0 | memory | 2.00x |"]
    assert ("Rows kept from the previous table (no records of them here): torch_mla_decode_v1 (1), "
            "flash_mla_decode_v1 (2); the measurement line above is not theirs, and their 'vs first' compares "
            "with the torch_mla_decode_v1 run of that table.") in text
    assert "Prose stays." in text and "After." in text and "Measured on an old run." not in text
    assert kernel_main(argv) == 0 and "unchanged" in capsys.readouterr().out        # idempotent

    # --compare says which kernels to show: the table is exactly the records' again
    assert kernel_main(argv + ["--compare=ct_flash_mla_decode_v1"]) == 0
    table = [ln for ln in path.read_text().splitlines() if ln.startswith("| ") and "kernel |" not in ln]
    assert [ln.split(" | ")[0] for ln in table] == ["| torch_mla_decode_v1", "| ct_flash_mla_decode_v1"]
    assert "Rows kept" not in path.read_text()


def test_devlog_refuses_to_merge_into_a_table_of_other_columns(tmp_path, monkeypatch, capsys):
    rec = _record()
    records.append(rec, tmp_path / "runs")
    path = _devlog_with_old_table(tmp_path, rec["problem_key"])
    before = path.read_text().replace("| vs first |", "| speedup |")
    path.write_text(before)
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    assert kernel_main(["torch_mla_decode", "--devlog", f"--records={tmp_path / 'runs'}",
                        f"--docs-dir={tmp_path / 'docs'}"]) == 2
    assert one_error(capsys, "--devlog: the table of torch_mla_decode_v1 in ").endswith(
        "rebuild it from records with --compare=<the kernels to show>")
    assert path.read_text() == before
