#!/usr/bin/env bash
# Issue 8's whole-grid table in parts that each fit one call: VERSION (default
# flash_mla_decode_v46) per step beside live FlashMLA (per step, its default), cuTile's newest and
# PyTorch, 10 interleaved rounds. PART: all (the bench grid, then the small_batch grid: session 22's
# whole grid measured in about 4.5 minutes), s1 (bench grid, s_q=1), s2 (bench grid, s_q=2), small
# (the small_batch grid), percall (the varlen bench cells, FlashMLA's metadata made in every call
# beside VERSION per call, its default: the other contract, so the devlog holds both).
# Carry VERSION's builds and .flashmla; cuTile needs the devkit's nvvm setup call too. The per-step
# builds, here (no GPU), e.g. for v54:
#   MLA_VAR3_AOT_DIR=.aot_grid_v54 python -m mla_var3.kernel flash_mla_decode_v54 --compile-only \
#       --arch=sm_90a --grid=bench --tiling +schedule=per_step          (and --grid=small_batch)
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/issue8_grid.sh s1 flash_mla_decode_v54",
#       carry=[".aot_grid_v54", ".flashmla"], timeout_s=600)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
part=${1:?usage: issue8_grid.sh all|s1|s2|small|percall [VERSION]}
version=${2:-flash_mla_decode_v46}
case "$part" in
  all)   grid=(--grid=bench) ;;
  s1)    grid=(--grid=bench --where "s_q == 1") ;;
  s2)    grid=(--grid=bench --where "s_q == 2") ;;
  small) grid=(--grid=small_batch) ;;
  percall) ;;
  *)     echo "error: issue8_grid.sh: unknown part '$part' (all, s1, s2, small, percall)" >&2; exit 2 ;;
esac
trap "pack issue8_grid_$part" EXIT
if [ "$part" = percall ]; then
    step grid_percall 570 python -m mla_var3.kernel flashmla_decode --grid=bench --where varlen \
        --tiling +metadata=per_call --compare="$version" --replays 10 --records="$W/records"
elif [ "$part" = all ]; then
    for g in bench small_batch; do
        step "grid_$g" 400 python -m mla_var3.kernel "$version" --grid=$g --tiling +schedule=per_step \
            --compare=flashmla_decode,ct_flash_mla_decode_v8,torch_mla_decode_v1 --replays 10 --records="$W/records"
    done
else
    step "grid_$part" 570 python -m mla_var3.kernel "$version" "${grid[@]}" --tiling +schedule=per_step \
        --compare=flashmla_decode,ct_flash_mla_decode_v8,torch_mla_decode_v1 --replays 10 --records="$W/records"
fi
