#!/usr/bin/env bash
# The main job, offline: train a small vanilla Transformer for a few minutes on the bytes of the
# Python standard library's source (present on every machine), evaluate it on the held-out test
# files, and print a sample. Set FORMERS_DEMO_BUDGET (e.g. 10m) to train longer.
source "$(dirname "$0")/env.sh"
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
formers train --preset vanilla --run-dir "$run" \
  --model.n_layers 4 --model.d_model 256 --model.n_heads 4 --model.d_ff 1024 --model.dropout 0 \
  --train.corpus stdlib --train.batch_size 16 --train.seq_len 128 --train.lr 2e-3 \
  --train.max_steps 1200 --train.time_budget "${FORMERS_DEMO_BUDGET:-4m}" \
  --train.eval_every 250 --train.eval_tokens 50000
echo "== test split =="
formers eval "$run" --split test
echo "== sample =="
formers generate "$run" --prompt "def " --max-new-tokens 300 --temperature 0.8 --top-k 40
