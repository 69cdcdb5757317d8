"""flash_mla_decode_v32 launches the two row-block CTAs of a split as one cluster at page 64 too,
without sharing anything (`multicast_kv` = False): the cluster only co-schedules them. CPU: the
defaults by page size, the autotune space, the tiling's one-line error; the compiled split kernel
is v30's page-64 kernel (v28's) instruction for instruction, its launch asks for clusters of two,
and at page 16 it is v30's multicast pair. GPU: the check grid and the fuzz cover the paired shapes."""
import re

import pytest

from compiled_sass import default_kernel, split_opcode_counts, stage_mlir
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _v32():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v32 import flash_mla_decode_v32
    return flash_mla_decode_v32


@pytest.mark.parametrize("page, cluster, multicast", [(64, 2, False), (32, 2, True), (16, 2, True)])
def test_paired_shapes_cluster_at_every_page_size_and_multicast_below_64(page, cluster, multicast):
    plan = _v32().Plan()
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1024, page_size=page)
    tiling = plan.default_tiling(problem)
    assert (tiling.cluster_rows, tiling.multicast_kv) == (cluster, multicast)
    configs = plan.autotune_configs(problem)
    assert {(t.cluster_rows, t.multicast_kv) for t in configs} >= {(1, multicast), (2, True), (2, False)}
    assert all(not t.validate(problem, None) for t in configs)


def test_one_row_block_stays_a_single_cta():
    plan = _v32().Plan()
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=64, seqlen=1024)
    assert plan.default_tiling(problem).cluster_rows == 1
    assert {t.cluster_rows for t in plan.autotune_configs(problem)} == {1}


def test_multicast_kv_must_be_a_bool():
    v32 = _v32()
    problem = MlaDecodeProblem(b=4, s_q=1, h_q=128, seqlen=1024)
    assert v32.FlashMlaSplitTiling(cluster_rows=2, multicast_kv=1).validate(problem, None) == [
        "multicast_kv must be True or False (whether a cluster's CTAs share each K/V tile), got 1"]


def test_the_page_64_pair_launches_as_a_cluster_of_two():
    paired = MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlen=1024, page_size=64)
    dims = lambda v: set(re.findall(r"cluster_dim = array<i64: ([0-9, ]+)>",
                                     stage_mlir(default_kernel(v, paired), "split")))
    assert dims("flash_mla_decode_v32") == {"2, 1, 1"}
    assert dims("flash_mla_decode_v30") == {"1, 1, 1"}


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
@pytest.mark.parametrize("page_size", [64, 16])
def test_the_kernel_body_is_v30s(page_size):
    """Page 64: v30's single-CTA kernel (no multicast, no remote arrival, no cluster barrier) under
    a cluster launch; page 16: v30's multicast pair."""
    paired = MlaDecodeProblem(b=2, s_q=1, h_q=128, seqlen=1024, page_size=page_size)
    v32 = split_opcode_counts("flash_mla_decode_v32", paired)
    assert v32 == split_opcode_counts("flash_mla_decode_v30", paired)
    assert (v32["UCGABAR_ARV"] == 0) == (page_size == 64)
