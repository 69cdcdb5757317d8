"""CUTLASS's Hopper CuTe DSL GEMM examples as peers of the `gemm` problem kind
(cutlass_dense_gemm_v1, cutlass_dense_gemm_persistent_v1): imported at run time from the
git-ignored third_party/cutlass, unavailable with the fetch command without it, what they refuse,
and (when the tree is here) a compile for sm_90a without a GPU, bf16 and fp16."""
import re
from pathlib import Path

import pytest

from mla_var3.cli.kernel import main
from mla_var3.errors import PlanError
from mla_var3.kernel.peer_python.common import cutlass_examples as cx
from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry
from mla_var3.runtime.devices import load_devices

ROOT = Path(__file__).resolve().parents[1]
PEERS = ["cutlass_dense_gemm_v1", "cutlass_dense_gemm_persistent_v1"]
FILES = {"cutlass_dense_gemm_v1": "dense_gemm.py", "cutlass_dense_gemm_persistent_v1": "dense_gemm_persistent.py"}
H200 = load_devices()["H200"]
HAVE_CUTLASS = cx.cutlass_root()[0] is not None


@pytest.fixture
def no_cutlass(tmp_path, monkeypatch):
    empty = tmp_path / "no_cutlass"
    empty.mkdir()
    monkeypatch.setenv("CUTLASS_DIR", str(empty))
    return empty


def test_the_pinned_commit_is_the_fetch_scripts():
    script = (ROOT / "scripts" / "fetch_cutlass.sh").read_text()
    assert re.search(rf"^CUTLASS_COMMIT={cx.CUTLASS_COMMIT}\b", script, re.M)


@pytest.mark.parametrize("name", PEERS)
def test_registered_as_gemm_peers_naming_the_upstream_file(name):
    entry = registry.discover()[name]
    assert entry.language == "peer" and entry.layer == "gemm"
    plan = entry.load()
    assert plan.problem_kind is GemmProblem and plan.arch == ("sm_90a",)
    assert plan.upstream == f"NVIDIA/cutlass@7107b05:examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/{FILES[name]}"
    assert plan.describe()["upstream"] == plan.upstream
    assert (ROOT / "docs" / "kernels" / f"{plan.design}.md").is_file()


@pytest.mark.parametrize("name", PEERS)
def test_list_shows_them_unavailable_with_the_fetch_command(name, no_cutlass, capsys):
    assert main(["list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(name + " "))
    assert "unavailable:" in line and f"no CUTLASS examples at CUTLASS_DIR={no_cutlass}" in line
    assert "scripts/fetch_cutlass.sh" in line
    plan = registry.get_plan(name)
    with pytest.raises(PlanError, match=rf"{name} is unavailable: .*scripts/fetch_cutlass\.sh") as ei:
        plan.build(GemmProblem(m=8, n=8, k=8).make_inputs())
    assert "\n" not in str(ei.value)


def test_cli_refuses_an_unfetched_example_in_one_line(no_cutlass, tmp_path, capsys):
    rc = main(["torch_gemm", "--check", "--compare=cutlass_dense_gemm", "--m=8", "--n=8", "--k=8",
               "--device=cpu", f"--records={tmp_path}"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "scripts/fetch_cutlass.sh" in err


def test_a_tree_at_another_commit_or_not_made_by_the_script_does_not_count(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_DIR", str(tmp_path))
    (tmp_path / "LICENSE.txt").write_text("x")
    assert "was not made by scripts/fetch_cutlass.sh" in registry.get_plan(PEERS[0]).unavailable()
    (tmp_path / cx.STAMP).write_text("cutlass=0123456789 paths=LICENSE.txt examples/python/CuTeDSL\n")
    why = registry.get_plan(PEERS[0]).unavailable()
    assert "holds cutlass=0123456789, not cutlass=7107b05" in why and "scripts/fetch_cutlass.sh" in why
    (tmp_path / cx.STAMP).write_text(f"cutlass={cx.CUTLASS_COMMIT} paths=LICENSE.txt\n")
    why = registry.get_plan(PEERS[0]).unavailable()
    assert why.startswith(f"{tmp_path} has no {cx.HOPPER_DENSE_GEMM}/dense_gemm.py")


@pytest.mark.parametrize("name", PEERS)
def test_supports_and_tilings(name):
    plan = registry.get_plan(name)
    for p in GemmProblem.grids["check"]() + GemmProblem.grids["bench"]() + [GemmProblem(m=1, n=8, k=8, dtype="fp16")]:
        assert plan.supports(p) == [], p.key()          # ragged m, bf16 and fp16: see cutlass_gemm_plan.py
    assert any("solves gemm" in r for r in plan.supports(MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=64)))
    p = GemmProblem(m=1000, n=3000, k=4000)
    assert plan.default_tiling(p).validate(p, H200) == []
    configs = plan.autotune_configs(p)
    assert len(configs) == 16 and all(t.validate(p, H200) == [] for t in configs)
    for bad in plan.example_bad_tilings():
        with pytest.raises(PlanError, match=rf"tiling .* does not fit {name}"):
            plan.check_tiling(bad, p, H200)
    (why,) = plan.Tiling(cluster_m=4, cluster_n=2).validate(p, H200)
    assert "at most 4 CTAs per cluster" in why


def test_mnl_views_have_the_examples_strides_and_share_storage():
    import torch
    a = torch.zeros(5, 16, dtype=torch.float16)
    v = cx.mnl_view(a)
    assert v.shape == (5, 16, 1) and v.stride() == (16, 1, 80) and v.data_ptr() == a.data_ptr()


@pytest.mark.skipif(not HAVE_CUTLASS, reason="third_party/cutlass absent: scripts/fetch_cutlass.sh [CUTLASS_GIT]")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("name", PEERS)
def test_the_example_compiles_for_sm90a_without_a_gpu(name, dtype):
    plan = registry.get_plan(name)
    assert plan.unavailable() is None
    assert plan.compile_only(GemmProblem(m=1000, n=3000, k=4000, dtype=dtype), "sm_90a") == {"compiled": True}
    small = plan.Tiling(tile_m=64, tile_n=64, cluster_m=2, cluster_n=1)
    assert plan.compile_only(GemmProblem(m=1000, n=3000, k=4000, dtype=dtype), "sm_90a", small) == {"compiled": True}
