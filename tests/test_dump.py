"""--dump and --lineinfo on the CPU: the files per stage (CuTe DSL one and two stages, cuTile),
the SASS / res-usage parsers on fixtures from real sm_90a cubins, one-line errors, and line info
reaching the compile key."""
import json
import re
from pathlib import Path

import pytest

from mla_var3.cli import dump, profile
from mla_var3.cli.kernel import main
from mla_var3.errors import UsageError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import cute_kernel, registry, sass

FIXTURES = Path(__file__).parent / "fixtures"
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


@pytest.fixture(autouse=True)
def _line_info_off(monkeypatch):
    monkeypatch.setenv(cute_kernel.LINE_INFO_ENV, "0")      # off; unset again after each test


def _dump(tmp_path, *argv):
    rc = main([*argv, f"--records={tmp_path}"])
    (out,) = (tmp_path / "dump" / argv[0]).iterdir()
    return rc, out, json.loads((out / "dump.json").read_text())


def _files(out):
    return sorted(p.name for p in out.iterdir())


# ---- the file set --------------------------------------------------------------------------

def test_dump_one_stage_cute_version(tmp_path, capsys):
    rc, out, manifest = _dump(tmp_path, "flash_mla_decode_v1", "--dump=all")
    assert rc == 0
    assert out.name == "s_q=1,h_q=64,block_n=64,num_threads=256"
    want = ["main.cubin", "main.mlir", "main.ptx"] + (["main.res-usage.txt", "main.sass"] if HAVE_SASS_TOOLS else [])
    assert _files(out) == sorted(want + ["dump.json"])
    assert b".target sm_90a" in (out / "main.ptx").read_bytes()
    assert (out / "main.cubin").read_bytes()[:4] == b"\x7fELF"
    assert "cute." in (out / "main.mlir").read_text()
    assert manifest["tiling_source"] == "default" and manifest["lineinfo"] is False
    if HAVE_SASS_TOOLS:
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert line.startswith("flash_mla_decode_v1 main: ") and " regs, spills 0 B stack / 0 B local" in line
        assert "HGMMA" in line and "UTMALDG" in line


def test_dump_two_stage_cute_version_only_asked_kinds(tmp_path, capsys):
    rc, out, manifest = _dump(tmp_path, "flash_mla_decode_v3", "--dump=ptx,sass", "--s_q=2", "--h_q=16")
    assert rc == 0 and out.name.startswith("s_q=2,h_q=16,chunk=")
    sass_files = ["combine.res-usage.txt", "combine.sass", "split.res-usage.txt", "split.sass"]
    assert _files(out) == sorted(["combine.ptx", "split.ptx", "dump.json"] + (sass_files if HAVE_SASS_TOOLS else []))
    assert [s["stage"] for s in manifest["stages"]] == ["split", "combine"]
    if HAVE_SASS_TOOLS:
        lines = capsys.readouterr().out.strip().splitlines()[-2:]
        assert lines[0].startswith("flash_mla_decode_v3 split: ") and lines[1].startswith("flash_mla_decode_v3 combine: ")


def test_dump_honours_tiling(tmp_path, capsys):
    rc, out, manifest = _dump(tmp_path, "flash_mla_decode_v3", "--dump=ptx", "--s_q=1", "--h_q=16", "--tiling=chunk=8")
    assert rc == 0 and ",chunk=8," in out.name and manifest["tiling_key"].startswith("chunk=8,")
    assert manifest["tiling_source"] == "--tiling"


def test_dump_cutile_version(tmp_path, capsys):
    rc, out, manifest = _dump(tmp_path, "ct_flash_mla_decode_v2", "--dump=all")
    assert rc == 0
    names = _files(out)
    assert "main.cubin" in names and "main.ptx" not in names
    assert "main.mlir" in names or "main.tileirbc" in names       # text needs tileirdisasm
    assert manifest["lineinfo"] == "always (cuTile)"
    text = capsys.readouterr().out
    assert "no PTX from cuTile" in text
    if HAVE_SASS_TOOLS:
        assert "main.sass" in names
        assert "ct_flash_mla_decode_v2 main: 168 regs" in text.splitlines()[-1]


