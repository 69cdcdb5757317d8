#!/usr/bin/env bash
# The GPU test suite in groups that each fit one device call (a whole `pytest -m gpu` run takes
# longer than the 600 s a call may run). Usage, on the GPU machine from the repository root:
#   scripts/gpu_suite.sh GROUP [OUT_DIR]      GROUP: mla-cute | mla-other | fuzz | ops | gemm | rest | rest-a | rest-b | rest-c | list
# Writes OUT_DIR/pytest_GROUP.log (OUT_DIR defaults to $OUT, else .) and prints the summary line.
# TIMEOUT (seconds, default 540) bounds the group; MLA_VAR3_RUN_QUARANTINED=1 includes
# quarantined versions; MLA_VAR3_FUZZ_EXAMPLES sets the fuzz count (default 200); ONLY narrows the
# group further with a pytest -k expression (e.g. ONLY="flash_mla_decode_v9 or flash_mla_decode_v10":
# every MLA version's GPU tests together no longer fit one 600 s device call).
# PYTEST_ADDOPTS="-n 8" runs a group in eight pytest-xdist processes (installed on the H200): the
# compiles run in parallel (rest-c: 70 s, session 27); leave it off for groups whose tests time
# kernels (mla-other's bench and autotune tests) if their numbers are read.
set -o pipefail
k=""
groups="mla-cute mla-other fuzz ops gemm rest rest-a rest-b rest-c"
# the test files a named group owns; rest (and rest-a/b/c) is every other test file
owned=(test_kernels_gpu.py test_fuzz.py test_ops.py test_gemm_kernels.py test_cutlass_examples.py test_companion.py)
group=${1:?usage: scripts/gpu_suite.sh GROUP [OUT_DIR] (GROUP: $groups list)}
out=${2:-${OUT:-.}}
case "$group" in
  mla-cute)  args=(tests/test_kernels_gpu.py); k="flash_mla_decode_v and not ct_flash" ;;
  mla-other) args=(tests/test_kernels_gpu.py); k="ct_flash or torch_mla or flashmla or bench or autotune" ;;
  fuzz)      args=(tests/test_fuzz.py) ;;
  ops)       args=(tests/test_ops.py) ;;
  gemm)      args=(tests/test_gemm_kernels.py tests/test_cutlass_examples.py tests/test_companion.py) ;;
  rest)      args=(tests)
             for n in "${owned[@]}"; do args+=("--ignore=tests/$n"); done ;;
  # rest in three parts by file name (session 24: the whole of rest ran 74 of its 170 GPU tests in 540 s,
  # most of it compiling versions that have no ahead-of-time cache)
  rest-a|rest-b|rest-c)
             args=()
             for f in tests/test_*.py; do
               n=$(basename "$f")
               [[ " ${owned[*]} " == *" $n "* ]] && continue
               if [[ "$n" < "test_ct_l" ]]; then part=rest-a; elif [[ "$n" < "test_s" ]]; then part=rest-b; else part=rest-c; fi
               [ "$part" = "$group" ] && args+=("$f")
             done ;;
  list)      echo "$groups"; exit 0 ;;
  *)         echo "error: scripts/gpu_suite.sh: unknown group '$group' ($groups)" >&2; exit 2 ;;
esac
mkdir -p "$out"
log="$out/pytest_$group.log"
if [ -n "${ONLY:-}" ]; then k="${k:+($k) and }($ONLY)"; fi
[ -n "${k:-}" ] && args+=(-k "$k")
timeout "${TIMEOUT:-540}" python -m pytest -m gpu -q -p no:cacheprovider -rfs "${args[@]}" > "$log" 2>&1
rc=$?
grep -E "^(FAILED|ERROR)" "$log" | head -20
tail -1 "$log"
[ "$rc" = 124 ] && echo "gpu_suite: $group timed out after ${TIMEOUT:-540} s (see $log)"
exit "$rc"
