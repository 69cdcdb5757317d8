"""The main job: python -m mla_var3

Lists the kernels, compile-checks every CuTe DSL and cuTile kernel for sm_90a, runs the
float32 reference and the PyTorch baseline on small problems on the CPU, and, with a GPU,
checks every kernel on the check grid and benchmarks them side by side. Without a GPU it says
in one line what it skipped.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def main() -> int:
    from mla_var3.cli.kernel import main as cli
    from mla_var3.layers.mla import decode as mla
    from mla_var3.runtime import devices, registry

    rc = 0
    print("== kernels")
    rc |= cli(["list"])
    dsl = {}                  # problem kind -> its CuTe DSL and cuTile versions (--compare needs one kind)
    for e in registry.all_entries():
        if e.language in ("cute-dsl", "cutile"):
            dsl.setdefault(e.load().problem_kind.kind, []).append(e.name)
    print("\n== compile-check for sm_90a (no GPU needed)")
    for names in dsl.values():
        rc |= cli([names[0], "--compile-only", "--arch=sm_90a"] + ([f"--compare={','.join(names[1:])}"] if names[1:] else []))
    if not dsl:
        print("no CuTe DSL or cuTile kernels yet")
    print("\n== float32 reference and the PyTorch baseline on the CPU")
    t0 = time.perf_counter()
    problem = mla.MlaDecodeProblem(b=2, s_q=2, h_q=16, seqlens=(65, 130))
    inputs = problem.make_inputs(seed=0)
    out, lse = problem.reference(inputs)
    print(f"reference b=2 s_q=2 h_q=16 seqlens=65,130: out {list(out.shape)} |out|max={float(out.abs().max()):.4f}, "
          f"lse {list(lse.shape)} in {time.perf_counter() - t0:.2f}s")
    rc |= cli(["torch_mla_decode", "--check", "--grid=smoke", "--device=cpu"])
    rc |= cli(["torch_gemm", "--check", "--grid=smoke", "--device=cpu"])
    print()
    if not devices.cuda_available():
        print("needs a GPU (skipped here): running the CuTe DSL/cuTile kernels, --check on the check grid, "
              "benchmarks, autotune and pytest -m gpu — run them on an sm_90a GPU (H200/H100).")
        return rc
    runnable = []
    for e in registry.all_entries():
        missing = e.load().unavailable()
        if missing:
            print(f"{e.name}: skipped, {missing}")
        elif devices.arch_supported(e.load().arch, devices.current_device().arch):
            runnable.append(e.name)
    print("== GPU: check grid, then a side-by-side benchmark")
    for name in runnable:
        rc |= cli([name, "--check"])
    newest = [n for n in runnable if n == registry.resolve(registry.resolve(n).design).name]
    mla_newest = [n for n in newest if registry.get_plan(n).problem_kind.kind == "mla_decode"]
    if mla_newest:
        rc |= cli([mla_newest[0], "--b=128", "--s_q=1", "--h_q=64", "--seqlen=4096"]
                  + ([f"--compare={','.join(mla_newest[1:])}"] if mla_newest[1:] else []))
    gemm_newest = [n for n in newest if registry.get_plan(n).problem_kind.kind == "gemm"]
    if gemm_newest:
        rc |= cli([gemm_newest[0], "--m=8192", "--n=8192", "--k=8192"]
                  + ([f"--compare={','.join(gemm_newest[1:])}"] if gemm_newest[1:] else []))
    return rc


if __name__ == "__main__":
    sys.exit(main())
