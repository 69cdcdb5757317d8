"""Layers: one problem kind per module (layers/<layer>/<kind>.py), behind layers/base.py.

`problem_kind(name)` finds a kind by the name records store, importing it only when asked.
"""
from __future__ import annotations

import importlib

from mla_var3.errors import RegistryError

KINDS = {"mla_decode": "mla_var3.layers.mla.decode:MlaDecodeProblem",
         "gemm": "mla_var3.layers.gemm.matmul:GemmProblem"}


def problem_kind(name: str) -> type:
    """The Problem class registered as `name` (e.g. "mla_decode")."""
    if name not in KINDS:
        raise RegistryError(f"problem kind: unknown {name!r}; known: {', '.join(sorted(KINDS))}")
    module, cls = KINDS[name].split(":")
    return getattr(importlib.import_module(module), cls)
