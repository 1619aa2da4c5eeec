#!/usr/bin/env bash
# The main job, offline: train a small vanilla Transformer on the bytes of the Python standard
# library's source (present on every machine) for up to FORMERS_DEMO_BUDGET of training time
# (default 4m) and 5 steps per second of it (1,200 steps for 4 minutes: the cosine schedule
# ends with the budget on a machine that keeps that pace, sooner on a faster one), evaluate it
# on the held-out test files, and print a sample.
source "$(dirname "$0")/env.sh"
budget="${FORMERS_DEMO_BUDGET:-4m}"
steps=$(python -c "from formers.train.config import parse_duration; print(max(1, int(5 * parse_duration('$budget'))))") || exit 2
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
formers train --preset vanilla --run-dir "$run" \
  --model.n_layers 4 --model.d_model 256 --model.n_heads 4 --model.d_ff 1024 --model.dropout 0 \
  --train.corpus stdlib --train.batch_size 16 --train.seq_len 128 --train.lr 2e-3 \
  --train.max_steps "$steps" --train.time_budget "$budget" \
  --train.eval_every 250 --train.eval_tokens 50000 || exit $?
echo "== test split =="
formers eval "$run" --split test
echo "== sample =="
formers generate "$run" --prompt "def " --max-new-tokens 300 --temperature 0.8 --top-k 40
