"""Does page 16's extra time come from the kernel or from where the pages sit in memory?

Times one version at pages 16 and 64 on one problem twice each: with the harness's block table
(a random permutation of the cache's pages, as a serving engine's allocator leaves them) and with
a sequential one (sequence i's pages are cache pages i * max_blocks ... in order, so page 16's
four pages of a tile are one contiguous 72 KB run, exactly page 64's memory layout). Same kernel,
same bytes, same boxes: if page 16 with sequential pages runs at page 64's speed, the gap is the
scatter (DRAM locality, address translation), not the box handling. Each of the four is timed with
the benchmark's protocol (bench.bench_plans: CUDA-graph replays) one after another, not
interleaved with the others (bench_plans interleaves plans of one problem sharing one input set),
and printed with the clock it ran at, so compare them through kcycles as well as time.

    python scripts/page_layout_probe.py flash_mla_decode_v30 --b=128 --s_q=1 --h_q=16 --seqlen=4096
"""
from __future__ import annotations

import argparse
import dataclasses
import json


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("version")
    for k, v in (("b", 128), ("s_q", 1), ("h_q", 16), ("seqlen", 4096)):
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--rep_ms", type=float, default=30.0)
    ap.add_argument("--json", help="write the four rows here")
    args = ap.parse_args()

    import torch

    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime import bench, devices, registry

    plan = registry.get_plan(args.version)
    device = devices.current_device()
    rows = []
    for page in (64, 16):
        problem = MlaDecodeProblem(b=args.b, s_q=args.s_q, h_q=args.h_q, seqlen=args.seqlen, page_size=page)
        x = problem.make_inputs(seed=0, device="cuda")
        if (x.cache_seqlens != args.seqlen).any():
            raise SystemExit("equal lengths only: every page of the cache must be in use")
        seq = torch.arange(x.block_table.numel(), dtype=torch.int32, device="cuda").view_as(x.block_table)
        for layout, inputs in (("random", x), ("sequential", dataclasses.replace(x, block_table=seq))):
            (rec,) = bench.bench_plans([(plan, plan.default_tiling(problem))], problem, device,
                                       rep_ms=args.rep_ms, inputs=inputs)
            clk = rec["clocks_during"] or {}
            rows.append({"page_size": page, "pages": layout, "us": round(rec["time_us"]["median"], 1),
                         "sm_mhz": clk.get("sm_mhz"), "kcycles": rec["kcycles"]})
            print(f"{args.version} {problem.key()} pages={layout:10} {rows[-1]['us']:8.1f} us "
                  f"at {clk.get('sm_mhz')} MHz", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"version": args.version, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
