#!/usr/bin/env bash
# The whole GPU suite (scripts/gpu_suite.sh's groups) at one commit, in four calls, each group's
# compiles spread over pytest-xdist processes (installed on the H200; rest-c ran in 70 s with -n 8
# in session 27 where a serial run of its compiles takes several minutes). Tests that time kernels
# (the interleaved A/A compare, bench, autotune) run alone, after the parallel part, so no other
# process shares the GPU while they time. PART:
#   core    mla-cute for the version in service (flash_mla_decode_v46), ops, then the timed tests
#   others  mla-other without its timed tests (cuTile, PyTorch and FlashMLA against the reference)
#   fuzz    four seeded GPU fuzz streams of 50 side by side, then gemm
#   rest    rest-a, rest-b, rest-c (other versions' mechanism tests)
# Quarantined versions are skipped (MLA_VAR3_RUN_QUARANTINED=0), as in the suite's own groups.
# Session 28 (JOBS=16, commit e2e63ca, no AOT cache): core 242 s, others 68 s, rest 236 s, fuzz 198 s of
# device time, 664 passed, 0 failed: the whole suite fits one session's device time with room to spare.
#   run("bash .devkit/nvvm/setup.sh", carry=[".devkit/nvvm"])   (cuTile: after the four devkit setups)
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/gpu_suite_all.sh core", carry=[".flashmla", ".aot_tests"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
export MLA_VAR3_RUN_QUARANTINED=0
part=${1:?usage: gpu_suite_all.sh core|others|fuzz|rest}
JOBS=${JOBS:-12}
TIMED="timed_interleaved or bench or autotune"
trap "pack gpu_suite_$part" EXIT
suite() {   # suite GROUP SECS [extra PYTEST_ADDOPTS]: one group of scripts/gpu_suite.sh, logs into $W/logs
    local group=$1 secs=$2; shift 2
    PYTEST_ADDOPTS="$*" TIMEOUT=$secs step "$group" $((secs + 10)) bash scripts/gpu_suite.sh "$group" "$W/logs"
}
case "$part" in
  core)
    ONLY="flash_mla_decode_v46 and not ($TIMED)" suite mla-cute 300 -n "$JOBS"
    suite ops 120 -n 4
    step timed 120 python -m pytest -m gpu -q -p no:cacheprovider -rfs tests/test_kernels_gpu.py -k "$TIMED" ;;
  others)
    ONLY="not ($TIMED)" suite mla-other 520 -n "$JOBS" ;;
  fuzz)
    for s in 1 2 3 4; do
        MLA_VAR3_FUZZ_SEED=$s MLA_VAR3_FUZZ_EXAMPLES=50 timeout 330 python -m pytest -m gpu -q -p no:cacheprovider \
            tests/test_fuzz.py > "$W/logs/fuzz_seed$s.log" 2>&1 &
    done
    wait
    for s in 1 2 3 4; do echo "fuzz seed $s: $(tail -1 "$W/logs/fuzz_seed$s.log")"; done
    suite gemm 180 -n 8 ;;
  rest)
    for g in rest-a rest-b rest-c; do suite "$g" 170 -n "$JOBS"; done ;;
  *) echo "error: gpu_suite_all.sh: unknown part '$part' (core, others, fuzz, rest)" >&2; exit 2 ;;
esac
