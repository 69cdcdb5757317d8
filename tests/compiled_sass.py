"""Test helper: the SASS of a runtime kernel's split stage, compiled for sm_90a on the CPU
(used by the tests that read compiled code: timeline toggle, producer warpgroup)."""
import tempfile
from pathlib import Path

from mla_var3.runtime import artifacts, sass


def split_sass(kern) -> str:
    split = next(s for s in kern.stages if s.name == "split")
    arts = artifacts.stage_artifacts(split, "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "split.cubin"
        cubin.write_bytes(arts.files["cubin"])
        return sass.disassemble(cubin, sass.find_disassemblers())[0]
