"""Sweeps on the CPU: problem sets, hydra composition, jobs, sharding, GPU pinning, merge, dry run."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mla_var3 import report, sweep
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import records, registry

CONF = sweep.conf_dir()
SETS = sorted(p.stem for p in (CONF / "problems").glob("*.yaml"))
REPO = Path(__file__).resolve().parents[1]
# SlurmQueueConf's fields in hydra-submitit-launcher 1.2 (checked against the plugin when installed)
SLURM_FIELDS = {"submitit_folder", "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
                "nodes", "name", "stderr_to_stdout", "_target_", "partition", "qos", "comment", "constraint",
                "exclude", "gres", "cpus_per_gpu", "gpus_per_task", "mem_per_gpu", "mem_per_cpu", "account",
                "signal_delay_s", "max_num_timeout", "additional_parameters", "array_parallelism", "setup"}


def plugin():
    try:
        from hydra_plugins.hydra_submitit_launcher import config
        return config
    except ImportError:
        return None


def cfg_of(*overrides, hydra_cfg=False):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("sweep", overrides=list(overrides), return_hydra_config=hydra_cfg)


def jobs_of(problems, kernels=("flash_mla_decode", "torch_mla_decode")):
    return sweep.expand_jobs({"problems": problems, "kernels": kernels if isinstance(kernels, str) else list(kernels)})


def test_problem_sets_are_there():
    assert {"check", "bench", "pages", "deepseek_v3_tp1", "deepseek_v3_tp8", "small"} <= set(SETS)


@pytest.mark.parametrize("name", SETS)
def test_every_problem_set_composes_and_validates(name):
    cfg = cfg_of(f"problems={name}")
    probs = sweep.load_problems(cfg.problems, mla.MlaDecodeProblem)
    assert probs and all(isinstance(p, mla.MlaDecodeProblem) for p in probs)
    assert len({p.key() for p in probs}) == len(probs)
    assert cfg.problems.source        # every set says where its shapes come from
    text = (CONF / "problems" / f"{name}.yaml").read_text()
    assert text.startswith("#")       # and documents them


@pytest.mark.parametrize("name", ["check", "bench", "pages"])
def test_named_grids_come_from_the_layer_not_a_copy(name):
    cfg = cfg_of(f"problems={name}")
    assert cfg.problems.grid == name and "list" not in cfg.problems and "product" not in cfg.problems
    assert [p.key() for p in sweep.load_problems(cfg.problems, mla.MlaDecodeProblem)] == [p.key() for p in mla.grid(name)]


@pytest.mark.parametrize("name, h_q", [("deepseek_v3_tp1", 128), ("deepseek_v3_tp8", 16)])
def test_deepseek_sets(name, h_q):
    probs = sweep.load_problems(cfg_of(f"problems={name}").problems, mla.MlaDecodeProblem)
    assert {p.h_q for p in probs} == {h_q}
    assert {p.b for p in probs} == {1, 8, 32, 64, 128} and {p.s_q for p in probs} == {1, 2}
    assert {p.seqlen for p in probs} == {4096, 8192, 16384, 32768} and len(probs) == 40
    assert "576" in (CONF / "problems" / f"{name}.yaml").read_text() and "128" in \
        (CONF / "problems" / f"{name}.yaml").read_text()


def test_a_problem_set_may_list_page_sizes():
    probs = sweep.load_problems({"product": {"b": 4, "seqlen": 100, "page_size": [16, 32, 64]},
                                 "list": [{"b": 2, "seqlens": [1, 17], "page_size": 16}]}, mla.MlaDecodeProblem)
    assert [p.page_size for p in probs] == [16, 32, 64, 16]
    jobs = sweep.expand_jobs({"problems": {"list": [{"b": 2, "seqlens": [1, 17], "page_size": 16}]},
                              "kernels": ["torch_mla_decode"]})
    assert mla.MlaDecodeProblem.from_dict(jobs[0]["problem"]).page_size == 16
    with pytest.raises(sweep.SweepError, match="page_size: expected one of 16, 32, 64"):
        sweep.load_problems({"list": [{"b": 2, "seqlen": 5, "page_size": 8}]}, mla.MlaDecodeProblem)


def test_small_set_is_a_dozen_quick_problems():
    probs = sweep.load_problems(cfg_of("problems=small").problems, mla.MlaDecodeProblem)
    assert len(probs) == 12 and max(p.b * p.seqlen for p in probs) <= 64 * 4096
    assert any(p.seqlens for p in probs) and any(p.varlen for p in probs) and {p.s_q for p in probs} == {1, 2}


@pytest.mark.parametrize("pset, match", [
    ({"grid": "nope"}, "unknown grid"),
    ({"list": [{"b": 1, "s_q": 1, "h_q": 16, "seqln": 4}]}, r"problems.list\[0\]: .*seqln"),
    ({"product": {"b": [1, 0], "h_q": 16}}, r"problems.product .*b: expected 1"),
    ({"lst": []}, "unknown keys"),
    ({}, "empty"),
])
def test_bad_problem_sets_say_where(pset, match):
    with pytest.raises((sweep.SweepError, mla.ProblemError), match=match):
        sweep.load_problems(pset, mla.MlaDecodeProblem)


def test_product_and_list_combine_without_duplicates():
    probs = sweep.load_problems({"product": {"b": [1, 2], "h_q": 16, "seqlen": 64},
                                 "list": [{"b": 1, "h_q": 16, "seqlen": 64}, {"b": 3, "seqlens": [1, 2, 3]}]},
                                mla.MlaDecodeProblem)
    assert [p.key() for p in probs] == ["b=1,s_q=1,h_q=16,seqlen=64", "b=2,s_q=1,h_q=16,seqlen=64",
                                        "b=3,s_q=1,h_q=64,seqlens=1,2,3"]


def test_jobs_are_problems_times_kernels_with_versions_resolved():
    jobs = jobs_of({"grid": "smoke"})
    newest = registry.resolve("flash_mla_decode").name
    assert [(j["index"], j["kernel"]) for j in jobs] == [(0, newest), (1, "torch_mla_decode_v1"),
                                                         (2, newest), (3, "torch_mla_decode_v1")]
    assert mla.MlaDecodeProblem.from_dict(jobs[0]["problem"]) == mla.grid("smoke")[0]
    assert jobs_of({"grid": "smoke"}, "flash_mla_decode, torch_mla_decode") == jobs
    with pytest.raises(registry.RegistryError, match="unknown kernel 'nope'"):
        jobs_of({"grid": "smoke"}, ["nope"])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 64])
def test_assign_deals_every_job_once_balanced_and_deterministic(n):
    jobs = jobs_of({"grid": "bench"})                   # 36 problems x 2 kernels
    hands = sweep.assign(jobs, n)
    assert len(hands) == n and sorted(j["index"] for h in hands for j in h) == list(range(len(jobs)))
    n_problems = [len({j["problem_key"] for j in h}) for h in hands]
    assert max(n_problems) - min(n_problems) <= 1
    for h in hands:                                     # a problem's kernels share one GPU, in order
        assert [j["index"] for j in h] == sorted(j["index"] for j in h)
        assert all(sum(j["problem_key"] == k for j in h) == 2 for k in {j["problem_key"] for j in h})
    assert sweep.assign(jobs, n) == hands == sweep.assign(list(jobs), n)
    with pytest.raises(sweep.SweepError):
        sweep.assign(jobs, 0)


def test_assign_does_not_alias_the_grid_structure():
    jobs = jobs_of(cfg_of("problems=deepseek_v3_tp1").problems, ["flash_mla_decode"])
    for h in sweep.assign(jobs, 4):                     # 4 seqlens, 4 workers: not one seqlen each
        assert len({j["problem"]["seqlen"] for j in h}) > 1


def test_shards_partition_the_jobs():
    jobs = jobs_of({"grid": "check"})
    shards = [sweep.shard(jobs, i, 4) for i in range(4)]
    assert sorted(j["index"] for s in shards for j in s) == list(range(len(jobs)))
    assert shards == sweep.assign(jobs, 4) and sweep.shard(jobs, 0, 1) == jobs
    for bad in ((4, 4), (-1, 4), (0, 0)):
        with pytest.raises(sweep.SweepError, match="0 <= shard < num_shards"):
            sweep.shard(jobs, *bad)


@pytest.mark.parametrize("env, n_gpus, n_workers, expect", [
    ({}, 4, 4, ["0", "1", "2", "3"]),
    ({}, 8, 2, ["0", "1"]),
    ({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4, 4, ["4", "5", "6", "7"]),
    ({"CUDA_VISIBLE_DEVICES": "GPU-aa, GPU-bb"}, 2, 2, ["GPU-aa", "GPU-bb"]),
])
def test_each_worker_is_pinned_to_its_own_gpu(env, n_gpus, n_workers, expect):
    envs = sweep.worker_envs(n_workers, n_gpus, {"PATH": "/bin", **env})
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == expect and all(e["PATH"] == "/bin" for e in envs)


def test_workers_setting():
    assert sweep.n_workers_for("auto", 8) == 8 and sweep.n_workers_for("auto", 0) == 1
    assert sweep.n_workers_for(2, 8) == 2
    with pytest.raises(sweep.SweepError, match="only 2 GPU"):
        sweep.worker_envs(3, 2, {})
    with pytest.raises(sweep.SweepError, match="workers: expected"):
        sweep.n_workers_for("many", 8)


def fake_record(kernel, problem, ts, t_us):
    plan = SimpleNamespace(name=f"{kernel}_v1", version=1, design=kernel, language="torch")
    rec = records.make_record("bench", plan, None, problem, time_us={"median": t_us, "min": t_us, "max": t_us, "n": 3},
                              tflops=1.0, gbps=2.0, pct_roofline=3.0, pct_datasheet=2.0, bound="memory",
                              flops=10, bytes=20)
    rec["timestamp"] = ts
    return rec


def write_lines(path, recs, tail=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs) + tail)


def test_merge_dedupes_orders_by_time_and_report_reads_it(tmp_path):
    p1, p2 = mla.MlaDecodeProblem(b=1, seqlen=64), mla.MlaDecodeProblem(b=2, seqlen=64)
    a = fake_record("k", p1, "2026-01-01T00:00:03+00:00", 5.0)
    b = fake_record("k", p2, "2026-01-01T00:00:01+00:00", 6.0)
    c = fake_record("j", p1, "2026-01-01T00:00:02+00:00", 7.0)
    old = fake_record("k", p1, "2025-12-31T00:00:00+00:00", 9.0)
    write_lines(tmp_path / "records.jsonl", [old])
    write_lines(tmp_path / "workers" / "shard-0-worker-0.jsonl", [a, b, a])
    write_lines(tmp_path / "workers" / "shard-1-worker-0.jsonl", [c, b], tail='{"kind": "bench", "tim')
    path = sweep.merge_records(tmp_path)
    assert path == tmp_path / "records.jsonl"
    merged = records.load(tmp_path)                     # what report --records DIR reads
    assert [r["time_us"]["median"] for r in merged] == [9.0, 6.0, 7.0, 5.0]
    for r in merged:
        records.validate_record(r)
    assert sweep.merge_records(tmp_path).read_text() == path.read_text()     # idempotent
    rows = report.bench_rows(merged)                    # the latest record per (problem, kernel)
    assert {(r["kernel"], r["time (us)"]) for r in rows} == {("k_v1", "5.0"), ("k_v1", "6.0"), ("j_v1", "7.0")}
    assert not list(tmp_path.glob("*.tmp"))


def test_merge_warns_about_each_bad_line_and_keeps_going(tmp_path, capsys):
    p = mla.MlaDecodeProblem(b=1, seqlen=64)
    a = fake_record("k", p, "2026-01-01T00:00:01+00:00", 5.0)
    b = fake_record("j", p, "2026-01-01T00:00:02+00:00", 6.0)
    c = fake_record("i", p, "2026-01-01T00:00:03+00:00", 7.0)
    write_lines(tmp_path / "records.jsonl", [a], tail="garbage\n")
    worker = tmp_path / "workers" / "shard-0-worker-0.jsonl"
    write_lines(worker, [b], tail='[1]\n{"kind": "bench", "tim')
    (tmp_path / "workers" / "shard-0-worker-1.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    write_lines(tmp_path / "workers" / "shard-0-worker-2.jsonl", [c])
    assert sweep.main(["merge", f"records={tmp_path}"]) == 0
    target = tmp_path / "records.jsonl"
    assert capsys.readouterr().err.splitlines() == [
        f"warning: records: {target}:2: not a JSON record, skipped",
        f"warning: merge: the 1 skipped line(s) of {target} are kept in {target}.skipped",
        f"warning: records: {worker}:2: not a JSON record (a JSON list, expected an object with 'kind' and "
        f"'kernel'), skipped",
        f"warning: records: {worker}:3: not a JSON record, skipped",
        f"warning: records: {tmp_path / 'workers' / 'shard-0-worker-1.jsonl'} is not a text file (expected JSON "
        f"lines, one record per line), skipped"]
    assert [r["kernel"] for r in records.load(tmp_path)] == ["k_v1", "j_v1", "i_v1"]
    assert (tmp_path / "records.jsonl.skipped").read_text() == "garbage\n"     # nothing lost


def test_merge_refuses_to_overwrite_a_records_file_that_is_not_text(tmp_path, capsys):
    (tmp_path / "records.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    write_lines(tmp_path / "workers" / "shard-0-worker-0.jsonl",
                [fake_record("k", mla.MlaDecodeProblem(), "2026-01-01T00:00:00+00:00", 1.0)])
    assert sweep.main(["merge", f"records={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"error: merge: records: {tmp_path / 'records.jsonl'} is not a text file (expected JSON lines, "
                   f"one record per line); move it out of {tmp_path} and merge again")
    assert (tmp_path / "records.jsonl").read_bytes().startswith(b"\x89PNG")


def test_merge_command_and_empty_dir(tmp_path, capsys):
    write_lines(tmp_path / "workers" / "shard-0-worker-1.jsonl",
                [fake_record("k", mla.MlaDecodeProblem(), "2026-01-01T00:00:00+00:00", 1.0)])
    assert sweep.main(["merge", f"records={tmp_path}"]) == 0
    assert "1 records" in capsys.readouterr().out
    assert report.main(["--records", str(tmp_path)]) == 0 and "k_v1" in capsys.readouterr().out
    assert sweep.main(["merge", f"records={tmp_path / 'none'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: merge: no records") and len(err.splitlines()) == 1


def test_default_config(tmp_path):
    cfg = cfg_of(hydra_cfg=True)
    assert cfg.problems.grid == "bench" and list(cfg.kernels) == ["flash_mla_decode", "ct_flash_mla_decode"]
    assert (cfg.records, cfg.rep_ms, cfg.seed, cfg.workers, cfg.shard, cfg.num_shards) == \
        ("runs/sweep", 100.0, 0, "auto", 0, 1)
    assert cfg.dry_run is False and cfg.autotune is False and cfg.merge is True
    assert cfg.hydra.job.chdir is False and cfg.hydra.run.dir.startswith("runs/sweep/hydra/")
    assert cfg.hydra.runtime.choices["hydra/launcher"] == "basic"     # plain runs need no plugin
    assert "launcher" not in cfg.hydra.runtime.choices or cfg.hydra.runtime.choices["launcher"] is None
    cfg = cfg_of("problems=deepseek_v3_tp1", "kernels=[torch_mla_decode]", f"records={tmp_path}")
    assert cfg.problems.product.h_q == [128] and len(sweep.expand_jobs(cfg)) == 40


def test_slurm_launcher_config():
    raw = OmegaConf.load(CONF / "launcher" / "slurm.yaml")
    assert {"override /hydra/launcher": "submitit_slurm"} in OmegaConf.to_container(raw.defaults)
    conf = plugin()
    if conf is not None:     # the [slurm] extra is installed: compose it for real
        cfg = cfg_of("launcher=slurm", hydra_cfg=True)
        assert cfg.hydra.runtime.choices["hydra/launcher"] == "submitit_slurm"
        assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
        assert SLURM_FIELDS == {f.name for f in dataclasses.fields(conf.SlurmQueueConf)}
        assert cfg.hydra.sweeper.params.shard == "range(0,4)"
        assert cfg_of("launcher=slurm", "num_shards=8", hydra_cfg=True).hydra.sweeper.params.shard == "range(0,8)"
        launcher, top = cfg.hydra.launcher, cfg
    else:                    # no plugin: the values alone, merged as hydra would merge them
        top = OmegaConf.merge(cfg_of(), {k: v for k, v in raw.items() if k not in ("defaults", "hydra")})
        launcher = raw.hydra.launcher
    assert set(launcher) <= SLURM_FIELDS
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.nodes) == (1, 1, 1)
    assert launcher.timeout_min >= 30 and launcher.array_parallelism >= 1 and "partition" in launcher
    assert top.num_shards == 4 and top.merge is False and top.shard == 0
    assert OmegaConf.to_container(raw.hydra.sweeper.params)["shard"] == "range(0,${num_shards})"
    assert (CONF / "hydra" / "launcher" / "README.md").is_file()
    assert not list((CONF / "hydra" / "launcher").glob("*.yaml"))   # never shadow the plugin


def test_slurm_launcher_instantiates():
    if plugin() is None:
        pytest.skip("hydra-submitit-launcher not installed (pip install -e '.[slurm]'): "
                    "only instantiating the plugin is skipped; its config is checked above")
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
    params = OmegaConf.to_container(cfg_of("launcher=slurm", hydra_cfg=True).hydra.launcher, resolve=False)
    launcher = SlurmLauncher(**{k: v for k, v in params.items() if k != "_target_"})
    assert launcher.params["gpus_per_node"] == 1 and launcher.params["array_parallelism"] == 8


def test_dry_run_lists_the_jobs_without_a_gpu(tmp_path, capsys):
    cfg = cfg_of("problems=small", "kernels=[flash_mla_decode]", f"records={tmp_path}", "dry_run=true", "workers=3")
    assert sweep.run(cfg) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("12 jobs (shard 0/1) over 3 worker(s)")
    assert len(out) == 13 and {ln.split()[3] for ln in out[1:]} == {"0", "1", "2"}
    assert not (tmp_path / "workers").exists()


def test_run_pins_one_worker_per_fake_gpu_then_merges(tmp_path, monkeypatch, capsys):
    from mla_var3.runtime import devices
    seen = {}

    def fake_workers(specs, envs):
        seen.update(specs=specs, envs=envs)
        for s in specs:                                 # what each worker would have written
            write_lines(Path(s["records_file"]), [fake_record("k", mla.MlaDecodeProblem.from_dict(j["problem"]),
                                                              f"2026-01-01T00:00:{j['index']:02d}+00:00", 1.0)
                                                  for j in s["jobs"]])
        return 0
    monkeypatch.setattr(devices, "cuda_available", lambda: True)
    monkeypatch.setattr(sweep, "_gpu_count", lambda: 4)
    monkeypatch.setattr(sweep, "run_workers", fake_workers)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    cfg = cfg_of("problems=small", "kernels=[flash_mla_decode,torch_mla_decode]", f"records={tmp_path}")
    assert sweep.run(cfg) == 0
    assert [e["CUDA_VISIBLE_DEVICES"] for e in seen["envs"]] == ["0", "1", "2", "3"]
    assert [s["worker"] for s in seen["specs"]] == [0, 1, 2, 3]
    assert {Path(s["records_file"]).name for s in seen["specs"]} == {f"shard-0-worker-{i}.jsonl" for i in range(4)}
    assert sorted(j["index"] for s in seen["specs"] for j in s["jobs"]) == list(range(24))
    merged = records.load(tmp_path / "records.jsonl")
    assert len(merged) == 24 and "merged into" in capsys.readouterr().out


def run_cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "mla_var3.sweep", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def main_in_process(monkeypatch, capsys, cwd, *args):
    """`python -m mla_var3.sweep ARGS` run from `cwd`, in this process: (exit status, stdout)."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["mla_var3.sweep"])
    try:
        rc = sweep.main(list(args))
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return SimpleNamespace(returncode=rc, stdout=out.out, stderr=out.err)


