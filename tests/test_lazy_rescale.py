"""flash_mla_decode_v19's lazy softmax max. CPU: a float64 mirror of its per-row update
(`lazy_rescale.exp_against_lazy_max`, same threshold) gives the exact softmax-weighted sum and lse
over tiles with a large dynamic range and fully masked tiles, rescaling only a few times; and the
compiled split kernel carries the warp vote that skips the multiply."""
import math

import numpy as np
import pytest

from compiled_sass import opcodes, stage_sass
from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import kernel_plan, registry, sass

HAVE_SASS_TOOLS = bool(sass.find_disassemblers())


def _threshold():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v19 import lazy_rescale
    return lazy_rescale.RESCALE_THRESHOLD


def _lazy_update(tiles_s, tiles_v, threshold):
    """The kernel's update per tile (log2 domain): m_ref moves only when the tile's max beats it
    by more than `threshold` (or it was -inf); O and l are multiplied by the correction, which is
    1 otherwise. Returns the unnormalized (O, l), the final m_ref and how many corrections were not 1."""
    m = -math.inf
    lsum, o = 0.0, np.zeros(tiles_v[0].shape[1])
    rescales = 0
    for s, v in zip(tiles_s, tiles_v):
        m_hi = max(m, s.max())
        with np.errstate(invalid="ignore"):
            moved = (np.float64(m_hi) - np.float64(m)) > threshold  # the kernel's test: -inf - -inf is NaN, False
        m_ref = m_hi if moved else m
        m_off = m_ref if m_ref != -math.inf else 0.0
        corr = 2.0 ** (m - m_off)
        rescales += corr != 1.0
        p = 2.0 ** (s - m_off)
        assert p.max() <= 2.0 ** threshold
        lsum = lsum * corr + p.sum()
        o = o * corr + p @ v
        m = m_ref
    return o, lsum, m, rescales


def test_the_lazy_max_gives_the_exact_softmax_with_few_rescales():
    rng = np.random.default_rng(0)
    n_tiles, tile, d = 64, 64, 8
    s = rng.normal(0.0, 3.0, (n_tiles, tile))
    s[0] -= 40.0                                  # a low start: the max must move once, by > 2^8
    s[5] = -math.inf                              # a fully masked tile (past seqlen for this row)
    s[9] += 6.0                                   # a rise below the threshold: no rescale
    v = rng.normal(size=(n_tiles, tile, d))
    o, lsum, m, rescales = _lazy_update(list(s), list(v), _threshold())
    out, lse = o / lsum, m + math.log2(lsum)
    flat_s, flat_v = s.reshape(-1), v.reshape(-1, d)
    w = 2.0 ** (flat_s - flat_s.max())
    np.testing.assert_allclose(out, (w @ flat_v) / w.sum(), rtol=1e-12)
    assert lse == pytest.approx(flat_s.max() + math.log2(w.sum()), rel=1e-12)
    assert rescales <= 3, rescales                # the first tile, the jump after tile 0, maybe one more


def test_a_row_that_never_sees_a_key_stays_empty():
    """All tiles masked: the reference max stays -inf (the kernel's `m_hi - m_old > threshold` is
    NaN > 8, false), P = 0, l = 0 and O = 0 without a NaN: the epilogue then writes out 0, lse +inf."""
    masked = [np.full(64, -math.inf)] * 3
    v = [np.ones((64, 4))] * 3
    o, lsum, m, rescales = _lazy_update(masked, v, _threshold())
    assert m == -math.inf and lsum == 0.0 and not np.isnan(o).any() and (o == 0).all()


@pytest.mark.skipif(not HAVE_SASS_TOOLS, reason="needs cuobjdump or nvdisasm")
def test_the_split_kernel_votes_before_each_rescale(monkeypatch):
    monkeypatch.setenv(kernel_plan.QUARANTINE_ENV, "1")
    problem = MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024)
    votes = {}
    for version in ("flash_mla_decode_v17", "flash_mla_decode_v19"):
        plan = registry.get_plan(version)
        ops = opcodes(stage_sass(plan.plan(problem.make_inputs(seed=0, device="cpu"),
                                           plan.default_tiling(problem)), "split"))
        votes[version] = sum(op.startswith("VOTE") for op in ops)
    # 2 rescales per pair on each warpgroup's path, the pair loop in two copies (v16's peel)
    assert votes["flash_mla_decode_v19"] - votes["flash_mla_decode_v17"] >= 4, votes
