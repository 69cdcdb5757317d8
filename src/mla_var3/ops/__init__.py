"""mla_var3.ops: a drop-in for FlashMLA's dense-decode API in serving engines (docs/serving.md).

    from mla_var3.ops import get_mla_metadata, flash_mla_with_kvcache

Importing it registers the custom op `torch.ops.mla_var3.mla_decode` (with a fake implementation,
so torch.compile traces it). Each call runs the best registered kernel version for the device and
shapes - CuTe DSL, else cuTile, else the PyTorch baseline (a CPU: PyTorch only) - built once per
shape and kept with its workspace; no call reads a length value on the host.
"""
from mla_var3.ops.flash_mla import MlaSchedMeta, flash_mla_with_kvcache, get_mla_metadata
from mla_var3.ops.dispatch import clear_cache, kernels_in_use, mla_decode, set_kernel

__all__ = ["MlaSchedMeta", "clear_cache", "flash_mla_with_kvcache", "get_mla_metadata", "kernels_in_use",
           "mla_decode", "set_kernel"]