def test_cli_dry_run_relative_records_and_config_dir(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "myconf" / "problems"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("source: a test\nlist:\n  - {b: 3, s_q: 1, h_q: 16, seqlen: 100}\n")
    r = main_in_process(monkeypatch, capsys, tmp_path, "--config-dir", str(tmp_path / "myconf"), "problems=mine",
                        "kernels=[torch_mla_decode]", "records=rel/out", "dry_run=true")
    assert r.returncode == 0, r.stderr
    assert f"1 jobs (shard 0/1) over 1 worker(s); records: {tmp_path / 'rel' / 'out' / 'workers'}" in r.stdout
    assert "torch_mla_decode_v1" in r.stdout and "b=3,s_q=1,h_q=16,seqlen=100" in r.stdout
    assert (tmp_path / "rel" / "out" / "hydra").is_dir()   # hydra's own output beside the records


def test_cli_multirun_shards_as_the_slurm_config_sets_them(tmp_path, monkeypatch, capsys):
    # conf/launcher/slurm.yaml without its plugin override: the basic launcher runs the shards here
    raw = OmegaConf.load(CONF / "launcher" / "slurm.yaml")
    local = OmegaConf.create({k: v for k, v in raw.items() if k != "defaults"})
    local.hydra = {"sweeper": raw.hydra.sweeper}
    (tmp_path / "conf" / "launcher").mkdir(parents=True)
    (tmp_path / "conf" / "launcher" / "local.yaml").write_text("# @package _global_\n" + OmegaConf.to_yaml(local))
    r = main_in_process(monkeypatch, capsys, tmp_path, "--config-dir", str(tmp_path / "conf"), "-m", "launcher=local",
                        "num_shards=3", "problems=small", "kernels=[flash_mla_decode]", f"records={tmp_path}/r",
                        "dry_run=true")
    assert r.returncode == 0, r.stderr
    heads = [ln for ln in r.stdout.splitlines() if " jobs (shard " in ln]
    assert [h.split(" over")[0] for h in heads] == ["4 jobs (shard 0/3)", "4 jobs (shard 1/3)", "4 jobs (shard 2/3)"]
    assert len({ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("  job")}) == 12


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_cli_without_a_gpu_fails_in_one_line(tmp_path):
    r = run_cli("problems=small", "kernels=[flash_mla_decode]", f"records={tmp_path}", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "needs a GPU" in err, err
    assert "dry_run=true lists its 12 jobs" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")
def test_worker_processes_get_their_gpu_and_report_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "tqdm", None)            # the GPU machine's devkit has no tqdm
    jobs = jobs_of({"grid": "smoke"}, ["torch_mla_decode"])
    specs = []
    for i, wjobs in enumerate(sweep.assign(jobs, 2)):
        out, fail = sweep.worker_paths(tmp_path, 0, i)
        out.parent.mkdir(parents=True, exist_ok=True)
        specs.append({"jobs": wjobs, "records_file": str(out), "failures_file": str(fail), "shard": 0,
                      "worker": i, "seed": 0, "rep_ms": 10.0, "autotune": False})
    envs = sweep.worker_envs(2, 2, {**os.environ, "PYTHONPATH": str(REPO / "src"), "CUDA_VISIBLE_DEVICES": "6,7"})
    assert sweep.run_workers(specs, envs) == 1          # no GPU here: each worker says so
    for i in range(2):
        log = (tmp_path / "workers" / f"shard-0-worker-{i}.log").read_text()
        assert log.strip().startswith("error: no CUDA GPU"), log


def test_slurm_without_its_plugin_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hydra_plugins.hydra_submitit_launcher", None)    # as if not installed
    assert sweep.main(["launcher=slurm", "dry_run=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: launcher=slurm needs hydra-submitit-launcher: pip install -e '.[slurm]'"


@pytest.mark.parametrize("have_tqdm", [True, False])
def test_worker_benchmarks_records_and_survives_a_failed_job(tmp_path, monkeypatch, capsys, have_tqdm):
    from dataclasses import replace

    from mla_var3.runtime import bench, devices
    h200 = replace(devices.load_devices()["H200"], name="NVIDIA H200")

    def fake_bench(entries, problem, device, *, seed=0, rep_ms=100.0, replays=10):
        if problem.s_q == 2:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        return [{"tiling_obj": None, "time_us": {"median": 2.0, "min": 1.0, "max": 3.0, "n": 5}, "tflops": 1.0,
                 "gbps": 2.0, "pct_roofline": 3.0, "pct_datasheet": 2.5, "bound": "memory", "flops": 1, "bytes": 2}
                for _ in entries]
    monkeypatch.setattr(devices, "current_device", lambda: h200)
    monkeypatch.setattr(bench, "bench_plans", fake_bench)
    if not have_tqdm:
        monkeypatch.setattr(sweep, "tqdm", None)
    out, fail = sweep.worker_paths(tmp_path, 1, 2)
    jobs = jobs_of({"grid": "smoke"}, ["torch_mla_decode"])          # s_q 1, then s_q 2 (fails)
    spec = {"jobs": jobs, "records_file": str(out), "failures_file": str(fail), "shard": 1, "worker": 2,
            "seed": 0, "rep_ms": 10.0, "autotune": False}
    assert sweep.run_jobs(spec, progress=have_tqdm) == 1
    (rec,) = records.load(out)
    records.validate_record(rec)
    assert rec["kernel"] == "torch_mla_decode_v1" and rec["problem_key"] == jobs[0]["problem_key"]
    assert rec["sweep"] == {"job": 0, "shard": 1, "worker": 2} and "tiling_obj" not in rec
    (bad,) = records.load(fail)
    assert bad["index"] == 1 and bad["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    captured = capsys.readouterr()
    assert "[1/2] torch_mla_decode_v1" in captured.out and "[2/2] FAILED" in captured.err
