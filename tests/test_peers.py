"""Peers: FlashMLA's dense decode as a plan of language `peer` (flashmla_decode_v1), the
availability hook, stages that return the outputs they allocated, and the build script's
argument handling. The GPU tests run FlashMLA itself where its extension is built."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import toy_layer

from mla_var3.cli.kernel import main
from mla_var3.errors import PlanError
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import check, registry
from mla_var3.runtime.peer_kernel import ExtensionSpec, PeerKernel, load_extension
from mla_var3.runtime.runtime_kernel import RuntimeKernel
from mla_var3.runtime.torch_kernel import TorchKernel

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "build_flashmla.sh"
PEER = "flashmla_decode_v1"


@pytest.fixture
def no_extension(tmp_path, monkeypatch):
    """Point the peer at an empty directory: its extension is missing, whatever is built here."""
    empty = tmp_path / "nothing_built"
    empty.mkdir()
    monkeypatch.setenv("MLA_VAR3_FLASHMLA", str(empty))
    return empty


# ---- registration and availability ---------------------------------------------------------------
def test_peer_registers_with_language_peer():
    entry = registry.resolve("flashmla_decode")
    assert entry.name == PEER and entry.language == "peer" and entry.layer == "mla"
    plan = entry.load()
    assert plan.language == "peer" and plan.arch == ("sm_90a",) and plan.problem_kind is mla.MlaDecodeProblem
    assert plan.upstream == "deepseek-ai/FlashMLA@9241ae3" and plan.describe()["upstream"] == plan.upstream
    assert plan.compile_only(mla.MlaDecodeProblem(), "sm_90a")["compiled"] is False


def test_list_shows_the_peer_unavailable_with_the_build_command(no_extension, capsys):
    assert main(["list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(PEER))
    assert " peer " in line and "unavailable:" in line and "scripts/build_flashmla.sh" in line
    assert f"MLA_VAR3_FLASHMLA={no_extension}" in line


def test_build_refuses_in_one_line_when_the_extension_is_missing(no_extension):
    plan = registry.get_plan(PEER)
    assert "scripts/build_flashmla.sh" in plan.unavailable()
    inputs = mla.MlaDecodeProblem(b=1, h_q=16, seqlen=64).make_inputs()
    with pytest.raises(PlanError, match=r"flashmla_decode_v1 is unavailable: .*scripts/build_flashmla\.sh") as ei:
        plan.build(inputs)
    assert "\n" not in str(ei.value)


def test_cli_refuses_an_unavailable_peer_before_any_work(no_extension, tmp_path, capsys):
    rc = main(["torch_mla_decode", "--check", "--compare=flashmla_decode", "--b=1", "--seqlen=64",
               "--device=cpu", f"--records={tmp_path}"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: flashmla_decode_v1 is unavailable:") and "scripts/build_flashmla.sh" in err
    assert not (tmp_path / "records.jsonl").exists()


def test_compare_all_skips_an_unavailable_peer_and_says_why(no_extension, capsys):
    from mla_var3.cli.kernel import kernel_names, parse
    args, kind = parse(["torch_mla_decode", "--compare=all"])
    names = kernel_names(args, kind)
    assert PEER not in names and names[0] == "torch_mla_decode_v1"
    assert f"--compare=all: skipping {PEER}: " in capsys.readouterr().out


def test_compile_only_needs_no_extension(no_extension, capsys):
    assert main([PEER, "--compile-only", "--arch=sm_90a", "--b=1", "--h_q=16", "--s_q=1"]) == 0
    assert "nothing to compile" in capsys.readouterr().out


def test_a_broken_extension_is_unavailable_with_the_rebuild_command(tmp_path, monkeypatch):
    bad = tmp_path / "flashmla_dense_sm90.so"
    bad.write_bytes(b"not an ELF file")
    monkeypatch.setenv("MLA_VAR3_FLASHMLA", str(bad))
    reason = registry.get_plan(PEER).unavailable()
    assert reason.startswith(f"{bad} does not import (ImportError") and "rebuild it with scripts/build_flashmla.sh" in reason


def test_extension_spec_finds_abi_tagged_names_and_names_the_variable(tmp_path, monkeypatch):
    spec = ExtensionSpec(module="mod_x", env_var="MLA_VAR3_TEST_EXT", default_dir="third_party/X/build",
                         build_command="make x")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLA_VAR3_TEST_EXT", raising=False)
    path, reason = spec.locate()
    assert path is None and "third_party/X/build/ (MLA_VAR3_TEST_EXT unset)" in reason and "make x" in reason
    built = tmp_path / "third_party" / "X" / "build"
    built.mkdir(parents=True)
    (built / "mod_x.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    assert spec.locate() == (built / "mod_x.cpython-312-x86_64-linux-gnu.so", None)
    monkeypatch.setenv("MLA_VAR3_TEST_EXT", str(tmp_path / "missing.so"))
    mod, reason = load_extension(spec)
    assert mod is None and f"MLA_VAR3_TEST_EXT={tmp_path / 'missing.so'}" in reason


# ---- what FlashMLA cannot run ----------------------------------------------------------------------
def test_supports_refuses_what_flashmla_cannot_run():
    plan = registry.get_plan(PEER)
    for p in mla.grid("check") + mla.grid("bench") + mla.grid("pages"):
        if p.page_size == 64:
            assert plan.supports(p) == [], p.key()
        else:
            assert plan.supports(p) == [f"page size {p.page_size}: FlashMLA checks page_block_size == 64 "
                                        f'("Currently page_block_size must be 64"); page_size 64 only'], p.key()
    assert plan.supports(mla.MlaDecodeProblem(b=4096, s_q=1, h_q=128, seqlen=64)) == []
    (tiny_scale,) = plan.supports(mla.MlaDecodeProblem(b=1, seqlen=64, softmax_scale=1e-4))
    assert "softmax_scale 0.0001 is not above 0.000693" in tiny_scale and "-1e+33" in tiny_scale
    assert plan.supports(mla.MlaDecodeProblem(b=1, seqlen=64, softmax_scale=1e-3)) == []
    (offsets,) = plan.supports(mla.MlaDecodeProblem(b=4096, s_q=16, h_q=128, seqlen=64))
    assert "32-bit element offsets" in offsets and "s_q*h_q=2048" in offsets
    huge = mla.MlaDecodeProblem(b=1, seqlen=64)
    object.__setattr__(huge, "b", 12000)             # past our kind's own limit: FlashMLA's reason still shows
    assert any("shared memory" in r and "at most 11622 sequences" in r for r in plan.supports(huge))
    assert plan.supports(toy_layer.VectorAddProblem(n=4)) == [f"{PEER} solves mla_decode, not toy_vector_add"]


# ---- stages that return the outputs they allocated --------------------------------------------------
class ReturnsItsOwn(toy_layer.TorchVectorAdd):
    """A peer-like plan: its call allocates z itself and returns it; the buffers stay NaN."""
    name = "toy_vector_add_v8"

    def plan(self, inputs, tiling):
        return self.runtime(tiling, TorchKernel(lambda x, outs, ws: (x.x + x.y,)))


class ReturnsWrong(ReturnsItsOwn):
    name = "toy_vector_add_v9"

    def plan(self, inputs, tiling):
        return self.runtime(tiling, TorchKernel(lambda x, outs, ws: [x.x - x.y]))


def test_a_stage_may_return_the_outputs_it_allocated():
    problem = toy_layer.VectorAddProblem(n=8)
    inputs = problem.make_inputs()
    kern = ReturnsItsOwn().build(inputs)
    buffers = problem.make_outputs(inputs)
    (z,) = kern.run(inputs, buffers)
    assert torch.equal(z, inputs.x + inputs.y) and z.data_ptr() != buffers[0].data_ptr()
    assert buffers[0].isnan().all(), "nothing is copied into the harness's buffers"
    assert kern.launch(inputs, buffers, kern.prepare(inputs))[0].shape == (8,)
    # in place, as before: torch.add(..., out=o) returns o, which is not a tuple and is ignored
    plain = toy_layer.TorchVectorAdd().build(inputs)
    assert plain.launch(inputs, buffers, plain.prepare(inputs)) is None
    assert plain.run(inputs, buffers)[0] is buffers[0] and torch.equal(buffers[0], inputs.x + inputs.y)


def test_the_last_stage_result_wins_and_its_arity_is_checked():
    plan = toy_layer.TorchVectorAdd()
    inputs = toy_layer.VectorAddProblem(n=4).make_inputs()
    first, last = (inputs.x.clone(),), (inputs.y.clone(),)
    stages = [TorchKernel(lambda x, o, ws: first, name="a"), TorchKernel(lambda x, o, ws: None, name="b"),
              PeerKernel(lambda x, ws: last, name="c")]
    kern = RuntimeKernel(plan, plan.Tiling(), stages)
    assert kern.launch(inputs, (inputs.x,), kern.prepare(inputs)) == last
    assert kern.run(inputs)[0] is last[0]
    two = RuntimeKernel(plan, plan.Tiling(), [PeerKernel(lambda x, ws: (x.x, x.y))])
    with pytest.raises(PlanError, match="a stage returned 2 outputs, the problem has 1"):
        two.run(inputs)


def test_the_check_compares_the_returned_tensors():
    problems = toy_layer.VectorAddProblem.grid("check")
    assert all(r.passed for r in check.check_plan(ReturnsItsOwn(), problems, device="cpu"))
    assert not any(r.passed for r in check.check_plan(ReturnsWrong(), problems, device="cpu"))


def test_the_peer_passes_flashmla_its_arguments_and_returns_its_tensors(monkeypatch):
    """The plan's call, with a stand-in for the extension (the real one needs an H200)."""
    plan = registry.get_plan(PEER)
    calls = []

    class FakeExtension:
        @staticmethod
        def dense_decode_fwd(*args):
            calls.append(args)
            out, lse = mla.reference(inputs)
            return out.to(torch.bfloat16), lse, "sched", "splits"
    monkeypatch.setattr(type(plan), "extension", lambda self: FakeExtension)
    inputs = mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(65, 130)).make_inputs()
    kern = plan.plan(inputs, plan.Tiling(metadata="per_call"))
    assert [s.name for s in kern.stages] == ["dense_decode_fwd"]
    out, lse = kern.run(inputs)
    (args,) = calls
    assert args[0] is inputs.q and args[1] is inputs.kv_cache and args[2] == 512
    assert args[3] is inputs.cache_seqlens and args[4] is inputs.block_table
    assert args[5] == pytest.approx(576 ** -0.5) and args[6] is True and args[7:] == (None, None)
    assert mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(65, 130)).compare((out, lse), mla.reference(inputs)).passed
    # per_step (the default): the schedule is made once in prepare, then passed back on every call
    calls.clear()
    kern = plan.plan(inputs, plan.Tiling())
    ws = kern.prepare(inputs)
    assert ws == {"sched": "sched", "num_splits": "splits"} and calls[0][7:] == (None, None)
    kern.launch(inputs, None, ws)
    kern.launch(inputs, None, ws)
    assert [c[7:] for c in calls[1:]] == [("sched", "splits"), ("sched", "splits")]
    assert plan.Tiling(metadata="never").validate(None, None)


