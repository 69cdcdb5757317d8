"""Fuzzing MLA decode: random problems against the float32 reference.

CPU: the reference itself against a naive per-token float64 loop on small random problems.
GPU: at least 200 random problems (lengths 0..20000 with 1 and exact page multiples favoured,
s_q 1..4, h_q in {8, 16, 32, 64, 128}, b 1..132, page size 16/32/64) for the newest version of
every CuTe DSL, cuTile and PyTorch design, each through the same check code as `--check` (what a
plan declares unsupported, e.g. a page size, is skipped with its reason).
MLA_VAR3_FUZZ_EXAMPLES overrides the count. MLA_VAR3_FUZZ_SEED=k draws from hypothesis seed k instead of
the derandomized stream, so n processes with seeds 1..n and n-th of the count each run n disjoint
random streams side by side (the device's CPU cores compile the kernels of each drawn shape).
"""
import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from mla_var3.layers.mla import decode as mla
from test_mla_layer import assert_reference_matches_naive

LENGTHS = st.one_of(st.sampled_from([0, 1, 15, 16, 17, 32, 63, 64, 65, 128, 4096, 20000]), st.integers(0, 20000))
PAGE_SIZES = st.sampled_from(mla.PAGE_SIZES)
FUZZ_SEED = os.environ.get("MLA_VAR3_FUZZ_SEED")


def _seeded(test):
    """hypothesis seed MLA_VAR3_FUZZ_SEED when it is set (then not derandomized), else unchanged."""
    return seed(int(FUZZ_SEED))(test) if FUZZ_SEED else test


@st.composite
def small_problems(draw):
    b = draw(st.integers(1, 3))
    s_q = draw(st.integers(1, 4))
    lens = tuple(draw(st.lists(st.one_of(st.sampled_from([0, 1, 16, 32, 64, 128]), st.integers(0, 150)),
                               min_size=b, max_size=b)))
    return mla.MlaDecodeProblem(b=b, s_q=s_q, h_q=draw(st.sampled_from([1, 2, 3])), seqlens=lens,
                                page_size=draw(PAGE_SIZES))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_problems(), seed=st.integers(0, 1000))
def test_reference_matches_naive_loop_on_random_problems(problem, seed):
    assert_reference_matches_naive(problem.make_inputs(seed=seed))


@st.composite
def decode_problems(draw):
    b = draw(st.integers(1, 132))
    lens = tuple(draw(st.lists(LENGTHS, min_size=b, max_size=b)))
    return mla.MlaDecodeProblem(b=b, s_q=draw(st.integers(1, 4)), h_q=draw(st.sampled_from([8, 16, 32, 64, 128])),
                                seqlens=lens, page_size=draw(PAGE_SIZES))


def _newest_plans():
    from mla_var3.runtime import registry
    plans = [e.load() for e in registry.newest_entries() if e.language in ("cute-dsl", "cutile", "torch")]
    return [p for p in plans if p.problem_kind is mla.MlaDecodeProblem]


@pytest.mark.gpu
@_seeded
@settings(max_examples=int(os.environ.get("MLA_VAR3_FUZZ_EXAMPLES", "200")), deadline=None, derandomize=FUZZ_SEED is None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=decode_problems(), seed=st.integers(0, 1 << 20))
def test_newest_versions_match_reference_on_random_problems(problem, seed):
    from mla_var3.runtime import check, devices
    here = devices.current_device()
    failed = []
    for plan in _newest_plans():
        if not devices.arch_supported(plan.arch, here.arch):
            continue
        for r in check.check_plan(plan, [problem], seeds=(seed,), extra_seeds=(), device="cuda"):
            if r.status == "fail":
                failed.append(f"{plan.name} {r.problem_key} seed={seed}: {r.reason}")
    assert not failed, "\n".join(failed)
