#!/usr/bin/env bash
# flash_mla_decode_v57's first run: its GPU tests (tests/test_short_rowmax.py, stop at the first
# failure); only if they pass, the 21 cells of v56's run (the 18 with s_q * h_q >= 128 and the three
# one-row-block varlen 4096 ones) beside v46 and live FlashMLA (balanced order), the 18 compute-bound
# cells again with rowmax="fold" (the scale move alone) beside v46, ncu's source counters beside v46
# at s_q=2 h_q=128 4096 varlen (the row-max lines' samples and stall reasons), then --check on the
# check grid. Carry .aot_tests57 (scripts/aot_test_builds.py tests/test_short_rowmax.py), .aot_v57
# (v57's --compile-only of those cells in both modes and of the check grid, v46's builds of the 21
# cells) and .flashmla. JOB_SECONDS bounds the whole job (set it below the device time left).
#   run("MLA_VAR3_COMMIT=<hash> JOB_SECONDS=<s> bash scripts/device_jobs/v57_first_run.sh",
#       carry=[".aot_tests57", ".aot_v57", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
trap 'pack v57_first_run' EXIT
step v57_tests 150 python -m pytest -x -q -m gpu tests/test_short_rowmax.py || exit 1
step v57_bench 190 python -m mla_var3.kernel flash_mla_decode_v57 --grid=bench \
    --where "s_q * h_q >= 128 or (varlen and seqlen == 4096)" \
    --compare=flash_mla_decode_v46,flashmla_decode --replays 10 --records="$W/records" || exit 1
step v57_fold_bench 120 python -m mla_var3.kernel flash_mla_decode_v57 --grid=bench --where "s_q * h_q >= 128" \
    --tiling +rowmax=fold --compare=flash_mla_decode_v46 --replays 10 --records="$W/records"
step ncu_source 100 python -m mla_var3.kernel flash_mla_decode_v57 --prof_type=ncu --ncu-set=source --lineinfo \
    --compare=flash_mla_decode_v46 --b=128 --s_q=2 --h_q=128 --seqlen=4096 --varlen \
    --records="$W/records" --tool-log="$W/logs/ncu_source_raw.log"
step v57_check 120 python -m mla_var3.kernel flash_mla_decode_v57 --check --records="$W/records"