def test_missing_disassembler_is_one_warning_and_the_rest_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sass, "find_tool", lambda name: None)
    rc, out, _ = _dump(tmp_path, "flash_mla_decode_v1", "--dump=ptx,cubin,sass")
    assert rc == 0
    assert _files(out) == ["dump.json", "main.cubin", "main.ptx"]
    captured = capsys.readouterr()
    warnings = [ln for ln in captured.err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "no cuobjdump or nvdisasm found" in warnings[0]
    assert captured.out.strip().splitlines()[-1] == "flash_mla_decode_v1 main: wrote main.ptx, main.cubin"


# ---- one-line errors -------------------------------------------------------------------------

@pytest.mark.parametrize("argv, match", [
    (["flash_mla_decode_v1", "--dump=ptx,elf"], r"--dump: unknown kind 'elf'; expected a comma-separated subset"),
    (["flash_mla_decode_v1", "--dump=,"], "--dump: unknown kind"),
    (["torch_mla_decode_v1", "--dump=ptx"], "--dump: torch_mla_decode_v1 is a torch kernel: nothing to dump"),
    (["flash_mla_decode_v1", "--dump=ptx", "--compare=flash_mla_decode_v2"], "--dump: one version at a time"),
    (["flash_mla_decode_v1", "--dump=ptx", "--grid=check"], "--dump: one problem shape"),
    (["flash_mla_decode_v1", "--dump=ptx", "--arch=sm_80"], r"--dump --arch=sm_80: flash_mla_decode_v1 is built for"),
])
def test_bad_dump_requests_are_one_line(argv, match, tmp_path, capsys):
    assert main([*argv, f"--records={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert re.search(match, err), err
    assert not (tmp_path / "dump").exists(), "refused before anything is written"


def test_parse_kinds():
    assert dump.parse_kinds("all") == ("ptx", "cubin", "sass", "mlir")
    assert dump.parse_kinds("SASS, ptx,sass") == ("sass", "ptx")
    with pytest.raises(UsageError):
        dump.parse_kinds("")


def test_long_dir_names_are_hashed():
    class T:
        def key(self):
            return "x=" + "9" * 200
    name = dump.dump_dir_name(MlaDecodeProblem(), T())
    assert len(name) == 16 and name.isalnum()


# ---- the parsers, on trimmed output of real sm_90a cubins (flash_mla_decode_v3) ----------------

def test_res_usage_parser():
    res = sass.parse_res_usage((FIXTURES / "res_usage_v3.txt").read_text())
    split, combine = (res[f] for f in sorted(res, key=lambda f: "combine" in f))
    assert (split["REG"], split["STACK"], split["SHARED"], split["LOCAL"]) == (194, 0, 1024, 0)
    assert (combine["REG"], combine["SHARED"], combine["CONSTANT[0]"]) == (38, 0, 624)


def test_sass_parser_nvdisasm_with_line_info():
    ops = sass.parse_sass((FIXTURES / "sass_nvdisasm_v3_split.txt").read_text())
    (fn,) = ops
    assert fn.startswith("kernel_cutlass_flash_mla_decode_v3_kernel")
    counts = ops[fn]
    assert all(n == 1 for n in counts.values()) and len(counts) == 55      # trimmed: one of each opcode
    for op in ("HGMMA", "UTMALDG", "LDG", "STG", "LDS", "STS", "BAR", "SYNCS", "MUFU", "SHFL", "WARPGROUP"):
        assert counts[op] == 1, op
    assert counts["NANOSLEEP"] == 1 and counts["EXIT"] == 1          # predicated (@!P0, @P0) still count
    assert "File" not in counts and "BSSY" in counts


def test_sass_parser_cuobjdump_and_summary_line():
    ops = sass.parse_sass((FIXTURES / "sass_cuobjdump_v3_combine.txt").read_text())
    res = sass.parse_res_usage((FIXTURES / "res_usage_v3.txt").read_text())
    (fn,) = ops
    assert fn in res and len(ops[fn]) == 34 and sum(ops[fn].values()) == 34
    facts = sass.summarize({fn: res[fn]}, ops)
    assert facts["registers"] == 38 and facts["instructions"] == 34
    assert sass.format_summary("flash_mla_decode_v3 combine", facts) == (
        "flash_mla_decode_v3 combine: 38 regs, spills 0 B stack / 0 B local, smem 0 B static, "
        "34 SASS: LDG 1, STG 1, MUFU 1")


def test_summary_over_several_functions_takes_the_worst_and_sums_counts():
    res = {"a": {"REG": 40, "STACK": 0, "SHARED": 0, "LOCAL": 8}, "b": {"REG": 90, "STACK": 16, "SHARED": 512}}
    ops = {"a": {"HGMMA": 2, "STL": 1}, "b": {"HGMMA": 3, "IMAD": 4}}
    facts = sass.summarize(res, ops)
    assert (facts["registers"], facts["stack_bytes"], facts["local_bytes"], facts["smem_static_bytes"]) == (90, 16, 8, 512)
    assert sass.format_summary("x", facts) == "x: 90 regs, spills 16 B stack / 8 B local, smem 512 B static, 10 SASS: HGMMA 5, STL 1"
    assert sass.format_summary("y", sass.summarize({}, {})).startswith("y: ? regs")


# ---- --lineinfo -------------------------------------------------------------------------------

def test_lineinfo_reaches_the_compile_key():
    plan = registry.get_plan("flash_mla_decode_v3")
    problem = MlaDecodeProblem()
    tiling = plan.default_tiling(problem)
    plain = dump.runtime_stages(plan, problem, tiling)
    cute_kernel.enable_line_info()
    lined = dump.runtime_stages(plan, problem, tiling)
    for a, b in zip(plain, lined):
        assert "--generate-line-info" not in a.key.options.split()
        assert b.key.options.split() == a.key.options.split() + ["--generate-line-info"]
        assert a.key != b.key, "a line-info build is its own cache entry"
    assert cute_kernel.with_line_info("--generate-line-info") == "--generate-line-info"   # once


def test_lineinfo_flag_builds_with_line_info(tmp_path, capsys):
    rc, out, manifest = _dump(tmp_path, "flash_mla_decode_v1", "--dump=cubin,sass", "--lineinfo")
    assert rc == 0 and manifest["lineinfo"] is True
    assert cute_kernel.line_info_enabled(), "set for this process and the ones it starts"
    key = [k for k, _ in cute_kernel.COMPILE_LOG if k.kernel == "flash_mla_decode_v1"][-1]
    assert "--generate-line-info" in key.options.split()
    if HAVE_SASS_TOOLS and "nvdisasm" in sass.find_disassemblers():
        assert '//## File "' in (out / "main.sass").read_text() and "flash_mla_decode_v1/kernel.py" in (out / "main.sass").read_text()


def test_lineinfo_reaches_the_ncu_inner_run():
    problem = MlaDecodeProblem()
    assert "--lineinfo" not in profile.inner_argv("flash_mla_decode_v3", problem, "ncu", 0)
    cute_kernel.enable_line_info()
    inner = profile.inner_argv("flash_mla_decode_v3", problem, "ncu", 0)
    assert inner[-1] == "--lineinfo"
    from mla_var3.runtime import profiling
    cmd = profiling.ncu_report_command(inner, "flash_mla_decode_v3:x", "rep")
    assert "--import-source" in cmd and cmd[-1] == "--lineinfo" and "--clock-control" in cmd
