#!/usr/bin/env bash
# Verify the GPU half of the kit on a CUDA host and record the figures.
#   bash grader/device_check.sh verify   # compile, every t2-t5 test, starter fails cleanly,
#                                        # selfcheck, the graded timing tests repeated
#   bash grader/device_check.sh bench    # make bench tables, t4/t5 scaling plots, the profiler
# Logs and figures go to $OUT (default build/device). PY defaults to python3 (a GPU host's
# python with torch); it needs pytest-json-report importable.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE="${1:-verify}"
OUT="${OUT:-build/device}"
PY="${PY:-python3}"
REPEATS="${REPEATS:-4}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" KIT_CACHE_DIR="${KIT_CACHE_DIR:-$PWD/.kit_cache}"
LOG="$OUT/${STAGE}.log"
exec > >(tee "$LOG") 2>&1
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }

say "GPU"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv
$PY -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
nvcc --version | tail -2

if [ "$STAGE" = verify ] || [ "$STAGE" = all ]; then
  if [ -z "${SKIP_COMPILE:-}" ]; then
    say "compile every .cu (sm_80, sm_90)"
    $PY -m assignment.cuda.compiler --check-all --jobs 8
  fi
  if [ -z "${SKIP_TESTS:-}" ]; then
  say "public and hidden tests, solutions"
  $PY -m pytest tests grader/hidden -m "t1 or t2 or t3 or t4 or t5" -q -p no:cacheprovider -x \
      --json-report --json-report-file="$OUT/tests_solutions.json" --json-report-omit log streams
  fi
  say "public tests, starter (every test must fail with NotImplementedError)"
  IMPL=starter $PY -m pytest tests -m "t1 or t2 or t3 or t4 or t5" -q -p no:cacheprovider \
      --json-report --json-report-file="$OUT/tests_starter.json" --json-report-omit log streams | tail -1
  $PY - "$OUT/tests_starter.json" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
unclean = [t["nodeid"] for t in tests if not (t.get("call") or {}).get("crash", {}).get("message", "").startswith("NotImplementedError")]
print(f"starter: {len(tests)} public tests, {len(tests) - len(unclean)} failed with NotImplementedError, {len(unclean)} otherwise")
for nodeid in unclean[:10]:
    print("  not clean:", nodeid)
PY
  say "selfcheck"
  $PY -m grader.selfcheck --repeats "${SELFCHECK_REPEATS:-1}"
  for i in $(seq 1 "$REPEATS"); do
    say "graded timing tests, solutions, repeat $i"
    $PY -m pytest grader/hidden -m perf -q -p no:cacheprovider \
        --json-report --json-report-file="$OUT/perf_$i.json" --json-report-omit log streams | tail -2
    $PY - "$OUT/perf_$i.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    m = (t.get("metadata") or {}).get("timing", {})
    print(f"  {t['outcome']:7} {m.get('rule', t['nodeid'])}: value {m.get('value', float('nan')):.3f}  "
          f"student {m.get('student_ms', 0):.3f} ms  other {m.get('reference_ms', m.get('naive_ms', 0)):.3f} ms")
PY
  done
  tar czf "$OUT/verify_json.tgz" -C "$OUT" $(cd "$OUT" && ls *.json) && rm -f "$OUT"/*.json
fi

if [ "$STAGE" = bench ] || [ "$STAGE" = all ]; then
  for t in t2 t3 t4; do say "bench $t"; timeout "${BENCH_TIMEOUT:-150}" $PY -m assignment.perf.bench --task "$t"; done
  say "scaling t4"; timeout 200 $PY -m assignment.perf.scaling --task t4 ${SCALING_ARGS:-}
  say "scaling t5"; timeout 150 $PY -m assignment.perf.scaling --task t5 --quick
  say "profile t4"; timeout 120 $PY -m assignment.perf.profile --task t4
  tar czf "$OUT/bench_results.tgz" -C build bench
fi
say "done"
