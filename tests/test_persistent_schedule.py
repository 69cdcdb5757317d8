"""flash_mla_decode_v6's token-balanced schedule: the closed forms its schedule, split and combine
kernels use (mirrored formula for formula in schedule.host_mirror) against brute force, on
random lengths (CPU; the kernels themselves are checked on the GPU)."""
import random

import pytest

from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v6 import schedule


def _cases():
    rng = random.Random(7)
    cases = [([0], 132), ([1], 132), ([64] * 3, 2), ([0, 0, 5000, 0], 7), ([100, 0, 64, 65], 132)]
    for _ in range(60):
        b = rng.randint(1, 150)
        lens = [rng.choice([0, 1, 63, 64, 65, rng.randint(0, 20000)]) for _ in range(b)]
        cases.append((lens, rng.choice([1, 2, 33, 66, 132, 264])))
    return cases


@pytest.mark.parametrize("lens, ctas", _cases())
def test_every_tile_is_walked_once_and_every_piece_is_merged_once(lens, ctas):
    m = schedule.host_mirror(lens, ctas)
    tiles = [-(-s // 64) for s in lens]
    # the split kernel: each sequence's tiles covered exactly once, in order, by consecutive CTAs
    seen = {i: [] for i in range(len(lens))}
    for g, segs in enumerate(m["segments"]):
        slots = [s[3] for s in segs if s[3] != "final"]
        assert len(slots) == len(set(slots)) <= 2, (g, segs)        # at most a first and a last piece
        for seq, t0, t1, _ in segs:
            seen[seq].append((g, t0, t1))
    for i, n in enumerate(tiles):
        ranges = sorted(seen[i], key=lambda r: r[1])
        assert [r[1] for r in ranges][:1] in ([0], []) and sum(r[2] - r[1] for r in ranges) == n
        assert all(a[2] == b[1] for a, b in zip(ranges, ranges[1:]))
    # balanced: CTA loads differ by at most one tile
    loads = [sum(t1 - t0 for _, t0, t1, _ in segs) for segs in m["segments"]]
    assert max(loads) - min(loads) <= 1
    # the combine merges exactly the pieces the split kernel wrote, each once, from the same slot
    written = {}
    for g, segs in enumerate(m["segments"]):
        for seq, _, _, slot in segs:
            if slot != "final":
                written.setdefault(seq, []).append((g, slot))
    for i, n in enumerate(tiles):
        p = m["pieces"][i]
        if n == 0:
            assert p == "empty" and i not in written
        elif p == "final":
            assert i not in written and len(seen[i]) == 1
        else:
            assert sorted(p) == sorted(written[i]), (i, p, written[i])


def test_split_launch_refuses_shapes_whose_schedule_overflows_int32():
    """(tiles + 1) x ctas must stay below 2^31 (the kernels' int32 products); checked from shapes
    only, before anything reaches the GPU (no device sync, graph-safe). Expanded views: no memory."""
    import torch

    from mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v6 import kernel
    b, pages = 4096, 1 << 16                                   # 2^28 tiles of 64 keys at page size 64
    q = torch.empty(1, 1, 1, 576, dtype=torch.bfloat16).expand(b, 1, 16, 576)
    kv = torch.empty(1, 64, 1, 576, dtype=torch.bfloat16)
    bt = torch.empty(1, 1, dtype=torch.int32).expand(b, pages)
    ws = {"first_seq": torch.empty(8, dtype=torch.int32)}
    with pytest.raises(ValueError, match="int32"):
        kernel.launch_arguments(q, kv, bt, torch.empty(b, dtype=torch.int32), None, None, ws, 0.04)


def test_v7_orders_its_three_kernels_with_griddepcontrol(tmp_path, capsys):
    """v7 = v6 + PDL: the schedule and split kernels trigger their dependents, the split and
    combine kernels wait for their predecessor before reading what it wrote (PTX, no GPU)."""
    from mla_var3.cli.kernel import main
    ptx = {}
    for name in ("flash_mla_decode_v6", "flash_mla_decode_v7"):
        assert main([name, "--dump=ptx", "--s_q=1", "--h_q=16", f"--records={tmp_path / name}"]) == 0
        for f in (tmp_path / name).rglob("*.ptx"):
            ptx[(name, f.stem)] = f.read_text()
    capsys.readouterr()
    for stage in ("schedule", "split", "combine"):
        assert "griddepcontrol" not in ptx[("flash_mla_decode_v6", stage)]
    v7 = {stage: ptx[("flash_mla_decode_v7", stage)] for stage in ("schedule", "split", "combine")}
    assert "griddepcontrol.launch_dependents" in v7["schedule"] and "griddepcontrol.wait" not in v7["schedule"]
    assert "griddepcontrol.launch_dependents" in v7["split"] and "griddepcontrol.wait" in v7["split"]
    assert "griddepcontrol.wait" in v7["combine"]
    # the split kernel waits before its first global load (cum / first_seq come from the schedule)
    split = v7["split"]
    assert split.index("griddepcontrol.wait") < split.index("ld.global")
