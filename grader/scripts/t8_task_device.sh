#!/usr/bin/env bash
# t8 as a task of the kit on a CUDA host: its public and hidden tests (timing included), its grade five times in a
# row, its GPU adversarial fixtures, the model's prefill and decode through ATTN=t8 in bfloat16, and make profile.
#   OUT=dir bash grader/scripts/t8_task_device.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/device}"
PY="${PY:-python3}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" KIT_CACHE_DIR="${KIT_CACHE_DIR:-$PWD/.kit_cache}"
source grader/scripts/device_env.sh
exec > >(tee "$OUT/t8_task.log") 2>&1
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }
say "GPU"; nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
say "t8 public and hidden tests of the solution"
$PY -m pytest tests/test_t8_flash_attention_tc.py grader/hidden/test_t8_hidden.py tests/kit/test_hidden_coverage.py \
    -q -p no:cacheprovider --durations=8 | tail -14
say "t8 graded five times (make repeatability)"
$PY -m grader.tools.repeatability solutions --repeats 5 --task t8 | tail -14
say "t8's GPU adversarial fixtures"
$PY -m grader.tools.adversarial --only $($PY -c "from grader.tools.adversarial import load_fixtures; print(' '.join(f.name for f in load_fixtures() if f.task == 't8'))") | tail -10
say "make generate ATTN=t8 DTYPE=bfloat16 DEVICE=cuda, against ATTN=sdpa"
for attn in sdpa t8; do
  $PY -m assignment.commands.generate --prompt "The history of the city" --temperature 0 --max-tokens 24 --device cuda \
      --dtype bfloat16 --attention "$attn" > "$OUT/generate_$attn.txt" 2>&1; echo "$attn rc $?"; head -3 "$OUT/generate_$attn.txt"
done
say "make profile T=t8"
timeout 200 $PY -m assignment.commands.profile --task t8 | tail -25
say "done"
