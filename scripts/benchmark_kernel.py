#!/usr/bin/env python3
"""scripts/benchmark_kernel.py FILE: see src/mla_var3/companion.py (a file exporting get_inputs(),
kernel_fn(*inputs) and reference_fn(*inputs); examples in examples/companion/)."""
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if (SRC / "mla_var3").is_dir():           # this checkout's package, installed or not
    sys.path.insert(0, str(SRC))

from mla_var3 import companion  # noqa: E402

raise SystemExit(companion.main_benchmark(sys.argv[1:]))
