"""Devices: per-GPU limits and peaks from conf/devices.json, the current GPU, the arch gate.

The arch gate runs before anything compiles: a kernel built for sm_90a on another GPU is a
clear one-line error (or a skip in tests), never a crash inside MLIR.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources

from mla_var3.errors import DeviceError

__all__ = ["DeviceError", "DeviceSpec", "current_device", "require_arch", "load_devices", "spec_for_name"]


@dataclass(frozen=True)
class DeviceSpec:
    key: str
    display_name: str
    arch: str
    sms: int
    smem_per_sm_bytes: int
    smem_per_block_bytes: int
    regs_per_sm: int
    l2_bytes: int
    hbm_gbps: float
    tflops: dict = field(default_factory=dict)
    measured: dict | None = None
    match: tuple[str, ...] = ()
    name: str = ""                 # what the driver calls the GPU in hand (empty for a spec only)

    @property
    def peak_tflops_bf16(self) -> float:
        return float(self.tflops["bf16"])

    def ceilings(self, measured: bool = True) -> tuple[float, float]:
        """(bf16 TFLOP/s, memory GB/s): our measured ceilings where we have them, else datasheet."""
        if measured and self.measured:
            return float(self.measured["bf16_tflops"]), float(self.measured["hbm_copy_gbps"])
        return self.peak_tflops_bf16, float(self.hbm_gbps)


@functools.lru_cache(maxsize=1)
def load_devices() -> dict[str, DeviceSpec]:
    data = json.loads(resources.files("mla_var3.conf").joinpath("devices.json").read_text())
    out = {}
    for key, d in data["devices"].items():
        out[key] = DeviceSpec(
            key=key, display_name=d["display_name"], arch=d["arch"], sms=int(d["sms"]),
            smem_per_sm_bytes=int(d["smem_per_sm_bytes"]), smem_per_block_bytes=int(d["smem_per_block_bytes"]),
            regs_per_sm=int(d["regs_per_sm"]), l2_bytes=int(d["l2_bytes"]), hbm_gbps=float(d["hbm_gbps"]),
            tflops=dict(d["tflops"]), measured=d.get("measured"), match=tuple(d.get("match", ())))
    return out


def spec_for_name(gpu_name: str) -> DeviceSpec | None:
    """The spec whose `match` substrings name this GPU (e.g. "NVIDIA H200" -> H200)."""
    low = gpu_name.lower()
    for spec in load_devices().values():
        if any(m.lower() in low for m in spec.match):
            return spec
    return None


def arch_from_capability(major: int, minor: int) -> str:
    """Compute capability -> the arch string kernels target (arch-specific 'a' where it exists)."""
    suffix = "a" if major >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


def inputs_on_cuda(inputs) -> bool:
    """Whether any tensor among the fields of `inputs` lives on a CUDA device."""
    fields = vars(inputs).values() if hasattr(inputs, "__dict__") else ()
    return any(getattr(t, "is_cuda", False) for t in fields)


def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def current_device() -> DeviceSpec:
    """The GPU in hand, with its limits; DeviceError when there is none."""
    import torch
    if not torch.cuda.is_available():
        raise DeviceError("no CUDA GPU is visible: running kernels needs one (use --compile-only --arch=sm_90a on a CPU)")
    name = torch.cuda.get_device_name()
    props = torch.cuda.get_device_properties(0)
    arch = arch_from_capability(props.major, props.minor)
    spec = spec_for_name(name)
    if spec is None:   # an unlisted GPU: what the driver reports, no datasheet peaks
        return DeviceSpec(key=name, display_name=name, arch=arch, sms=props.multi_processor_count,
                          smem_per_sm_bytes=getattr(props, "shared_memory_per_multiprocessor", 0),
                          smem_per_block_bytes=getattr(props, "shared_memory_per_block_optin", 0),
                          regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
                          l2_bytes=getattr(props, "L2_cache_size", 0), hbm_gbps=0.0, name=name)
    from dataclasses import replace
    return replace(spec, name=name, arch=arch)


def arch_supported(kernel_arch: tuple[str, ...], device_arch: str) -> bool:
    return "any" in kernel_arch or device_arch in kernel_arch


def require_arch(kernel_name: str, kernel_arch: tuple[str, ...], device: DeviceSpec) -> None:
    """The arch gate: raise before anything compiles for the wrong GPU."""
    if not arch_supported(kernel_arch, device.arch):
        raise DeviceError(f"{kernel_name} needs {' or '.join(kernel_arch)}; "
                          f"this GPU ({device.name or device.display_name}) is {device.arch}")


KNOWN_ARCHES = ("sm_80", "sm_90a", "sm_100a", "sm_120a")


def check_arch_name(arch: str) -> str:
    if arch not in KNOWN_ARCHES:
        raise DeviceError(f"--arch: expected one of {', '.join(KNOWN_ARCHES)}, got {arch!r}")
    return arch
