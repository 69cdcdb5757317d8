"""SASS and resource usage of a cubin: find the disassembler, run it, parse its text.

The parsers take text and return dicts, so they run on fixtures without a CUDA toolkit:

    parse_res_usage(`cuobjdump -res-usage` text)  -> {function: {"REG": 168, "STACK": 0, ...}}
    parse_sass(`cuobjdump -sass` or `nvdisasm` text) -> {function: {opcode: static count}}
    summarize(res, sass) -> one stage's facts;  format_summary(label, facts) -> one line

Counts are static (instructions in the binary, not executed ones); opcodes are counted by their
base mnemonic (`UTMALDG.3D` -> UTMALDG, `@!P0 BAR.SYNC.DEFER_BLOCKING` -> BAR).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

# The opcodes the summary line names, in this order (those with a zero count are left out).
MIX = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "UBLKCP", "LDG", "STG", "LDGSTS", "LDS", "STS", "LDSM",
       "LDL", "STL", "BAR", "SYNCS", "MUFU", "SHFL")
TOOLS = ("cuobjdump", "nvdisasm")
TOOL_TIMEOUT_S = 120

_FUNC_RES = re.compile(r"^\s*Function\s+(\S+?):?\s*$")
_RES_KV = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_FUNC_SASS = (re.compile(r"^\s*Function\s*:\s*(\S+)\s*$"),       # cuobjdump -sass
              re.compile(r"^\.text\.(\S+):\s*$"))                 # nvdisasm
_INSN = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def tool_dirs() -> list[Path]:
    """Where a CUDA binary tool is looked for after PATH: $CUDA_HOME/bin, /usr/local/cuda/bin,
    then the copy triton bundles (found without importing triton)."""
    dirs = [Path(os.environ["CUDA_HOME"]) / "bin"] if os.environ.get("CUDA_HOME") else []
    dirs.append(Path("/usr/local/cuda/bin"))
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).parent / "backends" / "nvidia" / "bin")
    return dirs


def find_tool(name: str) -> str | None:
    """The path of `name` (cuobjdump, nvdisasm), or None when it is nowhere to be found."""
    found = shutil.which(name)
    if found:
        return found
    for d in tool_dirs():
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def find_disassemblers() -> dict[str, str]:
    """{tool: path} for the tools found (may be empty)."""
    return {t: p for t in TOOLS if (p := find_tool(t)) is not None}


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed (rc={proc.returncode}): "
                           + (proc.stderr.strip().splitlines() or ["no output"])[-1])
    return proc.stdout


def disassemble(cubin: str | os.PathLike, tools: dict[str, str]) -> tuple[str, str]:
    """(SASS text, res-usage text) of a cubin file. SASS from `nvdisasm -c -g` (with the source
    lines of a line-info build as `//## File ..., line N` comments), else `cuobjdump -sass`;
    res-usage from `cuobjdump -res-usage` ("" without cuobjdump)."""
    cubin = str(cubin)
    if "nvdisasm" in tools:
        sass = _run([tools["nvdisasm"], "-c", "-g", cubin])
    else:
        sass = _run([tools["cuobjdump"], "-sass", cubin])
    res = _run([tools["cuobjdump"], "-res-usage", cubin]) if "cuobjdump" in tools else ""
    return sass, res


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` -> {function: {"REG": n, "STACK": bytes, "SHARED": bytes, "LOCAL": bytes, ...}}."""
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC_RES.match(line)
        if m:
            current = m.group(1)
            out[current] = {}
            continue
        if current is not None and "REG:" in line:
            out[current].update({k: int(v) for k, v in _RES_KV.findall(line)})
            current = None
    return out


def parse_sass(text: str) -> dict[str, dict[str, int]]:
    """SASS listing (cuobjdump -sass or nvdisasm) -> {function: {base opcode: static count}}."""
    out: dict[str, Counter] = {}
    current = None
    for line in text.splitlines():
        for pat in _FUNC_SASS:
            m = pat.match(line)
            if m:
                current = m.group(1)
                out.setdefault(current, Counter())
                break
        else:
            m = _INSN.match(line)
            if m:
                out.setdefault(current or "?", Counter())[m.group(1)] += 1
    return {f: dict(c) for f, c in out.items()}


def summarize(res: dict[str, dict[str, int]], sass: dict[str, dict[str, int]]) -> dict:
    """One stage's facts over the functions of its cubin: the largest register / stack / local /
    static shared use, and the opcode counts summed."""
    def worst(key):
        vals = [r[key] for r in res.values() if key in r]
        return max(vals) if vals else None
    ops: Counter = Counter()
    for counts in sass.values():
        ops.update(counts)
    return {"functions": sorted(set(res) | set(sass)), "registers": worst("REG"), "stack_bytes": worst("STACK"),
            "local_bytes": worst("LOCAL"), "smem_static_bytes": worst("SHARED"),
            "instructions": sum(ops.values()), "opcodes": dict(ops.most_common())}


def format_summary(label: str, facts: dict) -> str:
    """`<label>: 168 regs, spills 0 B stack / 0 B local, smem 222800 B static, 4321 SASS: HGMMA 40, ...`"""
    def num(v):
        return "?" if v is None else str(v)
    ops = facts.get("opcodes", {})
    mix = ", ".join(f"{op} {ops[op]}" for op in MIX if ops.get(op))
    return (f"{label}: {num(facts.get('registers'))} regs, spills {num(facts.get('stack_bytes'))} B stack / "
            f"{num(facts.get('local_bytes'))} B local, smem {num(facts.get('smem_static_bytes'))} B static, "
            f"{facts.get('instructions', 0)} SASS" + (f": {mix}" if mix else ""))


# ---- comparing builds ----------------------------------------------------------------------------

_INSN_TEXT = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.*?)\s*;")
TIMER_REGISTERS = ("SR_CLOCKLO", "SR_CLOCKHI", "SR_GLOBALTIMERLO", "SR_GLOBALTIMERHI")


def instructions(text: str) -> list[str]:
    """The instruction text of a SASS listing, addresses and encodings left out, so listings of
    the same code from nvdisasm and cuobjdump compare equal."""
    return [m.group(1) for line in text.splitlines() if (m := _INSN_TEXT.match(line))]


def fingerprint(text: str) -> dict:
    """{"instructions": n, "sha256": hash of the instruction text}: equal for identical code."""
    import hashlib
    insns = instructions(text)
    return {"instructions": len(insns), "sha256": hashlib.sha256("\n".join(insns).encode()).hexdigest()}


def timer_reads(text: str) -> dict[str, int]:
    """How many instructions read each timer register (clock64 -> CS2R SR_CLOCKLO, %globaltimer
    -> SR_GLOBALTIMERLO/HI): none in a build without in-kernel timeline instrumentation."""
    counts = Counter(reg for insn in instructions(text) for reg in TIMER_REGISTERS if re.search(rf"\b{reg}\b", insn))
    return dict(counts)
