#!/usr/bin/env bash
# Class grading on a GPU host (grader/benchmarks/batch_h100.txt): a small class through grader.batch (its GPU and
# CPU lanes, the GPU worker's reference check), the same command again (nothing to do), then the solutions graded
# with every task on the GPU worker (--no-split) to compare the timed values. Logs and outputs go to $OUT.
# Needs pytest-json-report importable (carry .whl/) and bubblewrap (carry .deb/, as grader/device_check.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/batch-device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
fi
if [ -z "${KIT_BWRAP:-}" ] && ! command -v bwrap >/dev/null && ls .deb/bubblewrap_*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/kit-bwrap && for deb in .deb/*.deb; do dpkg -x "$deb" /tmp/kit-bwrap; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/kit-bwrap/usr/lib/x86_64-linux-gnu exec /tmp/kit-bwrap/usr/bin/bwrap "$@"\n' \
    > /tmp/kit-bwrap/bwrap && chmod +x /tmp/kit-bwrap/bwrap
  export KIT_BWRAP=/tmp/kit-bwrap/bwrap
fi
C=/tmp/kit-class; rm -rf "$C"; mkdir -p $C/sol $C/starter $C/partial
cp solutions/*.py solutions/*.cu $C/sol/
cp starter/*.py starter/*.cu $C/starter/
cp solutions/*.py solutions/*.cu $C/partial/
cp starter/t4_flash_attention.cu starter/t7_generate.py $C/partial/
echo "Fast Fox" > $C/sol/leaderboard.txt
echo "Partial Pat" > $C/partial/leaderboard.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
python3 -m grader.batch $C --out $OUT/class ${JOBS:+--jobs $JOBS} 2>&1 | tee $OUT/batch.log
echo "===== again" | tee -a $OUT/batch.log
python3 -m grader.batch $C --out $OUT/class ${JOBS:+--jobs $JOBS} 2>&1 | tee -a $OUT/batch.log
if [ -z "${SKIP_NOSPLIT:-}" ]; then
  echo "===== --no-split, the solutions" | tee -a $OUT/batch.log
  python3 -m grader.batch $C --out $OUT/nosplit --no-split --only sol --no-collect 2>&1 | tee -a $OUT/batch.log
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
