#!/bin/bash
# Install the Debian 12 packages smcd needs to build, test and benchmark.
# Idempotent: packages already present are skipped quickly. Needs root (or sudo).
set -euo pipefail

PKGS=(
        # build
        gcc libc6-dev meson ninja-build pkg-config
        # libraries
        libsystemd-dev libjson-c-dev
        # netlink monitor; RoCE (libibverbs: required, SMC-R) and its providers
        libnl-3-dev libnl-route-3-dev libibverbs-dev ibverbs-providers
        # SMC TCP option: BPF sock_ops program (optional at build time)
        clang llvm libbpf-dev bpftool
        # libFuzzer runtime for the fuzz targets (fuzz/, -Dfuzz=true; a Recommends of clang)
        libclang-rt-14-dev
        # netlink test: ip, unshare (util-linux)
        iproute2
        # tests and benchmarks
        python3 sockperf util-linux procps jq dbus-daemon
        # real programs under smcrun (tests/test-real-apps.sh, bench/apps.sh); the tests
        # run nginx with their own config, prefix and ports, never the system's on port 80
        redis-server redis-tools nginx-light iperf3 qperf wrk curl socat
        # sshd: re-execs per connection, then a seccomp-sandboxed child serves it
        # (tests/test-smcrun-apps.sh runs its own on a free port, with its own keys)
        openssh-server openssh-client
        # node: libuv closes descriptors with syscall(2) (tests/apps/node-echo.js)
        nodejs
        # a process-per-connection database: postgres, pgbench, psql (test-real-apps.sh and
        # bench/apps.sh run their own cluster in a temporary directory on a free port)
        postgresql
        # units test: systemd-analyze verify, systemd-sysusers, systemd-tmpfiles; busctl
        systemd
)

missing=()
for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
        echo "install-deps: all ${#PKGS[@]} packages present"
        exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
        SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
