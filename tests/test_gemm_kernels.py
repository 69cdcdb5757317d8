"""The GEMM kernel versions (gemm_vN, ct_gemm_vN): what they refuse and why, on the CPU, the
compile-only CLI, and (GPU) every version against the reference on small ragged shapes."""
import pytest
from gpu_helpers import assert_check_passes

from mla_var3.cli.kernel import main
from mla_var3.errors import PlanError
from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import devices, registry
from mla_var3.runtime.devices import load_devices

GEMM = [e.name for e in registry.all_entries() if e.load().problem_kind is GemmProblem]
GEMM_DSL = [e.name for e in registry.all_entries() if e.name in GEMM and e.language in ("cute-dsl", "cutile")]
H200 = load_devices()["H200"]
# ragged: m not a multiple of any tile, n and k multiples of 8 but not of a tile
RAGGED = [GemmProblem(m=1, n=256, k=512), GemmProblem(m=1000, n=3000, k=4000),
          GemmProblem(m=512, n=512, k=512), GemmProblem(m=129, n=264, k=520, dtype="fp16"),
          GemmProblem(m=1000, n=3000, k=4000, dtype="fp16"), GemmProblem(m=77, n=8, k=8)]


def test_gemm_versions_are_registered():
    assert {"gemm_v1", "torch_gemm_v1"} <= set(GEMM)


@pytest.mark.parametrize("name", GEMM_DSL)
def test_supports_gives_reasons(name):
    plan = registry.get_plan(name)
    assert plan.supports(GemmProblem(m=1000, n=3000, k=4000)) == []
    assert plan.supports(GemmProblem(m=1, n=8, k=8, dtype="fp16")) == []
    assert any("solves gemm" in r for r in plan.supports(MlaDecodeProblem(b=1, s_q=1, h_q=16, seqlen=64)))
    huge = GemmProblem(m=65536, n=65536, k=65536)       # 2^32 elements per operand
    assert any("2^31" in r for r in plan.supports(huge))
    with pytest.raises(PlanError, match=f"{name} does not support m=65536"):
        plan.require_supported(huge)


@pytest.mark.parametrize("name", GEMM_DSL)
def test_tiling_reasons_are_clear(name):
    plan = registry.get_plan(name)
    p = GemmProblem(m=1000, n=3000, k=4000)
    assert plan.default_tiling(p).validate(p, H200) == []
    configs = plan.autotune_configs(p)
    assert configs and all(t.validate(p, H200) == [] for t in configs), "the search space must be valid on the H200"
    for bad in plan.example_bad_tilings():
        reasons = bad.validate(p, H200)
        assert reasons and all(isinstance(r, str) and r for r in reasons)
        with pytest.raises(PlanError, match=r"tiling .* does not fit " + name):
            plan.check_tiling(bad, p, H200)


@pytest.mark.parametrize("name", GEMM_DSL)
def test_compile_only_cli(name, capsys):
    assert main([name, "--compile-only", "--arch=sm_90a", "--m=1000", "--n=3000", "--k=4000", "--dtype=fp16"]) == 0
    assert f"{name} dtype=fp16 [sm_90a]: compiled" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.parametrize("problem", RAGGED, ids=[p.key() for p in RAGGED])
@pytest.mark.parametrize("name", GEMM)
def test_gemm_matches_reference(name, problem):
    plan = registry.get_plan(name)
    if plan.unavailable():                      # a peer whose outside code is not here
        pytest.skip(f"{name}: {plan.unavailable()}")
    here = devices.current_device()
    if not devices.arch_supported(plan.arch, here.arch):
        pytest.skip(f"{name} needs {plan.arch}; this GPU is {here.arch}")
    if plan.supports(problem):
        pytest.skip(f"{name}: " + "; ".join(plan.supports(problem)))
    assert_check_passes(plan, problem, seeds=(0, 1))


def test_gemm_v4_refuses_a_gpu_without_the_shared_memory():
    plan = registry.get_plan("gemm_v4")
    p = GemmProblem(m=4096, n=4096, k=4096, dtype="fp16")
    small = load_devices()["RTX-5090"]          # 99 KB per block; the default ring needs 193 KB
    assert any("shared memory" in r for r in plan.default_tiling(p).validate(p, small))
    assert plan.Tiling(block_n=128, stages=3, consumer_wgs=1).validate(p, small) == []


