#!/usr/bin/env bash
# Export NVIDIA/cutlass at a pinned commit into the git-ignored third_party/cutlass, for the
# learn path (docs/workflows/learn-from-an-example.md): its CuTe DSL examples are read there and
# imported at run time by peer plans, never copied into the project (third_party/README.md).
set -euo pipefail

CUTLASS_COMMIT=7107b05535f8977f5ecb9d01ee203205b1fd9bc4   # "[CuTeDSL] Fix export_to_c shape slot width for 64-bit dynamic dims (#3448)"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PATHS=(LICENSE.txt examples/python/CuTeDSL)             # default export; --full takes the whole tree

usage() {
    cat <<EOF2
usage: scripts/fetch_cutlass.sh [CUTLASS_GIT] [--dest=DIR] [--full]

Exports NVIDIA/cutlass at ${CUTLASS_COMMIT:0:7} into DEST (default third_party/cutlass):
${PATHS[*]} (a few MB), or the whole tree with --full.

  CUTLASS_GIT   a cutlass git directory (bare or not, e.g. a mirror on a machine without GitHub
                access) or URL (default: \$CUTLASS_GIT, else https://github.com/NVIDIA/cutlass.git)
  --dest=DIR    where the tree goes (default: \$CUTLASS_DIR, else third_party/cutlass)
  --full        export every file of the commit, not only the CuTe DSL examples
  -h, --help    this text

A second run with the same commit and paths does nothing; DEST must be empty or made by this script.
EOF2
}

die() { echo "fetch_cutlass.sh: $*" >&2; exit 2; }

SRC=${CUTLASS_GIT:-https://github.com/NVIDIA/cutlass.git}
DEST=${CUTLASS_DIR:-$ROOT/third_party/cutlass}
positional=0
for arg in "$@"; do
    case "$arg" in
        -h|--help) usage; exit 0 ;;
        --dest=*) DEST=${arg#*=} ;;
        --full) PATHS=(.) ;;
        --dest) die "--dest needs a value: --dest=DIR" ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)  [ $positional = 0 ] || die "one cutlass source only, got another: $arg"
            SRC=$arg; positional=1 ;;
    esac
done
[ -n "$SRC" ] && [ -n "$DEST" ] || die "an empty value: the source and --dest need one"
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)
STAMP=$DEST/.mla_var3_sources
WANT="cutlass=$CUTLASS_COMMIT paths=${PATHS[*]}"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    echo "cutlass: $DEST already holds $WANT"; exit 0
fi
if [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
    [ -f "$STAMP" ] || die "$DEST is not empty and was not made by this script: move it away or give --dest"
    echo "cutlass: replacing $DEST ($(cat "$STAMP") -> $WANT)"
    find "$DEST" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
fi

# a git dir holding the commit: SRC itself, or a fetch of SRC into a temporary bare repository
tmp=""
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT
if [ -d "$SRC" ]; then
    git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1 || die "$SRC is not a git directory"
    gdir=$SRC
else
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/fetch_cutlass.XXXXXX")
    git init -q --bare "$tmp"
    echo "fetching $SRC @ ${CUTLASS_COMMIT:0:10}" >&2
    if ! git -C "$tmp" fetch -q --depth 1 "$SRC" "$CUTLASS_COMMIT" 2>/dev/null; then
        git -C "$tmp" fetch -q "$SRC" '+refs/heads/*:refs/heads/*' \
            || die "cannot fetch $SRC (no network? give a local git directory)"
    fi
    gdir=$tmp
fi
git -C "$gdir" cat-file -e "$CUTLASS_COMMIT^{commit}" 2>/dev/null || die "$SRC does not hold commit $CUTLASS_COMMIT"

git -C "$gdir" archive --format=tar "$CUTLASS_COMMIT" "${PATHS[@]}" | tar -x -C "$DEST"
# a mirror missing blobs can make `git archive` warn and still succeed: count the files
want=$(git -C "$gdir" ls-tree -r --name-only "$CUTLASS_COMMIT" -- "${PATHS[@]}" | wc -l)
got=$(find "$DEST" -type f ! -name .mla_var3_sources | wc -l)
[ "$want" = "$got" ] || die "export incomplete: $got of $want files under $DEST"
echo "$WANT" > "$STAMP"
echo "cutlass: $DEST ($(du -sh "$DEST" | cut -f1)): ${CUTLASS_COMMIT:0:10}, ${PATHS[*]}"
for f in dense_gemm.py dense_gemm_persistent.py; do
    p=examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/$f
    [ -f "$DEST/$p" ] && echo "  $p"
done
