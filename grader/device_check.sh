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

if [ "$STAGE" = verify ]; then
  say "compile every .cu (sm_80, sm_90)"
  $PY -m assignment.cuda --check-all --jobs 8
  say "public and hidden tests, solutions"
  $PY -m pytest tests grader/hidden -m "t1 or t2 or t3 or t4 or t5" -q -p no:cacheprovider -x \
      --json-report --json-report-file="$OUT/tests_solutions.json" --json-report-omit log streams
  say "public tests, starter (every test must fail with NotImplementedError)"
  IMPL=starter $PY -m pytest tests -m "t2 or t3 or t4 or t5" -q -p no:cacheprovider | tail -3
  IMPL=starter $PY -m pytest tests -m "t2 or t3 or t4 or t5" -q -p no:cacheprovider -rf 2>&1 \
      | grep '^FAILED' | grep -vc NotImplementedError | sed 's/^/starter failures that are not NotImplementedError: /'
  say "selfcheck"
  $PY -m grader.selfcheck
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

if [ "$STAGE" = bench ]; then
  for t in t2 t3 t4 t5; do say "bench $t"; $PY -m assignment.bench --task "$t"; done
  say "scaling t4"; $PY -m assignment.scaling --task t4 ${SCALING_ARGS:-}
  say "scaling t5"; $PY -m assignment.scaling --task t5 --quick
  say "profile t4"; $PY -m assignment.profile --task t4
  tar czf "$OUT/bench_results.tgz" -C build bench
fi
say "done"
