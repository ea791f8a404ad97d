#!/bin/bash
# smcd restarts while SMC-D connections are open (issue 7 item 3, in part):
#   - a 256 MiB transfer (paced over ~6 s, SHA-256 checked by the receiver) keeps
#     flowing across two restarts of smcd, one by SIGTERM (a clean stop, as systemctl
#     restart) and one by SIGKILL: smcd is not on the SMC-D data path;
#   - a connection made while smcd is away is plain TCP, every byte right;
#   - the server (one process under smcrun, no fork) registers its listener again with
#     the new smcd on its next accept, so connections after that are SMC-D again,
#     counted by the new smcd;
#   - processes that mapped buffers of the old smcd (the server, and the client of the
#     long transfer, which makes 3 more connections afterwards) map the new smcd's
#     buffers even where it reuses an old buffer id (before the fix the server read
#     another connection's buffer: early EOF, EPIPE, a hung writer).
#   - the new smcd knows the connection made before it started once its processes
#     re-register it (REREG): the processes that move data do so by themselves within
#     about a second (smcd's instance file), others on their first request: both
#     endpoints joined
#     into one connection (stats: rereg_total 2, restored_current 2, conns_current 1),
#     and their closes are known closes (close_unknown 0, restored_current 0);
#   - a process that asks the new smcd nothing before it closes its connection (its
#     control connection still goes to the killed smcd) re-registers it at the close
#     and the close is counted (rereg_total 4 with its server's endpoint).
#   - `smcctl -j connections` (on a private system bus) lists the two restored
#     endpoints: state "restored", mode SMCD, the transfer's ports, null byte counters.
#   - a new smcd that hangs after writing its instance file stalls no transfer (each
#     send of a 96 MiB transfer takes < 1 s; it took 3.2 s before the idle path's
#     timeouts and back-off), and the real smcd after it learns both ends.
# Args: SMCD LIBSMCRUN SMCRUN SMCCTL
set -u
smcd=$1 lib=$2 smcrun=$3 smcctl=$4
here=$(dirname "$0")
tmp=$(mktemp -d /tmp/smcd-test-restart.XXXXXX)
chmod 0755 "$tmp"
spid= srv= BUS_PID=
trap '[ -n "$srv" ] && kill -KILL $srv 2>/dev/null; [ -n "${hold2:-}" ] && kill -KILL $hold2 2>/dev/null; [ -n "${hold3:-}" ] && kill -KILL $hold3 2>/dev/null; [ -n "${hold4:-}" ] && kill -KILL $hold4 2>/dev/null; [ -n "$spid" ] && kill $spid 2>/dev/null; [ -n "$BUS_PID" ] && kill $BUS_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
[ -n "${KEEP_TMP:-}" ] && trap "[ -n \"\$srv\" ] && kill -KILL \$srv 2>/dev/null; [ -n \"\$spid\" ] && kill \$spid 2>/dev/null; wait 2>/dev/null" EXIT
failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

# a sanitizer build of libsmcrun.so needs its runtime preloaded (smcrun-env.sh)
san=$(ldd "$lib" | awk '$1 ~ /^lib(a|ub|t|hwa)san\.so/ { print $3 }' | paste -sd:)
export SMCRUN_LIB=$(realpath "$lib") SMCD_RUNTIME_DIR=$tmp/run
# (always called in a subshell, in the background or in $(...): exec, so that $! is
# the program itself and the cleanup's kill reaches it)
run() {
        if [ -n "$san" ]; then
                LD_PRELOAD="$san" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" exec sh "$smcrun" "$@"
        else
                exec sh "$smcrun" "$@"
        fi
}

start_smcd() {
        mkdir -p "$tmp/run"
        # a killed smcd leaves its socket behind: wait for the new one's
        rm -f "$tmp/run/smcd.sock"
        "$smcd" --runtime-dir "$tmp/run" >>"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do [ -S "$tmp/run/smcd.sock" ] && return 0; sleep 0.05; done
        nok "smcd did not start: $(tail -5 "$tmp/smcd.log")"
        return 1
}

# stat KEY: smcd's "smcd" counter KEY from a fresh stats.json
stat() {
        rm -f "$tmp/run/stats.json"
        kill -USR1 "$spid"
        for _ in $(seq 250); do [ -s "$tmp/run/stats.json" ] && break; sleep 0.02; done
        python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["smcd"][sys.argv[2]])' \
                "$tmp/run/stats.json" "$1" 2>/dev/null || echo "?"
}

