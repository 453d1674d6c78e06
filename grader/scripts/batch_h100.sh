#!/usr/bin/env bash
# Class grading on a GPU host (grader/records/batch_h100.txt): a small class through grader.classroom.batch (its GPU and
# CPU lanes, the GPU worker's reference check), the same command again (nothing to do), then the solutions graded
# with every task on the GPU worker (--no-split) to compare the timed values. Logs and outputs go to $OUT.
# Needs pytest-json-report importable (carry .whl/) and bubblewrap (carry .deb/, as grader/scripts/device_check.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/batch-device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source grader/scripts/device_env.sh  # carried wheels on PYTHONPATH, carried bubblewrap as KIT_BWRAP
C=/tmp/kit-class; rm -rf "$C"; mkdir -p $C/sol $C/starter $C/partial
cp solutions/*.py solutions/*.cu $C/sol/
cp starter/*.py starter/*.cu $C/starter/
cp solutions/*.py solutions/*.cu $C/partial/
cp starter/t4_flash_attention.cu starter/t7_generate.py $C/partial/
echo "Fast Fox" > $C/sol/leaderboard.txt
echo "Partial Pat" > $C/partial/leaderboard.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
python3 -m grader.classroom.batch $C --out $OUT/class ${JOBS:+--jobs $JOBS} 2>&1 | tee $OUT/batch.log
echo "===== again" | tee -a $OUT/batch.log
python3 -m grader.classroom.batch $C --out $OUT/class ${JOBS:+--jobs $JOBS} 2>&1 | tee -a $OUT/batch.log
if [ -z "${SKIP_NOSPLIT:-}" ]; then
  echo "===== --no-split, the solutions" | tee -a $OUT/batch.log
  python3 -m grader.classroom.batch $C --out $OUT/nosplit --no-split --only sol --no-collect 2>&1 | tee -a $OUT/batch.log
fi
python3 - "$OUT" <<'PY' | tee -a $OUT/batch.log
import json, sys
for out in ("class", "nosplit"):
    try:
        g = json.load(open(f"{sys.argv[1]}/{out}/students/sol/grading.json"))
    except OSError:
        continue
    for task, record in g["tasks"].items():
        for t in record.get("timing", []):
            print(out, task, t["rule"], round(t.get("value", float("nan")), 3), t.get("worker_call_overhead_ms", ""))
PY
