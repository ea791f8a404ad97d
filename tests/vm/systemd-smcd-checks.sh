#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs INSIDE the VM (tests/vm/run-vm --systemd), with systemd as PID 1, the system bus,
# and smcd installed from the payload (`meson install --destdir`). One line per check
# ("ok N - ..." / "not ok N - ..."), a summary line, exit 1 if any check failed.
# Driven by tests/vm/test-systemd-smcd.sh.
set -u
export SYSTEMD_PAGER='' SYSTEMD_COLORS=0 LC_ALL=C.UTF-8

n=0
failed=0
last=$SECONDS
# each line ends with the seconds since the previous one (TCG: everything is slow)
ok() { n=$((n + 1)); echo "ok $n - $* [+$((SECONDS - last)) s]"; last=$SECONDS; }
notok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $* [+$((SECONDS - last)) s]"; last=$SECONDS; }
check() { # check DESCRIPTION COMMAND...: ok if COMMAND exits 0
        local d=$1; shift
        if "$@"; then ok "$d"; else notok "$d"; fi
}
info() { echo "# $*"; }
prop() { systemctl show smcd.service -P "$1" 2>/dev/null; }
# wait_for SECONDS COMMAND...: poll COMMAND every 0.5 s until it succeeds
wait_for() {
        local end=$((SECONDS + $1)); shift
        until "$@"; do
                [ $SECONDS -lt $end ] || return 1
                sleep 0.5
        done
}
is_active() { [ "$(prop ActiveState)" = active ] && [ "$(prop SubState)" = running ]; }
json_get() { # json_get EXPR: evaluate EXPR on the JSON document on stdin (python3)
        python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}
conns_total() { smcctl -j stats | json_get 'd["smcd"]["conns_client"] + d["smcd"]["conns_server"]'; }
dump_smcd() {
        systemctl status smcd.service --no-pager -l 2>&1 | sed 's/^/#   /'
        journalctl -b -u smcd.service -u smcd.socket --no-pager 2>&1 | tail -20 | sed 's/^/#   /'
}

work=/root/smcd-vm-test
mkdir -p "$work"
cd "$work" || exit 1

info "kernel $(uname -r), $(systemctl --version | head -1), uptime $(cut -d' ' -f1 /proc/uptime) s"
info "smcd $(command -v smcd), smcctl $(command -v smcctl), smcrun $(command -v smcrun)"

# --- 0. what meson install put in place is seen by systemd and dbus ---
check "systemd knows smcd.service and smcd.socket" \
        sh -c 'systemctl cat smcd.service smcd.socket >/dev/null'
check "systemctl start smcd.socket" systemctl start smcd.socket
check "D-Bus policy for org.smcd.smcd1 is installed where dbus-daemon reads it" \
        test -n "$(grep -l org.smcd.smcd1 /usr/share/dbus-1/system.d/*.conf /etc/dbus-1/system.d/*.conf 2>/dev/null)"

# --- 1. start: Type=notify, so "active (running)" means smcd sent READY=1 ---
t0=$SECONDS
if systemctl start smcd.service && is_active; then
        ok "systemctl start smcd: active (running) after READY=1 ($((SECONDS - t0)) s)"
else
        notok "systemctl start smcd: state $(prop ActiveState)/$(prop SubState)"
        dump_smcd
fi
pid1=$(prop MainPID)

# --- 2. smcctl stats answers over the system bus ---
if out=$(smcctl stats 2>&1) && grep -q conns_client <<<"$out"; then
        ok "smcctl stats answers"
else
        notok "smcctl stats: $out"
fi

# --- 3. a tunable persists across a restart ---
check "smcctl tunables set inline=on" smcctl tunables set inline=on
v=$(smcctl tunables get inline 2>&1)
check "smcctl tunables get inline = on (before restart; got '$v')" test "$v" = on
if systemctl restart smcd.service && is_active && [ "$(prop MainPID)" != "$pid1" ]; then
        ok "systemctl restart smcd: active again, new main pid $(prop MainPID)"
