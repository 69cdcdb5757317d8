#!/usr/bin/env bash
# Fetch FlashMLA at a pinned commit and build its SM90 dense bf16 decode as one torch extension
# (flashmla_dense_sm90), for the peer plan flashmla_decode_v1. Nothing of FlashMLA is vendored:
# its sources go to the git-ignored third_party/FlashMLA/ (third_party/README.md).
set -euo pipefail

FLASHMLA_COMMIT=9241ae3ef9bac614dd25e45e507e089f888280e0     # "Swap FlashMLA combine grid dimensions (#182)"
CUTLASS_COMMIT=147f5673d0c1c3dcf66f78d677fd647e4a020219      # FlashMLA's csrc/cutlass submodule at that commit
MODULE=flashmla_dense_sm90
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BINDING=$ROOT/scripts/flashmla_dense_binding.cpp

usage() {
    cat <<EOF
usage: scripts/build_flashmla.sh [FLASHMLA_GIT] [options]

Exports deepseek-ai/FlashMLA at ${FLASHMLA_COMMIT:0:7} into DEST (default third_party/FlashMLA),
its csrc/cutlass submodule (NVIDIA/cutlass ${CUTLASS_COMMIT:0:10}: include/ and tools/util/include
only) into DEST/csrc/cutlass, then builds the extension ${MODULE} for sm_90a from four sources
(our binding scripts/flashmla_dense_binding.cpp, get_decoding_sched_meta.cu, combine.cu,
sm90/decode/dense/instantiations/bf16.cu) and puts ${MODULE}.so into OUT.

  FLASHMLA_GIT            a FlashMLA git directory (bare or not) or URL
                          (default: \$FLASHMLA_GIT, else https://github.com/deepseek-ai/FlashMLA.git)
  --cutlass=GIT           an NVIDIA/cutlass git directory or URL
                          (default: \$CUTLASS_GIT, else https://github.com/NVIDIA/cutlass.git)
  --dest=DIR              where the sources go (default: \$FLASHMLA_DIR, else third_party/FlashMLA)
  --out=DIR               where ${MODULE}.so goes (default: DEST/build); objects stay in DEST/build/obj
  --fetch-only            export the sources, do not build (a machine with git access, no GPU needed)
  --build-only            build from the sources already in DEST (a machine without network)
  --compile-check         no build: compile the three .cu files with nvcc alone and syntax-check the
                          binding with g++ against whatever torch is installed (no GPU, no CUDA torch)
  --python=PY             the Python whose torch builds the extension (default: \$PYTHON, else python3)
  -h, --help              this text

Environment: NVCC_THREADS (nvcc --threads, default 1), MAX_JOBS (parallel compiles, default nproc),
CUDA_HOME (default: what torch finds, else the directory above \`which nvcc\`).
The peer plan finds the result through MLA_VAR3_FLASHMLA=<.so or its directory>, else in
third_party/FlashMLA/build/ under the current directory.
EOF
}

die() { echo "build_flashmla.sh: $*" >&2; exit 2; }

FLASHMLA_SRC=${FLASHMLA_GIT:-https://github.com/deepseek-ai/FlashMLA.git}
CUTLASS_SRC=${CUTLASS_GIT:-https://github.com/NVIDIA/cutlass.git}
DEST=${FLASHMLA_DIR:-$ROOT/third_party/FlashMLA}
OUT=""
MODE=all
PY=${PYTHON:-python3}
positional=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --cutlass=*) CUTLASS_SRC=${arg#*=} ;;
        --dest=*) DEST=${arg#*=} ;;
        --out=*) OUT=${arg#*=} ;;
        --python=*) PY=${arg#*=} ;;
        --fetch-only|--build-only|--compile-check)
            [ "$MODE" = all ] || die "give one of --fetch-only, --build-only, --compile-check"
            MODE=${arg#--} ;;
        --cutlass|--dest|--out|--python) die "$arg needs a value: $arg=VALUE" ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)  [ $positional = 0 ] || die "one FlashMLA source only, got another: $arg"
            FLASHMLA_SRC=$arg; positional=1 ;;
    esac
done
[ -n "$FLASHMLA_SRC" ] && [ -n "$CUTLASS_SRC" ] && [ -n "$DEST" ] && [ -n "$PY" ] \
    || die "an empty value: FlashMLA source, --cutlass, --dest and --python need one"
[ "$MODE" != fetch-only ] || [ -z "$OUT" ] || die "--out: --fetch-only builds nothing"
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)
OUT=${OUT:-$DEST/build}
STAMP=$DEST/.mla_var3_sources
WANT="flashmla=$FLASHMLA_COMMIT cutlass=$CUTLASS_COMMIT"

# ---- the four sources and the flags (upstream setup.py's, reduced to sm_90a + bf16) ------------
CU_SOURCES=(
    csrc/smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu
    csrc/smxx/decode/combine/combine.cu
    csrc/sm90/decode/dense/instantiations/bf16.cu
)
INCLUDE_DIRS=(csrc csrc/kerutils/include csrc/sm90 csrc/cutlass/include csrc/cutlass/tools/util/include)
FEATURES=(-DFLASH_MLA_DISABLE_FP16)
CXX_FLAGS=(-O3 -std=c++20 -DNDEBUG -Wno-deprecated-declarations "${FEATURES[@]}" "-DFLASHMLA_COMMIT=${FLASHMLA_COMMIT:0:7}")
NVCC_FLAGS=(
    -O3 -std=c++20 -DNDEBUG -D_USE_MATH_DEFINES -Wno-deprecated-declarations
    -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__
    -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr --expt-extended-lambda --use_fast_math
    --ptxas-options=-v,--register-usage-level=10,--warn-on-spills,--warn-on-local-memory-usage,--warn-on-double-precision-use
    -lineinfo --source-in-ptx
    "${FEATURES[@]}" -gencode arch=compute_90a,code=sm_90a --threads "${NVCC_THREADS:-1}"
)

# ---- fetch ----------------------------------------------------------------------------------
git_dir_for() {    # SRC COMMIT -> a git dir holding COMMIT (SRC itself, or a fetch into a temp dir)
    local src=$1 commit=$2 tmp
    if [ -d "$src" ]; then
        git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || die "$src is not a git directory"
        git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null || die "$src does not hold commit $commit"
        echo "$src"; return
    fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/build_flashmla.XXXXXX")
    git init -q --bare "$tmp"
    echo "fetching $src @ ${commit:0:10}" >&2
    if ! git -C "$tmp" fetch -q --depth 1 "$src" "$commit" 2>/dev/null; then
        git -C "$tmp" fetch -q "$src" '+refs/heads/*:refs/heads/*' || die "cannot fetch $src (no network? give a local git directory)"
    fi
    git -C "$tmp" cat-file -e "$commit^{commit}" 2>/dev/null || die "$src does not hold commit $commit"
    echo "$tmp"
}

fetch_sources() {
    if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
        echo "sources: $DEST already holds $WANT"; return
    fi
    if [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
        [ -f "$STAMP" ] || die "$DEST is not empty and was not made by this script: move it away or give --dest"
        echo "sources: replacing $DEST ($(cat "$STAMP") -> $WANT)"
        find "$DEST" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
    fi
    local fdir cdir
    fdir=$(git_dir_for "$FLASHMLA_SRC" "$FLASHMLA_COMMIT")
    git -C "$fdir" archive --format=tar "$FLASHMLA_COMMIT" | tar -x -C "$DEST"
    cdir=$(git_dir_for "$CUTLASS_SRC" "$CUTLASS_COMMIT")
    mkdir -p "$DEST/csrc/cutlass"
    git -C "$cdir" archive --format=tar "$CUTLASS_COMMIT" include tools/util/include | tar -x -C "$DEST/csrc/cutlass"
    local want got     # a mirror missing blobs can make `git archive` warn and still succeed: count the files
    want=$(git -C "$cdir" ls-tree -r --name-only "$CUTLASS_COMMIT" -- include tools/util/include | wc -l)
    got=$(find "$DEST/csrc/cutlass" -type f | wc -l)
    [ "$want" = "$got" ] || die "cutlass export incomplete: $got of $want files under $DEST/csrc/cutlass"
    for d in "$fdir" "$cdir"; do case "$d" in "${TMPDIR:-/tmp}"/build_flashmla.*) rm -rf "$d" ;; esac; done
    echo "$WANT" > "$STAMP"
    echo "sources: $DEST ($(du -sh "$DEST" | cut -f1)): FlashMLA ${FLASHMLA_COMMIT:0:7}, cutlass ${CUTLASS_COMMIT:0:10} (include/, tools/util/include)"
}

need_sources() {
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] || die "$DEST does not hold $WANT: run without --build-only/--compile-check first (or --fetch-only where git works)"
    for f in "${CU_SOURCES[@]}" csrc/api/dense_decode.h csrc/cutlass/include/cute/tensor.hpp; do
        [ -f "$DEST/$f" ] || die "$DEST/$f is missing: re-fetch (remove $DEST and run --fetch-only)"
    done
}

find_cuda_home() {
    if [ -n "${CUDA_HOME:-}" ]; then echo "$CUDA_HOME"; return; fi
    local nvcc d
    nvcc=$(command -v nvcc) || die "nvcc not found: set CUDA_HOME or put nvcc on PATH"
    d=$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)
    [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; return; }
    for d in /usr/local/cuda /usr/local/cuda-*; do [ -f "$d/include/cuda_runtime.h" ] && { echo "$d"; return; }; done
    die "cannot tell CUDA_HOME from $nvcc: set CUDA_HOME"
}

# ---- compile-check: nvcc alone, no torch CUDA ---------------------------------------------------
compile_check() {
    need_sources
    local cuda_home obj jobs pids=() i=0 t0 incs=()
    cuda_home=$(find_cuda_home)
    for d in "${INCLUDE_DIRS[@]}"; do incs+=(-I "$DEST/$d"); done
    [ -d "$cuda_home/include/cccl" ] && incs+=(-I "$cuda_home/include/cccl")
    obj=$DEST/build/check
    mkdir -p "$obj"
    jobs=${MAX_JOBS:-$(nproc)}
    echo "compile-check: nvcc $("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $jobs jobs, into $obj"
    t0=$SECONDS
    for cu in "${CU_SOURCES[@]}"; do
        ( s=$SECONDS
          "$cuda_home/bin/nvcc" -c "${NVCC_FLAGS[@]}" "${incs[@]}" -Xcompiler -fPIC "$DEST/$cu" \
              -o "$obj/$(basename "$cu").o" > "$obj/$(basename "$cu").log" 2>&1 \
              || { echo "FAILED $cu (log: $obj/$(basename "$cu").log)"; tail -20 "$obj/$(basename "$cu").log"; exit 1; }
          echo "ok $cu in $((SECONDS - s)) s: $(stat -c %s "$obj/$(basename "$cu").o") bytes" ) &
        pids+=($!)
        i=$((i + 1))
        if [ $((i % jobs)) = 0 ]; then for p in "${pids[@]}"; do wait "$p" || exit 1; done; pids=(); fi
    done
    for p in "${pids[@]}"; do wait "$p" || exit 1; done
    # the binding: g++ syntax check against the installed torch's headers (a CPU-only torch has
    # them, less one generated file) and this CUDA; headers either lacks get stand-in declarations
    # of the few names ATen's CUDA headers use (-idirafter: real headers win). Nothing is linked.
    local tinc stubs=$obj/stubs stubbed=()
    if tinc=$("$PY" -c 'import sysconfig; from torch.utils.cpp_extension import include_paths; print("\n".join(include_paths() + [sysconfig.get_paths()["include"]]))' 2>/dev/null); then
        local tincs=()
        while IFS= read -r d; do tincs+=(-I "$d"); done <<< "$tinc"
        mkdir -p "$stubs/c10/cuda/impl"
        stub() {   # HEADER TEXT: written where the real one is missing
            local h=$1 text=$2 found=0 d
            for d in "$cuda_home/include" $tinc; do [ -f "$d/$h" ] && found=1; done
            [ $found = 1 ] && return
            printf '#pragma once\n%s\n' "$text" > "$stubs/$h"; stubbed+=("$h")
        }
        stub cusparse.h 'typedef struct cusparseContext *cusparseHandle_t; typedef enum { CUSPARSE_STATUS_SUCCESS } cusparseStatus_t; const char *cusparseGetErrorString(cusparseStatus_t);'
        stub cublas_v2.h 'typedef struct cublasContext *cublasHandle_t; typedef enum { CUBLAS_STATUS_SUCCESS } cublasStatus_t;'
        stub cublasLt.h 'typedef struct cublasLtContext *cublasLtHandle_t;'
        stub cusolver_common.h 'typedef enum { CUSOLVER_STATUS_SUCCESS } cusolverStatus_t;'
        stub cusolverDn.h '#include <cusolver_common.h>
typedef struct cusolverDnContext *cusolverDnHandle_t;'
        stub c10/cuda/impl/cuda_cmake_macros.h '#define C10_CUDA_BUILD_SHARED_LIBS'
        ${CXX:-g++} -fsyntax-only -fPIC "${CXX_FLAGS[@]}" -DTORCH_EXTENSION_NAME=$MODULE -DTORCH_API_INCLUDE_EXTENSION_H \
            "${incs[@]}" -I "$cuda_home/include" "${tincs[@]}" -idirafter "$stubs" "$BINDING" \
            || die "the binding does not compile: $BINDING"
        echo "ok $(basename "$BINDING") (g++ -fsyntax-only against $("$PY" -c 'import torch; print("torch", torch.__version__)')$( \
            [ ${#stubbed[@]} = 0 ] || echo "; stand-ins for the missing ${stubbed[*]}"))"
    else
        echo "skipped the binding: $PY has no torch"
    fi
    echo "compile-check passed in $((SECONDS - t0)) s (no link: the extension is linked by a build on a CUDA torch)"
}

# ---- build: torch.utils.cpp_extension (ninja), then copy the .so to OUT --------------------------
build() {
    need_sources
    local cuda_home
    cuda_home=$(find_cuda_home)
    export CUDA_HOME=$cuda_home
    export MAX_JOBS=${MAX_JOBS:-$(nproc)}
    mkdir -p "$OUT" "$DEST/build/obj"
    DEST=$DEST OUT=$OUT MODULE=$MODULE BINDING=$BINDING COMMIT=${FLASHMLA_COMMIT:0:7} CUTLASS=$CUTLASS_COMMIT \
    CU_SOURCES=$(printf '%s\n' "${CU_SOURCES[@]}") INCLUDE_DIRS=$(printf '%s\n' "${INCLUDE_DIRS[@]}") \
    CXX_FLAGS=$(printf '%s\n' "${CXX_FLAGS[@]}") NVCC_FLAGS=$(printf '%s\n' "${NVCC_FLAGS[@]}") \
    "$PY" - <<'PYEOF'
import os, shutil, sys, time
from pathlib import Path

import torch
from torch.utils import cpp_extension

env = os.environ
lines = lambda k: [x for x in env[k].splitlines() if x]
dest, out, module = Path(env["DEST"]), Path(env["OUT"]), env["MODULE"]
cuda_home = Path(env["CUDA_HOME"])
if torch.version.cuda is None:
    print(f"build_flashmla.sh: torch {torch.__version__} has no CUDA: build on the GPU machine "
          f"(here, --compile-check checks the sources)", file=sys.stderr)
    sys.exit(2)
includes = [str(dest / d) for d in lines("INCLUDE_DIRS")]
if (cuda_home / "include" / "cccl").is_dir():       # CUDA 13: g++ needs it for cuda/std/* (cutlass)
    includes.append(str(cuda_home / "include" / "cccl"))
sources = [env["BINDING"]] + [str(dest / s) for s in lines("CU_SOURCES")]
obj = dest / "build" / "obj"
print(f"building {module}: torch {torch.__version__} (CUDA {torch.version.cuda}), CUDA_HOME={cuda_home}, "
      f"MAX_JOBS={env['MAX_JOBS']}, NVCC_THREADS={env.get('NVCC_THREADS', '1')}", flush=True)
t0 = time.time()
mod = cpp_extension.load(name=module, sources=sources, extra_cflags=lines("CXX_FLAGS"),
                         extra_cuda_cflags=lines("NVCC_FLAGS"), extra_include_paths=includes,
                         build_directory=str(obj), with_cuda=True, verbose=True)
so = obj / f"{module}.so"
out.mkdir(parents=True, exist_ok=True)
if out.resolve() != obj.resolve():
    shutil.copy2(so, out / so.name)
assert hasattr(mod, "dense_decode_fwd"), "the module lacks dense_decode_fwd"
size = (out / so.name).stat().st_size
(out / f"{module}.build.txt").write_text(
    f"{module}.so: deepseek-ai/FlashMLA@{env['COMMIT']} (cutlass {env['CUTLASS']}), sm_90a, bf16 only\n"
    f"torch {torch.__version__} CUDA {torch.version.cuda} python {sys.version.split()[0]}\n"
    f"sources: {' '.join(sources)}\ncxx: {' '.join(lines('CXX_FLAGS'))}\nnvcc: {' '.join(lines('NVCC_FLAGS'))}\n"
    f"built in {time.time() - t0:.0f} s, {size} bytes\n")
print(f"built {out / so.name} ({size / 2**20:.1f} MiB) in {time.time() - t0:.0f} s; "
      f"flashmla_commit={getattr(mod, 'flashmla_commit', '?')}")
print(f"use it: MLA_VAR3_FLASHMLA={out / so.name} python -m mla_var3.kernel flashmla_decode --check")
PYEOF
}

case "$MODE" in
    all) fetch_sources; build ;;
    fetch-only) fetch_sources ;;
    build-only) build ;;
    compile-check) compile_check ;;
esac
