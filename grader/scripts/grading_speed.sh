#!/usr/bin/env bash
# How long one full submission takes to grade on this GPU host, phase by phase, and what the GPU does with work a
# process left queued (issue 35). Logs and figures go to $OUT (default build/device).
#   bash grader/scripts/grading_speed.sh teardown   # grader/scripts/worker_teardown_check.py
#   bash grader/scripts/grading_speed.sh warmup     # the reference's builds (once per host, as a class's first grading)
#   bash grader/scripts/grading_speed.sh full [N]   # the solutions graded N times (default 1), the student's builds
#                                                   # cold each time: scores, phases, each task's slowest checks
#   bash grader/scripts/grading_speed.sh fixtures NAME...   # adversarial fixtures by name
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source grader/scripts/device_env.sh
STAGE="${1:-full}"
shift || true
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }

case "$STAGE" in
  teardown)
    say "queued GPU work of a process that ends"
    python3 grader/scripts/worker_teardown_check.py
    ;;
  warmup)
    say "the reference's builds and the host's preflight"
    python3 -m grader.grade.preflight | tail -5
    ;;
  full)
    for run in $(seq 1 "${1:-1}"); do
      rm -rf .kit_cache/grader/submissions
      say "the solutions as a submission, #$run (the student's builds cold)"
      /usr/bin/time -f "wall %e s, max RSS %M KB" python3 -m grader.grade.grade solutions --out "$OUT/grade_$run" \
        --skip-preflight | grep -v "^wrote"
      python3 - "$OUT/grade_$run/grading.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
print("pace", g["pace"], "phases", g["phases"])
for task, t in g["tasks"].items():
    print(f"  {task} {t['status']} {t['phases']} rerun alone: {t['rerun_alone']}; slowest {t['slowest'][:3]}")
    for rule in t["timing"]:
        print(f"     {rule.get('rule')}: {rule.get('value')}")
PY
    done
    ;;
  fixtures)
    say "fixtures: $*"
    python3 -m grader.tools.adversarial --only "$@"
    ;;
esac
say "done"
