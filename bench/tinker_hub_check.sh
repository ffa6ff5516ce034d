#!/usr/bin/env bash
# tinker-cookbook's sl_basic and rl_basic recipes, unmodified, against `gradacc serve` on a hub
# model the cookbook lists (they refuse any other before reading an argument, and they download
# No Robots and GSM8K). For a machine with the project installed (make setup), a GPU, and the hub
# or a cache holding the model, its tokenizer and both datasets: not CI, not the lent GPU machine
# (no network there). bench/gpu_check.sh runs it when GRADACC_HUB_CHECK=1.
#   MODEL=meta-llama/Llama-3.2-1B STEPS=2 bash bench/tinker_hub_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${MODEL:-meta-llama/Llama-3.2-1B}
STEPS=${STEPS:-2}
PORT=${PORT:-18765}
PY=${PY:-.venv/bin/python}
WORK=$(mktemp -d)
GRADACC_HOME=$WORK/home GRADACC_PREDICT_SERVER=false $PY -m commands.cli serve --port "$PORT" \
  --workers 1 >"$WORK/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER; wait $SERVER' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$PORT/api/v1/healthz" >/dev/null && break
  sleep 1
done
export TINKER_API_KEY=tml-local TINKER_TELEMETRY=0
status=0
# sl_basic stops after STEPS steps; rl_basic has no step limit (a GSM8K epoch), so it runs small
# batches for RL_SECONDS and passes once it logged STEPS steps.
run() {  # run RECIPE LIMIT ARGS...
  local recipe=$1 limit=$2 start=$SECONDS
  shift 2
  echo "## $recipe on $MODEL"
  timeout "$limit" $PY -m "tinker_cookbook.recipes.$recipe" model_name="$MODEL" \
    base_url="http://127.0.0.1:$PORT" log_path="$WORK/$recipe" "$@" </dev/null
  local rc=$? logged
  logged=$(wc -l <"$WORK/$recipe/metrics.jsonl" 2>/dev/null || echo 0)
  echo "## -> rc $rc after $((SECONDS - start)) s, $logged steps logged"
  [ "$rc" = 0 ] || { [ "$rc" = 124 ] && [ "$logged" -ge "$STEPS" ]; } || status=1
}
run sl_basic 900 max_steps="$STEPS"
run rl_basic "${RL_SECONDS:-600}" dataset_builder.batch_size=8 dataset_builder.group_size=2 max_tokens=64
tail -5 "$WORK/serve.log"
exit $status
