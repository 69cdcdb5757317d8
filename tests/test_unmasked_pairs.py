"""flash_mla_decode_v21 scales the scores of its leading pairs without the mask. CPU: the pairs it
sends through the unmasked loop copy never hold a key that any row may not see, over every length,
s_q, split and row (`_p_split` is a hand copy of kernel.py's formula: keep the two in step); and the
compiled split kernel has one loop copy's worth of selects fewer than v20's with the same wgmmas."""
import collections

import pytest

from compiled_sass import opcodes, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())
TILE = 64


def _p_split(seqlen, s_q, t_begin, t_end):
    """kernel.py (v21): lim_min = seqlen - (s_q - 1); n_clear = max(min(t_end, lim_min // TILE) - t_begin, 0);
    p_split = min(max(n_pairs - 1, 0), n_clear // 2). C division truncates toward zero."""
    n_pairs = (t_end - t_begin + 1) // 2
    lim_min = seqlen - (s_q - 1)
    q = int(lim_min / TILE)                      # truncation, as the device's Int32 division
    n_clear = max(min(t_end, q) - t_begin, 0)
    return min(max(n_pairs - 1, 0), n_clear // 2)


def _row_limits(seqlen, s_q, h_q):
    """Visible keys per query row: 0 .. min(seqlen - (s_q - 1) + token, seqlen) - 1 (FlashMLA's mask)."""
    return [min(seqlen - (s_q - 1) + row // h_q, seqlen) for row in range(s_q * h_q)]


@pytest.mark.parametrize("s_q", [1, 2, 4, 16])
def test_unmasked_pairs_hold_no_masked_key(s_q):
    checked = 0
    for seqlen in list(range(0, 300)) + [1023, 1024, 1025, 4095, 4096, 4097]:
        n_tiles = -(-seqlen // TILE)
        lim = min(_row_limits(seqlen, s_q, 2))
        for chunk in (1, 2, 3, 4, 7, 8, 64):
            for t_begin in range(0, n_tiles, chunk):
                t_end = min(n_tiles, t_begin + chunk)
                for p in range(_p_split(seqlen, s_q, t_begin, t_end)):
                    for t in (t_begin + 2 * p, t_begin + 2 * p + 1):
                        assert t < t_end and (t + 1) * TILE <= lim, (seqlen, s_q, chunk, t_begin, p, t)
                        checked += 1
    assert checked > 1000


def test_long_splits_skip_the_mask_until_the_tiles_a_row_can_miss():
    assert _p_split(8192, 1, 0, 128) == 63                        # 64 pairs: all but the last unmasked
    assert _p_split(8192, 16, 0, 128) == 63                       # the causal boundary in the last tile
    assert _p_split(8192 + 5, 1, 0, 129) == 64                    # 129 tiles: the last pair is tile 128 alone
    assert _p_split(8192 + 5, 16, 0, 129) == 63                   # boundary crosses into tile 127: 2 masked pairs
    assert _p_split(8192, 1, 64, 128) == 31                       # a later split of the same sequence


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_one_loop_copy_loses_its_selects(monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024)
    ops = {}
    for version in ("flash_mla_decode_v20", "flash_mla_decode_v21"):
        plan = registry.get_plan(version)
        ops[version] = opcodes(stage_sass(plan.plan(problem.make_inputs(seed=0, device="cpu"),
                                                    plan.default_tiling(problem)), "split"))
    count = {v: collections.Counter(o.split(".")[0] for o in o_) for v, o_ in ops.items()}
    assert count["flash_mla_decode_v20"]["FSEL"] - count["flash_mla_decode_v21"]["FSEL"] >= 32, count
    qk = {v: [o for o in o_ if o.startswith("HGMMA")] for v, o_ in ops.items()}
    assert qk["flash_mla_decode_v20"] == qk["flash_mla_decode_v21"]
