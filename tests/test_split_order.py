"""flash_mla_decode_v14's longest-first split order: the host mirror of the order kernel, the
makespan model that motivated it, the plan's choice between the orders, and (on the H200) the
order kernel against the mirror."""
import heapq

import pytest

from mla_var3.layers.mla.decode import MlaDecodeProblem
from mla_var3.runtime import registry

V14 = "flash_mla_decode_v14"
SMS = 132
C0 = 2.6        # prologue (Q) + epilogue of a CTA, in tile times (v11's timeline: ~6000 + ~3600 cycles, ~3750 a tile)


def _order_module():
    from mla_var3.kernel.cute_python.common import split_order
    return split_order


def _plan():
    return registry.get_plan(V14)


def _tiles(lens):
    return [-(-s // 64) for s in lens]


def _work(item, tiles, chunk, slots):
    if item < 0:
        return 0
    seq, split = divmod(item, slots)
    return max(0, min(chunk, tiles[seq] - split * chunk))


def _makespan(items_in_launch_order, tiles, chunk, slots):
    """CTAs handed to the first free SM in launch order, each costing C0 + its tiles (an idle
    slot ~0): the model behind the v14 devlog's prediction."""
    free = [0.0] * SMS
    end = 0.0
    for item in items_in_launch_order:
        w = _work(item, tiles, chunk, slots)
        t = heapq.heappop(free) + (C0 + w if w else 0.02)
        end = max(end, t)
        heapq.heappush(free, t)
    return end


def test_host_order_is_a_permutation_largest_first():
    order = _order_module()
    lens = [5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640]
    chunk, slots = 68, 3
    got = order.host_order(lens, chunk, slots)
    tiles = _tiles(lens)
    live = [i * slots + s for i, n in enumerate(tiles) for s in range(max(1, -(-n // chunk)))]   # empty: one split
    assert sorted(x for x in got if x >= 0) == sorted(live) and len(got) == len(lens) * slots
    assert got[len(live):] == [-1] * (len(got) - len(live))
    work = [max(_work(x, tiles, chunk, slots), 1 if x >= 0 else 0) for x in got]   # an empty split sorts as size 1
    assert work == sorted(work, reverse=True)


@pytest.mark.parametrize("seqlen", [4096, 8192])
@pytest.mark.parametrize("h_q", [16, 64])
def test_longest_first_nearly_removes_the_ragged_tail_in_the_model(seqlen, h_q):
    """The bench grid's varlen cells (b=128): CTAs in grid order finish at >= 1.5x the ideal
    (total tiles / SMs + C0), longest first at <= 1.2x; measured v11 varlen/fixed time: 1.47-1.49x."""
    plan = _plan()
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=h_q, seqlen=seqlen, varlen=True)
    lens = problem.resolve_seqlens(0)
    tiles = _tiles(lens)
    chunk = plan.default_tiling(problem).chunk
    slots = -(-max(tiles) // chunk)
    grid = [z * slots + y for z in range(len(lens)) for y in range(slots)]
    ideal = sum(tiles) / SMS + C0
    assert _makespan(grid, tiles, chunk, slots) / ideal >= 1.5
    assert _makespan(_order_module().host_order(lens, chunk, slots), tiles, chunk, slots) / ideal <= 1.2


def test_the_plan_sorts_ragged_batches_only():
    plan = _plan()
    assert plan.default_tiling(MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096, varlen=True)).order == "longest_first"
    assert plan.default_tiling(MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096)).order == "grid"
    configs = plan.autotune_configs(MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096))
    assert {c.order for c in configs} == {"grid", "longest_first"}


def test_bad_orders_are_refused():
    from mla_var3.runtime.devices import load_devices
    plan = _plan()
    h200 = load_devices()["H200"]
    T = plan.Tiling
    assert any("order must be one of grid, longest_first" in r
               for r in T(order="random").validate(MlaDecodeProblem(b=2, seqlen=64), h200))


@pytest.mark.gpu
@pytest.mark.parametrize("lens", [[5000, 70, 129, 64 * 68, 0, 9000, 64 * 68 * 2 + 1, 640], "varlen"])
def test_order_kernel_matches_the_host_mirror(lens):
    from gpu_helpers import order_stage_output, runnable_plan
    order = _order_module()
    if lens == "varlen":
        lens = MlaDecodeProblem(b=128, s_q=1, h_q=64, seqlen=4096, varlen=True).resolve_seqlens(0)
    chunk = 68
    slots = -(-max(_tiles(lens)) // chunk) + 1                       # one slot more than needed: -1 entries
    got = order_stage_output(runnable_plan(V14), lens, chunk, slots)
    want = order.host_order(lens, chunk, slots)
    tiles = _tiles(lens)
    n_full = sum(n // chunk for n in tiles)
    assert got[:n_full] == want[:n_full]                              # full splits: deterministic
    assert sorted(got) == sorted(want)                                # the same items, the same -1 count
    work = [max(_work(i, tiles, chunk, slots), 1 if i >= 0 else 0) for i in got]
    assert work == sorted(work, reverse=True)                         # equal sizes may swap (atomics)
