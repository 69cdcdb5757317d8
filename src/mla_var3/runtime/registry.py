"""Registry: discovers kernel versions on disk; name -> plan.

A version is a package `kernel/<language>_python/<layer>/<design>/<design>_vN/` whose module
`<design>_vN.py` defines a KernelPlan subclass (exported as `Plan`). A bare design name means its
newest version. Discovery reads directory names only; a plan module is imported when asked for.
"""
from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from mla_var3.errors import RegistryError
from mla_var3.runtime.kernel_plan import KernelPlan

KERNEL_ROOT = Path(__file__).resolve().parents[1] / "kernel"
LANGUAGE_DIRS = {"cute_python": "cute-dsl", "cutile_python": "cutile", "torch_python": "torch",
                 "peer_python": "peer"}     # peer: an outside library called live (runtime/peer_kernel.py)
_VERSION_DIR = re.compile(r"^(?P<design>[a-z][a-z0-9_]*)_v(?P<n>[0-9]+)$")


@dataclass(frozen=True)
class VersionEntry:
    name: str          # flash_mla_decode_v1
    design: str
    version: int
    language: str
    layer: str
    module: str        # importable module of the plan

    def load(self) -> KernelPlan:
        mod = importlib.import_module(self.module)
        plan_cls = getattr(mod, "Plan", None)
        if plan_cls is None or not issubclass(plan_cls, KernelPlan):
            raise RegistryError(f"{self.module}: expected a KernelPlan subclass named Plan")
        if plan_cls.name != self.name:
            raise RegistryError(f"{self.module}: Plan.name is {plan_cls.name!r}, expected {self.name!r}")
        return plan_cls()


@functools.lru_cache(maxsize=1)
def discover() -> dict[str, VersionEntry]:
    found = {}
    for lang_dir, language in LANGUAGE_DIRS.items():
        root = KERNEL_ROOT / lang_dir
        for vdir in sorted(root.glob("*/*/*_v*")):
            m = _VERSION_DIR.match(vdir.name)
            layer, design = vdir.parent.parent.name, vdir.parent.name
            if not m or m["design"] != design or not (vdir / f"{vdir.name}.py").exists():
                continue
            module = f"mla_var3.kernel.{lang_dir}.{layer}.{design}.{vdir.name}.{vdir.name}"
            found[vdir.name] = VersionEntry(vdir.name, design, int(m["n"]), language, layer, module)
    return found


def versions_of(design: str) -> list[VersionEntry]:
    return sorted((e for e in discover().values() if e.design == design), key=lambda e: e.version)


def quarantined(e: VersionEntry) -> bool:
    """A version held back by its plan's `quarantine` (unless MLA_VAR3_RUN_QUARANTINED=1)."""
    plan = e.load()
    return bool(plan.quarantine) and plan.unavailable() is not None


def resolve(name: str) -> VersionEntry:
    """A version name, or a design name meaning its newest version that is not quarantined
    (a quarantined version runs only when named, with MLA_VAR3_RUN_QUARANTINED=1)."""
    entries = discover()
    if name in entries:
        return entries[name]
    vs = versions_of(name)
    if vs:
        return next((e for e in reversed(vs) if not quarantined(e)), vs[-1])
    designs = sorted({e.design for e in entries.values()})
    raise RegistryError(f"kernel: unknown kernel {name!r}; known designs: {', '.join(designs)} "
                        f"(`python -m mla_var3.kernel list` shows every version)")


def get_plan(name: str) -> KernelPlan:
    return resolve(name).load()


def all_entries() -> list[VersionEntry]:
    return sorted(discover().values(), key=lambda e: (e.language, e.design, e.version))


def newest_entries() -> list[VersionEntry]:
    """The newest version of every design (the newest that is not quarantined, see resolve)."""
    newest = {resolve(d).name for d in {e.design for e in all_entries()}}
    return [e for e in all_entries() if e.name in newest]