# shellcheck source=tests/lib-bus.sh
. "$here/lib-bus.sh"
start_bus "$tmp" bus || exit 1

start_smcd || exit 1
run python3 "$here/apps/restart-xfer.py" server "$tmp/port" >"$tmp/server.log" 2>&1 &
srv=$!
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port" 2>/dev/null)
[ -n "$port" ] || { nok "server did not start: $(cat "$tmp/server.log")"; exit 1; }

# the long transfer
# (paced over 20 s: it must outlast the restarts and checks below, which take longer
# with the sanitizer builds' slower python start-up)
run python3 "$here/apps/restart-xfer.py" client "$port" $((256 << 20)) 20 3 "$tmp/trigger" >"$tmp/long.out" 2>&1 &
long=$!
# wait until it is connected (python under smcrun starts slowly on a loaded machine)
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" = 1 ] && break
        sleep 0.25
done
[ "$n" = 1 ] && ok "the transfer is SMC-D (smcd counts 1 server connection)" \
        || nok "the transfer is not SMC-D: conns_server $n"
# a connection whose process then waits, asking smcd nothing, until it closes
run python3 "$here/apps/restart-xfer.py" hold "$port" "$tmp/go" >"$tmp/hold.out" 2>&1 &
hold=$!
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" = 2 ] && break
        sleep 0.25
done
[ "$n" = 2 ] || nok "the second connection is not SMC-D: conns_server $n"
# another such connection, whose client is killed while idle after the restarts
run python3 "$here/apps/restart-xfer.py" hold "$port" "$tmp/go2" >"$tmp/hold2.out" 2>&1 &
hold2=$!
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" = 3 ] && break
        sleep 0.25
done
[ "$n" = 3 ] || nok "the third connection is not SMC-D: conns_server $n"
# and one whose two processes close it while no smcd runs, the client staying 4 s
run python3 "$here/apps/restart-xfer.py" hold "$port" "$tmp/go3" 4 >"$tmp/hold3.out" 2>&1 &
hold3=$!
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" = 4 ] && break
        sleep 0.25
done
[ "$n" = 4 ] || nok "the fourth connection is not SMC-D: conns_server $n"

# restart 1: SIGTERM (a clean stop), a connection while smcd is away, start again
kill -TERM "$spid"; wait "$spid"; rc=$?; spid=
[ $rc = 0 ] && ok "smcd stopped by SIGTERM (exit 0) with a connection open" || nok "smcd exit $rc on SIGTERM"
if out=$(run python3 "$here/apps/restart-xfer.py" client "$port" $((1 << 20)) 0 2>&1); then
        ok "while smcd is away: a new connection works (TCP): $out"
else
        nok "while smcd is away: $out"
fi
start_smcd || exit 1
sleep 1.5

# restart 2: SIGKILL; while no smcd runs, the fourth connection ends (its closes
# reach no smcd: each process keeps its close for the next one)
kill -KILL "$spid"; wait "$spid" 2>/dev/null; spid=
touch "$tmp/go3"
for _ in $(seq 100); do [ -s "$tmp/go3.done" ] && break; sleep 0.05; done
case "$(cat "$tmp/go3.done" 2>/dev/null)" in
ok*) ok "a connection closed while no smcd runs: $(cat "$tmp/go3.done")" ;;
*) nok "the connection closed while no smcd runs: $(cat "$tmp/go3.done" "$tmp/hold3.out" 2>/dev/null)" ;;
esac
sleep 0.3 # (its server thread closes its end after the answer)
start_smcd || exit 1

# before any process tells it anything, the new smcd knows every connection from the
# endpoint table the killed one left: the four connections' eight endpoints, idle
# ones too (and the fourth's, closed meanwhile: its processes still run), each with
# the pid of its process
# (restored_current 7 once the server told its kept close of the fourth: it may be
# that fast)
ld=$(stat restored_loaded) rc=$(stat restored_current) cc=$(stat conns_current)
[ "$ld" = 8 ] && { [ "$rc" = 8 ] || [ "$rc" = 7 ]; } && [ "$cc" = 4 ] &&
        ok "from the endpoint table at once: restored_loaded 8, restored_current $rc, conns_current 4" ||
        nok "from the endpoint table: restored_loaded $ld restored_current $rc conns_current $cc (want 8 8|7 4)"
