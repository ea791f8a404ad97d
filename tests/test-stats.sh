#!/bin/bash
# smcctl stats against a private dbus-daemon and a private smcd, with real connections
# made by test-stats-client (libsmcproto). Args: SMCD SMCCTL CLIENT. Skips (77) without
# dbus-daemon. TAP-ish output ("ok - ...", "not ok - ...").
#
# Checks: per-mode counts (SMC-D client / server, SMC-R all 0, TCP fallbacks), the
# fallback table (names, codes, client vs server side), messages = the client
# program's send / recv calls, cork flushes for TCP_CORK and MSG_MORE, bytes, the
# connect and buffer_acquire histograms' counts, a per-uid buffer limit that
# downgrades both RMBs of a connection to 16 KiB (data intact, pool.downgrade),
# reset zeroing the counters (smcd's and the pool's) but not the gauges, the typed
# D-Bus properties, and text and JSON agreeing (with and without -d).
set -u
smcd=$1 smcctl=$2 client=$3
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }

tmp=$(mktemp -d /tmp/smcd-test-stats.XXXXXX)
rundir=$tmp/run
mkdir "$rundir"
spid= dpid= hpid=
cleanup() {
        [ -n "$hpid" ] && touch "$tmp/go" && kill "$hpid" 2>/dev/null && wait "$hpid" 2>/dev/null
        [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null
        [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT

# shellcheck source=tests/lib-bus.sh
. "$(dirname "$0")/lib-bus.sh"
start_bus "$tmp" bus || exit 1
dpid=$BUS_PID
export SMCD_RUNTIME_DIR=$rundir

failed=0
ok() { echo "ok - $*"; }
nok() { echo "not ok - $*"; failed=1; }

"$smcd" -v --runtime-dir "$rundir" --state-file "$tmp/state/tunables.json" >"$tmp/smcd.log" 2>&1 &
spid=$!
for _ in $(seq 100); do "$smcctl" stats >/dev/null 2>&1 && break; sleep 0.05; done
"$smcctl" stats >/dev/null 2>"$tmp/err" || { nok "smcd on the bus: $(cat "$tmp/err" "$tmp/smcd.log")"; exit 1; }

# Wait (5 s at most) until smcctl -j stats shows SECTION.KEY == VALUE.
wait_stat() {
        for _ in $(seq 100); do
                [ "$("$smcctl" -j stats | python3 -c "import json,sys; print(json.load(sys.stdin)['$1']['$2'])")" = "$3" ] &&
                        return 0
                sleep 0.05
        done
}

# A JSON check: python3 CHECK-EXPRESSIONS over s = smcctl -j stats (and o = the
# client's output line when given), each line one assert.
check_json() {
        local what=$1 client_out=$2 py=$3
        "$smcctl" -j stats >"$tmp/stats.json" 2>"$tmp/err" || { nok "$what: smcctl -j stats: $(cat "$tmp/err")"; return; }
        if python3 - "$tmp/stats.json" "$client_out" >"$tmp/pyout" 2>&1 <<PY
import json, sys
s = json.load(open(sys.argv[1]))
o = json.loads(sys.argv[2]) if sys.argv[2] else {}
def hist(name): return s["histograms"][name]
def reasons(): return {e["name"]: e for e in s["fallback"]["by_reason"]}
$py
PY
        then ok "$what"; else nok "$what: $(cat "$tmp/pyout")"; fi
}

# ---- reset first: whatever the start did is gone, gauges stay ----
"$smcctl" stats reset 2>"$tmp/err" && ok "stats reset" || nok "stats reset: $(cat "$tmp/err")"
check_json "after reset: all counters 0, reset_usec set" "" '
d = s["smcd"]
for k in ("conns_client", "conns_server", "msgs_tx", "msgs_rx", "bytes_tx", "cork_flushes", "fallback_total"):
    assert d[k] == 0, (k, d[k])
assert all(v == 0 for v in s["smcr"].values()), s["smcr"]
assert s["fallback"] == {"client": 0, "server": 0, "by_reason": []}, s["fallback"]
assert hist("connect")["count"] == 0 and hist("buffer_acquire")["count"] == 0
assert s["pool"]["alloc"] == 0 and s["pool"]["reuse"] == 0 and s["pool"]["downgrade"] == 0
assert s["reset_usec"] > 0 and s["reset_usec"] <= s["time_usec"]'

# ---- traffic: 3 SMC-D connections with known calls ----
if out=$(timeout 60 "$client" traffic 2>"$tmp/err"); then ok "client traffic: $out"
else nok "client traffic: $(cat "$tmp/err")"; out=; fi
# the counters of a connection arrive when smcd has seen both ends close
wait_stat smcd conns_closed 3
check_json "SMC-D: 3 client + 3 server connections, closed, none current; SMC-R 0; no fallback" "$out" '
d = s["smcd"]
assert d["conns_client"] == 3 and d["conns_server"] == 3, d
assert d["conns_closed"] == 3 and d["conns_aborted"] == 0 and d["conns_current"] == 0, d
assert d["conns_client_current"] == 0 and d["conns_server_current"] == 0, d
assert all(v == 0 for v in s["smcr"].values()), s["smcr"]
assert s["fallback"]["client"] == 0 and s["fallback"]["server"] == 0, s["fallback"]'
check_json "messages: msgs_tx = the send calls, msgs_rx = the recv calls that returned data (both ends)" "$out" '
d = s["smcd"]
assert d["msgs_tx"] == o["send_calls"] == 3 * 16, (d["msgs_tx"], o)
assert d["msgs_rx"] == o["recv_calls"], (d["msgs_rx"], o)'
check_json "cork flushes: TCP_CORK off and MSG_MORE ends, 3 per connection" "$out" '
d = s["smcd"]
assert d["cork_flushes"] == o["cork_flushes"] == 9, (d["cork_flushes"], o)
assert d["sendfile_calls"] == 0 and d["sendfile_bytes"] == 0 and d["inline_sends"] == 0, d'
check_json "bytes: bytes_tx client to server, bytes_rx server to client" "$out" '
d = s["smcd"]
assert d["bytes_tx"] == o["bytes_tx"] and d["bytes_rx"] == o["bytes_rx"], (d["bytes_tx"], d["bytes_rx"], o)'
check_json "histograms: connect count 3 (one per CONNECT), buffer_acquire count 6 (two per connection)" "$out" '
c, b = hist("connect"), hist("buffer_acquire")
assert c["count"] == 3 and b["count"] == 6, (c["count"], b["count"])
for h in (c, b):
    assert h["unit"] == "ns" and len(h["buckets"]) == 32 and sum(x["count"] for x in h["buckets"]) == h["count"]
    assert h["sum"] > 0 and h["buckets"][-1]["le"] == 2**64 - 1
    assert [x["le"] for x in h["buckets"][:-1]] == [2**i for i in range(31)]
assert s["pool"]["reuse"] + s["pool"]["alloc"] == 6, s["pool"]'
# release-time clearing zeroes the header and only the ring bytes a writer wrote
# (dmb.h data_dirty): no ring wrapped here, so exactly the bytes sent
wait_stat pool pending_clear 0
check_json "pool: 6 buffers cleared, 256 header bytes each plus the bytes written into them" "$out" '
p = s["pool"]
assert p["clear"] == 6 and p["pending_clear"] == 0, p
assert p["bytes_cleared"] == 6 * 256 + o["bytes_tx"] + o["bytes_rx"], (p["bytes_cleared"], o)'
# the doorbell socketpairs taken by those connections are made again in idle time:
# 32 (or one per 256 descriptors of smcd's limit)
wait_stat smcd spare_pairs 32
check_json "smcd.spare_pairs: made again when idle, at most 32" "" '
assert 1 <= s["smcd"]["spare_pairs"] <= 32, s["smcd"]["spare_pairs"]'

# ---- fallbacks: PEERNOSMC (client only), PEERDECL (accept queue full: server too) ----
if fout=$(timeout 60 "$client" fallback 2>"$tmp/err"); then ok "client fallback: $fout"
else nok "client fallback: $(cat "$tmp/err")"; fout=; fi
wait_stat smcd conns_closed 5
check_json "fallbacks: client 2 (PEERNOSMC, PEERDECL), server 1 (PEERDECL), names and codes" "$fout" '
f, r = s["fallback"], reasons()
assert f["client"] == 2 and f["server"] == 1, f
assert set(r) == {"SMC_CLC_DECL_PEERNOSMC", "SMC_CLC_DECL_PEERDECL"}, r
assert r["SMC_CLC_DECL_PEERNOSMC"] == {"name": "SMC_CLC_DECL_PEERNOSMC", "code": "0x03010000", "count": 1, "server": 0}
assert r["SMC_CLC_DECL_PEERDECL"] == {"name": "SMC_CLC_DECL_PEERDECL", "code": "0x05000000", "count": 1, "server": 1}
assert [e["code"] for e in f["by_reason"]] == sorted(e["code"] for e in f["by_reason"])
d = s["smcd"]
assert d["fallback_total"] == 2 and d["fallback"] == {"SMC_CLC_DECL_PEERNOSMC": 1, "SMC_CLC_DECL_PEERDECL": 1}, d
assert d["conns_client"] == 5 and d["conns_server"] == 5, d
assert hist("connect")["count"] == 3 + o["connects"], hist("connect")["count"]
assert hist("buffer_acquire")["count"] == 6 + 2 * o["smcd"], hist("buffer_acquire")["count"]'

# ---- typed D-Bus properties agree with the JSON ----
if command -v busctl >/dev/null; then
        prop() { busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" get-property org.smcd.smcd1 /org/smcd/smcd1/stats \
                         org.smcd.smcd1.Stats "$1" 2>&1; }
        "$smcctl" -j stats >"$tmp/stats.json"
        bad=
        for pair in SmcdClientConnections:smcd.conns_client SmcdServerConnections:smcd.conns_server \
                    SmcrClientConnections:smcr.conns_client SmcrServerConnections:smcr.conns_server \
                    ConnectionsCurrent:smcd.conns_current FallbackTotal:fallback.client \
                    FallbackServer:fallback.server HandshakeErrors:smcd.handshake_errors \
                    BytesTx:smcd.bytes_tx BytesRx:smcd.bytes_rx MessagesTx:smcd.msgs_tx MessagesRx:smcd.msgs_rx \
                    CorkFlushes:smcd.cork_flushes SendfileCalls:smcd.sendfile_calls \
                    PoolBuffersInUse:pool.in_use PoolBytesInUse:pool.bytes_in_use PoolDowngrades:pool.downgrade \
                    ConnectCount:histograms.connect.count ResetTimestamp:reset_usec; do
                name=${pair%%:*} key=${pair#*:}
                want=$(python3 -c 'import json,sys
o = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): o = o[k]
print(o)' "$tmp/stats.json" "$key")
                got=$(prop "$name")
                [ "$got" = "t $want" ] || bad="$bad $name='$got'(want $want)"
        done
        [ -z "$bad" ] && ok "typed properties (t) agree with Get's JSON" || nok "properties:$bad"
        out=$(busctl --address="$DBUS_SYSTEM_BUS_ADDRESS" introspect org.smcd.smcd1 /org/smcd/smcd1/stats 2>&1)
        echo "$out" | grep -q '^\.MessagesTx  *property  *t ' && echo "$out" | grep -q '^\.Reset  *method' \
                && ok "introspect shows the properties" || nok "introspect: $out"
else
        echo "ok - SKIP property checks: busctl not installed"
fi

# ---- text and JSON agree (the same numbers), with and without -d ----
text_vs_json() {
        local what=$1; shift
        "$smcctl" -j stats >"$tmp/stats.json" && "$smcctl" "$@" stats >"$tmp/stats.txt" 2>"$tmp/err" || {
                nok "$what: $(cat "$tmp/err")"; return; }
        if python3 - "$tmp/stats.json" "$tmp/stats.txt" "$*" >"$tmp/pyout" 2>&1 <<'PY'
import json, re, sys
s = json.load(open(sys.argv[1])); text = open(sys.argv[2]).read(); details = "-d" in sys.argv[3].split()
blocks = [b.splitlines() for b in text.strip("\n").split("\n\n")]
seen = set()
def table(lines):
    head = lines[0].split()
    # aligned: every row as long as the header line or shorter only by the last column
    starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
    return head, [l.split() for l in lines[1:]]
def right_aligned(lines, col):
    # a right-aligned column ends at the same position in every line
    ends = {m.end() for l in lines for i, m in enumerate(re.finditer(r"\S+", l)) if i == col}
    assert len(ends) == 1, (col, lines)
for b in blocks:
    if b[0].startswith("HISTOGRAM "):
        m = re.match(r"HISTOGRAM (\w+): count (\d+) sum_ns (\d+) mean_ns (\d+)$", b[0]); assert m, b[0]
        h = s["histograms"][m.group(1)]
        assert int(m.group(2)) == h["count"] and int(m.group(3)) == h["sum"], (b[0], h["count"], h["sum"])
        assert int(m.group(4)) == (h["sum"] // h["count"] if h["count"] else 0)
        head, rows = table(b[1:])
        assert head == ["LE_NS", "COUNT"], head
        want = [("inf" if i == 31 else str(x["le"]), str(x["count"])) for i, x in enumerate(h["buckets"])
                if details or x["count"] > 0]
        assert [tuple(r) for r in rows] == want, (rows, want)
        right_aligned(b[1:], 0)
        right_aligned(b[1:], 1)
        seen.add("hist " + m.group(1)); continue
    head, rows = table(b)
    kind = head[0]; seen.add(kind)
    for c in range(0 if kind == "CLASS" else 1, len(head)):
        if not (kind == "FALLBACK" and c == 1):
            right_aligned(b, c)
    if kind == "MODE":
        assert head == ["MODE", "SMC-D", "SMC-R", "TCP"], head
        tcp = {"conns_client": str(s["fallback"]["client"]), "conns_server": str(s["fallback"]["server"])}
        keys = [r[0] for r in rows]
        smcr_own = ["cdc_sends", "llc_sends", "rdma_writes", "link_groups", "link_groups_total", "links_failed", "links_added", "failovers", "handshakes_ok", "handshakes_declined", "handshakes_failed", "decline_sent", "decline_rcvd"]  # the SMCR table's
        assert keys == [k for k in s["smcr"] if k not in smcr_own], (keys, list(s["smcr"]))
        for r in rows:
            assert r[1:] == [str(s["smcd"][r[0]]), str(s["smcr"][r[0]]), tcp.get(r[0], "-")], r
    elif kind == "FALLBACK":
        assert head == ["FALLBACK", "CODE", "COUNT", "SERVER"], head
        assert rows == [[e["name"], e["code"], str(e["count"]), str(e["server"])] for e in s["fallback"]["by_reason"]], rows
    elif kind in ("SMCD", "SMCR", "POOL", "SNAPSHOT"):
        src = {"SMCD": s["smcd"], "SMCR": s["smcr"], "POOL": s["pool"], "SNAPSHOT": s}[kind]
        assert head == [kind, "VALUE"], head
        for r in rows:
            if r[0] == "time_usec":  # a new snapshot per call
                assert len(r) == 2 and abs(int(r[1]) - src[r[0]]) < 60 * 10**6, r
                continue
            assert len(r) == 2 and r[1] == str(src[r[0]]), (kind, r, src.get(r[0]))
        if kind == "SNAPSHOT":
            assert [r[0] for r in rows] == ["seq", "time_usec", "reset_usec"], rows
    elif kind == "CLASS":
        assert head == (["CLASS", "SIZE", "IN_USE", "FREE"] if details else ["CLASS", "SIZE", "IN_USE"]), head
        for c, r in enumerate(rows):
            want = [str(c), "%dK" % (16 << c) if c < 6 else "1M", str(s["pool"]["in_use_by_class"][c])]
            if details: want.append(str(s["pool"]["free_count_by_class"][c]))
            assert r == want, (r, want)
    else:
        raise AssertionError("unknown block %r" % b[0])
want = {"MODE", "FALLBACK", "SMCD", "SMCR", "POOL", "CLASS", "hist connect", "hist buffer_acquire"} | ({"SNAPSHOT"} if details else set())
assert seen == want, seen
PY
        then ok "$what"; else nok "$what: $(cat "$tmp/pyout") $(cat "$tmp/stats.txt")"; fi
}
text_vs_json "text and JSON agree (tables aligned)"
text_vs_json "text and JSON agree with -d (free per class, every bucket, snapshot)" -d
# -j is smcd's JSON unchanged, -j -p the same document indented
"$smcctl" -j stats >"$tmp/a.json"; "$smcctl" -j -p stats >"$tmp/b.json"
if python3 - "$tmp/a.json" "$tmp/b.json" <<'PY' 2>"$tmp/err"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
a.pop("time_usec"); b.pop("time_usec")
assert a == b and "\n  " in open(sys.argv[2]).read()
PY
then ok "-j and -j -p carry the same document"; else nok "-j vs -j -p: $(cat "$tmp/err")"; fi

# ---- downgrade: a per-uid buffer limit that forces 16 KiB RMBs ----
# one connection (128K + 128K, same uid) leaves 32K of 288K: the next gets 16K + 16K
"$smcctl" stats reset
"$smcctl" tunables set max_buf_per_uid=288K 2>"$tmp/err" || nok "set max_buf_per_uid: $(cat "$tmp/err")"
rm -f "$tmp/ready" "$tmp/go"
timeout 60 "$client" hold "$tmp" >"$tmp/hold.out" 2>"$tmp/hold.err" &
hpid=$!
for _ in $(seq 600); do [ -e "$tmp/ready" ] && break; kill -0 "$hpid" 2>/dev/null || break; sleep 0.05; done
if [ -e "$tmp/ready" ]; then
        ok "1 MiB each way over the downgraded connection, checksums match"
        "$smcctl" -j connections >"$tmp/conns.json"
        check_json "downgrade: pool.downgrade 2, RMBs 16K on the second connection, 128K on the first" "" "
conns = json.load(open('$tmp/conns.json'))
assert sorted(e['rmb'] for e in conns) == [16384, 16384, 131072, 131072], conns
assert all(e['sndbuf'] == e['rmb'] for e in conns), conns  # one uid, symmetric sizes
small = [e for e in conns if e['rmb'] == 16384]
assert sum(e['bytes_tx'] for e in small) == 2 * 2**20 and sum(e['msgs_rx'] for e in small) > 0, small
assert s['pool']['downgrade'] == 2, s['pool']
assert s['pool']['in_use'] == 4 and s['pool']['in_use_by_class'][0] == 2 and s['pool']['in_use_by_class'][3] == 2, s['pool']
assert s['fallback']['client'] == 0, s['fallback']"
        # reset with connections open: counters to 0, gauges stay, and what the open
        # connections did before the reset is not counted again when they end
        "$smcctl" stats reset
        check_json "reset with 2 connections open: counters 0 (pool's too), gauges kept" "" '
d, p = s["smcd"], s["pool"]
assert d["conns_client"] == 0 and d["msgs_tx"] == 0 and d["bytes_tx"] == 0, d
assert d["conns_current"] == 2 and d["conns_client_current"] == 2 and d["conns_server_current"] == 2, d
assert d["clients"] >= 1 and d["listeners"] == 1, d
assert p["downgrade"] == 0 and p["alloc"] == 0 and p["reuse"] == 0 and hist("buffer_acquire")["count"] == 0, p
assert p["in_use"] == 4 and p["bytes_in_use"] == 2 * (4096 + 16384) + 2 * (4096 + 131072), p
assert hist("connect")["count"] == 0'
        touch "$tmp/go"
else
        nok "hold client did not get ready: $(cat "$tmp/hold.err")"
fi
wait "$hpid"; rc=$?; hpid=
[ $rc -eq 0 ] && ok "hold client done: $(cat "$tmp/hold.out")" || nok "hold client: exit $rc $(cat "$tmp/hold.err")"
wait_stat smcd conns_current 0
check_json "after the reset, the ended connections add only what they did since (nothing)" "" '
d = s["smcd"]
assert d["conns_closed"] == 2 and d["conns_current"] == 0, d
assert d["bytes_tx"] == 0 and d["bytes_rx"] == 0 and d["msgs_tx"] == 0 and d["msgs_rx"] == 0, d
assert d["cork_flushes"] == 0, d'
"$smcctl" tunables set max_buf_per_uid=0 2>/dev/null

# ---- bad arguments ----
"$smcctl" stats reset now >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "unexpected argument" "$tmp/err" && ok "stats reset with an argument: exit 2" \
        || nok "stats reset now: exit $rc $(cat "$tmp/err")"
"$smcctl" stats show -x >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && ok "stats show with an argument: exit 2" || nok "stats show -x: exit $rc"

kill "$spid"; wait "$spid"; rc=$?; spid=
[ $rc -eq 0 ] && ok "smcd exits cleanly" || { nok "smcd exit $rc"; cat "$tmp/smcd.log"; }
exit $failed
