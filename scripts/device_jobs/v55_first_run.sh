#!/usr/bin/env bash
# flash_mla_decode_v55's first run: its GPU tests (tests/test_counter_items.py, stop at the first
# failure); only if they pass, v54's 21 cells beside v54, v46 and live FlashMLA (balanced order),
# --check on the check grid, compute-sanitizer with one column taking every item from the counter,
# then ncu's detail beside v54 at s_q=2 h_q=128 4096 varlen (the least busy SM, the prediction's
# number). Carry .aot_tests55 (scripts/aot_test_builds.py tests/test_counter_items.py), .aot_v55
# (v55's, v54's and v46's --compile-only of those cells, v55's check grid and sanitizer shape; 22 MiB)
# and .flashmla.
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/v55_first_run.sh",
#       carry=[".aot_tests55", ".aot_v55", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
trap 'pack v55_first_run' EXIT
step v55_tests 150 python -m pytest -x -q -m gpu tests/test_counter_items.py || exit 1
step v55_bench 200 python -m mla_var3.kernel flash_mla_decode_v55 --grid=bench \
    --where "s_q * h_q >= 128 or (varlen and seqlen == 4096)" \
    --compare=flash_mla_decode_v54,flash_mla_decode_v46,flashmla_decode --replays 10 --records="$W/records" || exit 1
step v55_check 110 python -m mla_var3.kernel flash_mla_decode_v55 --check --records="$W/records"
step v55_sanitize 60 python -m mla_var3.kernel flash_mla_decode_v55 --prof_type=sanitize --racecheck-detail \
    --s_q=1 --h_q=16 --seqlens=0,0,17,1000,4097,64 --tiling +persistent_ctas=1,multicast_kv=False,chunk=3 \
    --records="$W/records" --tool-log="$W/logs/sanitize_raw.log"
step ncu_s2_h128_4096_varlen 60 python -m mla_var3.kernel flash_mla_decode_v55 --prof_type=ncu --ncu-set=detail \
    --compare=flash_mla_decode_v54 --b=128 --s_q=2 --h_q=128 --seqlen=4096 --varlen \
    --records="$W/records" --tool-log="$W/logs/ncu_raw.log"
