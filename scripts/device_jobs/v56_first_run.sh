#!/usr/bin/env bash
# flash_mla_decode_v56's first run: its GPU tests (tests/test_pair_claims.py, stop at the first
# failure); only if they pass, v54's 21 cells beside v55 (each CTA claims from its own counter), v46
# and live FlashMLA (balanced order), --check on the check grid, compute-sanitizer on a pair taking
# every item from rank 0's claims, then ncu's detail beside v54 (whose dealing kept the pair in
# step) at s_q=2 h_q=128 4096 varlen and beside v55 at s_q=1 h_q=128 8192 varlen (v55's largest
# loss): L2 read sectors, clocks, the least busy SM. Carry .aot_tests56 (scripts/aot_test_builds.py
# tests/test_pair_claims.py), .aot_v56 (v56's and v55's --compile-only of those cells, v46's, v54's
# one cell, v56's check grid and sanitizer shape) and .flashmla. JOB_SECONDS bounds the whole job
# (set it below the device time left).
#   run("MLA_VAR3_COMMIT=<hash> JOB_SECONDS=<s> bash scripts/device_jobs/v56_first_run.sh",
#       carry=[".aot_tests56", ".aot_v56", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
trap 'pack v56_first_run' EXIT
step v56_tests 120 python -m pytest -x -q -m gpu tests/test_pair_claims.py || exit 1
step v56_bench 170 python -m mla_var3.kernel flash_mla_decode_v56 --grid=bench \
    --where "s_q * h_q >= 128 or (varlen and seqlen == 4096)" \
    --compare=flash_mla_decode_v55,flash_mla_decode_v46,flashmla_decode --replays 10 --records="$W/records" || exit 1
step ncu_s2_h128_4096_varlen 50 python -m mla_var3.kernel flash_mla_decode_v56 --prof_type=ncu --ncu-set=detail \
    --compare=flash_mla_decode_v54 --b=128 --s_q=2 --h_q=128 --seqlen=4096 --varlen \
    --records="$W/records" --tool-log="$W/logs/ncu_raw.log"
step v56_sanitize 50 python -m mla_var3.kernel flash_mla_decode_v56 --prof_type=sanitize --racecheck-detail \
    --s_q=2 --h_q=64 --seqlens=0,0,17,1000,4097,64 --tiling +persistent_ctas=1,multicast_kv=False,chunk=3,cluster_rows=2 \
    --records="$W/records" --tool-log="$W/logs/sanitize_raw.log"
step v56_check 120 python -m mla_var3.kernel flash_mla_decode_v56 --check --records="$W/records"
step ncu_s1_h128_8192_varlen 50 python -m mla_var3.kernel flash_mla_decode_v56 --prof_type=ncu --ncu-set=detail \
    --compare=flash_mla_decode_v55 --b=128 --s_q=1 --h_q=128 --seqlen=8192 --varlen \
    --records="$W/records" --tool-log="$W/logs/ncu_raw_s1.log"
