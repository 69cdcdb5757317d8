import os
import sys
from pathlib import Path

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")     # before anything imports cutlass.cute
sys.path.insert(0, str(Path(__file__).parent))       # tiny_kernels

import pytest  # noqa: E402


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


HAS_GPU = _has_gpu()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run through the device tool on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
