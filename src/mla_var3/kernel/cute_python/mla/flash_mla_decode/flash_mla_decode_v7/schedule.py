"""Schedule kernel of flash_mla_decode_v7: the token-balanced work split, computed on the device.

The split kernel runs `ctas` persistent CTAs per 64-row block. The KV tiles of all sequences are
laid end to end (sequence i owns global tiles cum[i] .. cum[i+1) - 1, cum[i] = sum of cdiv(len_j,
64) for j < i) and CTA g takes global tiles [g T / ctas, (g + 1) T / ctas) (integer division, T =
cum[b]): every CTA gets the same number of tiles, +-1, however the lengths are spread, and a CTA
may walk the end of one sequence and the start of the next. Closed forms, so nobody searches:
- the CTA that owns global tile x is ((x + 1) ctas - 1) // T;
- the CTAs whose range starts inside sequence i are ceil(cum[i] ctas / T) .. (cum[i+1] ctas - 1) // T.
This kernel (one CTA of 1024 threads, before the split kernel in the same stream, so a CUDA graph
replayed with new lengths recomputes it) writes cum[0..b] (an inclusive scan of the tile counts:
each thread sums up to 4 sequences, then a Hillis-Steele scan of the 1024 partial sums in shared
memory) and first_seq[g], the sequence in which CTA g's range starts. Sizes come from shapes only
(b <= 4096 = 4 x 1024, checked on the host).
"""
from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.memory import SmemAllocator

TILE = 64
THREADS = 1024
PER_THREAD = 4
MAX_B = THREADS * PER_THREAD
I32 = cutlass.Int32


