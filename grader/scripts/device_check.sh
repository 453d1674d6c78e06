#!/usr/bin/env bash
# Verify the GPU half of the kit on a CUDA host and record the figures.
#   bash grader/scripts/device_check.sh tests      # compile; every available task's public and hidden tests, the kit's GPU tests;
#                                          # the starter fails cleanly (SKIP_STARTER=1: not this time); the preflight
#   bash grader/scripts/device_check.sh grading    # grading time (a cold and a warm build), selfcheck x SELFCHECK_REPEATS
#   bash grader/scripts/device_check.sh fixtures   # the GPU adversarial fixtures (FIXTURES="name ..." for some of them)
#   bash grader/scripts/device_check.sh repeat     # the solutions graded REPEATS times (full marks each, the time of each),
#                                          # and a buggy t3 graded REPEATS times (the same points each time)
#   bash grader/scripts/device_check.sh baseline   # grading time of another tree (BASELINE=dir: an earlier commit's
#                                          # files), cold, beside this tree's, on the same GPU
#   bash grader/scripts/device_check.sh verify     # tests, grading and fixtures
#   bash grader/scripts/device_check.sh bench      # make bench tables, t4/t5 scaling plots, the profiler
# Logs and figures go to $OUT (default build/device). PY defaults to python3 (a GPU host's python with
# torch); it needs pytest-json-report importable. Bubblewrap: set KIT_BWRAP, or carry Debian's
# bubblewrap and libcap2 packages in .deb/ (apt-get download bubblewrap libcap2): they are unpacked to
# /tmp and used through a wrapper, so the host needs no install.
set -uo pipefail
cd "$(dirname "$0")/../.."
STAGE="${1:-verify}"
OUT="${OUT:-build/device}"
PY="${PY:-python3}"
SELFCHECK_REPEATS="${SELFCHECK_REPEATS:-5}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" KIT_CACHE_DIR="${KIT_CACHE_DIR:-$PWD/.kit_cache}"
LOG="$OUT/${STAGE}.log"
exec > >(tee "$LOG") 2>&1
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }

say "GPU"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv
$PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
nvcc --version | tail -2

source grader/scripts/device_env.sh  # carried wheels on PYTHONPATH, carried bubblewrap as KIT_BWRAP
$PY -c "from grader.isolation.sandbox import best_isolation; print('isolation:', *best_isolation())"

# The available tasks' markers, from the registry ("t1 or t2 or ...").
TASK_MARKERS="$($PY -c "from assignment.registry import load_registry; print(' or '.join(t.id for t in load_registry().tasks if t.available))")"

stage() { [ "$STAGE" = "$1" ] || [ "$STAGE" = all ] || { [ "$STAGE" = verify ] && [ "$1" != bench ]; }; }

if stage tests; then
  if [ -z "${SKIP_COMPILE:-}" ]; then
    say "compile every .cu (sm_80, sm_90)"
    $PY -m assignment.cuda.check_all --jobs 8
  fi
  if [ -z "${SKIP_TESTS:-}" ]; then
    say "public and hidden tests of the solutions, and the kit's GPU tests"
    $PY -m pytest tests grader/hidden -m "$TASK_MARKERS or gpu" -q -p no:cacheprovider \
        --ignore tests/kit/test_adversarial.py --ignore tests/kit/test_handout.py \
        --ignore tests/kit/test_handout_browser.py --ignore tests/kit/test_mathml.py --durations=20 \
        --json-report --json-report-file="$OUT/tests_solutions.json" --json-report-omit log streams | tail -25
  fi
  if [ -z "${SKIP_STARTER:-}" ]; then
  say "public tests, starter (every test must fail with NotImplementedError)"
  IMPL=starter $PY -m pytest tests -m "$TASK_MARKERS" -q -p no:cacheprovider --ignore tests/kit \
      --json-report --json-report-file="$OUT/tests_starter.json" --json-report-omit log streams | tail -1
  $PY - "$OUT/tests_starter.json" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
skipped = [t["nodeid"] for t in tests if t["outcome"] == "skipped"]
def at_a_todo(call):  # the kit's plugin reports a TODO stub as "TODO(tN) not written yet: NotImplementedError: ..."
    return (call.get("crash", {}).get("message", "").startswith("NotImplementedError")
            or ") not written yet: NotImplementedError" in str(call.get("longrepr", "")))
