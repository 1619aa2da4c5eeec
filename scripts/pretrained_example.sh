#!/usr/bin/env bash
# The worked example of docs/pretrained.md, offline: a Hugging Face GPT-2 checkpoint in, evaluated,
# sampled, fine-tuned on Tiny Shakespeare, and out again.
#
#   bash scripts/pretrained_example.sh [OUT]        # OUT default: runs/pretrained-example
#
# PRETRAIN_STEPS (default 1500) and FINETUNE_STEPS (default 1000) shorten it for a quick check;
# an OUT made with other step counts is refused, so a quick check never feeds a full run.
# FORMERS (default: formers) is the command to run, split on spaces; PYTHON (default: python)
# the interpreter of the summary.
#
# The checkpoint is a small GPT-2 (4 layers of 256, a 4,096-token byte-level BPE) that formers
# pretrains on WikiText-2 and exports with `formers export --to hf`: an ordinary GPT2LMHeadModel
# folder, so the rest runs as it would on one downloaded from the hub (SOURCE = its hub id).
# Step counts, not time budgets, end each training run, so the numbers do not depend on the
# machine's speed. About 15 minutes on 2 CPU cores. Run again after a stop, it keeps the
# pretrained checkpoint and the imports, and continues the fine-tuning from its last checkpoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:-$root/runs/pretrained-example}")
cd "$root"
formers=(${FORMERS:-formers})
python=${PYTHON:-python}
pretrain_steps=${PRETRAIN_STEPS:-1500}
finetune_steps=${FINETUNE_STEPS:-1000}
mkdir -p "$out"
steps="pretrain $pretrain_steps, fine-tune $finetune_steps"
if [ -f "$out/steps" ] && [ "$(cat "$out/steps")" != "$steps" ]; then
  echo "error: $out was made with $(cat "$out/steps") steps, not $steps: give another OUT" \
    "or remove it" >&2
  exit 2
fi
echo "$steps" > "$out/steps"
say() { printf '\n== %s\n' "$*"; }

if [ ! -f "$out/gpt2-hf/config.json" ] || [ ! -d "$out/pretrain/checkpoints" ]; then
  say "pretrain a GPT-2-shaped model on WikiText-2 and export it as a Hugging Face folder"
  rm -rf "$out/pretrain" "$out/gpt2-hf" "$out/gpt2" "$out/gpt2-wt2" "$out/gpt2-ts"  # all from it
  "${formers[@]}" train --run-dir "$out/pretrain" --no-progress \
    --model.norm pre --model.position learned --model.embed_scale 1.0 \
    --model.ffn.activation gelu_tanh --model.n_layers 4 --model.d_model 256 \
    --model.n_heads 4 --model.d_ff 1024 --model.max_len 256 \
    --train.corpus wikitext-2-bytes --train.tokenizer bpe --train.tokenizer_vocab 4096 \
    --train.seq_len 256 --train.batch_size 16 --train.max_steps "$pretrain_steps" \
    --train.warmup_steps 100 \
    --train.eval_every 500 --train.save_every 500
  "${formers[@]}" export "$out/pretrain" --to hf "$out/gpt2-hf"
fi

say "import the Hugging Face folder as a run, reading Tiny Shakespeare with its tokenizer"
[ -d "$out/gpt2" ] || "${formers[@]}" import "$out/gpt2-hf" --run-dir "$out/gpt2" \
  --corpus tinyshakespeare
"${formers[@]}" eval "$out/gpt2" --split valid --no-progress | tee "$out/eval-before.json"

say "the same folder imported for WikiText-2 scores it as the run that pretrained it"
[ -d "$out/gpt2-wt2" ] || "${formers[@]}" import "$out/gpt2-hf" --run-dir "$out/gpt2-wt2" \
  --corpus wikitext-2-bytes
"${formers[@]}" eval "$out/gpt2-wt2" --split valid --no-progress | tee "$out/eval-wt2.json"
"${formers[@]}" eval "$out/pretrain" --split valid --no-progress > "$out/eval-pretrain.json"

say "generate from the imported model"
"${formers[@]}" generate "$out/gpt2" --prompt "ROMEO:" --temperature 0 --max-new-tokens 40

say "fine-tune it on Tiny Shakespeare"
start=(--init-from "$out/gpt2")  # a run with a checkpoint continues with --resume instead
if compgen -G "$out/gpt2-ts/checkpoints/step_*" > /dev/null; then
  start=(--resume)
else
  rm -rf "$out/gpt2-ts"  # stopped before its first checkpoint: start again
fi
"${formers[@]}" train "${start[@]}" --run-dir "$out/gpt2-ts" \
  --no-progress --train.corpus tinyshakespeare --train.seq_len 256 --train.lr 3e-4 \
  --train.warmup_steps 50 --train.max_steps "$finetune_steps" --train.eval_every 250 --train.save_every 250
"${formers[@]}" eval "$out/gpt2-ts" --split valid --no-progress | tee "$out/eval-after.json"
"${formers[@]}" generate "$out/gpt2-ts" --prompt "ROMEO:" --temperature 0 --max-new-tokens 40

say "export the fine-tuned run"
rm -rf "$out/gpt2-ts-hf"
"${formers[@]}" export "$out/gpt2-ts" --to hf "$out/gpt2-ts-hf"
"$python" - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
before, after = (json.load(open(f"{out}/eval-{s}.json")) for s in ("before", "after"))
wt2, own = (json.load(open(f"{out}/eval-{s}.json")) for s in ("wt2", "pretrain"))
print(f"WikiText-2 valid loss: {own['loss']:.6f} of the pretraining run, {wt2['loss']:.6f} of "
      "its import")
for name, r in (("imported", before), ("fine-tuned", after)):
    print(f"{name:>10}: valid loss {r['loss']:.4f} per token, perplexity {r['perplexity']:.2f}, "
          f"{r['bits_per_byte']:.4f} bits per byte")
try:
    import torch
    from transformers import GPT2LMHeadModel
except ImportError:
    print("transformers is not installed: the exported folder was not loaded back")
    raise SystemExit
import formers
run = formers.from_pretrained(f"{out}/gpt2-ts-hf")
hf = GPT2LMHeadModel.from_pretrained(f"{out}/gpt2-ts-hf").eval()
ids = torch.tensor([run.tokenizer.encode("ROMEO: What say you?")])
with torch.no_grad():
    gap = (hf(ids).logits - run.model.eval()(ids).logits).abs().max().item()
print(f"exported folder, loaded by transformers: largest logit difference {gap:.2e}")
EOF
