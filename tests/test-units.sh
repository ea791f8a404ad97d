#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# `meson install` of the build into a DESTDIR puts every unit and system file in place,
# and each one is valid for the tool that reads it:
#   systemd-analyze verify   smcd.service, smcd.socket (in a private mount namespace
#                            where DESTDIR's prefix is bind-mounted over the real one, so
#                            ExecStart= points at the installed smcd)
#   systemd-sysusers --root  creates the admin group
#   systemd-tmpfiles --root  creates the runtime and state directories
#   XML parser               the D-Bus policy; the activation file names the unit
# Usage: test-units.sh BUILDDIR PREFIX ADMIN_GROUP. TAP output.
set -u
build=$1 prefix=$2 group=$3
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n - SKIP $*"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
if ! meson install -C "$build" --destdir "$dest" --no-rebuild >"$tmp/install.log" 2>&1; then
        nok "meson install: $(tail -5 "$tmp/install.log")"
        echo "1..$n"; exit 1
fi
ok "meson install --destdir"

unitdir=$dest$prefix/lib/systemd/system
for f in "$unitdir/smcd.service" "$unitdir/smcd.socket" "$dest$prefix/sbin/smcd" "$dest$prefix/bin/smcctl" \
         "$dest$prefix/lib/tmpfiles.d/smcd.conf" "$dest$prefix/lib/sysusers.d/smcd.conf" \
         "$dest$prefix/share/dbus-1/system-services/org.smcd.smcd1.service" \
         "$dest/usr/share/dbus-1/system.d/org.smcd.smcd1.conf"; do
        [ -f "$f" ] && ok "installed ${f#"$dest"}" || nok "missing ${f#"$dest"}"
done

grep -q "^ExecStart=$prefix/sbin/smcd\$" "$unitdir/smcd.service" && ok "ExecStart= is the installed smcd" \
        || nok "ExecStart: $(grep ExecStart "$unitdir/smcd.service")"
grep -q '^FileDescriptorStoreMax=[1-9]' "$unitdir/smcd.service" && ok "FileDescriptorStoreMax= (the TCP option program's listener record over a restart)" \
        || nok "no FileDescriptorStoreMax= in smcd.service"
grep -q '^WatchdogSec=' "$unitdir/smcd.service" && grep -q '^Type=notify$' "$unitdir/smcd.service" \
        && ok "Type=notify with WatchdogSec=" || nok "smcd.service lacks Type=notify / WatchdogSec="

if ! command -v systemd-analyze >/dev/null; then
        skip "systemd-analyze not installed"
elif [ -n "$(ls -A "$dest$prefix" 2>/dev/null)" ] &&
     unshare -m true 2>/dev/null; then
        # DESTDIR's prefix over the real prefix, only inside this mount namespace
        if unshare -m sh -c 'mount --bind "$1" "$2" && systemd-analyze verify --man=no \
                "$2/lib/systemd/system/smcd.service" "$2/lib/systemd/system/smcd.socket"' \
                sh "$dest$prefix" "$prefix" >"$tmp/verify" 2>&1 && [ ! -s "$tmp/verify" ]; then
                ok "systemd-analyze verify smcd.service smcd.socket: clean"
        else
                nok "systemd-analyze verify: $(cat "$tmp/verify")"
        fi
else
        skip "no mount namespace for systemd-analyze verify"
fi

if command -v systemd-sysusers >/dev/null; then
        mkdir -p "$tmp/root/etc"
        if systemd-sysusers --root="$tmp/root" "$dest$prefix/lib/sysusers.d/smcd.conf" >/dev/null 2>&1 &&
           grep -q "^$group:" "$tmp/root/etc/group"; then
                ok "systemd-sysusers creates group $group"
        else nok "systemd-sysusers: $(cat "$tmp/root/etc/group" 2>&1)"; fi
else skip "systemd-sysusers not installed"; fi

if command -v systemd-tmpfiles >/dev/null; then
        if systemd-tmpfiles --root="$tmp/root" --create "$dest$prefix/lib/tmpfiles.d/smcd.conf" 2>"$tmp/tmpf" &&
           [ -d "$tmp/root/var/lib/smcd" ] && [ -d "$tmp/root/run/smcd" ]; then
                ok "systemd-tmpfiles creates /run/smcd and /var/lib/smcd"
        else nok "systemd-tmpfiles: $(cat "$tmp/tmpf")"; fi
else skip "systemd-tmpfiles not installed"; fi

policy=$dest/usr/share/dbus-1/system.d/org.smcd.smcd1.conf
if python3 - "$policy" "$group" <<'PY'
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
pol = d.getElementsByTagName("policy")
assert any(p.getAttribute("user") == "root" for p in pol), "no root policy"
assert any(p.getAttribute("group") == sys.argv[2] for p in pol), "no admin group policy"
denied = {(e.getAttribute("send_interface"), e.getAttribute("send_member"))
          for p in pol if p.getAttribute("context") == "default" for e in p.getElementsByTagName("deny")}
need = {("org.smcd.smcd1.Stats", "Reset"), ("org.smcd.smcd1.Manager", "SetTunable"),
        ("org.smcd.smcd1.Manager", "SetTunables"),
        ("org.smcd.smcd1.Pnet", "Add"), ("org.smcd.smcd1.Pnet", "Del"),
        ("org.smcd.smcd1.Policy", "Add"), ("org.smcd.smcd1.Policy", "Del")}
assert need <= denied, "not denied to others: %s" % (need - denied)
PY
then ok "D-Bus policy: well-formed; root owns; $group and root may change state; others may not"
else nok "D-Bus policy $policy"; fi
act=$dest$prefix/share/dbus-1/system-services/org.smcd.smcd1.service
grep -q '^Name=org.smcd.smcd1$' "$act" && grep -q '^SystemdService=smcd.service$' "$act" &&
        grep -q "^Exec=$prefix/sbin/smcd\$" "$act" && ok "D-Bus activation file" || nok "activation file: $(cat "$act")"

echo "1..$n"
[ $failed -eq 0 ]
