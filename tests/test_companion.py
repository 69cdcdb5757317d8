"""Companion scripts (scripts/verify_kernel.py, scripts/benchmark_kernel.py, mla_var3/companion.py)
and their two CuTe DSL examples (examples/companion/): the examples compile for sm_90a on the
CPU and their references are right; the scripts refuse in one line; (GPU) both examples pass."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mla_var3 import companion

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = [ROOT / "examples" / "companion" / f for f in ("axpy_bf16.py", "rmsnorm.py")]
SCRIPTS = {"verify": ROOT / "scripts" / "verify_kernel.py", "benchmark": ROOT / "scripts" / "benchmark_kernel.py"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_exports_the_three_names_and_compiles_for_sm90a(path):
    mod = companion.load(path)
    assert mod.compile_kernel() is not None          # cute.compile from fake tensors: no GPU


def test_axpy_reference_on_the_cpu():
    mod = companion.load(EXAMPLES[0])
    x, y = mod.get_inputs(device="cpu", n=4096)
    assert x.dtype == y.dtype == torch.bfloat16 and x.shape == (4096,)
    exact = mod.ALPHA * x.double() + y.double()
    ref = mod.reference_fn(x, y)
    assert ref.dtype == torch.bfloat16
    assert torch.allclose(ref.double(), exact, rtol=2 ** -8, atol=0)     # one bf16 rounding
    with pytest.raises(ValueError, match="multiple of 8"):
        mod.kernel_fn(x[:7], y[:7])


def test_rmsnorm_reference_on_the_cpu():
    mod = companion.load(EXAMPLES[1])
    x, w = mod.get_inputs(device="cpu", rows=8, hidden=256)
    xd = x.double()
    exact = xd / torch.sqrt((xd * xd).mean(dim=1, keepdim=True) + mod.EPS) * w.double()
    ref = mod.reference_fn(x, w)
    assert ref.shape == x.shape and ref.dtype == torch.bfloat16
    assert torch.allclose(ref.double(), exact, rtol=2 ** -7, atol=1e-6)
    rms = ref.double().div(w.double()).pow(2).mean(dim=1)
    assert torch.allclose(rms, torch.ones_like(rms), atol=0.02)           # unit RMS before the weight
    with pytest.raises(ValueError, match="multiple of 8"):
        mod.kernel_fn(x[:, :12].contiguous(), w[:12])


def test_compare_reports_mismatches_and_specials():
    r = torch.tensor([1.0, 2.0, float("nan"), float("inf")])
    ok, lines = companion.compare((r.clone(),), (r,), 1e-2, 1e-2)
    assert ok and "ok" in lines[0]
    ok, lines = companion.compare((torch.tensor([1.0, 2.5, float("nan"), float("inf")]),), (r,), 1e-2, 1e-2)
    assert not ok and "1 of 4 beyond" in lines[0] and "max |out - ref| 0.5" in lines[0]
    ok, lines = companion.compare((torch.tensor([1.0, 2.0, 0.0, float("inf")]),), (r,), 1e-2, 1e-2)
    assert not ok and "1 NaN/inf where the reference differs" in lines[0]
    ok, lines = companion.compare((torch.tensor([1.0, float("nan"), float("nan"), float("inf")]),), (r,), 1, 1)
    assert not ok                                                        # a NaN where the reference is finite
    ok, lines = companion.compare((r[:2],), (r,), 1, 1)
    assert not ok and "shape" in lines[0]
    ok, lines = companion.compare((r, r), (r,), 1, 1)
    assert not ok and "2 outputs" in lines[0]


def test_load_refuses_in_one_line(tmp_path):
    cases = {"missing.py": None, "notpy.txt": "x = 1\n", "broken.py": "import no_such_module_here\n",
             "partial.py": "def get_inputs():\n    return ()\n\ndef kernel_fn():\n    pass\n"}
    for name, text in cases.items():
        if text is not None:
            (tmp_path / name).write_text(text)
    msgs = {}
    for name in cases:
        with pytest.raises(companion.CompanionError) as ei:
            companion.load(tmp_path / name)
        msgs[name] = str(ei.value)
        assert "\n" not in msgs[name]
    assert msgs["missing.py"].endswith("no such file")
    assert "expected a Python file" in msgs["notpy.txt"]
    assert "import failed (ModuleNotFoundError: No module named 'no_such_module_here')" in msgs["broken.py"]
    assert "missing reference_fn;" in msgs["partial.py"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU refusal")
@pytest.mark.parametrize("which", sorted(SCRIPTS))
def test_scripts_refuse_without_a_gpu_in_one_line(which):
    r = subprocess.run([sys.executable, str(SCRIPTS[which]), str(EXAMPLES[0])], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == f"error: {which}_kernel.py: no CUDA GPU is visible; companion kernels run on one (the H200)"


@pytest.mark.parametrize("which", sorted(SCRIPTS))
def test_scripts_refuse_a_file_without_the_names(which, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    r = subprocess.run([sys.executable, str(SCRIPTS[which]), str(bad)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "missing get_inputs" in r.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_pass_verify_and_time(path):
    ok, lines = companion.verify(path)
    assert ok, "\n".join(lines)
    res = companion.benchmark(path, rep_ms=20)
    assert res["time_us"]["median"] > 0 and res["gbps"] > 0
