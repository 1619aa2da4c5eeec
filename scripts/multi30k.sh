#!/usr/bin/env bash
# The Multi30k runs of docs/translation.md: a 3+3-layer, d_model 256 Transformer trained for 60
# minutes (training steps only) per direction with the paper's recipe (Adam β2 0.98, ε 1e-9,
# linear warmup then inverse square root, label smoothing 0.1, dropout 0.1), then test2016 BLEU
# with greedy and beam search (K 4, α 0.6), from the last checkpoint and from the average of the
# last 5.
#
#   scripts/multi30k.sh train de-en      # 60 min; runs/multi30k-de-en (more flags may follow)
#   scripts/multi30k.sh eval de-en       # average + 4 evaluations: runs/*/test2016.beam*.json
#   scripts/multi30k.sh table -          # the results table from both directions' runs
#
# The runs start from the paper's token embeddings (--model.embed_init paper), as the results
# were measured. FORMERS (default: formers) is the command to run; FORMERS_LOCK, if set, a lock file each
# command waits for.
set -euo pipefail
# OpenMP threads that sleep instead of spinning while they wait, leaving the cores to the work.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
formers=(${FORMERS:-formers})
run() { if [ -n "${FORMERS_LOCK:-}" ]; then flock "$FORMERS_LOCK" "${formers[@]}" "$@"; else "${formers[@]}" "$@"; fi; }
action=$1 pair=$2
shift 2
dir="runs/multi30k-$pair"
case "$action" in
  train)
    run train --preset transformer --run-dir "$dir" --no-progress \
      --train.corpus "multi30k-$pair" \
      --model.n_layers 3 --model.d_model 256 --model.n_heads 8 --model.d_ff 1024 \
      --model.dropout 0.1 --model.embed_init paper \
      --train.max_tokens 4096 --train.optimizer adam_paper --train.schedule inverse_sqrt \
      --train.lr 1e-3 --train.warmup_steps 400 --train.label_smoothing 0.1 \
      --train.max_steps 100000 --train.time_budget 60m \
      --train.eval_every 200 --train.save_every 100 --train.keep_checkpoints 5 \
      --train.log_every 20 "$@"
    ;;
  eval)
    [ $# -eq 0 ] || { echo "$0 eval $pair takes no further flags (got: $*)" >&2; exit 2; }
    run average "$dir" --last 5 --replace  # a fresh average: no earlier evaluation stays
    for run_dir in "$dir" "$dir-avg5"; do
      for beam in 1 4; do
        run eval "$run_dir" --split test2016 --beam "$beam" > "$run_dir/test2016.beam$beam.json"
      done
    done
    ;;
  table)  # the results table of docs/translation.md, from the runs and their evaluations
    python scripts/experiments/multi30k_table.py runs/multi30k-de-en runs/multi30k-en-de
    ;;
  *) echo "usage: $0 train|eval de-en|en-de, or $0 table -" >&2; exit 2 ;;
esac
