#!/usr/bin/env bash
# Lay the GPU toolchain into the git-ignored .devkit/ for `device` runs, with the CuTe DSL (58 MiB)
# and tools (47 MiB) bundles each cut in two: with the project's tree (~18 MiB) one call may carry
# at most 64 MiB, so each travels in two calls. Usage, from the repository root: scripts/stage_device.sh [DEVKIT_DIR]
# (DEVKIT_DIR: the shared devkit with `stage`, default ../shared/devkit). Then, on a cold machine,
# back to back:
#   run("bash .devkit/cutlass_a/setup.sh", carry=[".devkit/cutlass_a"])
#   run("bash .devkit/cutlass_b/setup.sh", carry=[".devkit/cutlass_b"])
#   run("bash .devkit/tools_a/setup.sh",   carry=[".devkit/tools_a"])
#   run("bash .devkit/tools_b/setup.sh",   carry=[".devkit/tools_b"])
#   run("bash .devkit/nvvm/setup.sh",      carry=[".devkit/nvvm"])      # cuTile only
#   run("source /tmp/site/env.sh && MLA_VAR3_COMMIT=<hash> ...", carry=[...])
# (MLA_VAR3_COMMIT: the device's copy may hold a stale .git; records would name its commit.)
set -euo pipefail
kit=${1:-../shared/devkit}
[ -x "$kit/stage" ] || { echo "error: scripts/stage_device.sh: no devkit 'stage' at $kit" >&2; exit 2; }
"$kit/stage" > /dev/null
for p in /.aot*/ /runs/ /.flashmla/; do grep -qxF "$p" .git/info/exclude || echo "$p" >> .git/info/exclude; done
halves() {   # .devkit/$1 -> .devkit/$1_a (first half, kept in /tmp/site) + .devkit/$1_b (joins, runs setup)
    local part=$1
    mkdir -p ".devkit/${part}_a" ".devkit/${part}_b"
    split -n 2 -d ".devkit/$part/bundle.tar.zst" ".devkit/${part}_piece"
    mv -f ".devkit/${part}_piece00" ".devkit/${part}_a/part"
    mv -f ".devkit/${part}_piece01" ".devkit/${part}_b/part"
    cp -f ".devkit/$part/zstd" ".devkit/${part}_b/zstd"
    cp -f ".devkit/$part/setup.sh" ".devkit/${part}_b/orig_setup.sh"
    cat > ".devkit/${part}_a/setup.sh" <<A
#!/bin/bash
# the first half of the devkit's $part bundle, kept in /tmp/site until ${part}_b's call joins it
set -e
mkdir -p /tmp/site
cp "\$(dirname "\${BASH_SOURCE[0]}")/part" /tmp/site/${part}_part_a
echo "devkit: $part part a staged"
A
    cat > ".devkit/${part}_b/setup.sh" <<B
#!/bin/bash
# joins the two halves of the $part bundle and runs the devkit's own setup on them
set -e
d="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
[ -f /tmp/site/${part}_part_a ] || { echo "devkit: $part part a is not on this machine (cold?): run .devkit/${part}_a/setup.sh first" >&2; exit 3; }
mkdir -p /tmp/site/$part
cat /tmp/site/${part}_part_a "\$d/part" > /tmp/site/$part/bundle.tar.zst
cp "\$d/zstd" /tmp/site/$part/
cp "\$d/orig_setup.sh" /tmp/site/$part/setup.sh
bash /tmp/site/$part/setup.sh
rm -f /tmp/site/$part/bundle.tar.zst /tmp/site/${part}_part_a
B
    chmod +x ".devkit/${part}_a/setup.sh" ".devkit/${part}_b/setup.sh"
}
halves cutlass
halves tools
du -sh .devkit/cutlass_? .devkit/tools_? .devkit/nvvm | sed 's/^/staged: /'
echo "project files that travel with every call: $(git ls-files -co --exclude-standard -z | du -ch --files0-from=- 2>/dev/null | tail -1 | cut -f1)"
