"""Test helper: the SASS of a runtime kernel's split stage (or any stage), compiled for sm_90a on the CPU
(used by the tests that read compiled code: timeline toggle, producer warpgroup)."""
import collections
import os
import tempfile
from pathlib import Path

from mla_var3.runtime import artifacts, kernel_plan, registry, sass


_SASS: dict = {}       # CompileKey -> SASS text: many tests read the same baseline kernel (v32's, v36's)


def stage_sass(kern, name: str) -> str:
    """The SASS of the runtime kernel's stage `name` ("split", "combine", ...). Kept per compile key
    for the session: the key names everything the build depends on within one process (version,
    stage, tiling, dtypes, static dims, arch, options, variant), as the runtime's own compile cache
    does, and a dozen tests compare against the same baseline build."""
    stage = next(s for s in kern.stages if s.name == name)
    key = getattr(stage, "key", None)
    if key is not None and key in _SASS:
        return _SASS[key]
    arts = artifacts.stage_artifacts(stage, "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / f"{name}.cubin"
        cubin.write_bytes(arts.files["cubin"])
        text = sass.disassemble(cubin, sass.find_disassemblers())[0]
    if key is not None:
        _SASS[key] = text
    return text


def split_sass(kern) -> str:
    return stage_sass(kern, "split")


def opcodes(text: str) -> list[str]:
    """The opcode of each SASS instruction in address order (a predicate guard such as `@!P0` skipped)."""
    return [w[1] if w[0].startswith("@") else w[0] for w in map(str.split, sass.instructions(text))]


def small_decode(page_size: int = 64, varlen: bool = False):
    """The small MLA decode problem the split-kernel SASS tests compile (b=2 s_q=1 h_q=64 seqlen 1024)."""
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    return MlaDecodeProblem(b=2, s_q=1, h_q=64, seqlen=1024, page_size=page_size, varlen=varlen)


def paired_varlen_decode(page_size: int = 64):
    """The pair-loop SASS tests' problem (b=4 s_q=2 h_q=64 seqlen 700 varlen): two row blocks (a
    cluster pair), ragged lengths (the longest-first order kernel) and partial last tiles."""
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    return MlaDecodeProblem(b=4, s_q=2, h_q=64, seqlen=700, varlen=True, page_size=page_size)


def default_kernel(version: str, problem, tiling=None):
    """`version`'s runtime kernel for `problem` at `tiling` (default: its default tiling), built on
    the CPU (a quarantined version too: the compiled-code tests are how a new version is checked
    first)."""
    old = os.environ.get(kernel_plan.QUARANTINE_ENV)
    os.environ[kernel_plan.QUARANTINE_ENV] = "1"
    try:
        plan = registry.get_plan(version)
        return plan.plan(problem.make_inputs(seed=0, device="cpu"), tiling or plan.default_tiling(problem))
    finally:
        if old is None:
            os.environ.pop(kernel_plan.QUARANTINE_ENV)
        else:
            os.environ[kernel_plan.QUARANTINE_ENV] = old


def split_opcode_counts(version: str, problem, tiling=None) -> collections.Counter:
    """Opcode -> count in `version`'s split kernel for `problem` at `tiling` (default: its default
    tiling), compiled on the CPU."""
    return collections.Counter(opcodes(stage_sass(default_kernel(version, problem, tiling), "split")))


def stage_mlir(kern, name: str) -> str:
    """The MLIR the DSL kept for the runtime kernel's stage `name` (launch attributes included)."""
    stage = next(s for s in kern.stages if s.name == name)
    text = artifacts.stage_artifacts(stage, "sm_90a", mlir=True).files["mlir"]
    return text.decode() if isinstance(text, bytes) else text


def count(ops: collections.Counter, prefix: str) -> int:
    """How many instructions of `ops` have an opcode starting with `prefix` (e.g. "HGMMA")."""
    return sum(n for op, n in ops.items() if op.startswith(prefix))
