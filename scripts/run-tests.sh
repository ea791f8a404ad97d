#!/bin/bash
# Install dependencies, build smcd three ways (plain, ASan+UBSan, TSan), run every
# test suite, and end with the line "N passed, N failed". Exit status 0 only if all
# passed. Usage: scripts/run-tests.sh [--quick]   (--quick: plain build only)
set -uo pipefail
cd "$(dirname "$0")/.."
top=$PWD

./scripts/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

passed=0
failed=0
failed_names=()

# the qemu VM tests (suite 'vm'; run once, in the plain build): qemu, Debian's 6.1 kernel
# and its 6.12 one (kernel-smcr-vm, rxe-pair-6.12: the kernel's own SMC-R needs 6.12),
# busybox-static. Without them the VM tests skip, so a failed install counts as a failure.
if ! ./scripts/install-vm-deps.sh --kernel-6.12; then
        failed=$((failed + 1)); failed_names+=("install-vm-deps.sh")
fi

# count results from a meson testlog.json
count() {
        local build=$1
        local log="$build/meson-logs/testlog.json"
        [ -f "$log" ] || { failed=$((failed + 1)); failed_names+=("$build: no test log"); return; }
        local p f names
        read -r p f < <(python3 - "$log" <<'PY'
import json, sys
p = f = 0
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)
    if r["result"] in ("OK", "EXPECTEDFAIL"):
        p += 1
    elif r["result"] != "SKIP":
        f += 1
print(p, f)
PY
)
        names=$(python3 - "$log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if line:
        r = json.loads(line)
        if r["result"] not in ("OK", "EXPECTEDFAIL", "SKIP"):
            print(r["name"])
PY
)
        passed=$((passed + p))
        failed=$((failed + f))
        for n in $names; do failed_names+=("$build: $n"); done
}

build_and_test() {
        local build=$1; shift
        local setup_args=$1; shift
        echo "=== $build: meson setup $setup_args"
        if [ ! -f "$build/build.ninja" ]; then
                meson setup "$build" $setup_args >"$build.setup.log" 2>&1 || {
                        cat "$build.setup.log"; failed=$((failed + 1)); failed_names+=("$build: setup"); return; }
        fi
        if ! ninja -C "$build" >"$build.build.log" 2>&1; then
                tail -50 "$build.build.log"
                failed=$((failed + 1)); failed_names+=("$build: build")
                return
        fi
        rm -f "$build/meson-logs/testlog.json"
        meson test -C "$build" --print-errorlogs --num-processes 2 "$@"
        count "$build"
}

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

build_and_test build ""
if [ "${1:-}" != "--quick" ]; then
        # ASan+UBSan: everything but the VM suite (the sockperf test preloads the
        # sanitizer runtime ahead of libsmcrun.so, since sockperf itself is not instrumented)
        build_and_test build-asan "-Db_sanitize=address,undefined -Db_lundef=false" --no-suite vm
        # TSan: the lock-free parts (pool, ring)
        build_and_test build-tsan "-Db_sanitize=thread -Db_lundef=false" --suite tsan
fi
# --- libFuzzer targets (fuzz/README.md): a clang build with -Dfuzz=true; suite 'fuzz'
# runs each target 30 s (SMCD_FUZZ_SECONDS) from its seed corpus, one at a time (9
# targets: about 5 minutes); each target counts as one test.
if [ "${1:-}" != "--quick" ]; then
        CC=clang build_and_test build-fuzz "-Dfuzz=true" --suite fuzz
fi
# --- end libFuzzer

if [ ${#failed_names[@]} -gt 0 ]; then
        echo "failed:"
        printf '  %s\n' "${failed_names[@]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
