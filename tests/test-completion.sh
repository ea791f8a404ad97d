#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The bash completion of smcctl (shell-completion/bash/smcctl) without smcd: objects,
# prefixes, commands per object, options, tunable keys (the documented fallback list
# when smcd does not answer), connections filters. Usage: test-completion.sh FILE
# [SMCCTL]. TAP output.
set -u
file=$1
n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }

# smcctl on PATH points at a bus nobody listens on: dynamic lookups fail fast
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/nonexistent/bus
[ $# -ge 2 ] && PATH=$(dirname "$2"):$PATH
# shellcheck source=/dev/null
source "$file"

# complete "WORDS..." (the last word is the one being completed)
complete_words() {
        COMP_WORDS=("$@")
        COMP_CWORD=$(($# - 1))
        COMPREPLY=()
        _smcctl
        echo "${COMPREPLY[*]}"
}

check() { # expected-output description words...
        local want=$1 what=$2
        shift 2
        local got
        got=$(complete_words "$@")
        [ "$got" = "$want" ] && ok "$what: $got" || nok "$what: want '$want', got '$got'"
}

[ "$(complete -p smcctl 2>/dev/null)" = "complete -F _smcctl smcctl" ] && ok "registered for smcctl" || nok "not registered"
check "stats connections devices linkgroups tunables pnet policy set get" "all objects" smcctl ""
check "stats" "object prefix st" smcctl st
check "pnet policy" "object prefix p" smcctl p
check "--json" "long option --js" smcctl --js
check "stats" "object after options" smcctl -j -p st
check "show reset" "stats commands" smcctl stats ""
check "show reset" "commands after a prefix object" smcctl sta ""
check "show get set" "tunables commands" smcctl tunables ""
check "show add del" "policy commands" smcctl policy ""
check "show --mode --port" "connections commands and filters" smcctl connections ""
check "smcd tcp" "--mode values" smcctl connections --mode ""
check "inline=" "tunables set key with =" smcctl tunables set inl
# as bash splits them (COMP_WORDBREAKS has "="): values only, readline keeps the key
check "auto on off" "inline values after =" smcctl tunables set inline =
check "on off" "inline values after =o" smcctl tunables set inline = o
check "release create" "buf_clear values" smcctl tunables set rmem = 64K buf_clear =
check "buf_clear" "tunables get key" smcctl tunables get buf
check "" "nothing after stats reset" smcctl stats reset ""
check "inline=" "smcctl set KEY" smcctl set inl
check "auto on off" "smcctl set inline=" smcctl set inline =
check "rmem" "smcctl get KEY" smcctl get rm
check "" "unknown object" smcctl bogus ""

echo "1..$n"
[ $failed -eq 0 ]
