"""Does a kernel's time in the benchmark depend on consecutive calls overlapping each other?

The benchmark (runtime/bench.py) captures many calls back to back in one CUDA graph. A library that
launches with programmatic dependent launch (FlashMLA does) may start a call's first kernel before
the previous call's last one has finished, so part of each call could hide behind its neighbours.
For each kernel and problem this times the calls back to back (the benchmark's protocol, 4 input
sets rotated) and again with a tiny ordinary kernel after every call, which each next call must
wait for, then subtracts the tiny kernel's own time (a graph of it alone). Equal numbers: the lead
or lag is inside each call.

    python scripts/call_overlap_probe.py flash_mla_decode_v32 flashmla_decode_v1 --out probe.json
"""
from __future__ import annotations

import argparse
import json

CELLS = [dict(b=128, s_q=1, h_q=16, seqlen=1024, varlen=True), dict(b=128, s_q=1, h_q=16, seqlen=1024),
         dict(b=128, s_q=2, h_q=128, seqlen=4096, varlen=True), dict(b=128, s_q=1, h_q=64, seqlen=4096)]


def graph_us(fn, reps: int = 50, rounds: int = 7) -> float:
    """Median over `rounds` replays of one graph of `reps` calls of fn, in us per call of fn."""
    import torch
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(rounds):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000 / reps)
    return sorted(times)[len(times) // 2]


def main() -> None:
    import torch

    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime.registry import get_plan
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels", nargs="+")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args()
    tiny = torch.zeros(1, device="cuda")
    tiny_us = graph_us(lambda: tiny.add_(1))
    rows = []
    for cell in CELLS:
        problem = MlaDecodeProblem(**cell)
        sets = [problem.make_inputs(seed=0, device="cuda", data_seed=1000 * i) for i in range(4)]
        for name in args.kernels:
            kern = get_plan(name).build(sets[0])
            kern.compile()
            runs = [(x, problem.make_outputs(x, fill=0.0), kern.prepare(x)) for x in sets]

            def calls(runs=runs, kern=kern):
                for x, o, w in runs:
                    kern.launch(x, o, w)

            def fenced(runs=runs, kern=kern):
                for x, o, w in runs:
                    kern.launch(x, o, w)
                    tiny.add_(1)
            back = graph_us(calls) / len(runs)
            sep = graph_us(fenced) / len(runs)
            row = dict(problem=problem.key(), kernel=name, back_to_back_us=round(back, 2),
                       fenced_us=round(sep - tiny_us, 2), tiny_us=round(tiny_us, 2),
                       stages=[s.name for s in kern.stages], device=torch.cuda.get_device_name())
            print(json.dumps(row))
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
