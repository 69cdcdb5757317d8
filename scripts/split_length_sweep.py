"""Time split-KV versions across split lengths (`chunk`) on one problem, all interleaved in one
benchmark run (runtime/bench.bench_plans: CUDA-graph replays, inputs rotated past L2), with a peer
beside them. Each version runs its own tiling for the problem (tuned winner, else default) with
`chunk` replaced, and `--set key=value,...` on top (e.g. schedule=per_step).

Why: a split-per-CTA grid's time follows the list schedule of its splits over the SMs, which
jumps with the split length (devlog, flash_mla_decode_v38); this shows the landscape around the
autotuner's pick and whether a change to a CTA's fixed cost moves the optimum.

    python scripts/split_length_sweep.py flash_mla_decode_v36,flash_mla_decode_v38 --b=128 --s_q=1 \
        --h_q=16 --seqlen=1024 --varlen --chunks=16,18,20,22,24 --set=schedule=per_step \
        --peer=flashmla_decode --out sweep.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("versions", help="comma-separated split-KV versions (Tiling with a `chunk` field)")
    for dim in ("b", "s_q", "h_q", "seqlen"):
        ap.add_argument(f"--{dim}", type=int, required=True)
    ap.add_argument("--page_size", type=int, default=64)
    ap.add_argument("--varlen", action="store_true")
    ap.add_argument("--chunks", required=True, help="comma-separated split lengths in KV tiles")
    ap.add_argument("--set", default="", help="key=value,... over each version's tiling besides chunk")
    ap.add_argument("--peer", help="a plan timed beside, at its own default tiling (e.g. flashmla_decode)")
    ap.add_argument("--rep_ms", type=float, default=50.0)
    ap.add_argument("--out", required=True, help="JSON file to write")
    args = ap.parse_args(argv)

    from mla_var3.cli.tiling import parse_fields
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime import autotune, bench, devices, records, registry
    problem = MlaDecodeProblem(b=args.b, s_q=args.s_q, h_q=args.h_q, seqlen=args.seqlen,
                               page_size=args.page_size, varlen=args.varlen)
    try:
        chunks = [int(c) for c in args.chunks.split(",")]
    except ValueError:
        ap.error(f"--chunks: expected comma-separated KV tile counts, got {args.chunks!r}")
    plans = [registry.get_plan(n) for n in args.versions.split(",")]
    for plan in plans:
        if "chunk" not in {f.name for f in dataclasses.fields(plan.Tiling)}:
            ap.error(f"{plan.name}: its Tiling has no `chunk` field (not a split-KV version)")
    if not devices.cuda_available():
        ap.error("needs an NVIDIA GPU (run it through the device tool on the H200)")
    device = devices.current_device()
    entries = []
    for plan in plans:
        base = autotune.lookup(plan, problem, device.name) or plan.default_tiling(problem)
        extra = parse_fields(plan, args.set) if args.set else {}
        entries += [(plan, dataclasses.replace(base, **extra, chunk=c)) for c in chunks]
    if args.peer:
        peer = registry.get_plan(args.peer)
        entries.append((peer, peer.default_tiling(problem)))
    results = bench.bench_plans(entries, problem, device, rep_ms=args.rep_ms)
    rows = []
    for (plan, tiling), r in zip(entries, results):
        rows.append({"kernel": plan.name, "tiling": tiling.key(), "chunk": getattr(tiling, "chunk", None),
                     "median_us": r["time_us"]["median"], "min_us": r["time_us"]["min"],
                     "max_us": r["time_us"]["max"]})
        print(f"{plan.name:24} chunk={rows[-1]['chunk']!s:5} {rows[-1]['median_us']:8.1f} us")
    with open(args.out, "w") as f:
        json.dump({"problem": problem.key(), "env": records.environment(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
