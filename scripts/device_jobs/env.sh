# Sourced by every device job (scripts/device_jobs/*.sh), on the lent GPU machine from the
# repository root, after the devkit's setup calls (scripts/stage_device.sh's header lists them).
# Sets the toolchain (/tmp/site/env.sh), the AOT caches that travelled (every .aot*/ directory,
# searched in turn), FlashMLA's module (.flashmla/ or third_party/FlashMLA/build/), and the work
# directory $W whose files `pack` puts into $OUT as one tarball (a call brings back 8 files at most).
# Needs MLA_VAR3_COMMIT=<hash> in the command: the device's copy may hold a stale .git.
set -uo pipefail
site=${MLA_VAR3_SITE_ENV:-/tmp/site/env.sh}      # (a test points this elsewhere)
[ -f "$site" ] || { echo "device job: $site is missing: run the devkit's setup calls first (scripts/stage_device.sh)" >&2; exit 3; }
source "$site"
: "${MLA_VAR3_COMMIT:?set MLA_VAR3_COMMIT=<the commit these files are> in the device command}"
export MLA_VAR3_COMMIT MLA_VAR3_RUN_QUARANTINED=${MLA_VAR3_RUN_QUARANTINED:-1}
aot=""
for d in .aot*/; do [ -d "$d" ] && aot="${aot:+$aot:}$PWD/${d%/}"; done
[ -n "$aot" ] && export MLA_VAR3_AOT_DIR="$aot"
if [ -f .flashmla/flashmla_dense_sm90.so ]; then export MLA_VAR3_FLASHMLA=$PWD/.flashmla; fi
OUT=${OUT:-$PWD/out}
W=$(mktemp -d "${TMPDIR:-/tmp}/job.XXXX")
mkdir -p "$W/records" "$W/logs"
echo "device job: commit $MLA_VAR3_COMMIT, $(nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null), kernel $(uname -r)"
echo "device job: AOT caches ${MLA_VAR3_AOT_DIR:-none}; FlashMLA ${MLA_VAR3_FLASHMLA:-third_party/FlashMLA/build if built}"

# the whole job ends by JOB_SECONDS (default 570: a call may run 600 s, and `pack` must still run)
JOB_END=$((SECONDS + ${JOB_SECONDS:-570}))

# step NAME SECONDS CMD...: run CMD bounded by SECONDS and by what is left of the job (less 20 s
# for packing), its output in $W/logs/NAME.log; prints the log's last lines and the time it took;
# returns CMD's status (124: it ran out of time)
step() {
    local name=$1 secs=$2; shift 2
    local t0=$SECONDS left=$((JOB_END - SECONDS - 20))
    [ "$left" -lt "$secs" ] && secs=$left
    if [ "$secs" -le 0 ]; then echo "== $name: skipped, no time left in the job"; return 124; fi
    timeout --kill-after=5 "$secs" "$@" > "$W/logs/$name.log" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - t0)) s"
    tail -n "${TAIL:-15}" "$W/logs/$name.log"
    return $rc
}

# pack NAME: $W (records/ and logs/) -> $OUT/NAME.tgz
pack() {
    mkdir -p "$OUT"
    tar -czf "$OUT/$1.tgz" -C "$W" .
    echo "packed: $OUT/$1.tgz ($(du -h "$OUT/$1.tgz" | cut -f1))"
}
