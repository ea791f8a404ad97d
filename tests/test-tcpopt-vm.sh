#!/bin/bash
# The SMC TCP option (smcd/tcpopt.c, BPF sock_ops) on a Debian kernel: runs
# tests/test-tcpopt.c (argument 1, from the build tree) inside a throw-away qemu VM
# (tests/vm/run-vm, busybox init, TCG), with the kernel's smc module loaded so that
# the test also exchanges the option with kernel AF_SMC sockets. cgroup2 is mounted on
# /sys/fs/cgroup here if the VM's init did not. Args: TEST_TCPOPT RUN_VM. Skips (77) when the VM
# cannot run (no qemu or kernel). Set SMCD_VM_KERNEL to pick a kernel version.
set -u
test_bin=$1 runvm=$2

if [ -z "${SMCD_TEST_IN_VM:-}" ]; then
        [ -x "$runvm" ] || { echo "SKIP: $runvm missing"; exit 77; }
        kernel=()
        [ -n "${SMCD_VM_KERNEL:-}" ] && kernel=(--kernel "$SMCD_VM_KERNEL")
        exec "$runvm" "${kernel[@]}" --timeout 240 --env SMCD_TEST_IN_VM=1 "$0" "$(realpath "$test_bin")" "$runvm"
fi

echo "# in the VM: $(uname -r)"
if ! grep -q ' - cgroup2 ' /proc/self/mountinfo; then
        mount -t cgroup2 none /sys/fs/cgroup || { echo "not ok - mount cgroup2 on /sys/fs/cgroup"; exit 1; }
        echo "# mounted cgroup2 on /sys/fs/cgroup"
fi
# the kernel's own SMC (AF_SMC) as an interop peer, where the kernel has the module
modprobe smc 2>/dev/null && echo "# kernel SMC module loaded" || echo "# no smc module: kernel interop cases skip"
start=$(date +%s.%N)
"$test_bin"
rc=$?
end=$(date +%s.%N)
echo "# test-tcpopt exit $rc in $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }') s (guest clock)"
exit $rc
