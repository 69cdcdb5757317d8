"""A model of flash_mla_decode_v56's pair claims (kernel.py, `claim` with `pair`), run on the CPU.
Each persistent column is a cluster of two CTAs (rank 0 and rank 1, two row blocks). Rank 0's warp
8 takes places from a counter shared by the columns, writes each into its own two-entry ring and,
by an st.async, into rank 1's; the st.async completes rank 1's full barrier by its bytes, on which
rank 1's warp 8 arrives expecting them (count 1 and 4 bytes: the bytes may land before the
expectation). Every reading warp of both CTAs, rank 1's warp 8 included, frees rank 0's entry, the
only one rank 0 waits on. Random interleavings of several columns and several calls on one counter
check: no role waits forever, every role of both CTAs sees the same places in the same order, no
entry of either CTA is overwritten before all its readers have read it, every place of a call
runs exactly once, and the counter is zero after each call. An mbarrier is modelled by its phase
parity (a wait on parity p passes whenever the current phase's parity differs from p) and its
transaction count."""
import random

from mbarrier_model import MBarrier


def cluster(n_places, ctas, counter, readers, log, rng):
    """The roles of one column (a pair): (rank, who, generator); who is "w" for warp 8 or a reader
    index. Each generator yields a predicate to wait on (None: let others run)."""
    full = {0: [MBarrier(1), MBarrier(1)], 1: [MBarrier(1), MBarrier(1)]}
    empty = [MBarrier(2 * readers + 1), MBarrier(2 * readers + 1)]          # rank 0's only
    ring = {0: [None, None], 1: [None, None]}
    read_by = {0: [set(), set()], 1: [set(), set()]}
    # readers of an entry: rank 0's reader warps; rank 1's reader warps and its warp 8
    need = {0: set(range(readers)), 1: set(range(readers)) | {"w"}}
    in_flight = []                                 # st.async stores not yet landed: (entry, place)

    def land_one():
        e, got = in_flight.pop(0)
        assert len(read_by[1][e]) in (0, len(need[1])), "rank 1's entry rewritten before it was read"
        ring[1][e] = got
        read_by[1][e] = set()
        full[1][e].complete_tx(4)

    def claim(f, rank, who):
        e = f % 2
        if rank == 0 and who == "w":
            if f >= 2:
                yield lambda: empty[e].passed((f // 2 - 1) % 2)
                assert read_by[0][e] == need[0], "rank 0's entry rewritten before every reader read it"
                assert read_by[1][e] == need[1], "rank 1's entry about to be rewritten before it was read"
            got = counter[0]
            counter[0] += 1
            ring[0][e] = got
            read_by[0][e] = set()
            if got == n_places + ctas - 1:
                counter[0] = 0
            in_flight.append((e, got))             # the st.async lands later (another step)
            full[0][e].arrive()
        elif who == "w":
            full[1][e].arrive(expect_tx=4)
        yield lambda: full[rank][e].passed((f // 2) % 2)
        k = ring[rank][e]
        if not (rank == 0 and who == "w"):
            read_by[rank][e].add(who)
            empty[e].arrive()
        return k

    def role(rank, who):
        f, seen = 0, []
        k = yield from claim(f, rank, who)
        while k < n_places:
            seen.append(k)
            if rank == 0 and who == "w":
                log.append(k)
            for _ in range(rng.randrange(4)):      # the item's work
                yield None
            f += 1
            k = yield from claim(f, rank, who)
        return seen

    roles = [(r, who, role(r, who)) for r in (0, 1) for who in ["w", *range(readers)]]
    return roles, in_flight, land_one


def run_call(n_places, ctas, readers, counter, rng):
    log, roles, landers = [], [], []
    for c in range(ctas):
        rs, in_flight, land_one = cluster(n_places, ctas, counter, readers, log, rng)
        roles += [(c, r, who, gen) for r, who, gen in rs]
        landers.append((in_flight, land_one))
    waiting = {i: None for i in range(len(roles))}
    seen = {}
    while waiting or any(q for q, _ in landers):
        ready = [i for i, cond in waiting.items() if cond is None or cond()]
        stores = [j for j, (q, _) in enumerate(landers) if q]
        assert ready or stores, "deadlock: every role waits"
        if stores and (not ready or rng.random() < 0.3):
            landers[rng.choice(stores)][1]()
            continue
        i = rng.choice(ready)
        c, r, who, gen = roles[i]
        try:
            waiting[i] = next(gen)
        except StopIteration as stop:
            seen[(c, r, who)] = stop.value
            del waiting[i]
    return log, seen


def test_pair_claims_hand_every_place_once_to_both_ctas_and_reset_the_counter():
    rng = random.Random(0)
    for trial in range(300):
        n_places, ctas, readers = rng.randrange(1, 12), rng.randrange(1, 4), rng.choice([8, 9, 11])
        counter = [0]
        for call in range(3):                      # one counter across calls, as in a graph replay
            log, seen = run_call(n_places, ctas, readers, counter, rng)
            assert sorted(log) == list(range(n_places)), (trial, call, log)
            assert counter == [0], (trial, call, counter)
            for c in range(ctas):
                lead = seen[(c, 0, "w")]
                assert all(seen[(c, r, who)] == lead for r in (0, 1) for who in ["w", *range(readers)]), (trial, c)
