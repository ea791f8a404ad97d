# SPDX-License-Identifier: LGPL-2.1-or-later
# shellcheck shell=bash disable=SC2034
# (SC2034: rundir and spid are set here for the sourcing script)
#
# The prologue of the smcrun tests that run their programs with a plain `sh SMCRUN`
# (tests/test-smcrun-apps.sh, tests/test-smcrun-exec.sh). Source it from bash, then:
#
#   smcrun_env SMCD LIBSMCRUN NAME [SMCD-ARGS...]
#       a private runtime directory $rundir (/tmp/NAME.XXXXXX); exports SMCD_RUNTIME_DIR
#       and SMCRUN_LIB; starts SMCD [SMCD-ARGS...] --runtime-dir $rundir in the
#       background (log $rundir/smcd.log, PID $spid) and waits up to 5 s for its
#       socket; sets an EXIT trap that stops smcd and removes $rundir. For a sanitizer
#       build of LIBSMCRUN it exports LD_PRELOAD with the sanitizer runtime ahead of
#       everything (the programs, python3 above all, are not instrumented) and
#       ASAN_OPTIONS with leak checking off (their allocations are not ours).
#
# (tests/apps/lib.sh is the fuller kit of test-real-apps.sh and bench/apps.sh: it keeps
# the preload inside its SMCRUN command instead of exporting it.)

rundir=
spid=

smcrun_env() {
        local smcd=$1 lib=$2 name=$3 san
        shift 3
        rundir=$(mktemp -d "/tmp/$name.XXXXXX") || return 1
        export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib
        "$smcd" "$@" --runtime-dir "$rundir" >"$rundir/smcd.log" 2>&1 &
        spid=$!
        trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$rundir"' EXIT
        for _ in $(seq 100); do [ -S "$rundir/smcd.sock" ] && break; sleep 0.05; done
        san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
        if [ -n "$san" ]; then
                export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
                export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
        fi
        return 0
}
