#!/bin/bash
# Install the Debian 12 packages the qemu VM tests (tests/vm/) need: qemu, a Debian
# kernel to boot, static busybox for the initramfs, kmod for module loading inside.
# Idempotent and quick when everything is present. Non-interactive. Needs root (or sudo).
#
# Usage: scripts/install-vm-deps.sh [--kernel-6.12] [EXTRA-PACKAGE ...]
#   --kernel-6.12 (or env SMCD_VM_KERNEL_612=1): also install Debian 12's 6.12 kernel
#   (meta-package linux-image-6.12-amd64 from bookworm-security, which pulls the newest
#   linux-image-6.12.N+deb12-amd64; ~2 min). Kernel SMC-R v2 over soft-RoCE works there,
#   not on 6.1; boot it with `tests/vm/run-vm --kernel 6.12`. run-vm's default stays
#   the 6.1 kernel of linux-image-amd64; run-tests.sh asks for both (the tests that boot
#   6.12 boot again when its guest kernel crashes under TCG: tests/vm/retry-crashed).
#   Extra packages are installed in the same way; a later test can also append them to
#   PKGS below.
set -euo pipefail

kernel612=${SMCD_VM_KERNEL_612:-0}
extra=()
for a in "$@"; do
        case $a in
        --kernel-6.12) kernel612=1 ;;
        -*) echo "install-vm-deps: unknown option $a" >&2; exit 2 ;;
        *) extra+=("$a") ;;
        esac
done

PKGS=(
        # the emulator (TCG; no display, no firmware beyond seabios)
        qemu-system-x86
        # the guest kernel: Debian 12's 6.1, with virtio, 9p, overlay as modules
        linux-image-amd64
        # the initramfs: one static binary; kmod: modprobe inside the guest
        busybox-static kmod
        # the systemd-in-VM test: systemd as PID 1 and a system bus (the host's root
        # is the guest's root, so these must be installed here)
        systemd dbus python3
        # soft-RoCE tests (tests/test-rxe-pair.sh): the rdma tool and rxe provider
        # (rdma-core pulls iproute2's rdma, ibverbs-providers), ibv_rc_pingpong,
        # rping, ib_write_bw / ib_send_lat
        rdma-core ibverbs-utils rdmacm-utils perftest
        ${extra[@]+"${extra[@]}"}
)
if [ "$kernel612" = 1 ]; then
        PKGS+=(linux-image-6.12-amd64)
fi

missing=()
for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
        echo "install-vm-deps: all ${#PKGS[@]} packages present"
        exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
        SUDO=(sudo)
fi
echo "install-vm-deps: installing ${missing[*]}"
# The VM boots with its own initramfs (tests/vm/run-vm builds it), so skip the
# distribution's update-initramfs run for the new kernel: it costs ~30 s and is unused.
# (linux-image's postinst hook /etc/kernel/postinst.d/initramfs-tools honours INITRD=No.)
# A timeout per step: a stuck mirror must not hang CI.
env=(env DEBIAN_FRONTEND=noninteractive INITRD=No)
timeout 300 "${SUDO[@]}" "${env[@]}" apt-get update -qq
timeout 900 "${SUDO[@]}" "${env[@]}" apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Use-Pty=0 "${missing[@]}"
echo "install-vm-deps: done"
