"""The GEMM problem kind (C = A @ B^T) and its PyTorch baseline, on the CPU: a second layer through
the same contract, check code and CLI as MLA, with no change in runtime/."""
import re

import pytest
import torch

from mla_var3 import jobs
from mla_var3.cli.kernel import main, parse
from mla_var3.errors import ProblemError
from mla_var3.layers.gemm.matmul import GemmProblem
from mla_var3.runtime import registry


@pytest.mark.parametrize("kwargs, match", [
    (dict(n=12), "n: expected a multiple of 8 .16-byte row strides for TMA., got 12"),
    (dict(k=20), "k: expected a multiple of 8"),
    (dict(m=0), r"m: expected an int in 1..131072, got 0"),
    (dict(dtype="fp32"), "dtype: expected one of bf16, fp16, got 'fp32'"),
])
def test_bad_gemm_problems_name_the_argument(kwargs, match):
    with pytest.raises(ProblemError, match=match):
        GemmProblem(**kwargs)


def test_m_is_arbitrary_and_the_grids_hold_the_issue_shapes():
    assert GemmProblem(m=1, n=8, k=8).key() == "m=1,n=8,k=8,dtype=bf16"
    keys = {p.key() for p in GemmProblem.grid("check")}
    assert {"m=8192,n=8192,k=8192,dtype=bf16", "m=4096,n=4096,k=8192,dtype=bf16",
            "m=1000,n=3000,k=4000,dtype=bf16", "m=1,n=256,k=512,dtype=bf16"} <= keys
    assert GemmProblem.from_dict(GemmProblem(m=3, n=16, k=24, dtype="fp16").to_dict()) == GemmProblem(m=3, n=16, k=24, dtype="fp16")


def test_reference_is_the_float64_product():
    p = GemmProblem(m=5, n=8, k=16)
    x = p.make_inputs(seed=1)
    (ref,) = p.reference(x)
    naive = torch.tensor([[sum(float(x.a[i, t]) * float(x.b[j, t]) for t in range(16)) for j in range(8)]
                          for i in range(5)], dtype=torch.float64)
    torch.testing.assert_close(ref, naive)


def test_torch_baseline_passes_and_wrong_answers_fail():
    plan = registry.get_plan("torch_gemm_v1")
    rec, results = jobs.check_record(plan, GemmProblem.grid("smoke"), device="cpu", grid="smoke")
    assert rec["passed"] and rec["problem_kind"] == "gemm" and len(results) == 6
    p = GemmProblem(m=33, n=72, k=136)
    x = p.make_inputs()
    (c,) = plan.build(x).run(x)
    ref = p.reference(x)
    assert p.compare((c,), ref, inputs=x).passed
    off = p.compare((c + 1,), ref, inputs=x)
    assert not off.passed and re.match(r"c max abs error .* > 2 x torch.matmul's", off.reason)
    holes = c.clone()
    holes[3, 5] = float("nan")
    assert "NaN positions differ" in p.compare((holes,), ref, inputs=x).reason
    assert not p.compare((c,), ref).passed, "without the inputs there is no tolerance to apply"


def test_cli_speaks_gemm(capsys, tmp_path):
    args, kind = parse(["torch_gemm", "--m=4", "--n=8", "--k=16", "--dtype=fp16"])
    assert kind is GemmProblem and kind.from_cli(args) == [GemmProblem(m=4, n=8, k=16, dtype="fp16")]
    assert main(["torch_gemm", "--check", "--m=4", "--n=8", "--k=16", "--device=cpu", f"--records={tmp_path}"]) == 0
    assert "torch_gemm_v1: PASSED 2/2 cases on 1 problems" in capsys.readouterr().out
    assert main(["torch_gemm", "--b=4"]) == 2
    assert capsys.readouterr().err.strip() == "error: unrecognized arguments: --b=4"
    assert main(["torch_gemm", "--compare=torch_mla_decode"]) == 2
    assert "torch_mla_decode_v1 solves mla_decode, torch_gemm_v1 solves gemm" in capsys.readouterr().err
    assert main(["torch_gemm", "--check", "--n=12", "--m=1", "--k=8", "--device=cpu"]) == 2
    assert "n: expected a multiple of 8" in capsys.readouterr().err