class FlashMlaScheduleKernel:
    """Constexpr config: `ctas`, the persistent split CTAs per row block."""

    def __init__(self, ctas: int):
        if ctas < 1:
            raise ValueError(f"ctas: expected >= 1 persistent CTAs per row block, got {ctas}")
        self.ctas = ctas

    @cute.jit
    def __call__(self, seqlens: cute.Tensor, cum: cute.Tensor, first_seq: cute.Tensor, stream):
        @cute.struct
        class Storage:
            part: cute.struct.MemRange[I32, THREADS]

        self.storage = Storage
        self.flash_mla_decode_v7_schedule_kernel(seqlens, cum, first_seq).launch(
            grid=(1, 1, 1), block=(THREADS, 1, 1), stream=stream)

    @cute.kernel
    def flash_mla_decode_v7_schedule_kernel(self, seqlens: cute.Tensor, cum: cute.Tensor,
                                            first_seq: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        cute.arch.griddepcontrol_launch_dependents()     # PDL: the split kernel may start its set-up now
        b = seqlens.shape[0]
        st = SmemAllocator().allocate(self.storage)
        part = st.part.get_tensor(cute.make_layout(THREADS))

        # ---- tiles of this thread's (up to) 4 consecutive sequences, then the block scan
        first = tidx * PER_THREAD
        mine = cute.make_rmem_tensor((PER_THREAD,), I32)
        total = I32(0)
        for k in cutlass.range_constexpr(PER_THREAD):
            n = I32(0)
            if first + k < b:
                n = (seqlens[first + k] + TILE - 1) // TILE
            mine[k] = n
            total += n
        part[tidx] = total
        cute.arch.sync_threads()
        d = 1
        for _ in cutlass.range_constexpr(10):            # 2^10 = THREADS
            v = part[tidx]
            if tidx >= d:
                v += part[tidx - d]
            cute.arch.sync_threads()
            part[tidx] = v
            cute.arch.sync_threads()
            d *= 2
        # part[t] is now the inclusive sum over threads 0..t: write cum for this thread's sequences
        run = part[tidx] - total
        if tidx == 0:
            cum[0] = 0
        for k in cutlass.range_constexpr(PER_THREAD):
            run += mine[k]
            if first + k < b:
                cum[first + k + 1] = run
        cute.arch.sync_threads()

        # ---- first_seq[g]: the sequence in which CTA g's range of global tiles starts
        big_t = part[THREADS - 1]
        if big_t > 0:
            for k in cutlass.range_constexpr(PER_THREAD):
                i = first + k
                if i < b:
                    c0 = cum[i]
                    c1 = cum[i + 1]
                    if c1 > c0:
                        lo = (c0 * self.ctas + big_t - 1) // big_t
                        hi = (c1 * self.ctas - 1) // big_t
                        for g in cutlass.range(lo, hi + 1, unroll=1):
                            first_seq[g] = i
        else:
            if tidx < self.ctas:
                first_seq[tidx] = 0


def fake_arguments(k: FlashMlaScheduleKernel) -> tuple:
    """Fake tensors in __call__'s order: seqlens [b] i32, cum [b + 1] i32, first_seq [ctas] i32."""
    b = cute.sym_int(symbol="b")
    b1 = cute.sym_int(symbol="b_plus_1")
    seqlens = make_fake_compact_tensor(I32, (b,), assumed_align=4)
    cum = make_fake_compact_tensor(I32, (b1,), assumed_align=4)
    first_seq = make_fake_compact_tensor(I32, (k.ctas,), assumed_align=4)
    return seqlens, cum, first_seq, make_fake_stream(use_tvm_ffi_env_stream=True)


def launch_arguments(cache_seqlens, ws) -> tuple:
    if cache_seqlens.shape[0] > MAX_B:
        raise ValueError(f"cache_seqlens: v6's schedule kernel takes b <= {MAX_B}, got {cache_seqlens.shape[0]}")
    return cache_seqlens, ws["cum"], ws["first_seq"]


def host_mirror(lens: list[int], ctas: int) -> dict:
    """The schedule in plain Python, formula for formula as the three kernels compute it (tests
    check the closed forms against brute force; nothing calls this at run time):
    cum, first_seq, each CTA's segments (seq, t_begin, t_end, final or piece slot) as the split
    kernel walks them, and for each sequence the (cta, slot) pieces the combine merges."""
    n = [-(-s // TILE) for s in lens]
    cum = [0]
    for k in n:
        cum.append(cum[-1] + k)
    big_t = cum[-1]
    first_seq = [0] * ctas
    if big_t:
        for i in range(len(lens)):
            if cum[i + 1] > cum[i]:
                for g in range((cum[i] * ctas + big_t - 1) // big_t, (cum[i + 1] * ctas - 1) // big_t + 1):
                    first_seq[g] = i
    segments = []
    for g in range(ctas):
        x, x_end = (g * big_t) // ctas, ((g + 1) * big_t) // ctas
        seq, seg, mine = first_seq[g], 0, []
        while x < x_end:
            base, n_tiles = cum[seq], cum[seq + 1] - cum[seq]
            if n_tiles > 0:
                t_begin, t_end = x - base, min(n_tiles, x_end - base)
                final = t_begin == 0 and t_end == n_tiles
                mine.append((seq, t_begin, t_end, "final" if final else (0 if seg == 0 else 1)))
                seg += 1
            x = base + min(n_tiles, x_end - base)
            seq += 1
        segments.append(mine)
    pieces = []
    for i in range(len(lens)):
        c0, c1 = cum[i], cum[i + 1]
        if c1 == c0:
            pieces.append("empty")
            continue
        c_first, c_last = ((c0 + 1) * ctas - 1) // big_t, (c1 * ctas - 1) // big_t
        if c_last == c_first:
            pieces.append("final")
            continue
        mine = []
        for c in range(c_first, c_last + 1):
            if (c * big_t) // ctas < ((c + 1) * big_t) // ctas:
                mine.append((c, 1 if c == c_first and first_seq[c] != i else 0))
        pieces.append(mine)
    return {"cum": cum, "first_seq": first_seq, "segments": segments, "pieces": pieces}
