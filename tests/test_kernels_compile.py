"""Every CuTe DSL and cuTile kernel compiles for sm_90a on the CPU, for each static shape of its
problem kind (MLA decode: s_q, h_q; GEMM: the dtype)."""
import pytest

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import registry

DSL = [e.name for e in registry.all_entries() if e.language in ("cute-dsl", "cutile")]
SHAPES = [(1, 16), (2, 64), (1, 128), (2, 128)]
COMPILE_PROBLEMS = {
    "mla_decode": [mla.MlaDecodeProblem(b=1, s_q=s_q, h_q=h_q, seqlen=65) for s_q, h_q in SHAPES]
    + [mla.MlaDecodeProblem(b=1, s_q=4, h_q=8, seqlen=65, page_size=16),
       mla.MlaDecodeProblem(b=1, s_q=1, h_q=128, seqlen=65, page_size=32)],
    "gemm": [GemmProblem(m=1000, n=3000, k=4000, dtype=d) for d in ("bf16", "fp16")],
}
CASES = [(name, p) for name in DSL for p in COMPILE_PROBLEMS[registry.get_plan(name).problem_kind.kind]]


@pytest.mark.parametrize("name, problem", CASES, ids=[f"{n}-{p.static_key()}" for n, p in CASES])
def test_compiles_for_sm90a(name, problem):
    plan = registry.get_plan(name)
    if plan.supports(problem):
        pytest.skip("; ".join(plan.supports(problem)))
    info = plan.compile_only(problem, "sm_90a")
    assert info["compiled"] is True


@pytest.mark.parametrize("name", DSL)
def test_tilings_that_do_not_fit_are_refused(name):
    from mla_var3.runtime.devices import load_devices
    from mla_var3.runtime.kernel_plan import PlanError
    plan = registry.get_plan(name)
    problem = COMPILE_PROBLEMS[plan.problem_kind.kind][0]
    good = plan.default_tiling(problem)
    assert good.validate(problem, load_devices()["H200"]) == []
    if plan.problem_kind is mla.MlaDecodeProblem:
        small = load_devices()["RTX-5090"]          # 99 KB of shared memory per block
        assert any("shared memory" in r for r in good.validate(problem, small)), "must refuse a GPU it does not fit"
    assert plan.example_bad_tilings(), f"{name}: give example_bad_tilings so this test checks the refusals"
    for bad in plan.example_bad_tilings():
        with pytest.raises(PlanError, match="does not fit"):
            plan.check_tiling(bad, problem, load_devices()["H200"])


def test_dsl_kernels_are_registered():
    assert "flash_mla_decode_v1" in DSL
    assert "gemm_v1" in DSL