else
        notok "systemctl restart smcd: state $(prop ActiveState)/$(prop SubState), pid $(prop MainPID)"
        dump_smcd
fi
v=$(smcctl tunables get inline 2>&1)
check "smcctl tunables get inline = on after the restart (got '$v')" test "$v" = on

# --- 4. a connection through smcrun: in `smcctl connections` while open, in stats after ---
cat >server.py <<'EOF'
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
c, _ = s.accept()
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
c.close()
EOF
cat >client.py <<'EOF'
import hashlib, os, socket, sys, time
port, ready, go = int(sys.argv[1]), sys.argv[2], sys.argv[3]
data = os.urandom(1 << 20)
c = socket.create_connection(("127.0.0.1", port))
got = bytearray()
for i in range(0, len(data), 65536):
    c.sendall(data[i:i + 65536])
    while len(got) < i + 65536:
        got += c.recv(1 << 20)
assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), "echo differs"
open(ready, "w").close()
for _ in range(600):               # keep the connection open until the test looked
    if os.path.exists(go):
        break
    time.sleep(0.1)
c.shutdown(socket.SHUT_WR)
assert c.recv(1) == b""
c.close()
print("client: 1 MiB echoed, sha256 equal")
EOF
rm -f port ready go
before=$(conns_total 2>/dev/null || echo -1)
timeout 120 smcrun python3 server.py port &
spid=$!
wait_for 30 test -s port
port=$(cat port 2>/dev/null)
timeout 120 smcrun python3 client.py "${port:-0}" ready go >client.out 2>&1 &
cpid=$!
if wait_for 60 test -e ready; then
        rows=$(smcctl -j connections --port "$port" | json_get 'len(d)' 2>&1)
        smcctl connections | sed 's/^/#   /'
        modes=$(smcctl -j connections --port "$port" | json_get '",".join(sorted(set(c["mode"] for c in d)))' 2>&1)
        if [ "$rows" -ge 2 ] 2>/dev/null; then
                ok "smcctl connections shows the open smcrun connection ($rows endpoints, mode $modes)"
        else
                notok "smcctl connections shows the open smcrun connection (got '$rows')"
        fi
else
        notok "smcrun client/server connected and echoed 1 MiB"
fi
touch go
wait $cpid; crc=$?
wait $spid; src=$?
sed 's/^/#   /' client.out
check "smcrun python3 echo: 1 MiB verified, client and server exited 0 ($crc, $src)" \
        test $crc -eq 0 -a $src -eq 0
after=$(conns_total 2>/dev/null || echo -1)
check "smcctl -j stats: SMC-D connection counters grew ($before -> $after)" \
        test "$after" -gt "$before"
wait_for 10 test "$(smcctl -j connections --port "$port" | json_get 'len(d)' 2>/dev/null)" = 0
check "smcctl connections: the connection is gone after close" \
        test "$(smcctl -j connections --port "$port" | json_get 'len(d)' 2>/dev/null)" = 0

# --- 5. the watchdog ---
wd=$(prop WatchdogUSec)
case $wd in
"" | 0 | infinity)
        info "SKIP watchdog checks: smcd.service has no WatchdogSec (WatchdogUSec='$wd')"
        ;;