for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
if "$smcctl" -j connections >"$tmp/conns0.json" 2>"$tmp/conns.err" &&
   python3 - "$tmp/conns0.json" "$srv" "$long" "$hold" "$hold2" "$hold3" >"$tmp/conns0.out" 2>&1 <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["mode"] == "SMCD"]
srv, long, hold, hold2, hold3 = (int(x) for x in sys.argv[2:])
# (8, unless the server told its kept close of the fourth already, or the fourth's
# client exited)
assert 6 <= len(rows) <= 8 and all(r["state"] in ("restored", "closed-by-peer") for r in rows), rows
cli = sorted(r["pid"] for r in rows if r["role"] == "client")
assert {long, hold, hold2} <= set(cli) <= {long, hold, hold2, hold3}, (cli, rows)
assert all(r["pid"] == srv for r in rows if r["role"] == "server"), rows
print("clients %s, server %d" % (cli, srv))
PY
then
        ok "smcctl connections lists the endpoints with their processes: $(cat "$tmp/conns0.out")"
else
        nok "smcctl connections from the endpoint table: $(cat "$tmp/conns.err" "$tmp/conns0.out")"
fi
# the idle client killed: its process's exit ends its endpoint (smcd watches the
# pids the table names)
h2pid=$hold2
kill -KILL "$hold2"; wait "$hold2" 2>/dev/null; hold2=
gone() { # gone PID: no endpoint of process PID is listed
        "$smcctl" -j connections 2>/dev/null | python3 -c 'import json, sys; sys.exit(any(r["pid"] == int(sys.argv[1]) for r in json.load(sys.stdin)))' "$1"
}
for _ in $(seq 50); do gone "$h2pid" && break; sleep 0.1; done
gone "$h2pid" && ok "an idle client killed after the restart: its endpoint ends with it" ||
        nok "after killing an idle client (pid $h2pid): its endpoint is still listed"
# the fourth connection: the server process, which moves data, tells its pending
# close within about a second; the client's end goes when its process exits (4 s)
wait "$hold3"; hold3=
for _ in $(seq 100); do [ "$(stat restored_current)" = 4 ] && break; sleep 0.1; done
rc=$(stat restored_current) cu=$(stat close_unknown)
[ "$rc" = 4 ] && [ "$cu" = 0 ] &&
        ok "the connection closed while no smcd ran: its server's kept close told (REREG, CLOSE), its client's end gone with its process (restored_current 4, close_unknown 0)" ||
        nok "the connection closed while no smcd ran: restored_current $rc close_unknown $cu (want 4 0)"

# no request yet: the processes that move data notice the new smcd by themselves (its
# instance file, read when a send or receive waits, at most once a second) and
# confirm their endpoints: the transfer's two ends, and with the server's the waiting
# connections' server ends (the clients wait in sleep(), outside the library)
for _ in $(seq 80); do [ "$(stat rereg_total)" = 5 ] && break; sleep 0.1; done
rr=$(stat rereg_total)
[ "$rr" = 5 ] && ok "the processes moving data confirmed their endpoints without a request (rereg_total 5, with the kept close)" ||
        nok "without a request: rereg_total $rr (want 5)"

# the long transfer's client makes a side connection (TCP: the server registers its
# listener again on the accept after it)
touch "$tmp/trigger"
for _ in $(seq 300); do [ -s "$tmp/trigger.done" ] && break; sleep 0.05; done
side=$(cat "$tmp/trigger.done" 2>/dev/null)
case "$side" in
ok*) ok "a side connection during the transfer, after the restarts: $side" ;;
*) nok "the side connection during the transfer: ${side:-no answer}" ;;
esac
# (the server registers again on its accept() after the one that returned the side
# connection: perhaps after the side connection's answer)
# Re-registered now: the transfer's two endpoints (joined) and the server's end of
# the waiting connection (its client asked nothing yet)
if kill -0 "$long" 2>/dev/null; then
        # smcctl connections: both restored endpoints, the transfer's ports
        for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
        if "$smcctl" -j connections >"$tmp/conns.json" 2>"$tmp/conns.err" &&
           python3 - "$tmp/conns.json" "$port" "$long" >"$tmp/conns.out" 2>&1 <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r["mode"] == "SMCD"]
