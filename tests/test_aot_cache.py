"""The on-disk AOT compile cache (runtime/aot_cache.py, opt-in with MLA_VAR3_AOT_DIR): a compile
stores its TVM-FFI function as an object file, a later compile of the same key (here: after the
in-memory cache is cleared, as in a new process) loads it instead of compiling; edits, dump
builds and broken entries never serve a stale or foreign kernel. Runs on the CPU (sm_90a)."""
import pytest
import torch

import tiny_kernels
from mla_var3.runtime import aot_cache, cute_kernel
from mla_var3.runtime.cute_kernel import CuteKernel


def _stage(alpha=7.0, options=cute_kernel.DEFAULT_OPTIONS):
    build, fake_args, launch_args = tiny_kernels.cute_axpy_parts(alpha)
    return CuteKernel(kernel=f"aot_axpy_{alpha}", build=build, fake_args=fake_args, launch_args=launch_args,
                      dtypes=(torch.float32,), static=(alpha,), options=options)


@pytest.fixture
def aot_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(aot_cache.AOT_ENV, str(tmp_path))
    cute_kernel.clear_cache()
    aot_cache.LOADED.clear()
    yield tmp_path
    cute_kernel.clear_cache()


def test_a_compile_is_stored_and_a_later_one_loads_it(aot_dir):
    k = _stage()
    k.compile()
    objs = list(aot_dir.glob("aot_axpy_7_0-main-*.o"))
    assert len(objs) == 1 and objs[0].with_suffix(".json").is_file()
    compiles = len(cute_kernel.COMPILE_LOG)
    cute_kernel.clear_cache()                      # a new process: only the disk is left
    fn = _stage().compile()
    assert aot_cache.LOADED == [k.key] and len(cute_kernel.COMPILE_LOG) == compiles
    assert isinstance(fn, aot_cache.FilledCall) and type(fn.fn).__module__.startswith("tvm_ffi")
    # the exported function wants `probe` too; called as the launch calls it (x, y), it gets past
    # the arity check and stops only at the device check (CPU tensors here)
    with pytest.raises(TypeError, match="Expects 3 parameters"):
        fn.fn(torch.randn(8), torch.randn(8))
    with pytest.raises(ValueError, match="expected device_type=cuda"):
        fn(torch.randn(8), torch.randn(8))


def test_several_directories_are_searched_in_turn_and_new_entries_go_to_the_first(aot_dir, tmp_path_factory,
                                                                                  monkeypatch):
    other = tmp_path_factory.mktemp("other_cache")
    monkeypatch.setenv(aot_cache.AOT_ENV, str(other))
    k = _stage(alpha=5.0)
    k.compile()                                    # stored in `other`
    assert len(list(other.glob("*.o"))) == 1
    fresh = tmp_path_factory.mktemp("fresh_cache")
    monkeypatch.setenv(aot_cache.AOT_ENV, f"{fresh}:{other}")
    assert aot_cache.directories() == [fresh, other] and aot_cache.directory() == fresh
    cute_kernel.clear_cache()
    compiles = len(cute_kernel.COMPILE_LOG)
    _stage(alpha=5.0).compile()                    # found in the second directory
    assert aot_cache.LOADED == [k.key] and len(cute_kernel.COMPILE_LOG) == compiles
    _stage(alpha=6.0).compile()                    # a miss everywhere: compiled, stored in the first
    assert len(list(fresh.glob("*.o"))) == 1 and len(list(other.glob("*.o"))) == 1


def test_an_edit_of_the_kernel_source_is_a_miss(aot_dir, monkeypatch):
    _stage().compile()
    cute_kernel.clear_cache()
    monkeypatch.setattr(aot_cache, "source_digest", lambda obj: "edited")
    compiles = len(cute_kernel.COMPILE_LOG)
    _stage().compile()
    assert aot_cache.LOADED == [] and len(cute_kernel.COMPILE_LOG) == compiles + 1
    assert len(list(aot_dir.glob("*.o"))) == 2


