"""Test helper: the SASS of a runtime kernel's split stage (or any stage), compiled for sm_90a on the CPU
(used by the tests that read compiled code: timeline toggle, producer warpgroup)."""
import tempfile
from pathlib import Path

from mla_var3.runtime import artifacts, sass


def stage_sass(kern, name: str) -> str:
    """The SASS of the runtime kernel's stage `name` ("split", "combine", ...)."""
    stage = next(s for s in kern.stages if s.name == name)
    arts = artifacts.stage_artifacts(stage, "sm_90a")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / f"{name}.cubin"
        cubin.write_bytes(arts.files["cubin"])
        return sass.disassemble(cubin, sass.find_disassemblers())[0]


def split_sass(kern) -> str:
    return stage_sass(kern, "split")


def opcodes(text: str) -> list[str]:
    """The opcode of each SASS instruction in address order (a predicate guard such as `@!P0` skipped)."""
    return [w[1] if w[0].startswith("@") else w[0] for w in map(str.split, sass.instructions(text))]
