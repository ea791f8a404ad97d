#!/bin/bash
# smcd's hints for short-lived connections (tunable short_conn_rate, smcd-tunables(5);
# libsmcproto/smc-hints.h), with a private smcd and tests/apps/short-conn.py under
# smcrun:
#   - with short_conn_rate 20, a loop of 300 one-request connections: the first 64 are
#     SMC-D (smcd has seen no window yet), then connections go TCP with reason
#     SMCD_DECL_SHORTCONN at both ends, every reply right; 1.3 s later (the hint held
#     1 s) a connection is SMC-D again; smcd counted the hint (short_conn_hints) and,
#     from the clients' batched counts, exactly the hinted connections (fallback
#     SMCD_DECL_SHORTCONN, client and server);
#   - a hint expiring between a client's connect and its server's accept: the server's
#     end is hinted within 250 ms of the expiry;
#   - the hints page: $SMCD_RUNTIME_DIR/hints, 4096 bytes, mode 0644, gone after smcd
#     stops; truncated or replaced under smcd and its clients, nobody dies (no one maps
#     it) and smcd writes it anew at its next hint;
#   - SMCPROTO_HINTS=0: the same loop all SMC-D;
#   - connections of 12 request/reply rounds: all SMC-D (not short);
#   - --short-conn-rate=0: the same short loop all SMC-D, no hint.
# Args: SMCD LIBSMCRUN SMCRUN. TAP-ish output, exit 1 on any failure.
set -u
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/apps/lib.sh"
apps_init "$1" "$2" "$3" smcd-test-short-conn || exit 1
py=$(dirname "$0")/apps/short-conn.py
failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }
# j JSON KEY
j() { jq -r ".$2" <<<"$1"; }

run() { # run [ENV=VAL...] KIND N: short-conn.py under smcrun, its JSON line in $out
        local envs=()
        while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
        out=$(timeout 120 env "${envs[@]}" "${SMCRUN[@]}" python3 "$py" "$@" 2>"$APPS_DIR/py.err")
        local rc=$?
        [ $rc -eq 0 ] || { nok "short-conn.py $* exit $rc: $out $(tail -n 3 "$APPS_DIR/py.err")"; return 1; }
        return 0
}

apps_smcd_start --short-conn-rate=20 || exit 1
hints=$APPS_DIR/hints
if [ -f "$hints" ] && [ "$(stat -c '%s %a' "$hints")" = "4096 644" ]; then
        ok "the hints page is there: 4096 bytes, mode 0644"
else
        nok "hints page: $(stat -c '%s %a' "$hints" 2>&1)"
fi

# 1. short connections, hints on
if run short 300; then
        smcd_n=$(j "$out" smcd) hinted=$(j "$out" hinted) shinted=$(j "$out" server_hinted)
        [ "$(j "$out" bad)" = 0 ] && [ "$(j "$out" other)" = 0 ] &&
                ok "300 short connections: every reply right, each SMC-D or hinted TCP ($out)" ||
                nok "short connections: $out"
        first=$(j "$out" first_tcp)
        [ "$first" -ge 64 ] && ok "the first 64 were SMC-D (first TCP: #$first)" ||
                nok "a connection went TCP before smcd saw a window: #$first"
        [ "$hinted" -ge 100 ] && ok "then the hint sent them to TCP ($hinted of 300, reason SMCD_DECL_SHORTCONN)" ||
                nok "only $hinted connections hinted to TCP"
        [ "$shinted" = "$hinted" ] && ok "the server's ends say the same ($shinted)" ||
                nok "server ends hinted $shinted, clients $hinted"
        [ "$(j "$out" after_hold)" = 1 ] && ok "after the hold (1 s) SMC-D again" ||
                nok "after the hold: mode $(j "$out" after_hold)"
        sleep 0.3 # (the counts the program sent at its exit reach smcd before the SIGUSR1)
        apps_stats
        h=$(apps_stat short_conn_hints)
        [ "${h:-0}" -ge 1 ] && ok "smcd counted $h hint(s)" || nok "short_conn_hints ${h:-none}"
        c=$(jq -r '.smcd.fallback.SMCD_DECL_SHORTCONN // 0' "$APPS_DIR/stats.json")
        [ "$c" = "$hinted" ] && ok "smcd counted the hinted connections from the clients' batches ($c)" ||
                nok "smcd counted $c hinted connections, the program saw $hinted"
        s=$(jq -r '[.fallback.by_reason[]? | select(.name == "SMCD_DECL_SHORTCONN") | .server] | add // 0' \
                "$APPS_DIR/stats.json")
        [ "$s" = "$hinted" ] && ok "... and their server ends ($s)" || nok "server ends counted $s, expected $hinted"
