#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# smcd under systemd, for real: `meson install --destdir` of BUILDDIR into a payload
# tree, boot a qemu VM (tests/vm/run-vm --systemd: systemd as PID 1, system bus) with
# the payload laid over the root, and run tests/vm/systemd-smcd-checks.sh inside:
# start (READY=1), smcctl stats, a tunable persisting over a restart, an smcrun
# connection in `smcctl connections` and in the stats, the watchdog (fed; a SIGSTOPped
# smcd killed and restarted), a clean stop; SMC-R inside the unit's sandbox (a soft-RoCE
# pair set up before smcd starts: RoCE device in use, TCP option program loaded, SMC-R
# transfers to a second smcd). One line per check; exit 0 if all passed,
# 77 (skip) when qemu or a kernel is not installed (scripts/install-vm-deps.sh).
#
# Usage: tests/vm/test-systemd-smcd.sh [BUILDDIR] [run-vm OPTION...]
#   e.g. tests/vm/test-systemd-smcd.sh build --timeout 900 -v
set -u
here=$(cd "$(dirname "$0")" && pwd)
builddir=${1:-build}
shift $(($# > 0 ? 1 : 0))

"$here/run-vm" --check || exit 77
if [ ! -f "$builddir/build.ninja" ]; then
        echo "test-systemd-smcd: $builddir is not a meson build directory" >&2
        exit 1
fi

start=$SECONDS
payload=$(mktemp -d "${TMPDIR:-/var/tmp}/smcd-vm-payload.XXXXXX") || exit 1
trap 'rm -rf "$payload"' EXIT
if ! timeout 300 meson install -C "$builddir" --destdir "$payload" --no-rebuild --quiet >"$payload.log" 2>&1; then
        cat "$payload.log" >&2
        rm -f "$payload.log"
        echo "not ok - meson install -C $builddir --destdir $payload" >&2
        exit 1
fi
rm -f "$payload.log"

# what the payload must hold, wherever the prefix put it
missing=0
for f in sbin/smcd bin/smcctl bin/smcrun smcd/libsmcrun.so systemd/system/smcd.service \
         systemd/system/smcd.socket dbus-1/system.d/org.smcd.smcd1.conf; do
        p=$(find "$payload" -path "*/$f" \( -type f -o -type l \) -print -quit)
        if [ -n "$p" ]; then
                echo "ok - meson install put ${f##*/} at ${p#"$payload"}"
        else
                echo "not ok - meson install put */$f into the payload"
                missing=1
        fi
done
for f in org.smcd.smcd1.service smcd.conf smcd-sysusers.conf; do
        p=$(find "$payload" -path '*/dbus-1/*' -name "$f" -o -path '*.d/*' -name "$f" | head -1)
        [ -n "$p" ] && echo "# also installed: ${p#"$payload"}"
done
[ $missing -eq 0 ] || exit 1
echo "# payload ready in $((SECONDS - start)) s"

# SMC-R: the soft-RoCE set-up script and the transfer tool of the build travel in the
# payload: systemd's tmpfiles empty /tmp in the VM, and
# the source tree may live there (a clone in /tmp)
mkdir -p "$payload/usr/local/libexec/smcd-test"
cp "$here/rxe-pair-setup.sh" "$payload/usr/local/libexec/smcd-test/"
smcr_env=(--env "RXE_PAIR_SETUP=/usr/local/libexec/smcd-test/rxe-pair-setup.sh")
xfer=$builddir/tests/smcr-xfer
if [ -x "$xfer" ]; then
        cp "$xfer" "$payload/usr/local/libexec/smcd-test/"
        smcr_env+=(--env "SMCR_XFER=/usr/local/libexec/smcd-test/smcr-xfer")
fi
"$here/run-vm" --systemd --timeout 800 --payload "$payload" "${smcr_env[@]}" "$@" "$here/systemd-smcd-checks.sh"
rc=$?
echo "# VM stage: $((SECONDS - start)) s in all, status $rc"
exit $rc
