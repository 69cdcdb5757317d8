"""A stage's compiler output without a GPU: PTX, cubin and MLIR, as bytes per kind.

CuTe DSL: the stage is compiled once more with `--keep-ptx --keep-cubin --dump-dir=<tmp>` added
to its options (a separate entry of the CuteKernel cache: the options are part of the key) and,
for MLIR, the DSL's KEEP=ir switch (the module after canonicalize+cse) turned on for that one
compile. cuTile: `export_kernel` gives the cubin and the Tile IR bytecode; the bytecode becomes
MLIR text through `tileirdisasm` (shipped beside tileiras from CUDA 13.4). cuTile emits no PTX
(tileiras compiles Tile IR straight to SASS) and always passes --lineinfo to tileiras.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mla_var3.errors import UsageError
from mla_var3.runtime.ct_kernel import CtKernel
from mla_var3.runtime.cute_kernel import CuteKernel, ensure_dsl_arch

KINDS = ("ptx", "cubin", "sass", "mlir")
CUTILE_NO_PTX = "no PTX from cuTile (tileiras compiles Tile IR bytecode straight to a cubin)"


@dataclass
class StageArtifacts:
    """`files`: kind -> content ("ptx", "cubin", "mlir"; "tileirbc" when the MLIR text could not be
    made); `notes`: what could not be produced and why, one line each."""
    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def dumpable(stage) -> bool:
    return isinstance(stage, (CuteKernel, CtKernel))


def stage_artifacts(stage, arch: str, *, mlir: bool = False) -> StageArtifacts:
    """Compile `stage` for `arch` and return what it produced (always the cubin)."""
    if isinstance(stage, CuteKernel):
        return _cute(stage, arch, mlir)
    if isinstance(stage, CtKernel):
        return _cutile(stage, arch, mlir)
    raise UsageError(f"stage {stage.name}: a {type(stage).__name__} has no compiler output to dump")


@contextlib.contextmanager
def _cute_keep_ir(directory: str, on: bool):
    """The DSL's KEEP=ir switch for one compile: set on the DSL's settings, restored after."""
    if not on:
        yield
        return
    from cutlass.cutlass_dsl import CuTeDSL
    envar = CuTeDSL._get_dsl().envar
    saved = (envar.keep_ir_clean, envar.dump_dir)
    envar.keep_ir_clean, envar.dump_dir = True, directory
    try:
        yield
    finally:
        envar.keep_ir_clean, envar.dump_dir = saved


def _cute(stage: CuteKernel, arch: str, mlir: bool) -> StageArtifacts:
    ensure_dsl_arch(arch)
    tmp = tempfile.mkdtemp(prefix="mla_var3_dump_")
    try:
        dump = copy.copy(stage)
        dump.key = dataclasses.replace(stage.key, arch=arch,
                                       options=f"{stage.key.options} --keep-ptx --keep-cubin --dump-dir={tmp}")
        with _cute_keep_ir(tmp, mlir):
            dump.compile()
        out = StageArtifacts()
        for kind, pattern in (("ptx", "*.ptx"), ("cubin", "*.cubin"), ("mlir", "*.mlir")):
            found = sorted(Path(tmp).glob(pattern))
            if found:
                out.files[kind] = found[0].read_bytes()
            elif kind != "mlir" or mlir:
                out.notes.append(f"{kind}: the CuTe DSL compile wrote none")
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cutile(stage: CtKernel, arch: str, mlir: bool) -> StageArtifacts:
    out = StageArtifacts(files={"cubin": stage.export(arch)}, notes=[CUTILE_NO_PTX])
    if mlir:
        bytecode = stage.export(arch, output_format="tileir_bytecode")
        try:
            from cuda.tile._compile import _bytecode_to_mlir_text     # tileirdisasm, CUDA >= 13.4
            out.files["mlir"] = _bytecode_to_mlir_text(bytecode).encode()
        except Exception as ex:      # no tileirdisasm (or the private helper moved): keep the bytecode
            out.files["tileirbc"] = bytes(bytecode)
            out.notes.append(f"mlir: Tile IR bytecode written instead of text ({type(ex).__name__}: "
                             f"{str(ex).splitlines()[0] if str(ex) else ''})")
    return out