# ---- the build script -------------------------------------------------------------------------------
def _script(*args, **kw):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, **kw)


def test_build_script_help_names_the_pins():
    r = _script("--help")
    assert r.returncode == 0 and "9241ae3" in r.stdout and "147f5673d0" in r.stdout
    for flag in ("--fetch-only", "--build-only", "--compile-check", "--cutlass=", "--dest=", "--out="):
        assert flag in r.stdout


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown option --bogus"),
    (["--dest"], "--dest needs a value"),
    (["a", "b"], "one FlashMLA source only"),
    (["--fetch-only", "--build-only"], "give one of"),
    (["--fetch-only", "--out=x"], "--fetch-only builds nothing"),
])
def test_build_script_refuses_bad_arguments_in_one_line(args, message):
    r = _script(*args)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_build_script_checks_its_sources_before_building(tmp_path):
    r = _script("--build-only", f"--dest={tmp_path / 'src'}")
    assert r.returncode == 2 and "does not hold flashmla=9241ae3" in r.stderr
    r = _script(str(tmp_path), "--fetch-only", f"--dest={tmp_path / 'src'}")
    assert r.returncode == 2 and "is not a git directory" in r.stderr
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    r = _script(str(repo), "--fetch-only", f"--dest={tmp_path / 'src'}")
    assert r.returncode == 2 and "does not hold commit 9241ae3" in r.stderr
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "file").write_text("x")
    r = _script(str(repo), "--fetch-only", f"--dest={tmp_path / 'mine'}")
    assert r.returncode == 2 and "was not made by this script" in r.stderr


