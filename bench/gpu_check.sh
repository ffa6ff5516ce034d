#!/usr/bin/env bash
# CUDA checks for a lent GPU machine, in one short run (< 5 minutes on an H200):
#   1. memory vs K with torch.cuda.max_memory_allocated (K = 1, 2, 4, 8, 16 and the b·K batch)
#   2. samples/s of each backend against its hand-driven twin
#   3. the accumulation-equivalence tests, on CUDA
#   4. the memory-adaptive micro-batch: a real CUDA OOM (a capped memory fraction) halving the
#      micro-batch, fp16 and bf16 pairs, "auto" against the card's memory
#   4. with 2 GPUs or more: 2 data-parallel processes over NCCL (bench/ddp_comm.py --device cuda)
#
# The GPU image has torch, transformers and accelerate but not datasets or pydantic, and no
# network. Prepare the missing wheels here first, then carry bench/wheelhouse with the run:
#   bash bench/gpu_check.sh wheels        # on the dev machine (PyPI reachable)
#   bash bench/gpu_check.sh               # on the GPU machine (device tool, carry bench/wheelhouse)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=bench/wheelhouse
MISSING="peft datasets dill multiprocess pydantic pydantic-core pydantic-settings annotated-types typing-inspection python-dotenv pytest pluggy iniconfig"

if [ "${1:-}" = "wheels" ]; then
  mkdir -p "$WHEELS"
  .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --implementation cp \
    -d "$WHEELS" $MISSING
  ls -la "$WHEELS"
  exit 0
fi

PY=${PY:-python3}
SITE=/tmp/gradacc-site
if ! $PY -c "import datasets, pydantic, pydantic_settings" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --find-links "$WHEELS" --target "$SITE" $MISSING
fi
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY -c "import torch, transformers, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'cuda', torch.cuda.is_available())"
echo "## memory vs K (CUDA)"
timeout 150 $PY bench/memory_vs_k.py --ks 1,2,4,8,16 --batch 8 | tee "$OUT/gpu_memory.md"
echo "## throughput vs hand-driven twins (CUDA)"
timeout 150 $PY bench/core_throughput.py --repeats 2 | tee "$OUT/gpu_throughput.md"
echo "## equivalence tests on CUDA"
timeout 120 $PY -m pytest -q -p no:cacheprovider --noconftest tests/trainer_core/test_equivalence.py | tail -3 | tee "$OUT/gpu_tests.txt"
echo "## memory-adaptive micro-batch, fp16/bf16 (CUDA)"
timeout 150 $PY bench/gpu_memory_adaptive.py | tee "$OUT/gpu_memory_adaptive.md"
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -ge 2 ]; then
  echo "## two processes over NCCL: all-reduce per window vs every micro-batch"
  timeout 150 $PY bench/ddp_comm.py --device cuda --rows 8192 | tee "$OUT/gpu_ddp.md"
else
  echo "## two-process NCCL case skipped: $GPUS GPU (NCCL needs one GPU per rank)" | tee "$OUT/gpu_ddp.md"
fi
