"""A model of flash_mla_decode_v55's item ring (kernel.py, `claim`), run on the CPU: warp 8 of
each persistent column takes places from a counter shared by the row block's columns and writes
them into a two-entry ring (barriers `item_full`, count 1, and `item_empty`, one arrival per
reader); the column's other roles read every entry. Random interleavings of several columns and
several calls on one counter check what the device code relies on: no role waits forever, every
role of a column sees the same places in the same order, no entry is overwritten before every
reader has read it, every place of a call runs exactly once, and the counter is zero after each
call. The mbarrier is modelled by its phase parity, aliasing included (a wait on parity p passes
whenever the current phase's parity differs from p)."""
import random

from mbarrier_model import MBarrier


def column(col, n_places, ctas, counter, readers, log, rng):
    """The generators of one CTA column: the writer (warp 8) and `readers` reader roles; each
    yields a predicate to wait on (or None to let others run)."""
    full, empty = [MBarrier(1), MBarrier(1)], [MBarrier(readers), MBarrier(readers)]
    ring = [None, None]
    read_by = [set(), set()]                       # readers that read the entry's current place

    def claim(f, who):
        e = f % 2
        if who == "w":
            if f >= 2:
                yield lambda: empty[e].passed((f // 2 - 1) % 2)
                assert len(read_by[e]) == readers, "entry rewritten before every reader read it"
            got = counter[0]
            counter[0] += 1
            ring[e] = got
            read_by[e] = set()
            if got == n_places + ctas - 1:
                counter[0] = 0
            full[e].arrive()
        yield lambda: full[e].passed((f // 2) % 2)
        k = ring[e]
        if who != "w":
            read_by[e].add(who)
            empty[e].arrive()
        return k

    def role(who):
        f, seen = 0, []
        k = yield from claim(f, who)
        while k < n_places:
            seen.append(k)
            if who == "w":
                log.append(k)
            for _ in range(rng.randrange(4)):      # the item's work
                yield None
            f += 1
            k = yield from claim(f, who)
        return seen

    return [("w", role("w"))] + [(r, role(r)) for r in range(readers)]


def run_call(n_places, ctas, readers, counter, rng):
    log = []
    roles = [(c, who, gen) for c in range(ctas) for who, gen in column(c, n_places, ctas, counter, readers, log, rng)]
    waiting = {i: None for i in range(len(roles))}
    seen = {}
    while waiting:
        ready = [i for i, cond in waiting.items() if cond is None or cond()]
        assert ready, "deadlock: every role waits"
        i = rng.choice(ready)
        c, who, gen = roles[i]
        try:
            waiting[i] = next(gen)
        except StopIteration as stop:
            seen[(c, who)] = stop.value
            del waiting[i]
    return log, seen


def test_the_ring_hands_every_place_once_to_every_role_and_resets_the_counter():
    rng = random.Random(0)
    for trial in range(300):
        n_places, ctas, readers = rng.randrange(1, 12), rng.randrange(1, 5), rng.choice([8, 9, 11])
        counter = [0]
        for call in range(3):                      # one counter across calls, as in a graph replay
            log, seen = run_call(n_places, ctas, readers, counter, rng)
            assert sorted(log) == list(range(n_places)), (trial, call, log)
            assert counter == [0], (trial, call, counter)
            for c in range(ctas):
                assert all(seen[(c, r)] == seen[(c, "w")] for r in range(readers)), (trial, call, c)
