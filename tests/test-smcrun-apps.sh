#!/bin/bash
# Real programs patterns under smcrun over a private smcd: asyncio (nonblocking sockets
# set with ioctl(FIONBIO), epoll, many connections), a server that exits without
# closing (EOF, as over TCP), sendfile(2) (offset / file position, nonblocking, past
# the end, a pipe: tests/apps/sendfile.py; counted in smcd's sendfile_calls),
# connections shared by fork (fork-share.py) and by dup (dup-share.py),
# sendmmsg/recvmmsg/splice (mmsg-splice.py), signals and SA_RESTART (sa-restart.py),
# plain TCP peers on either side with the reason recorded (mixed-worlds.py),
# SMC-D sockets inherited across execve() (tests/apps/exec-inherit.py), C stdio on SMC
# connections: inetd's pattern with tr/sed/grep/sort/sha256sum/... (stdio-inetd.py) and
# fdopen/dprintf/dup2 onto stdin/stdout/stderr (tests/stdio-smc.c).
# Args: SMCD LIBSMCRUN SMCRUN STDIO_SMC
set -u
smcd=$1 lib=$2 smcrun=$3 stdio_smc=$4
here=$(dirname "$0")
rundir=$(mktemp -d /tmp/smcd-test-apps.XXXXXX)
export SMCD_RUNTIME_DIR=$rundir SMCRUN_LIB=$lib
"$smcd" --runtime-dir "$rundir" >"$rundir/smcd.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$rundir"' EXIT
for _ in $(seq 100); do [ -S "$rundir/smcd.sock" ] && break; sleep 0.05; done
# A sanitizer build of libsmcrun.so needs its runtime preloaded ahead of it (python3 is
# not instrumented); leak checking is off for python's own allocations.
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then
        export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
failed=0
for app in asyncio-echo exit-without-close sendfile fork-share dup-share mmsg-splice sa-restart mixed-worlds exec-inherit stdio-inetd; do
        if out=$(timeout 60 sh "$smcrun" python3 "$here/apps/$app.py" 2>&1); then
                echo "ok - $app: $out"
        else
                echo "not ok - $app: $out"
                failed=1
        fi
done
if out=$(printf 'first\nsecond\n' | timeout 60 sh "$smcrun" "$stdio_smc" 2>&1); then
        echo "ok - stdio-smc:"
else
        echo "not ok - stdio-smc:"
        failed=1
fi
echo "$out" | sed 's/^/    /'
kill -USR1 $spid
sleep 0.5
python3 - "$rundir/stats.json" <<'PY' || failed=1
import json, sys
s = json.load(open(sys.argv[1]))["smcd"]
# asyncio: 5 connections; exit-without-close: 1; sendfile: 5 (4 of them sendfile data)
ok = s["conns_client"] >= 11 and s["conns_server"] >= 11 and s["sendfile_calls"] >= 4 and \
    s["sendfile_bytes"] >= 3 * (4 << 20)
print("%s - stats: conns_client %d, conns_server %d (SMC-D), sendfile_calls %d, sendfile_bytes %d" %
      ("ok" if ok else "not ok", s["conns_client"], s["conns_server"], s["sendfile_calls"], s["sendfile_bytes"]))
sys.exit(0 if ok else 1)
PY
exit $failed