port = int(sys.argv[2])
assert len(rows) >= 4, rows
assert all(r["state"] == "restored" for r in rows), rows
assert all(r["bytes_tx"] is None and r["bytes_rx"] is None for r in rows), rows
cli = [r for r in rows if r["role"] == "client" and r["pid"] == int(sys.argv[3])][0]
srv = [r for r in rows if r["role"] == "server" and r["peer"] == cli["local"]][0]
assert srv["local"].endswith(":%d" % port) and cli["peer"].endswith(":%d" % port), rows
assert srv["peer"] == cli["local"], rows
assert cli["sndbuf"] == srv["rmb"] and cli["rmb"] == srv["sndbuf"], rows
print("%s <-> %s, rings %d/%d" % (cli["local"], cli["peer"], cli["rmb"], cli["sndbuf"]))
PY
        then
                ok "smcctl connections lists the restored endpoints, the transfer's two crosswise: $(cat "$tmp/conns.out")"
        else
                nok "smcctl connections after re-registration: $(cat "$tmp/conns.err" "$tmp/conns.out") $(cat "$tmp/conns.json" 2>/dev/null)"
        fi
else
        nok "the long transfer ended before the re-registration could be checked (slow machine?)"
fi

# the waiting connection goes on and closes: its first request to the new smcd
touch "$tmp/go"
if wait "$hold"; then
        ok "the waiting connection, across both restarts: $(cat "$tmp/go.done")"
else
        nok "the waiting connection: $(cat "$tmp/go.done" "$tmp/hold.out" 2>/dev/null)"
fi
rr=$(stat rereg_total)
[ "$rr" = 6 ] && ok "its close confirmed it first (rereg_total 6)" ||
        nok "the waiting connection's close did not confirm it: rereg_total $rr (want 6)"

if wait "$long"; then
        ok "256 MiB across two smcd restarts (SIGTERM, SIGKILL), then 3 more connections from that process, checked: $(tr '\n' ' ' <"$tmp/long.out")"
else
        nok "256 MiB across two restarts, then 3 more: $(tr '\n' ' ' <"$tmp/long.out")"
fi
# both ends closed it with CLOSE under their new ids (the server's thread closes it
# after its answer; give it a moment)
for _ in $(seq 50); do [ "$(stat restored_current)" = 0 ] && break; sleep 0.1; done
rc=$(stat restored_current) cu=$(stat close_unknown)
[ "$rc" = 0 ] && [ "$cu" = 0 ] && ok "the re-registered endpoints closed as known endpoints (restored_current 0, close_unknown 0)" ||
        nok "after the transfer: restored_current $rc close_unknown $cu (want 0 0)"

# new connections: the first may still be TCP (the listener registers again on the
# accept it wakes for), then SMC-D, counted by the new smcd
smc=0
for i in $(seq 5); do
        if ! out=$(run python3 "$here/apps/restart-xfer.py" client "$port" $((4 << 20)) 0 2>&1); then
                nok "connection $i after the restarts: $out"
                break
        fi
        smc=$(stat conns_server)
        [ "$smc" != "?" ] && [ "$smc" -ge 1 ] && break
        sleep 1.1 # the listener tries again at most every second
done
[ "$smc" != "?" ] && [ "$smc" -ge 1 ] && ok "after the restarts new connections are SMC-D again (after $i, the listener registered again)" \
        || nok "after the restarts no connection is SMC-D (conns_server $smc)"

# restart 3: the smcd that comes next hangs after writing its instance file (a stand-in
# that listens on the control socket and never accepts nor answers), for 4 s, then a
# real smcd starts. A transfer going on meanwhile must keep flowing: each check of the
# idle path waits at most 0.2 s for the stand-in, then 2 s, 4 s ... pass before the
# next (before the fix every check stalled a send or receive for the 2 s HELLO
# timeout, every second). Once the real smcd is up, the transfer's two processes
# re-register their ends by themselves.
n0=$(stat conns_server)
run python3 "$here/apps/restart-xfer.py" client "$port" $((96 << 20)) 16 >"$tmp/hung.out" 2>&1 &
xfer=$!
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" != "?" ] && [ "$n" -gt "$n0" ] && break
        sleep 0.1
