#!/bin/bash
# Who may serve smcd's control socket (helper 121: in a world-writable runtime
# directory another user renamed a socket of theirs over smcd.sock and got root's
# HELLO, and could have handed it buffers of its own).
#   1. smcd refuses a runtime directory that others can write (mode 0777, 0775), one
#      owned by another user, one under a world-writable directory without the sticky
#      bit, and paths through symbolic links others can change (exit 1, one line naming
#      the culprit; nothing created); under /tmp-like 1777 and through root's links it
#      runs;
#   2. the library does not talk to a control socket served by a user who is neither
#      root, nor its own uid, nor the owner of the socket's directory: a root client
#      under smcrun connects over TCP with its data right, and the impostor (uid 65534,
#      its socket in a 0777 directory of root's) reads no byte;
#   3. ... but it does talk to one served by the owner of the directory (a private smcd
#      of another user): the HELLO reaches it.
# Args: SMCD LIBSMCRUN SMCRUN. Root; skips (77) without setpriv. TAP-ish output.
set -u
smcd=$1 lib=$2 smcrun=$3
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
command -v setpriv >/dev/null || { echo "SKIP: setpriv not installed"; exit 77; }
py=/usr/bin/python3 # (uid 65534 must be able to run it: not a shim under /root)
[ -x $py ] || py=$(command -v python3)

san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
if [ -n "$san" ]; then   # a sanitizer build: its runtime ahead of everything
        export LD_PRELOAD="$san${LD_PRELOAD:+:$LD_PRELOAD}"
        export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
tmp=$(mktemp -d /tmp/smcd-test-trust.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
        for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
        rm -rf "$tmp"
}
trap cleanup EXIT
failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

# --- 1. smcd's own check
refused() { # LABEL DIR: smcd exits 1 at once, naming DIR's problem
        local out rc
        out=$(timeout 10 "$smcd" --no-bus --runtime-dir "$2" --state-file "$tmp/state-$RANDOM.json" 2>&1)
        rc=$?
        if [ $rc = 1 ] && echo "$out" | grep -Eq "could (replace smcd's control socket|point it elsewhere)" &&
           [ ! -e "$2/smcd.sock" ]; then
                ok "1: smcd refuses $1: $(echo "$out" | grep -Em1 "could (replace|point)" | cut -c1-160)"
        else
                nok "1: smcd refuses $1 (exit $rc): $out"
        fi
}
mkdir -p "$tmp/w777" "$tmp/w775" "$tmp/other" "$tmp/open/sub" "$tmp/sticky/sub"
chmod 0777 "$tmp/w777"
chmod 0775 "$tmp/w775"
chown 65534 "$tmp/other"
chmod 0777 "$tmp/open"
chmod 1777 "$tmp/sticky"
refused "a mode 0777 runtime directory" "$tmp/w777"
refused "a mode 0775 runtime directory" "$tmp/w775"
refused "a runtime directory of uid 65534" "$tmp/other"
refused "a runtime directory under a mode 0777 directory" "$tmp/open/sub"
# symbolic links on the way count too (helper 122: one of uid 65534 in a sticky
# directory was followed, and pointed elsewhere later)
mkdir -p "$tmp/good"
ln -s "$tmp/good" "$tmp/sticky/link-nobody" && chown -h 65534 "$tmp/sticky/link-nobody"
refused "a path through a symbolic link of uid 65534 (in a 1777 directory)" "$tmp/sticky/link-nobody"
ln -s "$tmp/good" "$tmp/open/link-root"
refused "a path through a symbolic link of root's in a mode 0777 directory" "$tmp/open/link-root"
ln -s ../w777 "$tmp/good/rel"
refused "a relative symbolic link to a mode 0777 directory" "$tmp/good/rel"
if [ ! -e "$tmp/open/sub/new" ] && ! timeout 10 "$smcd" --no-bus --runtime-dir "$tmp/open/sub/new/x" \
        --state-file "$tmp/state-new.json" >/dev/null 2>&1 && [ ! -e "$tmp/open/sub/new" ]; then
        ok "1: nothing is created under a path others can change"
else
        nok "1: nothing is created under a path others can change: $(ls -la "$tmp/open/sub")"
