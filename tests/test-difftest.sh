#!/bin/bash
# The random differential tester (tests/apps/difftest.py) for a fixed list of seeds:
# each seed's transcript over plain TCP and under smcrun with a private smcd (every
# pair SMC-D: SMC_EXPECT=1) must be identical, line by line. A divergence is printed
# with its seed and step (the diff of the two transcripts).
# Args: SMCD LIBSMCRUN SMCRUN [SEED...]; DIFFTEST_STEPS (default 60) steps per seed,
# DIFFTEST_AVOID (difftest.py --avoid: known divergences not to provoke).
# Another list of seeds by hand, for example 1000 seeds from 500:
#   bash tests/test-difftest.sh build/smcd/smcd build/libsmcproto/libsmcrun.so \
#       build/libsmcproto/smcrun $(seq 500 1499)
set -u
smcd=$1 lib=$2 smcrun=$3
shift 3
here=$(dirname "$0")
py=$here/apps/difftest.py
steps=${DIFFTEST_STEPS:-60}
args=(--seed SEED --steps "$steps" ${DIFFTEST_AVOID:+--avoid "$DIFFTEST_AVOID"})
# seeds whose transcripts were identical (3 runs over TCP, 3 under smcrun, all equal)
# when the test was written (helper 132, 2026-12-07), and seeds that found divergences
# fixed then (1: SIOCOUTQ through a dup, 25 and 34: sendfile at the file's end)
seeds=("$@")
[ ${#seeds[@]} -gt 0 ] || seeds=(2 3 4 7 8 18 21 22 26 30 1 25 34)
# shellcheck source=tests/apps/smcrun-env.sh
. "$here/apps/smcrun-env.sh"
# (--short-conn-rate=0: each seed's pairs are short connections; they must be SMC-D)
smcrun_env "$smcd" "$lib" smcd-test-difftest --short-conn-rate=0 || exit 1
failed=0
for seed in "${seeds[@]}"; do
        tcp=$rundir/tcp.$seed smc=$rundir/smc.$seed
        timeout 60 /usr/bin/python3 "$py" "${args[@]/SEED/$seed}" >"$tcp" 2>&1
        trc=$?
        SMC_EXPECT=1 timeout 60 sh "$smcrun" /usr/bin/python3 "$py" "${args[@]/SEED/$seed}" >"$smc" 2>&1
        src=$?
        if [ $trc != 0 ]; then
                echo "not ok - seed $seed: over TCP exit $trc: $(tail -n 3 "$tcp")"
                failed=1
        elif [ $src != 0 ]; then
                echo "not ok - seed $seed: under smcrun exit $src: $(tail -n 3 "$smc")"
                failed=1
        elif d=$(diff "$tcp" "$smc"); then
                echo "ok - seed $seed: $(wc -l <"$tcp") lines identical"
        else
                echo "not ok - seed $seed: transcripts differ (< TCP, > smcrun):"
                echo "$d" | head -n 20 | sed 's/^/#   /'
                failed=1
        fi
done
[ $failed = 0 ] && echo "PASS" || echo "FAIL"
exit $failed