# ---- on the GPU: FlashMLA itself ---------------------------------------------------------------------
def _peer_or_skip():
    plan = registry.get_plan(PEER)
    missing = plan.unavailable()
    if missing:
        pytest.skip(missing)
    return plan


@pytest.mark.gpu
def test_flashmla_passes_the_check_on_part_of_the_grid():
    plan = _peer_or_skip()
    problems = [p for p in mla.grid("check") if p.b in (2, 4, 64) and p.h_q in (16, 128) and p.page_size == 64]
    results = check.check_plan(plan, problems, seeds=(0,), extra_seeds=(0,), device="cuda")
    assert results and all(r.status != "skip" for r in results)
    failed = [f"{r.problem_key} seed={r.seed} {r.dist}: {r.reason}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)


@pytest.mark.gpu
def test_flashmla_returns_its_own_tensors_and_runs_in_a_cuda_graph(tmp_path):
    from mla_var3 import jobs
    from mla_var3.runtime import devices, records
    plan = _peer_or_skip()
    problem = mla.MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlens=(63, 64, 65, 1))
    inputs = problem.make_inputs(device="cuda")
    kern = plan.build(inputs)
    buffers = problem.make_outputs(inputs)
    out, lse = kern.run(inputs, buffers)
    assert out.data_ptr() != buffers[0].data_ptr() and buffers[0].isnan().all() and buffers[1].isnan().all()
    assert out.shape == (4, 2, 64, 512) and lse.shape == (4, 64, 2) and lse.dtype == torch.float32
    rec = jobs.bench_record(plan, mla.MlaDecodeProblem(b=8, s_q=1, h_q=64, seqlen=1024), devices.current_device(),
                            rep_ms=10)
    records.append(rec, tmp_path)
    assert rec["language"] == "peer" and rec["upstream"] == plan.upstream and rec["stages"] == ["dense_decode_fwd"]
    assert rec["time_us"]["median"] > 0


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
