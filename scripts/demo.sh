#!/usr/bin/env bash
# The main job, offline: train a small vanilla Transformer on the bytes of the Python standard
# library's source (present on every machine) for FORMERS_DEMO_STEPS optimizer steps (default
# 1,000), evaluate it on the valid split four times along the way, then on the whole held-out
# test split, and print a sample. The budget is in steps, not time, so every machine sees the
# same run: the cosine schedule ends at the last step and the evaluations fall at a quarter,
# half and three quarters of it (and at the end); a slower machine only takes longer.
steps="${FORMERS_DEMO_STEPS:-1000}"
if ! [[ "$steps" =~ ^[0-9]+$ ]] || [ "$steps" -lt 4 ]; then
  echo "error: FORMERS_DEMO_STEPS=$steps is not a number of steps of at least 4: set e.g." \
    "FORMERS_DEMO_STEPS=1000" >&2
  exit 2
fi
steps=$((10#$steps))  # "0100" is one hundred, not octal
source "$(dirname "$0")/env.sh"
# OpenMP threads that sleep instead of spinning while they wait: on a machine busy with other
# work, spinning threads took ten times as long per step.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
echo "== training: $steps steps of a 4-layer vanilla Transformer on the stdlib's bytes, in $run" \
  "(its first lines say the precision and, once its first steps are timed, how long training" \
  "takes here; the evaluations, the test split and the sample come on top) ==" >&2
formers train --preset vanilla --run-dir "$run" \
  --model.n_layers 4 --model.d_model 256 --model.n_heads 4 --model.d_ff 1024 --model.dropout 0 \
  --train.corpus stdlib --train.batch_size 16 --train.seq_len 128 --train.lr 2e-3 \
  --train.max_steps "$steps" --train.warmup_steps $((steps / 10)) \
  --train.eval_every $((steps / 4)) --train.eval_tokens 50000 || exit $?
echo "== test split =="
formers eval "$run" --split test
echo "== sample =="
# a method's first line puts the model in the middle of code rather than in a docstring
formers generate "$run" --prompt "    def __init__(self, " --max-new-tokens 300 --temperature 0.8 \
  --top-k 40