done
[ "$n" != "?" ] && [ "$n" -gt "$n0" ] || nok "the transfer of restart 3 is not SMC-D (conns_server $n0 -> $n)"
kill -KILL "$spid"; wait "$spid" 2>/dev/null; spid=
rm -f "$tmp/run/smcd.sock"
python3 - "$tmp/run" <<'PY' &
import os, signal, socket, struct, sys, time
d = sys.argv[1]
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind(d + "/smcd.sock")
s.listen(2)  # once the backlog is full, connect() waits too
fd = os.open(d + "/instance", os.O_WRONLY | os.O_CREAT, 0o644)
os.pwrite(fd, struct.pack("=I", 0x5eed1e55), 0)
os.close(fd)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
while True:
    time.sleep(1)
PY
hung=$!
sleep 4
kill -TERM "$hung"; wait "$hung" 2>/dev/null
start_smcd || exit 1
for _ in $(seq 150); do [ "$(stat rereg_total)" = 2 ] && break; sleep 0.1; done
rr=$(stat rereg_total)
[ "$rr" = 2 ] && ok "after the hung smcd, the real one knows the transfer again (rereg_total 2, both ends)" ||
        nok "after the hung smcd: rereg_total $rr (want 2)"
if wait "$xfer"; then
        longest=$(awk '/^ok/ { print $5 }' "$tmp/hung.out")
        if awk -v l="$longest" 'BEGIN { exit !(l != "" && l < 1.0) }'; then
                ok "96 MiB across a hung smcd (4 s) and a new one, checked, longest send ${longest}s (< 1 s)"
        else
                nok "the transfer stalled while smcd hung: longest send ${longest}s: $(cat "$tmp/hung.out")"
        fi
else
        nok "the transfer across the hung smcd: $(tr '\n' ' ' <"$tmp/hung.out")"
fi

# restart 4: a connection closed while smcd is stopped (both CLOSEs wait unread in its
# socket), then smcd killed: the next smcd restores its two endpoints from the table.
# The server process, on its next request, re-registers what it holds (nothing of
# them) and sends REREG_DONE: its endpoint ends (restored_swept); the client's, whose
# process sleeps, ends with that process.
# (the first connection after restart 3 is TCP: the server's listener registers again
# on the accept after it)
(run python3 "$here/apps/restart-xfer.py" client "$port" $((1 << 20)) 0 >/dev/null 2>&1)
sleep 1.1
n0=$(stat conns_server)
run python3 "$here/apps/restart-xfer.py" hold "$port" "$tmp/go4" 3 >"$tmp/hold4.out" 2>&1 &
hold4=$!
for _ in $(seq 60); do
        n=$(stat conns_server)
        [ "$n" != "?" ] && [ "$n" -gt "$n0" ] && break
        sleep 0.25
done
[ "$n" != "?" ] && [ "$n" -gt "$n0" ] || nok "the connection of restart 4 is not SMC-D (conns_server $n0 -> $n)"
kill -STOP "$spid"
touch "$tmp/go4"
for _ in $(seq 100); do [ -s "$tmp/go4.done" ] && break; sleep 0.05; done
sleep 0.3
kill -KILL "$spid"; kill -CONT "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=
start_smcd || exit 1
ld=$(stat restored_loaded)
[ "$ld" = 2 ] && ok "closed while smcd was stopped, then smcd killed: the new one restores both ends from the table" ||
        nok "closed while smcd was stopped: restored_loaded $ld (want 2)"
out=$(run python3 "$here/apps/restart-xfer.py" client "$port" $((1 << 20)) 0 2>&1) ||
        nok "a connection after restart 4: $out"
for _ in $(seq 50); do [ "$(stat restored_swept)" = 1 ] && break; sleep 0.1; done
sw=$(stat restored_swept)
[ "$sw" = 1 ] && ok "the server's next request ends its end of it (REREG_DONE: restored_swept 1)" ||
        nok "after the server's next request: restored_swept $sw (want 1)"
wait "$hold4"; hold4=
for _ in $(seq 50); do [ "$(stat restored_current)" = 0 ] && break; sleep 0.1; done
rc=$(stat restored_current)
[ "$rc" = 0 ] && ok "... and the client's end with its process (restored_current 0)" ||
        nok "after the client's exit: restored_current $rc (want 0)"

