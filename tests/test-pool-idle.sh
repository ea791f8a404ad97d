#!/bin/bash
# smcd --pool-idle-sec: after a burst of connections, the free buffers nobody takes
# go back to the system within one to two intervals (pool.idle_trimmed, bytes_total
# back to the --prepopulate ones); with 0 they stay. Uses test-stats-client's
# "hold" (2 SMC-D connections at once: 4 buffers) and "traffic". Args: SMCD CLIENT
set -u
smcd=$1 client=$2
tmp=$(mktemp -d /tmp/smcd-test-pool-idle.XXXXXX)
spid=
trap '[ -n "$spid" ] && kill $spid 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

# pool KEY...: the pool's keys from a fresh stats.json, space separated
pool() {
        rm -f "$tmp/run/stats.json"
        kill -USR1 "$spid"
        for _ in $(seq 100); do [ -s "$tmp/run/stats.json" ] && break; sleep 0.02; done
        python3 - "$tmp/run/stats.json" "$@" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["pool"]
print(" ".join(str(p[k]) for k in sys.argv[2:]))
PY
}

# run IDLE_SEC PREPOPULATE: smcd with those, the traffic, then watch the pool
run() {
        mkdir -p "$tmp/run"
        "$smcd" --runtime-dir "$tmp/run" --no-bus --pool-idle-sec "$1" --prepopulate "$2" \
                --state-file "$tmp/tunables.json" >"$tmp/smcd.log" 2>&1 &
        spid=$!
        for _ in $(seq 100); do [ -S "$tmp/run/smcd.sock" ] && break; sleep 0.05; done
        # two connections at once (4 buffers), closed together
        rm -f "$tmp/ready" "$tmp/go"
        SMCD_RUNTIME_DIR=$tmp/run timeout 60 "$client" hold "$tmp" >"$tmp/out" 2>&1 &
        local hpid=$!
        for _ in $(seq 600); do [ -e "$tmp/ready" ] && break; kill -0 $hpid 2>/dev/null || break; sleep 0.05; done
        touch "$tmp/go"
        if ! wait $hpid; then
                nok "hold client (idle $1 s): $(cat "$tmp/out")"
                return 1
        fi
        for _ in $(seq 100); do [ "$(pool in_use pending_clear)" = "0 0" ] && break; sleep 0.05; done
}

stop() {
        kill "$spid"; wait "$spid"; local rc=$?; spid=
        [ $rc -eq 0 ] || nok "smcd exit $rc: $(cat "$tmp/smcd.log")"
        rm -rf "$tmp/run"
}

# 2 s interval, 2 pre-populated: the burst's buffers go, 2 stay
if run 2 2; then
        read -r in_use free_count0 trimmed total <<<"$(pool in_use free_count idle_trimmed bytes_total)"
        echo "# after the connections: in_use $in_use free_count $free_count0 idle_trimmed $trimmed bytes_total $total"
        for _ in $(seq 100); do
                read -r free_count trimmed total <<<"$(pool free_count idle_trimmed bytes_total)"
                [ "$free_count" = 2 ] && break
                sleep 0.1
        done
        want=$((2 * (4096 + 131072)))
        before=$free_count0
        if [ "$before" -gt 2 ] && [ "$free_count" = 2 ] && [ "$total" = "$want" ] &&
                [ "$trimmed" = $((before - 2)) ]; then
                ok "--pool-idle-sec 2: $trimmed of $before free buffers given back, 2 kept ($total bytes)"
        else
                nok "--pool-idle-sec 2: free_count $before then $free_count, idle_trimmed $trimmed, bytes_total $total (want 2, $((before - 2)), $want)"
        fi
        # what is left serves again
        if SMCD_RUNTIME_DIR=$tmp/run timeout 60 "$client" traffic >"$tmp/out" 2>&1; then
                ok "traffic again after the trim"
        else
                nok "traffic again: $(cat "$tmp/out")"
        fi
        stop
fi

# 0: nothing is given back
if run 0 0; then
        read -r before <<<"$(pool free_count)"
        sleep 2.5
        read -r free_count trimmed <<<"$(pool free_count idle_trimmed)"
        if [ "$trimmed" = 0 ] && [ "$free_count" -gt 0 ] && [ "$free_count" = "$before" ]; then
                ok "--pool-idle-sec 0: the $free_count free buffers stay"
        else
                nok "--pool-idle-sec 0: free_count $before then $free_count, idle_trimmed $trimmed"
        fi
        stop
fi

# bad values: refused, nothing started
for v in -1 86401 1x ""; do
        if "$smcd" --runtime-dir "$tmp/bad" --no-bus --pool-idle-sec "$v" >"$tmp/err" 2>&1; then
                nok "--pool-idle-sec '$v' accepted"
        elif grep -q "pool-idle-sec" "$tmp/err"; then
                ok "--pool-idle-sec '$v' refused: $(head -n 1 "$tmp/err")"
        else
                nok "--pool-idle-sec '$v': $(cat "$tmp/err")"
        fi
done
exit $failed