def test_dump_builds_and_unset_cache_never_touch_it(aot_dir, tmp_path_factory, monkeypatch):
    dump = tmp_path_factory.mktemp("dump")
    _stage(alpha=8.0, options=f"--enable-tvm-ffi --keep-ptx --dump-dir={dump}").compile()
    assert list(aot_dir.glob("*.o")) == []
    monkeypatch.delenv(aot_cache.AOT_ENV)
    assert aot_cache.directory() is None and not aot_cache.usable(_stage().key)


def test_a_broken_entry_is_ignored_with_a_message(aot_dir, capsys):
    k = _stage(alpha=9.0)
    k.compile()
    path, _ = aot_cache.entry(k.key, k.build())
    path.write_bytes(b"not an object file")
    cute_kernel.clear_cache()
    compiles = len(cute_kernel.COMPILE_LOG)
    assert _stage(alpha=9.0).compile() is not None
    assert len(cute_kernel.COMPILE_LOG) == compiles + 1 and aot_cache.LOADED == []
    assert "did not load" in capsys.readouterr().err


def test_compile_only_with_the_cache_builds_what_a_check_would(monkeypatch, tmp_path):
    """Two problems of one static shape whose default split lengths differ are two builds."""
    from mla_var3.cli.kernel import compile_problems, compile_shapes
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime import registry
    plan = registry.get_plan("flash_mla_decode_v4")
    probs = [MlaDecodeProblem(b=2, seqlen=64), MlaDecodeProblem(b=2, seqlen=20000), MlaDecodeProblem(b=2, seqlen=65)]
    assert len({plan.default_tiling(p).key() for p in probs}) == 2
    assert len(compile_shapes(probs)) == 1 and len(compile_problems(plan, probs)) == 2


def test_a_loaded_entry_gets_the_trailing_defaults_the_exported_function_requires():
    """Found on the H200: the exported function lists `timeline=None` as a parameter and refused
    the launch's 9 arguments ("Expects 10 parameters"); a loaded entry appends the defaults."""
    class Kern:
        def __call__(self, a, b, stream, timeline=None, flag=0):
            pass
    obj = Kern()
    assert aot_cache.trailing_defaults(obj, ("A", "B", "S")) == (None, 0)
    assert aot_cache.trailing_defaults(obj, ("A", "B", "S", "T", 1)) == ()
    seen = []
    aot_cache.FilledCall(lambda *a: seen.append(a), (None, 0))("a", "b")
    assert seen == [("a", "b", None, 0)]

    class NoDefault:
        def __call__(self, a, b, stream, must):
            pass
    assert aot_cache.trailing_defaults(NoDefault(), ("A", "B", "S")) == ()


@pytest.mark.gpu
def test_a_loaded_entry_runs_like_the_compiled_kernel(aot_dir):
    """The point of the cache: a function loaded from disk launches on the GPU, on the caller's
    stream, with the same result as a fresh compile - here on a side stream, so a launch that
    ignored the current stream would be caught by the check before the sync."""
    k = _stage(alpha=3.0)
    k.compile()                                   # stored
    cute_kernel.clear_cache()
    x = torch.randn(100_000, device="cuda")
    y = torch.randn(100_000, device="cuda")
    expect = 3.0 * x + y
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        _stage(alpha=3.0).launch(x, y)            # loaded, not compiled
        done = y.clone()                          # ordered after the launch on the same stream
    torch.cuda.synchronize()
    assert aot_cache.LOADED == [k.key]
    torch.testing.assert_close(done, expect)


def test_compile_only_with_the_cache_also_builds_the_committed_winners():
    """A run on the H200 builds flash_mla_decode_v32's committed winner at b=128 h_q=128 1024 (it
    differs from the default); --compile-only with the cache, made without a GPU, builds both."""
    from mla_var3.cli.kernel import with_tuned_winners
    from mla_var3.layers.mla.decode import MlaDecodeProblem
    from mla_var3.runtime import autotune, registry
    plan = registry.get_plan("flash_mla_decode_v32")
    problem = MlaDecodeProblem(b=128, s_q=1, h_q=128, seqlen=1024)
    winner = autotune.lookup(plan, problem, "NVIDIA H200")
    assert winner is not None and winner.key() != plan.default_tiling(problem).key()
    assert list(with_tuned_winners(plan, [problem])) == [(problem, None), (problem, winner)]