# a hung smcd and new connections: the connect of a process whose control connection is
# established waits for CONNECT's timeout (10 s), then goes on over TCP (a loopback
# destination is never SMC-R), before smcd goes on (15 s: helper 110 saw it wait for
# smcd, up to 70 s, then fail with ECONNRESET); smcd, reading the CONNECT late, sets
# nothing up for it (its socket is connected: no connection queued to the listener with
# nobody at the client's end); every byte right; the next ones are quick again
# (stopped once the first connection is done: python under smcrun, and more so under
# a sanitizer, may take longer than a fixed pause to start)
run python3 -u "$here/apps/restart-xfer.py" client "$port" $((1 << 20)) 0 3 >"$tmp/more.out" 2>&1 &
more=$!
for _ in $(seq 200); do grep -q '^ok ' "$tmp/more.out" 2>/dev/null && break; sleep 0.05; done
kill -STOP "$spid"
sleep 15
kill -CONT "$spid"
wait "$more"; mrc=$?
if [ $mrc = 0 ] && python3 - "$tmp/more.out" >"$tmp/more.chk" 2>&1 <<'PY'
import sys
t = [float(l.split()[-1]) for l in open(sys.argv[1]) if l.startswith("ok ")]
assert len(t) == 4, t
assert t[0] < 1 and 9 <= t[1] < 14 and t[2] < 1 and t[3] < 1, t
print("connect times %s s" % " ".join("%.3f" % x for x in t))
PY
then
        ok "a connect while smcd hangs (15 s) goes on over TCP after 10 s, the next ones are quick, all checked ($(cat "$tmp/more.chk"))"
else
        nok "connects while smcd hangs: $(cat "$tmp/more.chk" "$tmp/more.out" | tr '\n' ' ')"
fi

# the same from a process that lives on until smcd reads the CONNECT: smcd finds the
# client's socket connected and sets nothing up for it (no connection queued to the
# listener with nobody at the client's end)
rm -f "$tmp/hc.stopped" "$tmp/hc.resumed"
run python3 "$here/apps/hung-connect.py" "$tmp/hc.stopped" "$tmp/hc.resumed" >"$tmp/hc.out" 2>&1 &
hc=$!
for _ in $(seq 400); do [ -e "$tmp/hc.stopped" ] && break; sleep 0.05; done
kill -STOP "$spid"
sleep 15
kill -CONT "$spid"
touch "$tmp/hc.resumed"
wait "$hc" && ok "$(cat "$tmp/hc.out")" || nok "$(tr '\n' ' ' <"$tmp/hc.out")"
grep -q "after the client stopped waiting" "$tmp/smcd.log" &&
        ok "smcd logged the CONNECT it read after its client stopped waiting" ||
        nok "smcd did not log the late CONNECT: $(tail -3 "$tmp/smcd.log" | tr '\n' ' ')"

kill -KILL "$srv"; wait "$srv" 2>/dev/null; srv=

# A server that forks a child per connection and blocks in accept() again at once:
# the listener keeps both ends of its accept channel, so the channel outlives smcd;
# the first connection after the restart is TCP (no smcd knows the listener), and
# its accept gives the channel to the new smcd (LISTEN F_REVIVE), so the next ones
# are SMC-D again, whether the children close their copy or keep a dup of it (shared),
# and when the server exec'd itself with the listener, before the restart or after it
# (the copy of smcd's end of the channel goes with it in SMCRUN_INHERIT's "L:" entry).
fork_echo() { # PORT: one connection, 100000 random bytes echoed and compared
        run python3 -c '
import os, socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
d = os.urandom(100000)
c.sendall(d)
c.shutdown(socket.SHUT_WR)
g = b""
while True:
    x = c.recv(65536)
    if not x:
        break
    g += x
sys.exit(0 if g == d else 1)' "$1"
}
for mode in close dup exec usr1; do
        rm -f "$tmp/fl.port"
        run python3 "$here/apps/fork-listener.py" "$mode" "$tmp/fl.port" >"$tmp/fl-$mode.log" 2>&1 &
        srv=$!
        for _ in $(seq 200); do [ -s "$tmp/fl.port" ] && break; sleep 0.05; done
        flport=$(cat "$tmp/fl.port" 2>/dev/null)
        bad=0
        (fork_echo "$flport") || bad=$((bad + 1))
        (fork_echo "$flport") || bad=$((bad + 1))
        kill -TERM "$spid"; wait "$spid"; spid=
        start_smcd || exit 1
        if [ $mode = usr1 ]; then
                rm -f "$tmp/fl.port"
                kill -USR1 "$srv"
                for _ in $(seq 200); do [ -s "$tmp/fl.port" ] && break; sleep 0.05; done
        fi
        for _ in 1 2 3 4 5; do
                (fork_echo "$flport") || bad=$((bad + 1))
                sleep 1.2
        done
        n=$(stat conns_server)
        case $mode in exec | usr1) grep -q "exec'd image" "$tmp/fl-$mode.log" || bad=$((bad + 100)) ;; esac
        case $mode in
        exec) what="server exec'd with its listener, children 'close' it" ;;
        usr1) what="server exec'd with its listener after the restart, children 'close' it" ;;
        *) what="children '$mode' the listener" ;;
        esac
        [ $bad = 0 ] && [ "$n" -ge 3 ] 2>/dev/null &&
                ok "fork-per-connection server, $what: 7 echoes right ($bad bad), after an smcd restart $n of 5 over SMC-D (want >= 3)" ||
                nok "fork-per-connection server, $what: $bad bad echoes, after an smcd restart $n of 5 over SMC-D: $(tail -3 "$tmp/fl-$mode.log" | tr '\n' ' ')"
        kill -KILL "$srv"; wait "$srv" 2>/dev/null; srv=
