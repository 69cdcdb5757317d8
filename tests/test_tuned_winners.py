"""The committed autotune winners (src/mla_var3/conf/tuned/<gpu>.json) stay true to the code: each
key names a registered version whose sources hash as when it was tuned (an edit to the version
retires its winners), a problem that parses, and a tiling the version accepts for that problem;
and a benchmark of a tuned problem picks the winner up."""
import json
from importlib import resources

import pytest

from mla_var3.runtime import autotune, registry

TUNED = resources.files("mla_var3.conf").joinpath("tuned")
FILES = sorted(p for p in TUNED.iterdir() if p.name.endswith(".json"))
ENTRIES = [(f.name, key, hit) for f in FILES for key, hit in json.loads(f.read_text()).items()]


def test_there_are_committed_winners():
    assert FILES and ENTRIES, "conf/tuned/ holds no winners"


@pytest.mark.parametrize("name, key, hit", ENTRIES, ids=[k for _, k, _ in ENTRIES])
def test_each_winner_matches_its_version_sources_and_validates(name, key, hit):
    version, digest, problem_key, gpu, dsl = key.split("|")
    assert name == f"{gpu.replace(' ', '_')}.json"
    plan = registry.get_plan(version)
    assert autotune.source_hash(plan) == digest, (
        f"{version} changed since it was tuned: re-tune it or drop its winners from conf/tuned/{name}")
    assert dsl == autotune.dsl_version(plan), (
        f"{version} was tuned with {dsl}; this checkout runs {autotune.dsl_version(plan)} (pyproject pins it)")
    tiling = plan.Tiling(**hit["tiling"])
    problems = [p for p in _grid_problems(plan) if p.key() == problem_key]
    assert problems, f"{problem_key} is in no grid of {plan.problem_kind.kind}"
    assert tiling.validate(problems[0], None) == []
    assert hit["time_us"] > 0


def _grid_problems(plan):
    kind = plan.problem_kind
    return [p for g in kind.grids for p in kind.grid(g)]


@pytest.mark.parametrize("name, key, hit", ENTRIES, ids=[k for _, k, _ in ENTRIES])
def test_a_benchmark_of_a_tuned_problem_runs_the_winner(name, key, hit, monkeypatch, tmp_path):
    from types import SimpleNamespace

    from mla_var3 import jobs
    monkeypatch.setenv("MLA_VAR3_CACHE", str(tmp_path))          # no user cache in the way
    version, _, problem_key, gpu, _ = key.split("|")
    plan = registry.get_plan(version)
    problem = next(p for p in _grid_problems(plan) if p.key() == problem_key)
    assert jobs.choose_tiling(plan, problem, SimpleNamespace(name=gpu)) == plan.Tiling(**hit["tiling"])