def test_launch_arguments_refuse_what_the_compiled_code_assumes():
    import torch

    from mla_var3.errors import InputError
    from mla_var3.kernel.cute_python.common import gemm_io
    a, b, c = torch.zeros(4, 16, dtype=torch.bfloat16), torch.zeros(8, 16, dtype=torch.bfloat16), torch.zeros(4, 8, dtype=torch.bfloat16)
    assert gemm_io.launch_arguments(a, b, c) == (a, b, c)
    shifted = torch.zeros(4 * 16 + 1, dtype=torch.bfloat16)[1:].view(4, 16)     # 2 bytes past an aligned base
    with pytest.raises(InputError, match="a: expected a contiguous tensor whose data starts 16-byte aligned"):
        gemm_io.launch_arguments(shifted, b, c)



def _ptx(name, tiling_kw, dtype="bf16"):
    """The sm_90a PTX of one GEMM version at one tiling (compiled on the CPU, no GPU)."""
    from mla_var3.cli import dump
    from mla_var3.runtime import artifacts
    plan = registry.get_plan(name)
    problem = GemmProblem(m=512, n=512, k=512, dtype=dtype)
    tiling = plan.Tiling(**tiling_kw)
    plan.check_tiling(tiling, problem, None)
    (stage,) = dump.runtime_stages(plan, problem, tiling)
    return artifacts.stage_artifacts(stage, "sm_90a").files["ptx"].decode()


@pytest.mark.parametrize("tiling", [dict(block_k=64, stages=3), dict(block_k=32, stages=4)], ids=["bk64", "bk32"])
def test_gemm_v3_swizzled_ring_keeps_16_byte_vectors_aligned(tiling):
    """gemm_v3's shared-memory swizzle is attached to the pointer, so it acts on byte addresses:
    it must move whole 16-byte units (Swizzle<3,4,3> / <2,4,3>). The element-unit spelling
    (<3,3,3>) put half of the cp.async destinations and ldmatrix rows at 8 mod 16 (`misaligned
    address` on the H200). The compiler only emits a 16-byte shared store for the ring's zero
    fill when it can prove each 16-byte vector under the swizzle is 16-byte aligned: with the
    wrong unit the fill came out as st.shared.v2 (8 bytes) and the swizzle mask as 56 (bits 3-5)."""
    import re
    ptx = _ptx("gemm_v3", tiling)
    assert "st.shared.v4.b32" in ptx and "st.shared.v2" not in ptx
    # the swizzle on an address x: shr.u32 t, x, 3; and.b32 u, t, MASK; xor.b32 y, u, x
    swizzle = r"shr\.u32\s+(%r\d+), (%r\d+), 3;\s+and\.b32\s+(%r\d+), \1, (\d+);\s+xor\.b32\s+%r\d+, \3, \2;"
    masks = {int(m[3]) for m in re.findall(swizzle, ptx)}
    assert masks and all(m % 16 == 0 for m in masks), masks


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("tiling", [{}, dict(block_n=128, stages=6, epi_n=64), dict(consumer_wgs=1, stages=5, epi_bufs=4)],
                         ids=["default", "bn128", "one_wg"])
def test_gemm_v5_compiles_persistent_with_a_tma_store_epilogue(tiling, dtype):
    """gemm_v5 on sm_90a: TMA loads into the ring, stmatrix into the epilogue buffers, a TMA
    store per subtile with the bulk-group wait that guards buffer reuse, setmaxnreg kept, and a
    loop over tiles (the grid is at most `ctas`)."""
    ptx = _ptx("gemm_v5", tiling, dtype)
    assert "cp.async.bulk.tensor.2d.shared::cta.global" in ptx                # TMA loads
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx                # TMA store
    assert "stmatrix.sync.aligned" in ptx and "fence.proxy.async.shared::cta" in ptx
    assert "cp.async.bulk.wait_group.read" in ptx and "setmaxnreg.inc" in ptx
    assert "nctaid.x" in ptx                                                    # the persistent stride


GEMM_V6_CONFIGS = registry.get_plan("gemm_v6").autotune_configs(GemmProblem(m=4096, n=4096, k=4096, dtype="fp16"))


