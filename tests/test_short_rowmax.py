"""flash_mla_decode_v57's row-max step (`rowmax`): the knob and its refusal, the algebra it rests on
(max of raw scores times the scale equals the max of scaled scores; the tree's max equals the
chain's), the compiled code ("chain" is v46's kernel instruction for instruction; "fold" and "tree"
drop the 32 FMULs of each row-max step and fuse the scale into the exponent's FFMA), and on the H200
the kernel against the reference and bit for bit against v46 with "chain", at pages 64 and 16, with
planted keys that move the lazy max, and under a CUDA graph replayed with new lengths."""
import dataclasses
import itertools

import pytest
import torch
from gpu_helpers import assert_check_passes, check_with_planted_keys, planted_keys_problem, runnable_plan
from version_knob import (KNOB_CASES, assert_graph_replay_with_new_lengths, assert_reference_and_bitwise,
                          graph_replay_build, tiling_without)

from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V57, V46 = "flash_mla_decode_v57", "flash_mla_decode_v46"
MODES = ("tree", "fold", "chain")


@pytest.fixture(autouse=True)
def _quarantined_runs(monkeypatch):
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")


def test_rowmax_knob_and_refusal():
    plan = registry.get_plan(V57)
    p = MlaDecodeProblem(b=8, s_q=2, h_q=64, seqlen=1024, varlen=True)
    t = plan.default_tiling(p)
    assert t.rowmax == "tree"
    base = dataclasses.replace(t, rowmax="chain").to_dict()
    base.pop("rowmax")
    assert base == registry.get_plan(V46).default_tiling(p).to_dict()     # v46's tiling otherwise
    configs = plan.autotune_configs(p)
    assert {c.rowmax for c in configs} == set(MODES)
    for c in configs:
        plan.check_tiling(c, p, None)
    with pytest.raises(PlanError, match=r"rowmax must be one of tree, fold, chain .* got 'max3'"):
        plan.check_tiling(dataclasses.replace(t, rowmax="max3"), p, None)


def test_raw_max_times_scale_is_the_scaled_max_and_the_tree_is_the_chain():
    """The identities v57 relies on, in float32 as the kernel computes them: for a positive scale,
    rounding is monotonic, so max(s) * c == max(s * c) exactly; fmax is exact, so a pairwise tree
    gives the chain's max; masked scores (-inf) stay -inf and a fully masked row gives -inf."""
    g = torch.Generator().manual_seed(0)
    for c in (0.0601, 0.1803, 1.0, 3.3):
        s = torch.randn(4096, 16, generator=g, dtype=torch.float32) * 40
        s[::7, 3] = -torch.inf
        s[5] = -torch.inf
        c32 = torch.tensor(c, dtype=torch.float32)
        assert torch.equal(s.amax(1) * c32, (s * c32).amax(1))
        chain = s[:, 0].clone()
        for j in range(1, 16):
            chain = torch.maximum(chain, s[:, j])
        vals = [s[:, j] for j in range(16)]
        while len(vals) > 1:
            vals = [torch.maximum(a, b) for a, b in itertools.zip_longest(vals[::2], vals[1::2], fillvalue=vals[-1])]
        assert torch.equal(vals[0], chain)
        assert torch.isneginf(vals[0][5])


def test_rowmax_sass():
    """"chain": v46's split kernel, instruction for instruction. "fold" / "tree": 64 FMUL fewer (the
    32 per thread of each warpgroup's row-max step, in both copies of the pair loop; 4 left for the
    quad-reduced maxes) and 64 FFMA more (the scale inside the exponent), the same HGMMA, MUFU, SHFL,
    named barriers and wgmma waits, no spills; "tree" the same counts as "fold" (the same FMNMX, in
    a shorter chain)."""
    pytest.importorskip("cutlass")
    import compiled_sass as cs
    p = cs.paired_varlen_decode()
    tiling = registry.get_plan(V57).default_tiling(p)
    counts = {m: cs.split_opcode_counts(V57, p, tiling=dataclasses.replace(tiling, rowmax=m)) for m in MODES}
    assert counts["chain"] == cs.split_opcode_counts(V46, p)
    chain = counts["chain"]
    for m in ("fold", "tree"):
        on = counts[m]
        assert cs.count(on, "FMUL") <= cs.count(chain, "FMUL") - 60, m
        assert cs.count(on, "FFMA") >= cs.count(chain, "FFMA") + 60, m
        for op in ("HGMMA", "MUFU", "SHFL", "BAR.SYNC", "BAR.ARV", "WARPGROUP.DEPBAR"):
            assert cs.count(on, op) == cs.count(chain, op), (m, op)
        assert cs.count(on, "STL") == 0
    assert cs.count(counts["tree"], "FMNMX") <= cs.count(counts["fold"], "FMNMX")


def mode_tiling(problem, mode: str):
    return dataclasses.replace(registry.get_plan(V57).default_tiling(problem), rowmax=mode)


def planted_tiling(page_size: int, chunk: int):
    p = planted_keys_problem(page_size)
    return p, dataclasses.replace(registry.get_plan(V57).default_tiling(p), chunk=chunk)


PLANTED = [(64, 4), (64, 3), (16, 5)]


def aot_builds():
    """Every build of this file's GPU tests, for scripts/aot_test_builds.py."""
    for problem in KNOB_CASES:
        chain = mode_tiling(problem, "chain")
        yield V57, problem, chain
        yield V46, problem, tiling_without(registry.get_plan(V46), chain, "rowmax")
        for mode in ("tree", "fold"):
            yield V57, problem, mode_tiling(problem, mode)
    for page_size, chunk in PLANTED:
        yield V57, *planted_tiling(page_size, chunk)
    yield V57, *graph_replay_build(V57)


@pytest.mark.gpu
@pytest.mark.parametrize("case", range(len(KNOB_CASES)))
def test_v57_chain_is_v46_bit_for_bit(case):
    """"chain" against the reference (seeds 0, 1 and the peaked draw) and bit for bit v46."""
    problem = KNOB_CASES[case]
    assert_reference_and_bitwise(V57, problem, mode_tiling(problem, "chain"), knob="rowmax", base=V46)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tree", "fold"])
@pytest.mark.parametrize("case", range(len(KNOB_CASES)))
def test_v57_modes_match_the_reference(case, mode):
    """Each raw-score mode against the reference (seeds 0, 1 and the peaked draw)."""
    problem = KNOB_CASES[case]
    assert_check_passes(runnable_plan(V57), problem, seeds=(0, 1), extra_seeds=(0,), tiling=mode_tiling(problem, mode))


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,chunk", PLANTED)
def test_v57_matches_the_reference_with_planted_keys(page_size, chunk):
    """Planted keys move the lazy max on A and B tiles (the exponent's scale must follow the max's);
    odd chunks leave pairs without tile B (raw -inf scores); lengths 1000 and 700 end in partial
    tiles (the masked copy's raw -inf)."""
    check_with_planted_keys(runnable_plan(V57), planted_tiling(page_size, chunk)[1], page_size=page_size)


@pytest.mark.gpu
def test_v57_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V57)


def test_the_kernel_and_the_plan_name_the_same_modes():
    pytest.importorskip("cutlass")
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v57 import flash_mla_decode_v57, short_rowmax
    assert short_rowmax.ROWMAX_MODES == flash_mla_decode_v57.ROWMAX_MODES == MODES
