#!/usr/bin/env bash
# The CUDA measurements of formers in one command, on a machine with one GPU: the `gpu` tests,
# then the benchmarks of the GPU section of docs/benchmarks.md. Parts run most important first,
# each under a time limit and all under one budget, so a slow part cannot eat the ones after it;
# a part the budget does not reach is recorded as not run. Run it in the repository's root:
#
#   bash scripts/gpu_check.sh                       every part, in the order below
#   bash scripts/gpu_check.sh peers-compiled compile train-compile     only these, in this order
#   GPU_CHECK_DRY=1 bash scripts/gpu_check.sh       the plumbing, on the CPU at tiny sizes
#
# Output, in $OUT (default runs/gpu-check-DATE-TIME): gpu_check.log (everything printed),
# gpu_check.json (the machine, and per part its command, exit status, seconds and JSON results;
# rewritten after each part) and results.tar.gz (every report folder). Then
#   python scripts/gpu_report.py runs/gpu-check-* --write docs/benchmarks.md
# regenerates the GPU section (a later run's parts replace an earlier run's).
#
# Nothing heavy is installed: it uses the machine's python3 (GPU_CHECK_PYTHON) with the
# repository on PYTHONPATH. Peer libraries missing there travel as wheels in .whl/ (fetched
# by scripts/gpu_wheels.sh), installed into a temporary folder. Settings: GPU_CHECK_BUDGET
# (seconds for all parts, default 450), GPU_CHECK_PART_LIMIT (at most this for any one part),
# GPU_CHECK_ROW_LIMIT (seconds for one compiled row or preset, default 90).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/runs/gpu-check-$(date +%Y%m%d-%H%M%S)}"
python="${GPU_CHECK_PYTHON:-python3}"
dry="${GPU_CHECK_DRY:-0}"
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/formers-gpu-check.XXXXXX")"
log="$out/gpu_check.log"
: >"$log"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# a fresh inductor cache: compile seconds are those of a first compilation on this machine
export TORCHINDUCTOR_CACHE_DIR="$work/inductor-cache"

