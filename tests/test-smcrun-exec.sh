#!/bin/bash
# tests/apps/exec-inherit.py under smcrun over a private smcd, with every exec-family
# wrapper of libsmcrun.so driven from a C program (tests/exec-variants.c); checks that
# smcd ended every connection orderly. (test-smcrun-apps.sh runs the same app without
# the C variants.)
# Also tests/apps/inherit-forged.py (SMCRUN_INHERIT entries set by hand that name the
# program's own descriptors leave them as they were), and tests/spawn-listener.c's cases (posix_spawn while an SMC listener is open), each
# over plain TCP first (the reference) and then under smcrun.
# Args: SMCD LIBSMCRUN SMCRUN EXEC_VARIANTS SPAWN_LISTENER
set -u
smcd=$1 lib=$2 smcrun=$3
export EXEC_VARIANTS=$4
spawn_listener=$5
here=$(dirname "$0")
# shellcheck source=tests/apps/smcrun-env.sh
. "$here/apps/smcrun-env.sh"
# private smcd in $rundir (PID $spid); a sanitizer build: its runtime preloaded
smcrun_env "$smcd" "$lib" smcd-test-exec --no-bus || exit 1
failed=0
if out=$(timeout 100 sh "$smcrun" python3 "$here/apps/exec-inherit.py" 2>&1); then
        echo "ok - exec-inherit: $out"
else
        echo "not ok - exec-inherit: $out"
        failed=1
fi
# forged SMCRUN_INHERIT entries naming the program's own descriptors: left alone
if out=$(timeout 100 python3 "$here/apps/inherit-forged.py" 2>&1); then
        echo "ok - inherit-forged: $(echo "$out" | tail -1)"
else
        echo "not ok - inherit-forged: $out"
        failed=1
fi
for c in closefrom threads; do
        if ! ref=$(timeout 60 "$spawn_listener" $c 2>&1); then
                echo "not ok - spawn-listener $c over plain TCP: $ref"
                failed=1
        elif out=$(timeout 60 sh "$smcrun" "$spawn_listener" $c 2>&1) && echo "$out" | grep -q "mode 1\|refused"; then
                echo "ok - spawn-listener $c: $out"
        else
                echo "not ok - spawn-listener $c: $out"
                failed=1
        fi
done
kill -USR1 $spid
sleep 0.5
python3 - "$rundir/stats.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))["smcd"]
# 21 cases with a connection; every one closed, none aborted, none left open
ok = s["conns_client"] >= 21 and s["conns_current"] == 0 and s["conns_aborted"] == 0
print("%s - stats: conns_client %d, conns_current %d, conns_aborted %d" %
      ("ok" if ok else "not ok", s["conns_client"], s["conns_current"], s["conns_aborted"]))
sys.exit(0 if ok else 1)
PY
exit $failed
