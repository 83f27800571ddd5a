#!/usr/bin/env bash
# Runs areal-train under a launcher, and again after a failure, up to recover.retries
# times (AReaL's meaning); with recover.mode auto every new start resumes from the last
# recover checkpoint. The words before `--` are the launcher, those after it go to
# areal-train:
#
#   scripts/areal-run.sh mpirun -np 4 -- --config run.yaml recover.mode=auto
#   scripts/areal-run.sh srun --mpi=pmix -- --config run.yaml     (inside sbatch)
#
# Exit codes: areal-train's. 2 (a config error) is never retried. 75 (stopped by
# SIGTERM/SIGUSR1 after writing a recover checkpoint) is not retried here: inside a
# Slurm job the job is requeued (scontrol requeue) and continues by itself when it
# starts again; elsewhere the script exits 75. See docs/recovery.md.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

launcher=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do launcher+=("$1"); shift; done
[ $# -gt 0 ] || { echo "usage: $0 LAUNCHER... -- AREAL_TRAIN_ARGS..." >&2; exit 2; }
shift

# recover.retries and recover.mode of the merged config (a config error shows here, once).
config="$("$AREAL_BIN" "$@" --print-config)" || exit 2
option() {  # option SECTION KEY: the value of SECTION.KEY in the printed YAML
  awk -v section="$1:" -v key="$2:" '$0 == section {inside = 1; next} /^[^ ]/ {inside = 0}
    inside && $1 == key {gsub(/"/, "", $2); print $2}' <<< "$config"
}
retries="$(option recover retries)"
mode="$(option recover mode)"
case "$mode" in disabled|off) retries=0 ;; esac

attempt=0
while true; do
  "${launcher[@]}" "$AREAL_BIN" "$@"
  code=$?
  case $code in
    0|2) exit $code ;;
    75)
      if [ -n "${SLURM_JOB_ID:-}" ]; then
        echo "areal-run: stopped with a recover checkpoint; requeueing Slurm job $SLURM_JOB_ID" >&2
        scontrol requeue "$SLURM_JOB_ID"
      fi
      exit 75 ;;
  esac
  attempt=$((attempt + 1))
  if [ "$attempt" -gt "$retries" ]; then
    echo "areal-run: failed with exit code $code; no retries left (recover.retries = $retries)" >&2
    exit $code
  fi
  echo "areal-run: failed with exit code $code; start $((attempt + 1)) of $((retries + 1)) resumes from the last" \
       "recover checkpoint" >&2
done
