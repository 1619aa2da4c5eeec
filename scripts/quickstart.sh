#!/usr/bin/env bash
# The library working in under a minute on a laptop CPU (after the first run's install): train a
# 2-layer vanilla Transformer on the bytes of formers' own source for 150 steps, then sample
# Python-like text from it. The README's Quickstart shows these two commands.
source "$(dirname "$0")/env.sh"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"  # as scripts/demo.sh: kind to a busy machine
run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
formers train --run-dir "$run" --train.corpus formers \
    --model.n_layers 2 --model.d_model 128 --model.n_heads 4 --model.d_ff 512 --model.dropout 0 \
    --train.max_steps 150 --train.warmup_steps 50 --train.lr 3e-3 --train.eval_every 50 \
    > /dev/null || exit $?
formers generate "$run" --prompt "def " --max-new-tokens 200 --top-k 10
