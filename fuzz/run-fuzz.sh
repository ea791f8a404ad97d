#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Run the libFuzzer targets of a fuzz build (CC=clang meson setup BUILDDIR -Dfuzz=true)
# one after the other, each from a fresh copy of its seed corpus (fuzz/corpus/<name>/)
# for a bounded time or number of runs, and print per target the executions, the
# time, the coverage (cov: of libFuzzer's last line) and the crashes / leaks found.
# Before that, each target runs the inputs of earlier findings (fuzz/regressions/<name>/).
# Exit status 0 only if no target crashed, leaked, timed out or ran out of memory.
#
#   fuzz/run-fuzz.sh [--seconds N] [--runs N] [--target NAME]... BUILDDIR
#
#   --seconds N  stop each target after N seconds (-max_total_time; default 30, or
#                $SMCD_FUZZ_SECONDS; 0 = no limit: give --runs)
#   --runs N     stop each target after N executions (-runs; the long run: 10000000)
#   --target T   only this target (repeatable; default: all of fuzz/corpus/*)
#
# One fuzzer process at a time (-jobs=1: libFuzzer runs one worker, its output in
# BUILDDIR/fuzz-work/<name>/fuzz-0.log), under nice -n 10. Crash / leak inputs are
# kept in BUILDDIR/fuzz-artifacts/<name>/ (reproduce: BUILDDIR/fuzz/fuzz-<name> FILE).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
seconds=${SMCD_FUZZ_SECONDS:-30}
runs=
targets=()
while [ $# -gt 0 ]; do
        case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --seconds=*) seconds=${1#*=}; shift ;;
        --runs) runs=$2; shift 2 ;;
        --runs=*) runs=${1#*=}; shift ;;
        --target) targets+=("$2"); shift 2 ;;
        --target=*) targets+=("${1#*=}"); shift ;;
        -h|--help) sed -n '3,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "run-fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
        esac
done
if [ $# -ne 1 ]; then
        echo "usage: run-fuzz.sh [--seconds N] [--runs N] [--target NAME]... BUILDDIR" >&2
        exit 2
fi
build=$(cd "$1" && pwd) || exit 2
if [ ${#targets[@]} -eq 0 ]; then
        for d in "$here"/corpus/*/; do
                targets+=("$(basename "$d")")
        done
fi

# the state-file targets write a file per run: keep that in memory
tmpbase=/tmp
[ -d /dev/shm ] && [ -w /dev/shm ] && tmpbase=/dev/shm
fuzz_tmp=$(mktemp -d "$tmpbase/smcd-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$fuzz_tmp"' EXIT

failed=0
rows=()
for t in "${targets[@]}"; do
        exe="$build/fuzz/fuzz-$t"
        if [ ! -x "$exe" ]; then
                echo "fuzz-$t: $exe missing (not a -Dfuzz=true build?)"
                failed=$((failed + 1))
                continue
        fi
        work="$build/fuzz-work/$t"
        art="$build/fuzz-artifacts/$t"
        rm -rf "$work" "$art"
        mkdir -p "$work/corpus" "$art"
        cp "$here/corpus/$t"/* "$work/corpus/" 2>/dev/null
        opts=(-jobs=1 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "-artifact_prefix=$art/")
        [ -n "$runs" ] && opts+=("-runs=$runs")
        [ "$seconds" != 0 ] && opts+=("-max_total_time=$seconds")
        case "$t" in
        smcctl) opts+=(-close_fd_mask=3) ;; # smcctl prints its usage errors
        esac
        # the inputs of earlier findings (fuzz/regressions/<name>/) first: each must pass
        if compgen -G "$here/regressions/$t/*" >/dev/null; then
                replay=(-timeout=10 -rss_limit_mb=2048 "-artifact_prefix=$art/")
                [ "$t" = smcctl ] && replay+=(-close_fd_mask=3)
                if ! (cd "$work" && TMPDIR="$fuzz_tmp" "$exe" "${replay[@]}" "$here/regressions/$t"/* \
                        >"$work/regressions.log" 2>&1); then
                        echo "---- fuzz-$t: a regression input fails: end of $work/regressions.log"
                        tail -40 "$work/regressions.log"
                        failed=$((failed + 1))
                        rows+=("| $t | regression input fails | | | | |")
                        continue
                fi
        fi
        start=$(date +%s)
        (cd "$work" && TMPDIR="$fuzz_tmp" nice -n 10 "$exe" "${opts[@]}" corpus >"$work/parent.log" 2>&1)
        rc=$?
        end=$(date +%s)
        log="$work/fuzz-0.log"
        [ -f "$log" ] || log="$work/parent.log"
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
        crashes=$(find "$art" -maxdepth 1 \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
        leaks=$(find "$art" -maxdepth 1 -name 'leak-*' | wc -l)
        status=OK
        if [ "$crashes" -ne 0 ] || [ "$leaks" -ne 0 ] || [ -z "$execs" ] ||
           grep -q -e '^==[0-9]*==ERROR' -e '^SUMMARY: ' -e 'FUZZ_CHECK failed' "$log"; then
                status=FAIL
                failed=$((failed + 1))
                [ -z "$execs" ] && [ "$crashes" -eq 0 ] && [ "$leaks" -eq 0 ] && crashes="?"
                echo "---- fuzz-$t (exit $rc): end of $log"
                tail -40 "$log"
                ls -l "$art"
        fi
        echo "fuzz-$t: ${execs:-?} executions in $((end - start)) s, cov ${cov:-?}, crashes $crashes, leaks $leaks: $status"
        rows+=("| $t | ${execs:-?} | $((end - start)) s | $crashes | $leaks | ${cov:-?} |")
done

echo
echo "| target | executions | time | crashes | leaks | coverage |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
[ "$failed" -eq 0 ]
