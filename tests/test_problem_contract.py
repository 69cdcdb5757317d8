"""The problem contract: a toy kind defined here runs through the CLI's own check code on the CPU,
runtime/ imports no layer, and no module of the package imports itself through a circle."""
import ast
from pathlib import Path

import pytest

import toy_layer
from mla_var3 import jobs
from mla_var3.errors import PlanError
from mla_var3.layers.mla.decode import MlaDecodeProblem

SRC = Path(__file__).resolve().parents[1] / "src" / "mla_var3"


def test_a_toy_problem_kind_checks_through_the_same_code_as_mla():
    plan, kind = toy_layer.TorchVectorAdd(), toy_layer.VectorAddProblem
    rec, results = jobs.check_record(plan, kind.grid("check"), device="cpu", grid="check")
    assert rec["passed"] and rec["problem_kind"] == "toy_vector_add" and rec["kernel"] == "toy_vector_add_v1"
    assert [(r.problem_key, r.seed, r.status) for r in results] == [
        ("n=1", 0, "pass"), ("n=1", 1, "pass"), ("n=1000", 0, "pass"), ("n=1000", 1, "pass")]


def test_a_kernel_that_writes_nothing_fails():
    rec, results = jobs.check_record(toy_layer.WritesNothing(), [toy_layer.VectorAddProblem(n=8)], device="cpu")
    assert not rec["passed"] and "NaN positions differ" in results[0].reason


def test_unsupported_problems_are_skipped_with_the_reason():
    plan = toy_layer.SkipsOddVectorAdd()
    rec, results = jobs.check_record(plan, toy_layer.VectorAddProblem.grid("check"), device="cpu", grid="check")
    assert rec["passed"] and rec["errors"] == {"failed": 0, "skipped": 1, "total": 3}
    assert results[0].status == "skip" and results[0].reason == "n must be even"
    with pytest.raises(PlanError, match="does not support n=1: n must be even"):
        plan.build(toy_layer.VectorAddProblem(n=1).make_inputs())


def test_a_plan_refuses_another_kinds_problem():
    plan = toy_layer.TorchVectorAdd()
    assert plan.supports(MlaDecodeProblem(b=1, seqlen=1)) == ["toy_vector_add_v1 solves toy_vector_add, not mla_decode"]


def test_runtime_kernels_run_every_stage_in_order_with_one_workspace():
    from mla_var3.runtime.runtime_kernel import RuntimeKernel
    from mla_var3.runtime.torch_kernel import TorchKernel
    plan, seen = toy_layer.TorchVectorAdd(), []
    stages = [TorchKernel(lambda x, o, ws, n=n: seen.append((n, id(ws))), name=n) for n in ("schedule", "split", "combine")]
    kern = RuntimeKernel(plan, plan.Tiling(), stages, workspace=lambda x: {"partial": x.x.new_zeros(4)})
    inputs = toy_layer.VectorAddProblem(n=4).make_inputs()
    ws = kern.prepare(inputs)
    assert ws.nbytes() == 16
    kern.launch(inputs, (inputs.x,), ws)
    assert [n for n, _ in seen] == ["schedule", "split", "combine"] and len({w for _, w in seen}) == 1
    with pytest.raises(PlanError, match="unique"):
        RuntimeKernel(plan, plan.Tiling(), [TorchKernel(print), TorchKernel(print)])
    with pytest.raises(PlanError, match="at least one stage"):
        RuntimeKernel(plan, plan.Tiling(), [])


def _imports(path: Path) -> set[str]:
    """Every mla_var3 module `path` imports, at module level or inside functions."""
    mod = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
    known = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
             for p in SRC.rglob("*.py")}
    return {m for m in out if m in known and m.startswith("mla_var3")} - {mod.removesuffix(".__init__")}


def _graph() -> dict[str, set[str]]:
    return {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): _imports(p)
            for p in SRC.rglob("*.py")}


def test_runtime_imports_no_layer():
    bad = {m: sorted(i for i in deps if i.startswith("mla_var3.layers"))
           for m, deps in _graph().items() if m.startswith("mla_var3.runtime")}
    assert not {m: d for m, d in bad.items() if d}


def test_report_plots_and_runtime_never_import_the_cli():
    g = _graph()
    users = [m for m, deps in g.items() if any(d.startswith("mla_var3.cli") for d in deps)
             and not m.startswith(("mla_var3.cli", "mla_var3.kernel", "mla_var3.__main__"))]
    assert users == []


def test_no_import_circle():
    g = _graph()
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(g.get(m, ())):
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d, stack + [d])
        state[m] = "done"
    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, cycles
