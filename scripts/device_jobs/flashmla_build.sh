#!/usr/bin/env bash
# Build FlashMLA's SM90 dense decode (scripts/build_flashmla.sh --build-only) from the sources in
# third_party/FlashMLA (carry it: about 27 MiB) and bring the module back as $OUT/flashmla_dense_sm90.so;
# here, put it in .flashmla/ (git-ignored) and carry .flashmla in later calls (3 MiB).
#   run("MLA_VAR3_COMMIT=<hash> bash scripts/device_jobs/flashmla_build.sh", carry=["third_party/FlashMLA"], timeout_s=300)
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
NVCC_THREADS=1 MAX_JOBS=$(nproc) step flashmla_build 280 bash scripts/build_flashmla.sh --build-only --python=python3 || exit $?
mkdir -p "$OUT" && cp third_party/FlashMLA/build/flashmla_dense_sm90.so "$OUT/"
export MLA_VAR3_FLASHMLA=$PWD/third_party/FlashMLA/build
step flashmla_list 60 python -m mla_var3.kernel list
pack flashmla_build