def _consumer_first_wait_parity_is_reset_per_tile(ptx: str) -> bool:
    """True when the consumers' ring state restarts inside the persistent tile loop: the parity
    register of the consumers' first full-barrier wait (after setmaxnreg.inc), or the slot index
    its barrier address is made from (slot * 8), is set to the immediate 0, directly or through
    register copies, between the tile loop's head (the first label after setmaxnreg.inc) and
    that wait."""
    import re
    body = ptx[ptx.index("setmaxnreg.inc"):]
    wait = re.search(r"mbarrier\.try_wait\.parity\.shared\.b64 P1, \[%r\d+\], (%r\d+),", body)
    head = re.search(r"^\$L__BB\d+_\d+:", body, re.M)
    assert wait and head and head.start() < wait.start()
    span = body[head.start():wait.start()]
    zero = set(re.findall(r"mov\.b32\s+(%r\d+), 0;", span))
    for dst, src in re.findall(r"mov\.b32\s+(%r\d+), (%r\d+);", span):
        if src in zero:
            zero.add(dst)
    addr = re.search(r"shl\.b32\s+%r\d+, (%r\d+), 3;", span)        # slot * 8: the barrier's address
    return wait.group(1) in zero or (addr is not None and addr.group(1) in zero)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("tiling", [t.__dict__ for t in GEMM_V6_CONFIGS], ids=[t.key() for t in GEMM_V6_CONFIGS])
def test_gemm_v6_compiles_with_one_wgmma_batch_in_flight(tiling, dtype):
    """gemm_v6 on sm_90a, every autotune config: gemm_v5's TMA loads, stmatrix and TMA store, and
    a mainloop that keeps one wgmma batch in flight - wait_group 1 after each k tile's commit
    (then the previous slot's empty-barrier arrive), wait_group 0 once per output tile (the drain
    before the epilogue), never the wait-for-everything-per-k-tile of gemm_v5; and the consumers'
    ring phase carried across the tile loop, not restarted per tile."""
    ptx = _ptx("gemm_v6", tiling, dtype)
    assert "cp.async.bulk.tensor.2d.shared::cta.global" in ptx and "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert "stmatrix.sync.aligned" in ptx and "setmaxnreg.inc" in ptx and "nctaid.x" in ptx
    waits = [int(w) for w in __import__("re").findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+);", ptx)]
    assert waits == [1, 0], waits                   # one in the k loop, one drain per tile
    mainloop = ptx[ptx.index("wgmma.wait_group.sync.aligned \t1;"):]
    assert mainloop.index("mbarrier.arrive.shared.b64") < mainloop.index("wgmma.wait_group.sync.aligned \t0;")
    assert not _consumer_first_wait_parity_is_reset_per_tile(ptx)


@pytest.mark.parametrize("name", ["gemm_v5", "gemm_v6"])
def test_persistent_consumers_carry_their_ring_phase_across_tiles(name):
    """The producer's ring runs on across a CTA's tiles; the consumers' (slot, phase) must too,
    or every tile after the first reads the wrong slots unless n_k_tiles is a multiple of
    2 x stages. Checked in the PTX (no GPU)."""
    assert not _consumer_first_wait_parity_is_reset_per_tile(_ptx(name, {}, "fp16"))


# more tiles than CTAs, k tiles not a multiple of 2 x stages (63 k tiles at k = 4000; 9 at 520)
MULTI_TILE = [(GemmProblem(m=1000, n=3000, k=4000), dict(ctas=5)),
              (GemmProblem(m=1000, n=3000, k=4000, dtype="fp16"), dict(ctas=7, stages=3, epi_n=64, epi_bufs=4)),
              (GemmProblem(m=129, n=264, k=520, dtype="fp16"), dict(ctas=1, consumer_wgs=1, stages=5)),
              (GemmProblem(m=1000, n=3000, k=4000), dict(ctas=3, block_n=128, stages=6))]


@pytest.mark.gpu
@pytest.mark.parametrize("problem,tiling", MULTI_TILE, ids=[f"{p.key()}-{'-'.join(f'{k}{v}' for k, v in t.items())}"
                                                            for p, t in MULTI_TILE])
@pytest.mark.parametrize("name", ["gemm_v5", "gemm_v6"])
def test_persistent_gemm_many_tiles_per_cta(name, problem, tiling):
    """The GPU test shapes give each persistent CTA at most one tile at the default 132 CTAs;
    these tilings make every CTA walk several, with ragged k, so the ring's phase bookkeeping
    across tiles (and the epilogue buffers' reuse) is exercised (v5 and v6 share the tiling)."""
    plan = registry.get_plan(name)
    if plan.unavailable():
        pytest.skip(f"{name}: {plan.unavailable()}")
    here = devices.current_device()
    if not devices.arch_supported(plan.arch, here.arch):
        pytest.skip(f"{name} needs {plan.arch}; this GPU is {here.arch}")
    assert_check_passes(plan, problem, seeds=(0,), extra_seeds=(), tiling=plan.Tiling(**tiling))
