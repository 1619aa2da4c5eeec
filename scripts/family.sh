#!/usr/bin/env bash
# The comparisons of docs/family.md, one after another: the two family tables, the papers'
# claims, then the long-range probes. Each spec experiments/NAME.yaml trains into runs/NAME; a
# comparison resumes itself, so after a stop (Ctrl-C, a reboot) the same command skips what is
# finished and continues.
#
#   mkdir -p runs && nohup bash scripts/family.sh > runs/family.log 2>&1 &   # all: about 13 hours
#   bash scripts/family.sh xl-recurrence linformer-k                        # only these specs
#
# A spec whose header command runs on one thread (OMP_NUM_THREADS=1) runs on one thread here
# too, so that its budget buys the steps its header estimates. A comparison that fails is
# logged and the next one starts; the exit status is 1 if any failed. FORMERS (default:
# formers) is the command to run, PYTHON (default: python) the interpreter for the tables.
set -uo pipefail
cd "$(dirname "$0")/.."
formers=(${FORMERS:-formers})
python=${PYTHON:-python}
ALL=(family-lm family-mlm xl-recurrence sparse-topk-wt2 longformer-depth linformer-k
  switch-ablations transformer-multi30k probe-mqar probe-passkey probe-listops)

stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }

threads() {  # the OMP_NUM_THREADS of the spec's header command, or empty
  grep -m1 -o 'OMP_NUM_THREADS=[0-9]*' "$1" | cut -d= -f2
}

compare() {  # compare NAME: train and report experiments/NAME.yaml into runs/NAME
  local spec="experiments/$1.yaml" n
  n=$(threads "$spec")
  echo "$(stamp) start $1${n:+ (OMP_NUM_THREADS=$n)}"
  if [ -n "$n" ]; then
    OMP_NUM_THREADS=$n "${formers[@]}" compare --spec "$spec" --out "runs/$1" --no-progress
  else
    "${formers[@]}" compare --spec "$spec" --out "runs/$1" --no-progress
  fi
}

# Ctrl-C stops the whole sequence, not only the comparison running (which saves its run first)
trap 'echo "$(stamp) stopped; the same command continues" >&2; exit 130' INT TERM
failed=()
for name in "${@:-${ALL[@]}}"; do
  if [ ! -f "experiments/$name.yaml" ]; then
    echo "$(stamp) no spec experiments/$name.yaml: give names from: ${ALL[*]}" >&2
    failed+=("$name")
    continue
  fi
  compare "$name"
  status=$?
  # the comparison saw a Ctrl-C (130; bash may not run its trap) or was sent SIGTERM (143: a
  # stop from outside, e.g. `kill` of the comparison alone): the sequence stops too
  if [ "$status" -eq 130 ] || [ "$status" -eq 143 ]; then
    echo "$(stamp) stopped; the same command continues" >&2
    exit 130
  fi
  if [ "$status" -ne 0 ]; then
    echo "$(stamp) FAILED $name (exit $status); the same command resumes it" >&2
    failed+=("$name")
    continue
  fi
  echo "$(stamp) done $name: runs/$name/report.md"
  if [ "$name" = switch-ablations ]; then  # the drop rates per run, beside the report
    "$python" scripts/experiments/switch_table.py "runs/$name" > "runs/$name/switch_table.md"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "$(stamp) failed: ${failed[*]}" >&2
  exit 1
fi
echo "$(stamp) all done"