fi

# 1a. a hint expiring between a client's connect and its server's accept: the server's
# end is still the hinted connection it is within the accept grace (250 ms), a fallback
# of a client outside smcd (PEERNOSMC) after it
if run late 300; then
        want='{"client":[[2,184811520],[2,184811520]],"server":[[2,184811520],[2,50397184]]}'
        [ "$(jq -c . <<<"$out")" = "$want" ] &&
                ok "connected 100 ms before the hint's expiry: accepted 100 ms after it as hinted (SMCD_DECL_SHORTCONN), 400 ms after it as PEERNOSMC ($out)" ||
                nok "connect before the hint's expiry, accept after it: $out (want $want)"
fi

# 1b. the file truncated under smcd and its clients (root's stray '>'), then replaced by
# another file: neither maps it, so nothing dies; smcd writes it anew at its next hint,
# and the hints work again
for how in truncated replaced; do
        if [ $how = truncated ]; then
                : >"$hints"
        else
                rm -f "$hints" && echo garbage >"$hints"
        fi
        if run short 300; then
                [ "$(j "$out" bad)" = 0 ] && [ "$(j "$out" other)" = 0 ] && [ "$(j "$out" hinted)" -ge 1 ] &&
                        ok "hints file $how: 300 more connections, every reply right, hinted again ($out)" ||
                        nok "hints file $how: $out"
        fi
        [ "$(stat -c '%s %a' "$hints" 2>&1)" = "4096 644" ] && ok "hints file $how: smcd wrote it anew" ||
                nok "hints file $how: now $(stat -c '%s %a' "$hints" 2>&1)"
        kill -0 "$APPS_SMCD_PID" 2>/dev/null && ok "smcd lives on (hints file $how)" || nok "smcd died (hints file $how)"
done

# 2. the same, ignoring the hints
if run SMCPROTO_HINTS=0 short 300; then
        [ "$(j "$out" smcd)" = 300 ] && [ "$(j "$out" bad)" = 0 ] &&
                ok "SMCPROTO_HINTS=0: all 300 SMC-D" || nok "SMCPROTO_HINTS=0: $out"
fi

# 3. longer connections are not short
if run long 150; then
        [ "$(j "$out" smcd)" = 150 ] && [ "$(j "$out" bad)" = 0 ] &&
                ok "150 connections of 12 rounds: all SMC-D" || nok "long connections: $out"
fi

# 4. the tunable off
apps_smcd_stop || nok "smcd exit status $?"
[ ! -e "$hints" ] && ok "the hints page is removed when smcd stops" || nok "the hints page stays after smcd"
apps_smcd_start --short-conn-rate=0 || exit 1
if run short 300; then
        [ "$(j "$out" smcd)" = 300 ] && ok "short_conn_rate 0: all 300 SMC-D" || nok "short_conn_rate 0: $out"
fi
apps_stats
[ "$(apps_stat short_conn_hints)" = 0 ] && ok "short_conn_rate 0: no hint" || nok "hints: $(apps_stat short_conn_hints)"
apps_smcd_stop || nok "smcd exit status $?"

[ $failed = 0 ] && echo "PASS" || echo "FAIL"
exit $failed
