#!/usr/bin/env bash
# make test's pytest: the Slurm tier (-m slurm) and every other test at once, in two pytest processes. A Slurm
# test spends much of its time on the local Slurm's own pace (job starts and ends, requeues, signals before a
# time limit, held jobs), the others on the CPU; side by side the whole takes less wall time than one after the
# other (docs/tests.md). The other tests report on the terminal as they go; the Slurm tier into
# build/slurm-tier.log, shown once both are done. Arguments go to both pytest processes.
set -uo pipefail
cd "$(dirname "$0")/.."
pytest=${PYTEST:-.venv/bin/pytest}
log=build/slurm-tier.log
mkdir -p build
echo "test_tiers: the Slurm tier (pytest -m slurm) runs beside the other tests; its report goes to $log"
SRL_REQUIRE_SLURM=1 "$pytest" -ra -m slurm -p no:cacheprovider "$@" >"$log" 2>&1 &
slurm_tier=$!
trap 'kill -TERM "$slurm_tier" 2>/dev/null' INT TERM  # (a background job ignores SIGINT)
"$pytest" -ra -m "not slurm" "$@"
others=$?
echo "test_tiers: the other tests exited $others; waiting for the Slurm tier ($log)"
wait "$slurm_tier"
slurm=$?
echo
echo "==================================== the Slurm tier (pytest -m slurm) ===================================="
cat "$log"
echo "test_tiers: the other tests exited $others, the Slurm tier $slurm"
[ "$others" -eq 0 ] && [ "$slurm" -eq 0 ]
