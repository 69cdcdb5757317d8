"""flash_mla_decode_v47: a split's four row blocks (s_q * h_q = 256) launch as one cluster of four
at page 64, co-scheduled only. CPU: the defaults per shape and page size, the validation (four
multicast is not a mode), the launch's cluster dims and a kernel body equal to v46's (no remote
operation); on the H200, v47 against the reference and bit for bit against v36 (pairs), and under
a CUDA graph replayed with new lengths."""
import dataclasses
import re

import pytest

from compiled_sass import default_kernel, split_opcode_counts, stage_mlir
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry, sass
from version_knob import assert_graph_replay_with_new_lengths, assert_reference_and_bitwise

V47, V46 = "flash_mla_decode_v47", "flash_mla_decode_v46"
HAVE_SASS_TOOLS = bool(sass.find_disassemblers())
FOUR = MlaDecodeProblem(b=2, s_q=2, h_q=128, seqlen=1024, page_size=64)


@pytest.mark.parametrize("s_q, h_q, page, cluster, multicast", [
    (2, 128, 64, 4, False), (2, 128, 16, 2, True), (2, 128, 32, 2, True), (1, 128, 64, 2, False),
    (4, 64, 64, 4, False), (1, 64, 64, 1, False)])
def test_default_cluster_by_row_blocks_and_page(s_q, h_q, page, cluster, multicast):
    plan = registry.get_plan(V47)
    problem = MlaDecodeProblem(b=4, s_q=s_q, h_q=h_q, seqlen=1000, page_size=page)
    t = plan.default_tiling(problem)
    assert (t.cluster_rows, t.multicast_kv) == (cluster, multicast)
    configs = plan.autotune_configs(problem)
    assert all(plan.Tiling.validate(c, problem, None) == [] for c in configs)
    if cluster == 4:
        assert {c.cluster_rows for c in configs} == {1, 2, 4}


def test_a_cluster_of_four_does_not_multicast():
    plan = registry.get_plan(V47)
    problem = MlaDecodeProblem(b=4, s_q=2, h_q=128, seqlen=1000, page_size=64)
    bad = dataclasses.replace(plan.default_tiling(problem), multicast_kv=True)
    assert bad.validate(problem, None) == [
        "cluster_rows=4 only co-schedules the four row blocks (the multicast refill is a pair's): "
        "multicast_kv must be False, got True"]
    odd = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1000, page_size=64)
    assert "needs a number of 64-row blocks divisible by it" in dataclasses.replace(
        plan.default_tiling(odd), cluster_rows=4).validate(odd, None)[0]


def test_four_row_blocks_launch_as_a_cluster_of_four():
    dims = lambda v: set(re.findall(r"cluster_dim = array<i64: ([0-9, ]+)>",
                                     stage_mlir(default_kernel(v, FOUR), "split")))
    assert dims(V47) == {"4, 1, 1"}
    assert dims(V46) == {"2, 1, 1"}


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_kernel_body_is_v46s():
    v47 = split_opcode_counts(V47, FOUR)
    assert v47 == split_opcode_counts(V46, FOUR)
    assert v47["UCGABAR_ARV"] == 0                 # no cluster barrier: nothing remote to fence


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [
    MlaDecodeProblem(b=5, s_q=2, h_q=128, seqlens=(1, 130, 4095, 0, 700), page_size=64),
    MlaDecodeProblem(b=16, s_q=2, h_q=128, seqlen=900, varlen=True, page_size=64),
    MlaDecodeProblem(b=3, s_q=4, h_q=64, seqlens=(64, 3000, 5), page_size=64)], ids=lambda p: p.key())
def test_cluster_of_four_matches_reference_and_v36_bit_for_bit(problem):
    t = registry.get_plan(V47).default_tiling(problem)
    assert t.cluster_rows == 4
    assert_reference_and_bitwise(V47, problem, t, ("full_tile_issue", "wide_tail_zero"), base_fields={"cluster_rows": 2})


@pytest.mark.gpu
def test_cluster_of_four_cuda_graph_replay_with_new_lengths():
    assert_graph_replay_with_new_lengths(V47, page_size=64, h_q=128)