fi
runs() { # LABEL DIR REALDIR: smcd runs with --runtime-dir DIR, its socket in REALDIR
        local spid
        "$smcd" --no-bus --runtime-dir "$2" --state-file "$tmp/state-$RANDOM.json" >"$tmp/runs.log" 2>&1 &
        spid=$!
        pids+=("$spid")
        for _ in $(seq 100); do [ -S "$3/smcd.sock" ] && break; sleep 0.05; done
        if [ -S "$3/smcd.sock" ]; then
                ok "1: smcd runs $1"
        else
                nok "1: smcd runs $1: $(cat "$tmp/runs.log")"
        fi
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
}
ln -s "$tmp/sticky" "$tmp/link-root"
runs "through a symbolic link of root's, with .. and . in the path (created)" "$tmp/link-root/sub/../sub2/./" \
        "$tmp/sticky/sub2"
runs "in a mode 0755 directory under a mode 1777 one" "$tmp/sticky/sub" "$tmp/sticky/sub"

# --- 2., 3. the library's check, against an impostor (uid 65534) listening on smcd.sock
impostor() { # DIR LOG: a SEQPACKET listener at DIR/smcd.sock as uid 65534; LOG.out: "read N" lines
        setpriv --reuid=65534 --regid=65534 --clear-groups "$py" -c '
import os, socket, sys, time
d = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(d + "/smcd.sock.new"); os.chmod(d + "/smcd.sock.new", 0o777); s.listen(16)
os.rename(d + "/smcd.sock.new", d + "/smcd.sock")
print("listening", flush=True)
s.settimeout(30)
total = 0
try:
    while True:
        c, _ = s.accept()
        c.settimeout(2)
        try:
            while True:
                b = c.recv(4096)
                if not b:
                    break
                total += len(b)
                print("read %d" % total, flush=True)  # (stdout: the log belongs to root)
        except OSError:
            pass
        c.close()
except OSError:
    pass
' "$1" "$2" >"$2.out" 2>&1 &
        pids+=("$!")
        for _ in $(seq 100); do grep -q listening "$2.out" 2>/dev/null && return 0; sleep 0.05; done
        return 1
}
echo_pair() { # RUNDIR: a root TCP echo server and a client under smcrun; prints the client's line
        SMCD_RUNTIME_DIR=$1 SMCRUN_LIB=$lib timeout 30 sh "$smcrun" python3 -c '
import socket, threading, hashlib, os
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
def srv():
    c, _ = ls.accept()
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
threading.Thread(target=srv, daemon=True).start()
data = os.urandom(300000)
s = socket.create_connection(ls.getsockname(), timeout=20)
got = bytearray()
def rd():
    while len(got) < len(data):
        b = s.recv(65536)
        if not b:
            break
        got.extend(b)
t = threading.Thread(target=rd); t.start()
s.sendall(data); t.join(20)
print("echo", "right" if bytes(got) == data else "WRONG (%d of %d bytes)" % (len(got), len(data)))
'
}
mkdir -p "$tmp/rootdir" "$tmp/userdir"
chmod 0777 "$tmp/rootdir"   # (smcd itself would refuse it; the impostor got there first)
if impostor "$tmp/rootdir" "$tmp/imp1"; then
        out=$(echo_pair "$tmp/rootdir" 2>&1)
        sleep 0.5
        n=$(sed -n 's/^read //p' "$tmp/imp1.out" | tail -n 1)
        n=${n:-0}
        if echo "$out" | grep -q "echo right" && [ "$n" = 0 ]; then
                ok "2: a root client ignores a control socket of uid 65534 in root's 0777 directory: TCP, data right, the impostor read $n bytes"
        else
                nok "2: a root client ignores a control socket of uid 65534 in root's 0777 directory: client '$out', impostor read $n bytes"
        fi
else
        nok "2: the impostor did not start: $(cat "$tmp/imp1.out")"
fi
chown 65534 "$tmp/userdir"
chmod 0755 "$tmp/userdir"
if impostor "$tmp/userdir" "$tmp/imp2"; then
        out=$(echo_pair "$tmp/userdir" 2>&1)
        sleep 0.5
        n=$(sed -n 's/^read //p' "$tmp/imp2.out" | tail -n 1)
        n=${n:-0}
        if echo "$out" | grep -q "echo right" && [ "$n" -gt 0 ]; then
                ok "3: a root client talks to the control socket of its directory's owner (uid 65534): HELLO read ($n bytes), data right"
        else
                nok "3: a root client talks to the control socket of its directory's owner: client '$out', it read $n bytes"
        fi
else
        nok "3: the private listener did not start: $(cat "$tmp/imp2.out")"
fi
exit $failed