if [ "$dry" != 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$work/site" .whl/*.whl >>"$log" 2>&1 && export PYTHONPATH="$PYTHONPATH:$work/site"
fi

if [ "$dry" = 1 ]; then  # every part at tiny sizes on the CPU: the plumbing, not the numbers
  device=cpu backend=eager precision=fp32 budget="${GPU_CHECK_BUDGET:-4000}" row_limit=600
  gpt2=(--n-layers 1 --d-model 32 --n-heads 2 --d-ff 64)
  peers_shape=("${gpt2[@]}" --vocab 64 --seq-len 32 --batch-size 2 --mem-len 32 --window 16)
  bench_size=("${gpt2[@]}" --vocab-size 64 --seq-len 32 --batch-size 2 --matmul-size 64)
  lengths=(32 64) mlm_len=256 repeats=3 train_size=(--model.n_layers 1 --model.d_model 32
    --model.n_heads 2 --model.d_ff 64 --train.batch_size 2 --train.seq_len 32)
  sweep_presets=(vanilla longformer) compile_presets=(vanilla routing)
  train_presets=(vanilla bert transformer)
  steps=(--steps 2 --warmup 1 --corpus-bytes 100000 --translation-pairs 200)
else
  device=cuda backend=inductor precision=bf16 budget="${GPU_CHECK_BUDGET:-450}"
  row_limit="${GPU_CHECK_ROW_LIMIT:-90}"
  gpt2=(--n-layers 12 --d-model 768 --n-heads 12 --d-ff 3072)
  peers_shape=(--shape gpt2-small)
  bench_size=("${gpt2[@]}" --vocab-size 50257 --seq-len 1024 --batch-size 16)
  lengths=(1024 4096 8192 32768 65536) mlm_len=8192 repeats=20 train_size=()
  sweep_presets=(vanilla longformer routing)
  compile_presets=(vanilla primer-ez transformer-xl sparse-topk switch longformer routing)
  train_presets=(vanilla primer-ez transformer-xl sparse-topk switch longformer routing bert
    linformer transformer squared-relu dconv transformer-xl-enwik8 primer-xl)
  steps=(--steps 10 --warmup 3)
fi
peer_rows=(vanilla:bare vanilla:formers vanilla:hf-gpt2 vanilla:x-transformers
  transformer-xl:formers primer-ez:formers sparse-topk:formers switch:formers longformer:formers)
compiled_rows=()  # formers' own row first, then the bare model's, then the rest
for row in vanilla:formers vanilla:bare "${peer_rows[@]:2}"; do compiled_rows+=("$row+compile"); done
if [ "$dry" = 1 ]; then peer_rows=(vanilla:bare vanilla:formers vanilla:hf-gpt2
  vanilla:x-transformers transformer-xl:formers) compiled_rows=(vanilla:formers+compile); fi

# part name, its longest time in seconds, where its JSON lands, and its command
declare -A limit=([env]=30 [tests]=100 [peers]=120 [sweep]=150 [mlm]=40 [peers-compiled]=600
  [compile]=600 [train-compile]=600)
order=(env tests peers sweep mlm peers-compiled compile train-compile)
[ "$#" -gt 0 ] && order=("$@")
if [ "$dry" = 1 ]; then for part in "${!limit[@]}"; do limit[$part]=900; done; fi  # a slow CPU
if [ -n "${GPU_CHECK_PART_LIMIT:-}" ]; then
  for part in "${!limit[@]}"; do
    limit[$part]=$((limit[$part] < GPU_CHECK_PART_LIMIT ? limit[$part] : GPU_CHECK_PART_LIMIT))
  done
fi
for part in "${order[@]}"; do
  [ -n "${limit[$part]:-}" ] || { echo "gpu_check: no part $part (parts: env tests peers" \
    "sweep mlm peers-compiled compile train-compile)" >&2; exit 2; }
done

set_command() {  # cmd: the part's command line after "$python"; result: the JSON it leaves
  local peers=(benchmarks/peers.py --device "$device" "${peers_shape[@]}" --warmup 3
    --precision "$precision" --repeats 10 --compile-backend "$backend"
    --row-time-limit "$row_limit")
  local bench=(-m formers bench --device "$device" --precision "$precision" --gen-tokens 0
    --no-plots)
  result="$work/$1.json"
  case "$1" in
    env) cmd=(scripts/gpu_check_record.py --into "$out/gpu_check.json" env) result="" ;;
    tests) cmd=(-m pytest -m gpu -q -p no:cacheprovider --junitxml "$work/tests.xml")
      result="$work/tests.xml" ;;
    peers) cmd=("${peers[@]}" --rows "${peer_rows[@]}" --json "$result") ;;
    peers-compiled) cmd=("${peers[@]}" --rows "${compiled_rows[@]}" --json "$result") ;;
    compile) cmd=("${bench[@]}" "${bench_size[@]}" --presets "${compile_presets[@]}"
      --repeats "$repeats" --warmup 3 --compile --compile-backend "$backend"
      --compile-time-limit "$row_limit" --out "$work/compile") ;;
    sweep) cmd=("${bench[@]}" "${bench_size[@]}" --presets "${sweep_presets[@]}" --repeats 3
      --sweep "${lengths[@]}" --sweep-time-limit 60 --out "$work/sweep") ;;
    mlm) cmd=("${bench[@]}" "${bench_size[@]}" --presets bert linformer --seq-len "$mlm_len"
      --batch-size 2 --repeats 5 --model.max_len "$mlm_len" --out "$work/mlm") ;;
    train-compile) cmd=(benchmarks/train_compile.py --device "$device"
      --presets "${train_presets[@]}" "${steps[@]}" --compile-backend "$backend"
      --time-limit "$row_limit" "${train_size[@]}" --json "$result") ;;
  esac
  case "$1" in compile | sweep | mlm) result="$work/$1/bench.json" ;; esac
}

deadline=$(($(date +%s) + budget))
running=""
trap '[ -n "$running" ] && kill "$running" 2>/dev/null; rm -rf "$work"; exit 143' TERM INT
record=(scripts/gpu_check_record.py --into "$out/gpu_check.json")
"$python" "${record[@]}" start --dry "$dry" --budget "$budget" >>"$log" 2>&1
for part in "${order[@]}"; do
  left=$((deadline - $(date +%s)))
  seconds=$((left < ${limit[$part]} ? left : ${limit[$part]}))
  set_command "$part"
  if [ "$left" -lt 10 ]; then
    echo "== $part: not run, the budget of $budget s is spent" | tee -a "$log"
    "$python" "${record[@]}" part "$part" --status "not run" --seconds 0 -- "${cmd[@]}" \
      >>"$log" 2>&1
    continue
  fi
  echo "== $part (at most $seconds s): $python ${cmd[*]}" | tee -a "$log"
  start=$(date +%s)
  # (timeout runs the part in a process group of its own, ended whole at the limit)
  timeout --kill-after=15 "$seconds" "$python" "${cmd[@]}" >>"$log" 2>&1 &
  running=$!
  wait "$running"
  code=$?
  running=""
  took=$(($(date +%s) - start))
  if [ "$code" = 0 ]; then status=ok
  elif [ "$code" = 124 ] || [ "$code" = 137 ]; then status="over time limit"
  else status="exit $code"; fi
  echo "== $part: $status in $took s" | tee -a "$log"
  "$python" "${record[@]}" part "$part" --status "$status" --seconds "$took" \
    --result "$result" -- "${cmd[@]}" >>"$log" 2>&1
  tar -czf "$out/results.tar.gz" -C "$work" --exclude ./inductor-cache --exclude ./site . \
    2>>"$log"
done
rm -rf "$work"
echo "gpu_check: wrote $out/gpu_check.json, $out/gpu_check.log, $out/results.tar.gz" | tee -a "$log"
