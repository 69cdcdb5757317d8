#!/usr/bin/env bash
# Issue 8's whole-grid table in three parts that each fit one call: VERSION (default
# flash_mla_decode_v46) per step, beside live FlashMLA (per step, its default), cuTile's newest and
# PyTorch, 10 interleaved rounds. PART: s1 (bench grid, s_q=1), s2 (bench grid, s_q=2),
# small (the small_batch grid). Carry VERSION's builds of both grids and .flashmla; cuTile needs
# the devkit's nvvm setup call too. The builds, here (no GPU), e.g. for v54:
#   MLA_VAR3_AOT_DIR=.aot_grid_v54 python -m mla_var3.kernel flash_mla_decode_v54 --compile-only \
#       --arch=sm_90a --grid=bench --tiling +schedule=per_step          (and --grid=small_batch)
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/issue8_grid.sh s1 flash_mla_decode_v54",
#       carry=[".aot_grid_v54", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
part=${1:?usage: issue8_grid.sh s1|s2|small [VERSION]}
version=${2:-flash_mla_decode_v46}
case "$part" in
  s1)    grid=(--grid=bench --where "s_q == 1") ;;
  s2)    grid=(--grid=bench --where "s_q == 2") ;;
  small) grid=(--grid=small_batch) ;;
  *)     echo "error: issue8_grid.sh: unknown part '$part' (s1, s2, small)" >&2; exit 2 ;;
esac
trap "pack issue8_grid_$part" EXIT
step "grid_$part" 570 python -m mla_var3.kernel "$version" "${grid[@]}" --tiling +schedule=per_step \
    --compare=flashmla_decode,ct_flash_mla_decode_v8,torch_mla_decode_v1 --replays 10 --records="$W/records"