unclean = [t["nodeid"] for t in tests if t["outcome"] != "skipped" and not at_a_todo(t.get("call") or {})]
print(f"starter: {len(tests)} public tests, {len(tests) - len(unclean) - len(skipped)} failed with NotImplementedError, "
      f"{len(skipped)} skipped, {len(unclean)} otherwise")
for nodeid in unclean[:10]:
    print("  not clean:", nodeid)
PY
  fi
  say "preflight (the reference's time at every timing rule)"
  $PY -m grader.grade.preflight
  tar czf "$OUT/tests_json.tgz" -C "$OUT" tests_*.json && rm -f "$OUT"/tests_*.json
fi

if stage grading; then
  say "grading time: the solutions as a submission, cold student build then warm"
  rm -rf .kit_cache/grader/submissions
  # The preflight runs once per grading session (make preflight, or the batch grader), not per submission.
  for run in cold warm; do
    /usr/bin/time -f "$run: %e s wall, %M KB max RSS" $PY -m grader.grade.grade solutions --out "$OUT/grade_$run" \
        --skip-preflight | tail -8
    $PY -c "import json,sys; g=json.load(open(sys.argv[1])); print({k: v['duration_s'] for k, v in g['tasks'].items()}); [print(k, v['slowest']) for k, v in g['tasks'].items()]" "$OUT/grade_$run/grading.json"
  done
  say "selfcheck x$SELFCHECK_REPEATS"
  /usr/bin/time -f "selfcheck: %e s wall" $PY -m grader.tools.selfcheck --repeats "$SELFCHECK_REPEATS"
  tar czf "$OUT/grading.tgz" -C "$OUT" grade_cold grade_warm && rm -rf "$OUT"/grade_cold "$OUT"/grade_warm
fi

if stage fixtures; then
  say "adversarial fixtures that need a GPU"
  if [ -n "${FIXTURES:-}" ]; then $PY -m grader.tools.adversarial --only $FIXTURES; else $PY -m grader.tools.adversarial --gpu; fi
fi

if [ "$STAGE" = repeat ]; then
  say "the solutions graded ${REPEATS:-5} times (make repeatability)"
  $PY -m grader.tools.repeatability solutions --repeats "${REPEATS:-5}" --out /tmp/repeat_solutions --json "$OUT/repeat_solutions.json" | tail -40
  say "a buggy t3 (t3-k-edge-unguarded) graded ${REPEATS:-5} times"
  $PY -c "from pathlib import Path; from grader.tools.adversarial import build_submission, load_fixtures; \
print(build_submission(next(f for f in load_fixtures() if f.name == 't3-k-edge-unguarded'), Path('/tmp/buggy')))"
  $PY -m grader.tools.repeatability /tmp/buggy/t3-k-edge-unguarded --repeats "${REPEATS:-5}" --task t3 | tail -25
fi

if [ "$STAGE" = baseline ]; then
  say "grading time, cold: the baseline tree ($BASELINE), then this one"
  for tree in "$BASELINE" "$PWD"; do
    (cd "$tree" && rm -rf .kit_cache && KIT_CACHE_DIR="$PWD/.kit_cache" PYTHONPATH="$PWD:/tmp/site" \
       /usr/bin/time -f "$tree: %e s wall" $PY -m grader.grade.grade solutions --out "/tmp/grade_$(basename "$tree")" \
       --skip-preflight | tail -3)
    $PY -c "import json,sys; g=json.load(open(sys.argv[1])); print({k: round(v['duration_s'], 1) for k, v in g['tasks'].items()})" \
        "/tmp/grade_$(basename "$tree")/grading.json"
  done
fi

if stage bench; then
  for t in t2 t3 t4; do say "bench $t"; timeout "${BENCH_TIMEOUT:-150}" $PY -m assignment.commands.bench --task "$t"; done
  say "scaling t4"; timeout 200 $PY -m assignment.commands.scaling --task t4 ${SCALING_ARGS:-}
  say "scaling t5"; timeout 150 $PY -m assignment.commands.scaling --task t5 --quick
  say "profile t4"; timeout 120 $PY -m assignment.commands.profile --task t4
  tar czf "$OUT/bench_results.tgz" -C build bench
fi
say "done"
