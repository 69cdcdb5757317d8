"""Every CuTe DSL and cuTile kernel compiles for sm_90a on the CPU. The newest version of each
design and the first of each language in the serving order (conf/ops/mla_decode_order.json) compile
for each static shape of their problem kind (MLA decode: s_q, h_q, page size; GEMM: the dtype); the
other, frozen versions for one shape: the page-16 s_q=4 one where they take page 16, else the first
(page 64). That keeps a fresh clone's CI well under half an hour with 44 MLA versions: a change to
common/ that breaks a frozen version's build still fails here, and every version's own tests
(tests/test_<mechanism>.py) compile it further."""
import pytest

from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.layers.mla import decode as mla
from mla_var3.ops.dispatch import measured_order
from mla_var3.runtime import registry

DSL = [e.name for e in registry.all_entries() if e.language in ("cute-dsl", "cutile")]
SHAPES = [(1, 16), (2, 64), (1, 128), (2, 128)]
COMPILE_PROBLEMS = {
    "mla_decode": [mla.MlaDecodeProblem(b=1, s_q=s_q, h_q=h_q, seqlen=65) for s_q, h_q in SHAPES]
    + [mla.MlaDecodeProblem(b=1, s_q=4, h_q=8, seqlen=65, page_size=16),
       mla.MlaDecodeProblem(b=1, s_q=1, h_q=128, seqlen=65, page_size=32)],
    "gemm": [GemmProblem(m=1000, n=3000, k=4000, dtype=d) for d in ("bf16", "fp16")],
}
EVERY_SHAPE = ({e.name for e in registry.newest_entries()}
               | {names[0] for names in measured_order().values() if names})


def _problems(name):
    plan = registry.get_plan(name)
    problems = COMPILE_PROBLEMS[plan.problem_kind.kind]
    if name in EVERY_SHAPE or len(problems) <= 2:
        return problems
    return [problems[-2]] if not plan.supports(problems[-2]) else [problems[0]]


CASES = [(name, p) for name in DSL for p in _problems(name)]


def test_the_newest_and_the_serving_leader_compile_every_shape():
    assert {"flash_mla_decode_v1", "gemm_v1"}.isdisjoint(EVERY_SHAPE)
    newest = registry.resolve("flash_mla_decode").name
    assert newest in EVERY_SHAPE and measured_order()["cute-dsl"][0] in EVERY_SHAPE
    assert sum(n == newest for n, _ in CASES) == len(COMPILE_PROBLEMS["mla_decode"])
    assert [p.page_size for n, p in CASES if n == "flash_mla_decode_v1"] == [64]          # no page 16 there
    assert [p.page_size for n, p in CASES if n == "flash_mla_decode_v5"] == [16]


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
