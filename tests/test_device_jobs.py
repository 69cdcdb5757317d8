"""The device jobs (scripts/device_jobs/) and the AOT build lister (scripts/aot_test_builds.py):
the scripts parse, a job refuses to start on a machine without the devkit's setup, and a test
file's `aot_builds()` lists builds its plans accept (so the cache made here is what the GPU
tests load)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mla_var3.runtime import registry

ROOT = Path(__file__).resolve().parents[1]
JOBS = sorted((ROOT / "scripts" / "device_jobs").glob("*.sh"))


@pytest.mark.parametrize("script", JOBS, ids=lambda p: p.name)
def test_job_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_a_job_without_the_devkit_setup_says_what_to_run_first(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "scripts/device_jobs/v54_first_run.sh")], cwd=ROOT,
                       capture_output=True, text=True,
                       env={**os.environ, "MLA_VAR3_COMMIT": "x", "MLA_VAR3_SITE_ENV": str(tmp_path / "none.sh")})
    assert r.returncode == 3 and "run the devkit's setup calls first" in r.stderr


def test_steps_are_logged_bounded_and_packed(tmp_path):
    """A job's steps: output to logs/NAME.log, a step past its seconds ends with 124, a step past
    the job's end is skipped, and pack returns the logs as one tarball in $OUT."""
    import tarfile
    site = tmp_path / "site_env.sh"
    site.write_text("export FAKE_SITE=1\n")
    job = tmp_path / "job.sh"
    job.write_text(f"""source {ROOT}/scripts/device_jobs/env.sh
step hello 10 echo hi from $FAKE_SITE
step slow 1 sleep 5; echo "slow rc=$?"
JOB_END=$SECONDS
step late 10 echo never; echo "late rc=$?"
pack t
""")
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(job)], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "MLA_VAR3_SITE_ENV": str(site), "MLA_VAR3_COMMIT": "abc", "OUT": str(out),
                            "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "slow rc=124" in r.stdout and "late: skipped" in r.stdout and "late rc=124" in r.stdout
    with tarfile.open(out / "t.tgz") as tar:
        names = tar.getnames()
        assert "./logs/hello.log" in names and "./logs/late.log" not in names
        assert tar.extractfile("./logs/hello.log").read().decode().strip() == "hi from 1"


def test_aot_test_builds_needs_a_cache_directory():
    env = {k: v for k, v in os.environ.items() if k != "MLA_VAR3_AOT_DIR"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts/aot_test_builds.py"), "tests/test_persistent_items.py"],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "set MLA_VAR3_AOT_DIR" in r.stderr


def test_the_persistent_item_tests_list_builds_their_plans_accept(monkeypatch):
    monkeypatch.setenv("MLA_VAR3_RUN_QUARANTINED", "1")
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import aot_test_builds
    module = aot_test_builds.load_test_module(ROOT / "tests" / "test_persistent_items.py")
    builds = list(module.aot_builds())
    assert {v for v, _, _ in builds} == {"flash_mla_decode_v54", "flash_mla_decode_v46"} and len(builds) == 25
    for version, problem, tiling in builds:
        plan = registry.get_plan(version)
        assert not plan.supports(problem)
        plan.check_tiling(tiling or plan.default_tiling(problem), problem, None)
