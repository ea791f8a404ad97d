#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Runs INSIDE the VM (tests/vm/run-vm --systemd), with systemd as PID 1, the system bus,
# and smcd installed from the payload (`meson install --destdir`). One line per check
# ("ok N - ..." / "not ok N - ..."), a summary line, exit 1 if any check failed.
# Driven by tests/vm/test-systemd-smcd.sh.
# SMC-R under the unit's sandbox (when the driver passes RXE_PAIR_SETUP, and
# SMCR_XFER for the transfers): a soft-RoCE pair exists before smcd starts; the journal
# must show the RoCE device in use and no "SMC-R unavailable" (the TCP option program
# loaded and attached); SMC-R transfers to a second smcd (not a unit) on the other rxe
# device, with more memory registered than the default RLIMIT_MEMLOCK allows.
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
# py_pid SCRIPT: the pid of the python3 process running SCRIPT (not its wrappers)
py_pid() {
        python3 - "$1" <<'PY'
import os, sys
for p in os.listdir("/proc"):
    try:
        a = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    if len(a) > 1 and os.path.basename(a[0]) == b"python3" and a[1] == sys.argv[1].encode():
        print(p)
        break
else:
    print(0)
PY
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

# --- 0b. SMC-R: a soft-RoCE pair (tests/vm/rxe-pair-setup.sh) before smcd starts ---
smcr=0
if [ -z "${RXE_PAIR_SETUP:-}" ]; then
        info "SKIP SMC-R checks: RXE_PAIR_SETUP is not set"
elif ! command -v rdma >/dev/null || ! modinfo rdma_rxe >/dev/null 2>&1; then
        info "SKIP SMC-R checks: no rdma tool or no rdma_rxe module for $(uname -r)"
elif vars=$(sh "$RXE_PAIR_SETUP" 2>rxe-setup.log); then
        eval "$vars"
        smcr=1
        ok "soft-RoCE pair before smcd starts: $RXE_A_DEV on $RXE_A_NETDEV ($RXE_A_IP), $RXE_B_DEV on $RXE_B_NETDEV ($RXE_B_IP)"
else
        notok "soft-RoCE pair: $(tail -1 rxe-setup.log)"
fi

# --- 1. start: Type=notify, so "active (running)" means smcd sent READY=1 ---
t0=$SECONDS
if systemctl start smcd.service && is_active; then
        ok "systemctl start smcd: active (running) after READY=1 ($((SECONDS - t0)) s)"
else
        notok "systemctl start smcd: state $(prop ActiveState)/$(prop SubState)"
        dump_smcd
fi
pid1=$(prop MainPID)

# --- 1b. SMC-R came up inside the sandbox: the verbs device opened, the TCP option
# program loaded and attached to the cgroup2 root (ProtectControlGroups=yes) ---
if [ $smcr = 1 ]; then
        # root in the unit: its effective set is CapabilityBoundingSet= (capsh: libcap2-bin)
        capeff=$(sed -n 's/^CapEff:[[:space:]]*//p' "/proc/$pid1/status")
        eff=$(capsh --decode="$capeff" 2>/dev/null | sed 's/.*=//' | tr ',' '\n' | sort | xargs)
        bnd=$(prop CapabilityBoundingSet | tr ' ' '\n' | sort | xargs)
        info "$(systemctl show smcd.service -p ProtectControlGroups -p DevicePolicy -p LimitMEMLOCK -p NoNewPrivileges | xargs)"
        check "smcd's effective capabilities are the unit's CapabilityBoundingSet only ('$eff')" \
                test -n "$eff" -a "$eff" = "$bnd"
        # "ready" is logged after SMC-R's set-up: the journal then has all of it
        wait_for 10 sh -c 'journalctl -b -u smcd.service --no-pager -o cat | grep -q " ready ("'
        journal=$(journalctl -b -u smcd.service --no-pager -o cat 2>&1)
        if grep -q "SMC-R: using RoCE device $RXE_A_DEV " <<<"$journal"; then
                ok "journal: $(grep -m1 "SMC-R: using RoCE device $RXE_A_DEV " <<<"$journal")"
        else
                notok "journal: SMC-R: using RoCE device $RXE_A_DEV"
                dump_smcd
        fi
        if grep -q "SMC-R unavailable" <<<"$journal"; then
                notok "journal: no \"SMC-R unavailable\" (got: $(grep -m1 "SMC-R unavailable" <<<"$journal"))"
        else
                ok "journal: no \"SMC-R unavailable\": the SMC TCP option program loaded and attached"
        fi
fi

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
        # --- 4a. systemctl restart with it open: the new smcd lists both ends at once,
        # with their processes (the endpoint table in /run/smcd, kept by
        # RuntimeDirectoryPreserve=; pidfd_open, fallocate, mremap pass the unit's
        # SystemCallFilter=); their closes are counted ---
        if systemctl restart smcd.service && wait_for 30 is_active; then
                wait_for 30 smcctl stats >/dev/null 2>&1
                got=$(smcctl -j connections --port "$port" |
                        json_get '" ".join(sorted("%s:%s" % (c["role"], c["pid"]) for c in d if c["state"] == "restored" and c["pid"] > 0))' 2>&1)
                want="client:$(py_pid client.py) server:$(py_pid server.py)"
                if [ "$got" = "$want" ]; then
                        ok "systemctl restart with the connection open: the new smcd lists both ends at once, with their processes ($got)"
                else
                        notok "systemctl restart with the connection open: restored endpoints '$got' (want '$want')"
                        dump_smcd
                fi
        else
                notok "systemctl restart with a connection open: state $(prop ActiveState)/$(prop SubState)"
                dump_smcd
        fi
        before=$(smcctl -j stats | json_get 'd["smcd"]["conns_closed"] + d["smcd"]["conns_aborted"]' 2>/dev/null || echo -1)
else
        notok "smcrun client/server connected and echoed 1 MiB"
fi
touch go
wait $cpid; crc=$?
wait $spid; src=$?
sed 's/^/#   /' client.out
check "smcrun python3 echo: 1 MiB verified across the restart, client and server exited 0 ($crc, $src)" \
        test $crc -eq 0 -a $src -eq 0
wait_for 10 test "$(smcctl -j stats | json_get 'd["smcd"]["conns_closed"] + d["smcd"]["conns_aborted"]' 2>/dev/null)" -gt "$before"
after=$(smcctl -j stats | json_get 'd["smcd"]["conns_closed"] + d["smcd"]["conns_aborted"]' 2>/dev/null || echo -1)
check "smcctl -j stats: the restored connection's end counted ($before -> $after)" \
        test "$after" -gt "$before"
wait_for 10 test "$(smcctl -j connections --port "$port" | json_get 'len(d)' 2>/dev/null)" = 0
check "smcctl connections: the connection is gone after close" \
        test "$(smcctl -j connections --port "$port" | json_get 'len(d)' 2>/dev/null)" = 0

# --- 4b. SMC-R through the unit's smcd (host A, rxe0) to a second smcd started here
# (host B: not a unit, --roce-dev rxe1): queue pairs and memory registration work in the
# sandbox, and LimitMEMLOCK= lets smcd pin more than the default 8 MiB ---
smcr_stat() { smcctl -j stats | json_get "d['smcr']['$1']"; }
if [ $smcr = 1 ] && [ -x "${SMCR_XFER:-}" ]; then
        mkdir -p "$work/b"
        smcd -v --no-bus --runtime-dir "$work/b" --state-file "$work/b/tunables.json" \
                --roce-dev "$RXE_B_DEV" >smcd-b.log 2>&1 &
        bpid=$!
        wait_for 30 test -S "$work/b/smcd.sock"
        ok0=$(smcr_stat handshakes_ok 2>/dev/null || echo -1)
        rport=7001
        SMCD_RUNTIME_DIR=$work/b timeout 200 "$SMCR_XFER" server "$RXE_B_IP" $rport 8 >xfer-server.out 2>&1 &
        xspid=$!
        wait_for 30 grep -q listening xfer-server.out
        # one at a time: the first one sets the link group up (first contact)
        if SMCR_XFER_MODE=SMCR timeout 120 "$SMCR_XFER" client "$RXE_B_IP" $rport 1,65536,4000000 1 >xfer-client.out 2>&1; then
                ok "SMC-R transfers 1 B, 64 KiB, 4 MB both ways, checked: $(grep -c '^ok client.*mode=SMCR' xfer-client.out) in mode SMCR"
        else
                notok "SMC-R transfers: $(grep -v '^ok' xfer-client.out | head -3 | xargs)"
                tail -5 smcd-b.log | sed 's/^/#   /'
                dump_smcd
        fi
        # five connections held open at once (established one after the other), with a
        # 1 MiB RMB and send buffer each: 10 MiB registered, more than the default
        # RLIMIT_MEMLOCK of 8 MiB (there the 4th would fall back: SMC_CLC_DECL_ERR_REGBUF)
        check "smcctl set rmem=1M sndbuf=1M" smcctl set rmem=1M sndbuf=1M
        hpids=()
        for i in 1 2 3 4 5; do
                "$SMCR_XFER" hold "$RXE_B_IP" $rport 1000000000 >"xfer-hold.$i" 2>&1 &
                hpids+=($!)
                wait_for 30 grep -q connected "xfer-hold.$i"
        done
        held=$(cat xfer-hold.* | grep -c "connected mode=SMCR")
        pinned=$(sed -n 's/^VmPin:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$(prop MainPID)/status")
        check "5 SMC-R connections held open at once ($held in mode SMCR; smcd pins ${pinned:-?} kB, LimitMEMLOCK=$(prop LimitMEMLOCK))" \
                test "$held" = 5 -a "${pinned:-0}" -gt 8192
        kill "${hpids[@]}" $xspid 2>/dev/null
        wait "${hpids[@]}" $xspid 2>/dev/null
        ok1=$(smcr_stat handshakes_ok 2>/dev/null || echo -1)
        check "smcctl -j stats: smcr.handshakes_ok grew by 8 ($ok0 -> $ok1)" test "$ok1" -ge $((ok0 + 8))
        check "smcctl set rmem=128K sndbuf=16K (the defaults again)" smcctl set rmem=128K sndbuf=16K

        # --- 4c. a listener of the unit's smcd that was listening before `systemctl
        # restart smcd` gets SMC-R again: the TCP option program's record of the
        # listeners it saw start (the smc_flagged map) waits in systemd's file
        # descriptor store, and the new smcd loads its program with it (without, the
        # listener cannot be marked: SMC-R clients get TCP until it listens again) ---
        aport=7002
        timeout 300 "$SMCR_XFER" server "$RXE_A_IP" $aport 8 >xfer-a.out 2>&1 &
        aspid=$!
        wait_for 30 grep -q listening xfer-a.out
        SMCD_RUNTIME_DIR=$work/b timeout 60 "$SMCR_XFER" client "$RXE_A_IP" $aport 65536 1 >xfer-a0.out 2>&1
        check "host B -> the unit's listener before the restart: $(grep -o 'mode=[A-Z]*' xfer-a0.out | head -1)" \
                grep -q '^ok client.*mode=SMCR' xfer-a0.out
        pid_a=$(prop MainPID)
        info "file descriptor store before the restart: $(prop NFileDescriptorStore) of $(prop FileDescriptorStoreMax)"
        if systemctl restart smcd.service && wait_for 30 is_active && [ "$(prop MainPID)" != "$pid_a" ]; then
                # the first connection after the restart is TCP (the new smcd does not
                # know the listener yet); the library registers it again at the accept
                # after it (and at most once a second while it waits)
                modes=""
                for i in 1 2 3 4 5; do
                        SMCD_RUNTIME_DIR=$work/b timeout 60 "$SMCR_XFER" client "$RXE_A_IP" $aport 65536 1 \
                                >"xfer-a$i.out" 2>&1
                        m=$(grep -o 'mode=[A-Z]*' "xfer-a$i.out" | head -1)
                        modes="$modes ${m#mode=}"
                        [ "$m" = mode=SMCR ] && break
                        sleep 1.1
                done
                journal=$(journalctl -b -u smcd.service --no-pager -o cat 2>&1 | tail -200)
                if grep -q "listener record of the previous smcd reused" <<<"$journal"; then
                        ok "journal after the restart: the previous smcd's listener record reused"
                else
                        notok "journal after the restart: the previous smcd's listener record reused"
                        info "file descriptor store: $(prop NFileDescriptorStore)"
                        journalctl -b --no-pager -o cat 2>&1 | grep -i "store\|listener record\|tcp option" | tail -10 |
                                sed 's/^/#   /'
                fi
                check "the listener from before the restart gets SMC-R again (modes after the restart:$modes)" \
                        test "${m:-}" = mode=SMCR
                check "its data checked (all transfers ok)" sh -c '! grep -qh "^FAIL" xfer-a[0-9].out'
        else
                notok "systemctl restart smcd (4c): state $(prop ActiveState)/$(prop SubState)"
        fi
        kill $aspid 2>/dev/null
        wait $aspid 2>/dev/null

        # --- 4d. an SO_REUSEPORT group of two servers of the unit's smcd (nginx
        # `reuseport`): each member is marked for the TCP option when it registers, as
        # the kernel shows every listener on the port marked (sock_diag from within the
        # unit's sandbox); 8 connections from host B all SMC-R, whichever member
        # accepts (from 12c52b3 until the group check: TCP) ---
        gport=7003
        SMCR_XFER_REUSEPORT=1 timeout 300 "$SMCR_XFER" server "$RXE_A_IP" $gport 100 >xfer-g1.out 2>&1 &
        g1pid=$!
        wait_for 30 grep -q listening xfer-g1.out
        SMCR_XFER_REUSEPORT=1 timeout 300 "$SMCR_XFER" server "$RXE_A_IP" $gport 100 >xfer-g2.out 2>&1 &
        g2pid=$!
        wait_for 30 grep -q listening xfer-g2.out
        SMCD_RUNTIME_DIR=$work/b SMCR_XFER_MODE=SMCR timeout 120 "$SMCR_XFER" client "$RXE_A_IP" $gport \
                8x65536 1 >xfer-g.out 2>&1
        check "SO_REUSEPORT group of two smcrun servers: $(grep -c '^ok client.*mode=SMCR' xfer-g.out) of 8 connections SMC-R, data checked (accepted $(grep -c '^ok server' xfer-g1.out) + $(grep -c '^ok server' xfer-g2.out))" \
                test "$(grep -c '^ok client.*mode=SMCR' xfer-g.out)" = 8
        # ... and again after `systemctl restart smcd`: each member registers again at
        # its first accept after the restart (that connection is TCP), the first one's
        # mark waits for the second (tcpopt_mark() 1), the second's turns the echo on
        # (before: the group stayed TCP)
        if systemctl restart smcd.service && wait_for 30 is_active; then
                modes=""
                for i in 1 2 3 4 5 6 7 8 9 10; do
                        sleep 0.5
                        SMCD_RUNTIME_DIR=$work/b timeout 60 "$SMCR_XFER" client "$RXE_A_IP" $gport 65536 1 \
                                >"xfer-gr$i.out" 2>&1
                        m=$(grep -o 'mode=[A-Z]*' "xfer-gr$i.out" | head -1)
                        modes="$modes ${m#mode=}"
                        [ "$m" = mode=SMCR ] && break
                done
                SMCD_RUNTIME_DIR=$work/b SMCR_XFER_MODE=SMCR timeout 120 "$SMCR_XFER" client "$RXE_A_IP" $gport \
                        8x65536 1 >xfer-g2r.out 2>&1
                check "the SO_REUSEPORT group after systemctl restart smcd: SMC-R again (modes:$modes; then $(grep -c '^ok client.*mode=SMCR' xfer-g2r.out) of 8 SMC-R)" \
                        test "${m:-}" = mode=SMCR -a "$(grep -c '^ok client.*mode=SMCR' xfer-g2r.out)" = 8
                check "its data checked (all transfers ok)" sh -c '! grep -qh "^FAIL" xfer-gr*.out xfer-g2r.out'
                if [ "${m:-}" != mode=SMCR ]; then
                        cat xfer-gr*.out | sed 's/^/#   client: /'
                        info "accepted: $(grep -c '^ok server' xfer-g1.out) + $(grep -c '^ok server' xfer-g2.out)"
                        journalctl -b -u smcd.service --no-pager -o cat 2>&1 | tail -30 | sed 's/^/#   /'
                fi
        else
                notok "systemctl restart smcd (4d): state $(prop ActiveState)/$(prop SubState)"
        fi
        kill $g1pid $g2pid 2>/dev/null
        wait $g1pid $g2pid 2>/dev/null
        kill $bpid
        wait $bpid
elif [ $smcr = 1 ]; then
        info "SKIP SMC-R transfers: SMCR_XFER (tests/smcr-xfer of the build) is not set"
fi

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
        # (fed about every WatchdogSec/2; a TCG guest's timers slip under load, so the
        # check waits WatchdogSec + 1 s: a miss that long would have had smcd killed)
        ts1=$(prop WatchdogTimestampMonotonic)
        sleep $((wd_s + 1))
        ts2=$(prop WatchdogTimestampMonotonic)
        check "watchdog fed: WatchdogTimestamp advanced within WatchdogSec+1 s ($ts1 -> $ts2 us; WatchdogSec=$wd)" \
                test "${ts2:-0}" -gt "${ts1:-0}"
        check "smcd still active after $((wd_s + 1)) s" is_active
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