done

# the control socket removed (a cleaner of /tmp, a stray rm) while smcd runs: smcd binds
# it again at once, so new connections are SMC-D and a second smcd on the directory
# still stops (its lock); moved away: the same (helper 110: smcd ran on unreachable,
# every connect fell back to TCP, and no new smcd could start there)
for how in rm mv; do
        ino=$(command stat -c %i "$tmp/run/smcd.sock")
        case $how in rm) rm "$tmp/run/smcd.sock" ;; mv) mv "$tmp/run/smcd.sock" "$tmp/run/old.sock" ;; esac
        for _ in $(seq 100); do [ -S "$tmp/run/smcd.sock" ] && break; sleep 0.05; done
        ino2=$(command stat -c %i "$tmp/run/smcd.sock" 2>/dev/null)
        out=$(run python3 -c '
import socket
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(1)
c = socket.create_connection(ls.getsockname()); s, _ = ls.accept()
c.sendall(b"x" * 100000); d = b""
while len(d) < 100000: d += s.recv(65536)
print(c.getsockopt(286, 0x5301), s.getsockopt(286, 0x5301), d == b"x" * 100000)' 2>&1)
        "$smcd" --runtime-dir "$tmp/run" >"$tmp/second.log" 2>&1; rc2=$?
        if [ -n "$ino2" ] && [ "$ino2" != "$ino" ] && [ "$out" = "1 1 True" ] && [ $rc2 = 1 ] &&
           grep -q "smcd.sock was removed: bound it again" "$tmp/smcd.log"; then
                ok "control socket removed ($how): smcd binds it again, the next connection is SMC-D, a second smcd exits 1"
        else
                nok "control socket removed ($how): inode $ino -> ${ino2:-none}, connection '$out', second smcd exit $rc2 $(tail -2 "$tmp/second.log" | tr '\n' ' ')"
        fi
done
rm -f "$tmp/run/old.sock"
# replaced by another file (renamed over it): left alone and logged (helper 111: not
# logged); removed again, smcd binds its socket again
echo x >"$tmp/run/other"; mv "$tmp/run/other" "$tmp/run/smcd.sock"
for _ in $(seq 100); do grep -q "smcd.sock was replaced by another file" "$tmp/smcd.log" && break; sleep 0.05; done
grep -q "smcd.sock was replaced by another file" "$tmp/smcd.log" && [ -f "$tmp/run/smcd.sock" ] &&
        ok "control socket replaced by a regular file: left alone, logged" ||
        nok "control socket replaced: $(tail -2 "$tmp/smcd.log" | tr '\n' ' ')"
rm "$tmp/run/smcd.sock"
for _ in $(seq 100); do [ -S "$tmp/run/smcd.sock" ] && break; sleep 0.05; done
[ -S "$tmp/run/smcd.sock" ] && ok "... removed: smcd binds its socket again" || nok "no socket after the foreign file went"

kill -TERM "$spid"; wait "$spid"; rc=$?; spid=
[ $rc = 0 ] || nok "smcd exit $rc at the end: $(tail -5 "$tmp/smcd.log")"
exit $failed
