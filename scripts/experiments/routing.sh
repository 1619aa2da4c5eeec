#!/usr/bin/env bash
# Routing against vanilla (and longformer, where that preset exists) as causal LMs on WikiText-2
# bytes at context 1,024: the same model size and the same training-time budget per run, two
# seeds; formers compare writes the table (valid bits per byte, tokens/s) to $OUT/report.md.
# Used in docs/routing.md:
#   OUT=runs/routing-wt2 bash scripts/experiments/routing.sh
# Environment: OUT, BUDGET (per run, default 6m), SEEDS ("0 1"), BATCH (4), EXTRA (more
# `formers compare` flags, e.g. "--data-dir d --no-plots").
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python}
presets="vanilla routing"
if "$python" -c "import formers, sys; sys.exit('longformer' not in formers.PRESETS)"; then
  presets="$presets longformer"
fi
# shellcheck disable=SC2086
"$python" -m formers compare $presets --corpus wikitext-2-bytes --seeds ${SEEDS:-0 1} ${EXTRA:-} \
  --out "${OUT:-runs/routing-wt2}" --no-progress \
  --model.d_model 256 --model.n_layers 4 --model.n_heads 8 --model.d_ff 1024 \
  --model.max_len 1024 --train.seq_len 1024 --train.batch_size "${BATCH:-4}" \
  --train.schedule constant --train.warmup_steps 50 --train.max_steps 100000 \
  --train.time_budget "${BUDGET:-6m}" --train.eval_every 100 --train.eval_tokens 131072 \
  --train.save_every 0
