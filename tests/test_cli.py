"""The CLI: parsing, aliases, one-line errors, list, check on the CPU, devlog from records."""
import json
import re

import pytest
import torch

from mla_var3.cli.kernel import main, parse
from mla_var3.layers.mla.decode import MlaDecodeProblem


def problems(*argv):
    args, kind = parse(list(argv))
    return kind.from_cli(args)


def test_the_kernel_names_its_problem_kind_and_flags():
    args, kind = parse(["torch_mla_decode", "--b=4"])
    assert kind is MlaDecodeProblem and args.b == 4
    args, kind = parse(["--b", "4", "torch_mla_decode"])     # value before the name still parses
    assert args.name == "torch_mla_decode" and args.b == 4
    assert parse(["list"])[1] is None


def test_aliases_match_long_forms():
    a = vars(parse(["torch_mla_decode", "--b=4", "--s=2", "--h=16", "--t=300", "--varlen", "--seed=3"])[0])
    b = vars(parse(["torch_mla_decode", "--b=4", "--s_q=2", "--h_q=16", "--seqlen=300", "--varlen", "--seed=3"])[0])
    assert a == b
    (p,) = problems("torch_mla_decode", "--b=4", "--s=2", "--h=16", "--t=300", "--varlen")
    assert (p.b, p.s_q, p.h_q, p.seqlen, p.varlen) == (4, 2, 16, 300, True)


def test_seqlens_set_the_batch():
    (p,) = problems("torch_mla_decode", "--seqlens=63,64,65")
    assert p.b == 3 and p.seqlens == (63, 64, 65)
    assert problems("torch_mla_decode") is None


def test_page_size_flag():
    (p,) = problems("torch_mla_decode", "--seqlens=5,40", "--page_size=16")
    assert p.page_size == 16 and p.key() == "b=2,s_q=1,h_q=64,seqlens=5,40,page_size=16"
    (p,) = problems("torch_mla_decode", "--b=2")
    assert p.page_size == 64
    (p,) = problems("torch_mla_decode", "--page_size=32")          # alone it is a dimension flag too
    assert p.page_size == 32 and p.b == 128


