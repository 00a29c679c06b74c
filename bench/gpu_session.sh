#!/usr/bin/env bash
# The GPU measurements the open issues wait for, as one script for a lent GPU machine (about
# 8 minutes on one H100/H200; each step has its own time limit, so one slow step cannot eat the
# others). From the repository root, with a CUDA build of torch on the machine:
#
#     OUT=/tmp/gpu bash bench/gpu_session.sh
#
# Writes into $OUT (default ./runs/gpu-session): versions.txt (nvidia-smi, torch, CUDA), and
# one JSON/log per step:
#   1. stacked CNN training, K = 16 models of mnist-cnn and cifar-cnn, fp32 and bf16: today's
#      trainer one by one, a lean loop, the stacked trainer (issue #37, item 2: stacked >= 5x);
#   2. airbench94: seconds and test accuracy per model (issue #37, item 3; synthetic data
#      unless the data folder holds CIFAR-10, said in the output);
#   3. the LLM bench with SmolLM2-135M's shape and random weights, fp32 and bf16 against the
#      plain Hugging Face loop (issue #35, item 4), when $LLM_CONFIG_DIR holds SmolLM2's
#      config.json and tokenizer.json (bench/bench_llm.md says how to get them).
# miaudit's own imports (pydantic, numpy, ...) must be importable there: step 0 says which are
# missing and stops.
set -u
OUT=${OUT:-runs/gpu-session}
mkdir -p "$OUT"
export PYTHONPATH=src
PY=${PY:-python3}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, keep its output
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "   exit $? ($(tail -n 1 "$OUT/$name.log"))"
}

{ nvidia-smi; $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
  torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')"; } \
  >"$OUT/versions.txt" 2>&1
$PY -c "import miaudit.train.trainer, miaudit.signals.query" >"$OUT/imports.log" 2>&1 || {
  echo "miaudit does not import here (a missing package?):"; tail -n 3 "$OUT/imports.log"; exit 1; }

for dtype in fp32 bf16; do
  step "stacked_cnn_$dtype" 150 $PY bench/bench_stacked_cnn.py --device cuda --dtype "$dtype" \
    --arch mnist-cnn cifar-cnn --models 16 --steps 60 --json "$OUT/stacked_cnn_$dtype.json"
done
step airbench 150 $PY bench/bench_airbench.py --device cuda --models 4 --json "$OUT/airbench.json"
if [ -n "${LLM_CONFIG_DIR:-}" ]; then
  for dtype in fp32 bf16; do
    step "llm_$dtype" 120 $PY bench/bench_llm.py --random-weights --config-dir "$LLM_CONFIG_DIR" \
      --texts synthetic --device cuda --dtype "$dtype" --n-query 2048 --n-train 1024 \
      --json "$OUT/llm_$dtype.json"
  done
else
  echo "== llm: skipped (set LLM_CONFIG_DIR to a folder with SmolLM2's config.json and tokenizer.json)"
fi
echo "done: $OUT"
