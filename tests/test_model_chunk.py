"""flash_mla_decode_v23's split length for ragged batches: the makespan model (6 tile-times per
CTA) picks it among even lengths around v21's mean-based choice; equal lengths keep v21's."""
import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V23 = "flash_mla_decode_v23"


def _module():
    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v23 import flash_mla_decode_v23
    return flash_mla_decode_v23


@pytest.mark.parametrize("h_q", [16, 64])
def test_the_measured_best_split_length_is_the_models_choice(h_q):
    """v21's sweep (records/2026-12-02-h200-flash_mla_decode_v21-chunk-sweep-varlen1024.jsonl.gz):
    chunk 20 was fastest on both varlen 1024 cells, 1.06-1.07x the mean-based 18."""
    plan = registry.get_plan(V23)
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=h_q, seqlen=1024, varlen=True)
    assert registry.get_plan("flash_mla_decode_v21").default_tiling(problem).chunk == 18
    assert plan.default_tiling(problem).chunk == 20


@pytest.mark.parametrize("s_q,h_q,seqlen", [(s, h, n) for s in (1, 2) for h in (16, 64, 128) for n in (1024, 4096, 8192)])
def test_ragged_choices_are_even_and_within_twice_the_mean_based_one(s_q, h_q, seqlen):
    m = _module()
    problem = MlaDecodeProblem(b=128, s_q=s_q, h_q=h_q, seqlen=seqlen, varlen=True)
    tiles = [-(-s // 64) for s in problem.resolve_seqlens(0)]
    base = registry.get_plan("flash_mla_decode_v21").default_tiling(problem).chunk
    chunk = registry.get_plan(V23).default_tiling(problem).chunk
    assert chunk % 2 == 0 and base // 2 <= chunk <= 2 * base
    rows = s_q * h_q
    assert m.makespan(tiles, chunk, -(-rows // 64)) <= m.makespan(tiles, base, -(-rows // 64))


def test_equal_lengths_keep_v21s_tiling():
    v21, v23 = registry.get_plan("flash_mla_decode_v21"), registry.get_plan(V23)
    for problem in (MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096), MlaDecodeProblem(b=1, s_q=1, h_q=128, seqlen=32768),
                    MlaDecodeProblem(b=16, s_q=2, h_q=64, seqlen=8192)):
        assert v23.default_tiling(problem).key() == v21.default_tiling(problem).key()


def test_the_model_counts_every_row_block_and_the_empty_sequences_split():
    m = _module()
    assert m.makespan([0], 4, 1, sms=1, overhead=6.0) == 6.0                 # an empty sequence: one split
    assert m.makespan([8], 4, 2, sms=1, overhead=1.0) == 4 * (1 + 4)         # 2 splits x 2 row blocks
    assert m.makespan([8, 8], 8, 1, sms=2, overhead=0.0) == 8


SWEEP = "records/2026-12-02-h200-flash_mla_decode_v21-chunk-sweep-varlen1024.jsonl.gz"


@pytest.mark.parametrize("h_q", [16, 64])
def test_the_makespan_model_with_six_tiles_per_cta_ranks_the_measured_split_lengths(h_q):
    """v21's split-length sweep on the varlen 1024 cells (H200, 2026-12-02, one process per chunk,
    chunk 18 first and last within 0.1%): chunk 20 is fastest (63.2 us at h_q=16 against 66.9 for
    the default 18). v23's makespan model reproduces that ranking only with ~6 tile-times of
    overhead per CTA (v11's timeline gave 2.6, which ranks 18 first): under full load a CTA's
    prologue and epilogue cost about twice what a lone CTA's timeline shows."""
    import gzip
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / SWEEP
    recs = [json.loads(x) for x in gzip.open(path, "rt")]
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=h_q, seqlen=1024, varlen=True)
    measured = {r["tiling"]["chunk"]: r["time_us"]["median"] for r in recs
                if r["kind"] == "bench" and r["problem_key"] == problem.key()}
    assert len(measured) == 8
    tiles = [-(-s // 64) for s in problem.resolve_seqlens(0)]
    makespan = _module().makespan
    best = min(measured, key=measured.get)
    assert best == 20
    assert min(measured, key=lambda c: (makespan(tiles, c, 1, overhead=6.0), c)) == best
    assert min(measured, key=lambda c: (makespan(tiles, c, 1, overhead=2.6), c)) == 18   # the timeline's C0 misses it
