#!/usr/bin/env bash
# t9 (FlashAttention-3 on Hopper) on an H100/H200, in the calls a device session allows. From the repository root,
# with .whl/ and .deb/ carried (device_env.sh). Logs under $OUT (default build/t9_device).
#   bash grader/scripts/t9_device.sh kernel     # t9's kernel: correctness and the bench against cuDNN and FA2 (its own
#                                               # harness, grader/scripts/t9_kernel_check.py), then its schedule variants
#   bash grader/scripts/t9_device.sh task       # t9 graded as a task: the solutions five times (full marks each), the
#                                               # starter's public tests at their TODO, make sanitize, the GPU fixtures
#   bash grader/scripts/t9_device.sh bench      # make bench T=t9 (fp16, then --bf16; TTFT rows with the model)
set -uo pipefail
cd "$(dirname "$0")/../.."
source grader/scripts/device_env.sh
export OUT="${OUT:-build/t9_device}" KIT_CACHE_DIR="${KIT_CACHE_DIR:-$PWD/.kit_cache}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }
PY=python3
for stage in "$@"; do
  case "$stage" in
    kernel)
      say "t9 kernel: correctness and bench"
      timeout 240 $PY grader/scripts/t9_kernel_check.py --out "$OUT" --skip sanitize,variants > "$OUT/t9_kernel.txt" 2>&1
      echo "exit $?"; grep -E "FAIL|correctness:" "$OUT/t9_kernel.txt" | head -20; grep -A19 "===== bench" "$OUT/t9_kernel.txt" | cut -c1-190
      if [ -n "${VARIANTS:-}" ]; then
        say "t9 kernel: variants $VARIANTS"
        timeout 200 $PY grader/scripts/t9_kernel_check.py --out "$OUT" --skip correctness,sanitize,bench \
          --variants "$VARIANTS" > "$OUT/t9_variants.txt" 2>&1
        echo "exit $?"; tail -13 "$OUT/t9_variants.txt" | cut -c1-230
      fi ;;
    task)
      say "t9 graded: the solutions, ${REPEATS:-5} times"
      timeout 300 $PY -m grader.tools.repeatability solutions --repeats "${REPEATS:-5}" --task t9 --out /tmp/t9_repeat \
        > "$OUT/t9_repeat.txt" 2>&1; echo "exit $?"; tail -12 "$OUT/t9_repeat.txt"
      say "t9 starter: public tests at their TODO"
      IMPL=starter timeout 120 $PY -m pytest tests -m t9 -q -p no:cacheprovider --ignore tests/kit 2>&1 | tail -2
      say "make sanitize T=t9"
      timeout 200 $PY -m assignment.commands.sanitize --task t9 2>&1 | tail -6
      say "t9 fixtures (GPU)"
      timeout 400 $PY -m grader.tools.adversarial --only $($PY -c "from grader.tools.adversarial import load_fixtures; print(' '.join(f.name for f in load_fixtures() if f.task == 't9' and f.gpu))") 2>&1 | tail -10 ;;
    bench)
      say "make bench T=t9"
      timeout 240 $PY -m assignment.commands.bench --task t9 2>&1 | tee "$OUT/t9_bench.txt" | tail -40 ;;
  esac
done
say "done"