def test_check_at_page_16_on_cpu_and_compile_only_skips_with_the_reason(tmp_path, capsys):
    rc = main(["torch_mla_decode", "--check", "--seqlens=1,17,40", "--s_q=4", "--h_q=4", "--page_size=16",
               "--device=cpu", f"--records={tmp_path}"])
    assert rc == 0 and "PASSED 3/3 cases on 1 problems" in capsys.readouterr().out
    rec = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[-1])
    assert rec["problem"]["page_size"] == 16 and rec["problem_key"].endswith(",page_size=16")
    assert main(["flash_mla_decode_v4", "--compile-only", "--arch=sm_90a", "--b=1", "--s_q=1", "--h_q=16",
                 "--page_size=16"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"flash_mla_decode_v4 s_q=1,h_q=16,page_size=16: skipped, page size 16: .*page_size 64 only", out)
    assert main(["flash_mla_decode_v5", "--compile-only", "--arch=sm_90a", "--b=1", "--s_q=1", "--h_q=16",
                 "--page_size=16"]) == 0
    assert "flash_mla_decode_v5 s_q=1,h_q=16,page_size=16 [sm_90a]: compiled" in capsys.readouterr().out


def test_prof_type_is_accepted():
    assert parse(["torch_mla_decode", "--prof_type=ncu"])[0].prof_type == "ncu"


@pytest.mark.parametrize("argv, match", [
    (["nope", "--check"], "unknown kernel 'nope'"),
    (["torch_mla_decode", "--b=0"], "b: expected 1..4096"),
    (["torch_mla_decode", "--h_q=300"], "h_q: expected"),
    (["torch_mla_decode", "--check", "--page_size=128"], r"^error: page_size: expected one of 16, 32, 64 \(rows per cache page\), got 128$"),
    (["torch_mla_decode", "--b=2", "--seqlens=1,2,3"], "--b=2 but --seqlens gives 3"),
    (["torch_mla_decode", "--seqlens=1,x"], "--seqlens: expected comma-separated ints"),
    (["torch_mla_decode", "--grid=bench", "--b=2"], "--grid"),
    (["torch_mla_decode", "--grid=nope"], "--grid: invalid choice"),
    (["torch_mla_decode", "--b=two"], "invalid int value"),
    (["torch_mla_decode", "--compile-only", "--arch=sm_91"], "--arch: expected one of"),
    (["torch_mla_decode", "--compare=nope"], "unknown kernel 'nope'"),
    (["torch_mla_decode", "--compare=,"], "--compare: expected kernel names"),
    (["torch_mla_decode", "--bogus"], "unrecognized arguments: --bogus"),
    (["flash_mla_decode", "--check", "--device=cpu"], r"--device=cpu: flash_mla_decode_v\d+ is a cute-dsl kernel and needs a GPU"),
    (["torch_mla_decode", "--check", "--seqlens="], "--seqlens: expected at least one length"),
    (["torch_mla_decode", "--check", "--tiling=nope=1"],
     "--tiling: torch_mla_decode_v1 has no tiling field 'nope'; its fields: batch_chunk"),
    (["torch_mla_decode", "--check", "--tiling=batch_chunk=x"], "--tiling: batch_chunk='x' is not a valid int"),
    (["torch_mla_decode", "--check", "--tiling=batch_chunk"], "--tiling: expected key=value pairs"),
    (["torch_mla_decode", "--check", "--seqlens=1,65", "--device=cpu", "--tiling=batch_chunk=0"],
     "tiling batch_chunk=0 does not fit torch_mla_decode_v1"),
    (["torch_mla_decode", "--check", "--seqlens=,,,"], "--seqlens: expected at least one length"),
    (["torch_mla_decode", "--check", "--seqlens=5,6", "--seqlen=9"], "--seqlens and --seqlen"),
    (["torch_mla_decode", "--seed=99999999999999999999"], "--seed: expected 0.."),
    (["torch_mla_decode", "--seed=-1"], "--seed: expected 0.."),
    (["torch_mla_decode", "--rep_ms=-1"], r"--rep_ms: expected a timing budget"),
    (["torch_mla_decode", "--replays=2"], r"--replays: expected 3..1000 timed rounds, got 2"),
    (["torch_mla_decode", "--check", "--b=4096", "--seqlen=1048576", "--device=cpu"],
     r"needs ~\d.* TB for its inputs and outputs, cpu has .* free"),
    (["torch_mla_decode", "--grid=bench", "--where=hq > 3"], r"--where: unknown field 'hq' in 'hq > 3' \(fields: b, "),
    (["torch_mla_decode", "--grid=bench", "--where=h_q >"], r"--where: cannot read 'h_q >'"),
    (["torch_mla_decode", "--grid=bench", "--where=__import__('os')"], r"--where: .* is not allowed in"),
    (["torch_mla_decode", "--grid=bench", "--where=h_q > 1000"], r"--where: no problem of grid 'bench' matches"),
    (["torch_mla_decode", "--check", "--where=h_q > 3"], r"--where: only with --grid"),
    (["torch_mla_decode", "--b=2", "--tune-knobs=batch_chunk"], r"--tune-knobs: only with --autotune"),
    (["torch_mla_decode", "--b=2", "--autotune", "--tune-knobs=chunk"],
     r"--tune-knobs: 'chunk' not a field of torch_mla_decode_v1's .* \(fields: batch_chunk\)"),
    (["flash_mla_decode", "--compile-only", "--arch=sm_80", "--b=1", "--s_q=1", "--h_q=16"],
     r"--compile-only --arch=sm_80: flash_mla_decode_v\d+ cannot be compiled for sm_80"),
])
def test_bad_cli_input_is_one_line(argv, match, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert re.search(match, err), err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_check_on_cuda_without_gpu_says_so(capsys):
    assert main(["torch_mla_decode", "--check", "--grid=smoke", "--device=cuda"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --device=cuda: no CUDA GPU") and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_benchmark_without_gpu_says_so(capsys):
    assert main(["torch_mla_decode", "--b=2", "--seqlen=64"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_list_shows_versions_and_problem_kinds(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"torch_mla_decode_v1\s+torch\s+mla_decode", out)


def test_check_on_cpu_writes_records(tmp_path, capsys):
    js = tmp_path / "out.json"
    rc = main(["torch_mla_decode", "--check", "--seqlens=1,65", "--s_q=2", "--h_q=4", "--device=cpu",
               f"--records={tmp_path}", f"--json={js}"])
    assert rc == 0
    assert "PASSED 3/3 cases on 1 problems" in capsys.readouterr().out
    recs = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert recs[-1]["kind"] == "check" and recs[-1]["passed"] is True
    assert recs[-1]["problem_kind"] == "mla_decode"
    assert {c["dist"] for c in recs[-1]["cases"]} == {"default", "peaked"}
    assert json.loads(js.read_text())[0]["kernel"] == "torch_mla_decode_v1"


def test_compile_only_torch_has_nothing_to_compile(capsys):
    assert main(["torch_mla_decode", "--compile-only", "--arch=sm_90a", "--s_q=1", "--h_q=16", "--b=1"]) == 0
    assert "nothing to compile" in capsys.readouterr().out


def test_devlog_from_records_into_docs_dir(tmp_path, monkeypatch, capsys):
    from test_runtime import _record

    from mla_var3.runtime import devices, records
    records.append(_record(), tmp_path / "runs")
    monkeypatch.setattr(devices, "cuda_available", lambda: False)     # devlog from records, no run
    rc = main(["torch_mla_decode", "--devlog", f"--records={tmp_path / 'runs'}", f"--docs-dir={tmp_path / 'docs'}"])
    assert rc == 0, capsys.readouterr().err
    text = (tmp_path / "docs" / "kernels" / "torch_mla_decode.md").read_text()
    assert "## torch_mla_decode_v1" in text and "| torch_mla_decode_v1 |" in text and "10.0" in text
    assert "not re-run" not in text, "b=2 matches no FlashMLA config"


def test_devlog_outside_a_checkout_needs_docs_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                # not a git checkout: nowhere to write
    assert main(["torch_mla_decode", "--devlog", f"--records={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert "give --docs-dir" in err and len(err.strip().splitlines()) == 1


def test_main_job_shim_and_version_modules_reach_the_same_cli():
    from mla_var3.kernel import __main__ as shim
    assert shim.main is main


def test_devlog_without_bench_records_is_one_line(tmp_path, monkeypatch, capsys):
    from mla_var3.runtime import devices
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "records.jsonl").write_text("")
    rc = main(["torch_mla_decode", "--devlog", f"--records={tmp_path / 'runs'}", f"--docs-dir={tmp_path / 'docs'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == "error: --devlog: no bench records of torch_mla_decode_v1 in the records given", err


def test_tiling_flag_runs_the_first_kernel_with_it(tmp_path, capsys):
    rc = main(["torch_mla_decode", "--check", "--seqlens=1,65", "--s_q=2", "--h_q=4", "--device=cpu",
               "--tiling=batch_chunk=1", f"--records={tmp_path}"])
    assert rc == 0 and "batch_chunk_1" not in capsys.readouterr().err
    rec = json.loads((tmp_path / "records.jsonl").read_text().splitlines()[-1])
    assert rec["tiling"] == {"batch_chunk": 1} and rec["passed"]


def test_tiling_flag_converts_to_the_fields_types():
    from mla_var3.cli.tiling import parse_tiling
    from mla_var3.runtime import registry
    t = parse_tiling(registry.get_plan("flash_mla_decode_v3"), "chunk=16, num_threads=256")
    assert t.chunk == 16 and t.num_threads == 256 and t.block_n == 64
    assert parse_tiling(registry.get_plan("flashmla_decode_v1"), "metadata=per_call").metadata == "per_call"


def test_where_keeps_the_grid_problems_it_holds_for():
    """--where filters a named grid with an expression over the problem's fields (arithmetic,
    comparisons, and/or/not); the kept problems are the grid's own, in its order."""
    from mla_var3.cli.where import filter_grid
    from mla_var3.layers.mla import decode as mla
    bench = mla.grid("bench")
    kept = filter_grid(bench, "s_q * h_q >= 128 and not varlen", "bench")
    assert kept == [p for p in bench if p.s_q * p.h_q >= 128 and not p.varlen] and len(kept) == 9
    assert filter_grid(bench, "seqlen // 1024 % 4 == 0 or h_q == 16", "bench") == \
        [p for p in bench if p.seqlen // 1024 % 4 == 0 or p.h_q == 16]
    assert filter_grid(mla.grid("serving"), "page_size == 16 and 8 < h_q <= 32", "serving") == \
        [p for p in mla.grid("serving") if p.page_size == 16 and 8 < p.h_q <= 32]


def test_bench_line_clock_note_adds_energy_per_call_when_read():
    """The bench line's tail: clock and power, then the energy per call where the record has it;
    nothing for records without a clock reading."""
    from mla_var3.cli.kernel import clock_note
    during = {"sm_mhz": 1652.4, "power_w": 688.6, "sm_mhz_samples": [1652.4], "mj_per_call": 233.7,
              "power_w_energy": 690.1}
    assert clock_note(during) == "  at 1652 MHz, 689 W, 233.7 mJ/call"
    assert clock_note({**during, "mj_per_call": None}) == "  at 1652 MHz, 689 W"
    old = {"sm_mhz": 1652.4, "power_w": 688.6, "sm_mhz_samples": [1652.4]}       # before mj_per_call
    assert clock_note(old) == "  at 1652 MHz, 689 W"
    assert clock_note(None) == "" and clock_note({"sm_mhz": None, "power_w": None, "mj_per_call": 233.7}) == ""
