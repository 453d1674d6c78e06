#!/usr/bin/env bash
# How long one full submission takes to grade on this GPU host, phase by phase, and what the GPU does with work a
# process left queued (issue 35). Logs and figures go to $OUT (default build/device).
#   bash grader/scripts/grading_speed.sh teardown   # grader/scripts/worker_teardown_check.py
#   bash grader/scripts/grading_speed.sh warmup     # the reference's builds (once per host, as a class's first grading)
#   bash grader/scripts/grading_speed.sh full [N]   # the solutions graded N times (default 1): scores, phases, each
#                                                   # task's slowest checks and when each of its checkers ran
#                                                   # (PARALLEL=n: n checkers at once, grade's --parallel). Graded is a copy of solutions/ with a
#                                                   # comment added in every CUDA region, so that each grading compiles
#                                                   # every task (the solutions' own regions are the kit's: no build)
#   bash grader/scripts/grading_speed.sh builds     # one build of t4's file: nvcc alone, in the sandbox, the rules
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
  builds)
    say "t4's file: nvcc alone, in the compile sandbox, and the region rules"
    python3 grader/scripts/build_profile.py
    ;;
  full)
    for run in $(seq 1 "${1:-1}"); do
      rm -rf .kit_cache/grader/submissions /tmp/cold && mkdir -p /tmp/cold && cp -r solutions /tmp/cold/solutions
      sed -i "s|^\(\s*\)// BEGIN SOLUTION \(t[0-9]\).*$|&\n\1// graded $run: a comment, so that this region is built|" \
        /tmp/cold/solutions/*.cu
      say "the solutions as a submission, #$run (every CUDA region changed: the student's builds cold)"
      /usr/bin/time -f "wall %e s, max RSS %M KB" python3 -m grader.grade.grade /tmp/cold/solutions \
        --out "$OUT/grade_$run" --skip-preflight ${PARALLEL:+--parallel $PARALLEL} ${THREADS:+--threads $THREADS} | grep -v "^wrote"
      python3 - "$OUT/grade_$run/grading.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
print("pace", g["pace"], "phases", g["phases"])
for task, t in g["tasks"].items():
    print(f"  {task} {t['status']} {t['phases']} rerun alone: {t['rerun_alone']}; slowest {t['slowest'][:3]}")
    checkers = {}
    for check, checker, began, seconds in t.get("timeline", []):
        span = checkers.setdefault(checker, [began, began + seconds, 0])
        span[0], span[1], span[2] = min(span[0], began), max(span[1], began + seconds), span[2] + 1
    print("     checkers (first check began, last ended, checks): "
          + "; ".join(f"{c} {a:.1f}-{b:.1f} s ({n})" for c, (a, b, n) in sorted(checkers.items())))
    for rule in t["timing"]:
        extra = {k: rule[k] for k in ("checker_setup_s", "checker_setup_steps_s", "student_setup_s", "student_setup_steps_s") if k in rule}
        print(f"     {rule.get('rule')}: {rule.get('value')} {extra or ''}")
PY
      rm -f "$OUT/grade_$run/report.html" "$OUT/grade_$run/grades.csv" "$OUT/grade_$run/results.json"
    done
    ;;
  fixtures)
    say "fixtures: $*"
    python3 -m grader.tools.adversarial --only "$@"
    ;;
esac
say "done"
