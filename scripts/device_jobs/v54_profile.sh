#!/usr/bin/env bash
# flash_mla_decode_v54 under the profilers, after v54_first_run.sh passed: its timeline where CTAs
# walk the most items (s_q=1 h_q=128 1024: 66 columns; s_q=2 h_q=128 4096 varlen: 33 columns x 4
# row blocks), to fit PERSISTENT_ITEM_TILES from the gaps between items; then ncu's detail set
# beside v46 at s_q=2 h_q=128 4096 varlen (the L2 read sectors the prediction names). Carry .aot_v54.
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/v54_profile.sh", carry=[".aot_v54"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
trap 'pack v54_profile' EXIT
step timeline_h128_1024 150 python -m mla_var3.kernel flash_mla_decode_v54 --prof_type=timeline \
    --b=128 --s_q=1 --h_q=128 --seqlen=1024 --records="$W/records"
step timeline_s2_h128_4096_varlen 150 python -m mla_var3.kernel flash_mla_decode_v54 --prof_type=timeline \
    --b=128 --s_q=2 --h_q=128 --seqlen=4096 --varlen --records="$W/records"
step ncu_s2_h128_4096_varlen 250 python -m mla_var3.kernel flash_mla_decode_v54 --prof_type=ncu --ncu-set=detail \
    --compare=flash_mla_decode_v46 --b=128 --s_q=2 --h_q=128 --seqlen=4096 --varlen \
    --records="$W/records" --tool-log="$W/logs/ncu_raw.log"
