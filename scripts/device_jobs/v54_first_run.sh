#!/usr/bin/env bash
# flash_mla_decode_v54's first run: its GPU tests (tests/test_persistent_items.py, stop at the
# first failure); only if they pass, the bench cells its persistent default covers, beside v46 and
# live FlashMLA, then --check on the check grid, then compute-sanitizer on items walked in turn.
# Carry .aot_tests (scripts/aot_test_builds.py tests/test_persistent_items.py), .aot_v54 (v54's and
# v46's --compile-only of those grids) and .flashmla.
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/v54_first_run.sh", carry=[".aot_tests", ".aot_v54", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
trap 'pack v54_first_run' EXIT
step v54_tests 200 python -m pytest -x -q -m gpu tests/test_persistent_items.py || exit 1
step v54_bench 240 python -m mla_var3.kernel flash_mla_decode_v54 --grid=bench \
    --where "s_q * h_q >= 128 or (varlen and seqlen == 4096)" \
    --compare=flash_mla_decode_v46,flashmla_decode --replays 10 --records="$W/records" || exit 1
step v54_check 120 python -m mla_var3.kernel flash_mla_decode_v54 --check --records="$W/records"
# memcheck + racecheck where one CTA column walks keyless, one-key, multi-split and tail items in turn
step v54_sanitize 150 python -m mla_var3.kernel flash_mla_decode_v54 --prof_type=sanitize --racecheck-detail \
    --s_q=1 --h_q=16 --seqlens=0,0,17,1000,4097,64 --tiling +persistent_ctas=1,multicast_kv=False,chunk=3 \
    --records="$W/records" --tool-log="$W/logs/sanitize_raw.log"