*)
        # "10s", "1min 30s", "500ms" -> whole seconds, rounded up
        wd_s=$(python3 -c 'import re, sys
m = re.fullmatch(r"(?:(\d+)min)? ?(?:(\d+(?:\.\d+)?)s)? ?(?:(\d+)ms)?", sys.argv[1])
print(int(int(m[1] or 0) * 60 + float(m[2] or 0) + int(m[3] or 0) / 1000 + 0.999) if m else 10)' "$wd")
        ts1=$(prop WatchdogTimestampMonotonic)
        sleep $((wd_s / 2 + 2))
        ts2=$(prop WatchdogTimestampMonotonic)
        check "watchdog fed: WatchdogTimestamp advanced within WatchdogSec/2+2 s ($ts1 -> $ts2 us; WatchdogSec=$wd)" \
                test "${ts2:-0}" -gt "${ts1:-0}"
        check "smcd still active after $((wd_s / 2 + 2)) s" is_active
        # a stopped smcd no longer feeds it: systemd kills it (SIGABRT, then SIGCONT) and,
        # Restart=on-failure, starts it again
        pid2=$(prop MainPID)
        restarts=$(prop NRestarts)
        kill -STOP "$pid2"
        t0=$SECONDS
        if wait_for $((wd_s * 2 + 40)) sh -c '[ "$(systemctl show smcd.service -P NRestarts)" -gt '"$restarts"' ] &&
                        [ "$(systemctl show smcd.service -P ActiveState)" = active ]'; then
                ok "SIGSTOPped smcd killed by the watchdog and restarted in $((SECONDS - t0)) s (pid $pid2 -> $(prop MainPID))"
        else
                notok "SIGSTOPped smcd killed by the watchdog and restarted (state $(prop ActiveState), NRestarts $(prop NRestarts))"
                kill -CONT "$pid2" 2>/dev/null
                dump_smcd
        fi
        check "journal records the watchdog timeout" \
                sh -c 'journalctl -b -u smcd.service --no-pager | grep -qi "watchdog timeout"'
        v=$(smcctl tunables get inline 2>&1)
        check "inline = on after the watchdog restart (got '$v')" test "$v" = on
        ;;
esac

# --- 6. the short form, then a clean stop ---
check "smcctl set inline=auto (short for tunables set)" smcctl set inline=auto
v=$(smcctl get inline 2>&1)
check "smcctl get inline = auto (got '$v')" test "$v" = auto

stop_clean() { # stop_clean WHAT
        systemctl stop smcd.service 2>&1 | grep -v "can still be activated by\|smcd.socket$" | sed 's/^/#   /'
        local st res code status
        st=$(prop ActiveState); res=$(prop Result); code=$(prop ExecMainCode); status=$(prop ExecMainStatus)
        # ExecMainCode 1 = CLD_EXITED: smcd exited by itself on SIGTERM
        if [ "$st" = inactive ] && [ "$res" = success ] && [ "$code" = 1 ] && [ "$status" = 0 ]; then
                ok "$1: inactive, result success, exit status 0"
        else
                notok "$1: state $st, result $res, exit code $code status $status"
                dump_smcd
        fi
}
stop_clean "systemctl stop smcd"

# --- 7. activation: over D-Bus (org.smcd.smcd1.service -> smcd.service), by the socket ---
if out=$(smcctl stats 2>&1) && grep -q conns_client <<<"$out" && is_active; then
        ok "D-Bus activation: smcctl stats started smcd.service"
else
        notok "D-Bus activation: smcctl stats with smcd stopped (state $(prop ActiveState)): $(head -3 <<<"$out")"
fi
stop_clean "systemctl stop smcd (after D-Bus activation)"
python3 -c 'import socket; s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); s.connect("/run/smcd/smcd.sock"); s.close()'
if wait_for 60 is_active; then
        ok "socket activation: a connect to /run/smcd/smcd.sock started smcd.service"
else
        notok "socket activation: state $(prop ActiveState)/$(prop SubState)"
        dump_smcd
fi
stop_clean "systemctl stop smcd (after socket activation)"
check "no failed units" sh -c '[ -z "$(systemctl --failed --no-legend --plain | grep -v vm-test)" ]'
systemctl --failed --no-legend --plain | sed 's/^/#   /'

echo "# systemd-smcd: $n checks, $failed failed (uptime $(cut -d' ' -f1 /proc/uptime) s)"
[ $failed -eq 0 ]
