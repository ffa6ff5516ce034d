#!/usr/bin/env bash
# CUDA checks for a lent GPU machine, in one short run (about 12 minutes on an H200, the real-size step the longest):
#   1. the memory-adaptive micro-batch: a real CUDA OOM (a capped memory fraction) halving the
#      micro-batch, fp16 and bf16 pairs, "auto" against the card's memory
#   2. the core's tests that train (equivalence, accumulation, micro-batch, options, LoRA) on CUDA
#   3. memory vs K with torch.cuda.max_memory_allocated (K = 1, 2, 4, 8, 16 and the b·K batch)
#   4. samples/s of each backend against its hand-driven twin
#   5. the real-size models of bench/real_size.py in bf16 against the exact hand loop
#   6. with 2 GPUs or more: 2 data-parallel processes over NCCL (bench/ddp_comm.py --device cuda)
#   7. real-size models (Qwen3-0.6B, 1.7B, 8B shapes; full, LoRA, QLoRA, checkpointed, chunked
#      logits) in bf16: the memory plan against torch.cuda.max_memory_allocated
#      (bench/gpu_plan.py); with 2 GPUs or more, FSDP2 over all of them, each rank against the plan
#   8. the Tinker host on CUDA against the CPU (bench/tinker_cuda_check.py)
# Each step has its own time limit and a failed step does not stop the others; the reports land
# in $OUT (the device tool's folder) or /tmp.
#
# The GPU image has torch, accelerate and an older transformers, but not datasets or pydantic,
# and no network. Fetch the wheels here first, then carry bench/wheelhouse with the run:
#   bash bench/gpu_check.sh wheels        # on the dev machine (PyPI reachable)
#   bash bench/gpu_check.sh               # on the GPU machine (device tool, carry bench/wheelhouse)
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=bench/wheelhouse
# The versions the project's own environment runs (transformers too: the image's is older).
PINNED="datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5
pydantic-settings==2.16.3 annotated-types==0.8.0 typing-inspection==0.4.5 python-dotenv==1.2.4
transformers==5.24.0 bitsandbytes==0.50.2"

if [ "${1:-}" = "wheels" ]; then
  mkdir -p "$WHEELS"
  # shellcheck disable=SC2086
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$WHEELS" $PINNED
  ls -la "$WHEELS"
  exit 0
fi

PY=${PY:-python3}
SITE=/tmp/gradacc-site
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
  "$WHEELS"/*.whl || exit 1
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
step() {  # step SECONDS REPORT TITLE -- command...
  local limit=$1 report=$2 title=$3 start=$SECONDS
  shift 4
  echo "## $title"
  timeout "$limit" "$@" 2>"$OUT/$report.err" | tee "$OUT/$report"
  local rc=${PIPESTATUS[0]}
  echo "## -> rc $rc after $((SECONDS - start)) s"
  [ "$rc" = 0 ] || tail -20 "$OUT/$report.err"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
$PY -c "import torch, transformers, accelerate, datasets, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'datasets', datasets.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())"
step 150 gpu_memory_adaptive.md "memory-adaptive micro-batch, fp16/bf16 (CUDA)" -- \
  $PY bench/gpu_memory_adaptive.py
step 150 gpu_tests.txt "the core's training tests on CUDA" -- \
  $PY -m pytest -q -p no:cacheprovider --noconftest tests/trainer_core/test_equivalence.py \
  tests/trainer_core/test_accumulation.py tests/trainer_core/test_micro_batch.py \
  tests/trainer_core/test_training_options.py tests/trainer_core/test_lora.py
step 90 gpu_memory.md "memory vs K (CUDA)" -- $PY bench/memory_vs_k.py --ks 1,2,4,8,16 --batch 8
step 90 gpu_throughput.md "throughput vs hand-driven twins (CUDA)" -- \
  $PY bench/core_throughput.py --repeats 2
step 240 gpu_real_size.md "real-size models (gpt2-11m, bert-base) in bf16 vs the exact hand loop" -- \
  $PY bench/core_throughput.py --task none --real-size gpt2-11m,bert-base --precision bf16 --repeats 2
GPUS=$(nvidia-smi -L | wc -l)
if [ "$GPUS" -ge 2 ]; then
  step 150 gpu_ddp.md "two processes over NCCL: all-reduce per window vs every micro-batch" -- \
    $PY bench/ddp_comm.py --device cuda --rows 8192
else
  echo "## two-process NCCL case skipped: $GPUS GPU (NCCL needs one GPU per rank)"
fi
step 420 gpu_plan.md "real-size models: the memory plan vs max_memory_allocated (bf16)" -- \
  $PY bench/gpu_plan.py
if [ "$GPUS" -ge 2 ]; then
  step 300 gpu_plan_sharded.md "FSDP2 over $GPUS GPUs: each rank's peak vs the plan" -- \
    $PY -m torch.distributed.run --standalone --nproc_per_node "$GPUS" bench/gpu_plan.py --sharded
else
  echo "## FSDP2 case skipped: $GPUS GPU (sharding needs two ranks or more)"
fi
step 120 tinker_cuda.md "the Tinker host on CUDA vs the CPU: a window, greedy sampling, a swap" -- \
  $PY bench/tinker_cuda_check.py
# On a machine with the hub (or its cache) and the project installed: the cookbook's own recipes.
if [ "${GRADACC_HUB_CHECK:-0}" = 1 ]; then
  step 900 tinker_hub.md "tinker-cookbook sl_basic and rl_basic against gradacc serve" -- \
    bash bench/tinker_hub_check.sh
fi
