#!/usr/bin/env bash
# The class example and the fairness figures on a GPU host (grader/records/class_h100.txt):
#   1. make_class.py writes a generated class of 16 (the solutions five times, the starter, honest bugs, a crash,
#      hangs, partial work, a .zip) and the slower honest variant;
#   2. grade-all grades the class (python -m grader.classroom.batch, default lanes) and writes the class outputs;
#   3. grader.tools.repeatability grades the variant five times (t3 and t5, the tasks it slows down) and summarises the
#      five gradings of the solutions inside the class.
# One device call runs at most 10 minutes, so each phase runs in the background (setsid) and every call of this
# script waits for it up to WAIT seconds, then packs the state into $OUT/state.tgz. Carry that file back as
# scratch/class-state.tgz when the machine was given back in between: the batch resumes where it stopped (a
# submission graded whole is never graded again). KEEP="id ..." grades only those students of the class and
# PHASES=batch skips the variant (the two-GPU check: KEEP=... PHASES=batch on nvidia-h200-x2). Needs .whl/ (pytest-json-report) and .deb/ (bubblewrap) carried.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/class-device}"
W=${CLASS_WORK:-/tmp/kit-class-example}
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 KIT_CACHE_DIR=/tmp/kit-cache
source grader/scripts/device_env.sh  # carried wheels on PYTHONPATH, carried bubblewrap as KIT_BWRAP
if [ ! -d $W/class ] && [ -f scratch/class-state.tgz ]; then
  tar -C $W -xzf scratch/class-state.tgz && echo "resumed from the carried state: $(ls $W/done 2>/dev/null | wc -l) phase(s) done"
fi
if [ ! -d $W/class ]; then
  python3 grader/scripts/make_class.py $W/class --variant $W/variant > $W/make_class.txt || exit 1
  if [ -n "${KEEP:-}" ]; then  # a smaller class: only these ids (a two-GPU check, say)
    for entry in $W/class/*; do case " $KEEP " in *" $(basename "${entry%.zip}") "*) ;; *) rm -rf "$entry";; esac; done
  fi
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.total --format=csv > $W/gpu.txt
fi
mkdir -p $W/done
# The grader's version is fixed at the first start and kept across machines: only this script's notes may change
# between calls, and a resumed batch must not take that for a new grader and grade the class again.
[ -f $W/grader_version.txt ] || python3 -c 'from grader.classroom.ledger import grader_version; print(grader_version())' > $W/grader_version.txt
export KIT_GRADER_VERSION=$(cat $W/grader_version.txt)

DEADLINE=$((SECONDS + ${WAIT:-520}))
SOLUTIONS=s01-solutions,s13-zipped-solutions,s14-solutions-again,s15-solutions-once-more,s16-solutions-on-the-board
phase_command() {
  case "$1" in
    batch) echo "python3 -m grader.classroom.batch $W/class --out $W/out";;
    variant) echo "python3 -m grader.tools.repeatability $W/variant --repeats 5 --task t3 --task t5 --out $W/variant-graded --json $W/variant.json";;
  esac
}
for phase in ${PHASES:-batch variant}; do
  [ -f $W/done/$phase ] && continue
  if ! { [ -f $W/$phase.pid ] && kill -0 "$(cat $W/$phase.pid)" 2>/dev/null; }; then
    echo "===== $phase: $(phase_command $phase)" | tee -a $W/$phase.log
    setsid bash -c "START=\$(date +%s); $(phase_command $phase); rc=\$?; echo \"===== exit \$rc after \$(( \$(date +%s) - START )) s\"; [ \$rc -le 1 ] && touch $W/done/$phase" \
      >> $W/$phase.log 2>&1 < /dev/null &
    echo $! > $W/$phase.pid
  fi
  while kill -0 "$(cat $W/$phase.pid)" 2>/dev/null && [ $SECONDS -lt $DEADLINE ]; do sleep 5; done
  [ -f $W/done/$phase ] || break
done
if [ -f $W/done/batch ] && [ ! -f $W/solutions.json ] && [ -z "${KEEP:-}" ]; then
  graded=$(echo $SOLUTIONS | tr , '\n' | sed "s|^|$W/out/students/|" | paste -sd,)
  python3 -m grader.tools.repeatability --graded "solutions=$graded" --json $W/solutions.json > $W/solutions.txt 2>&1
fi
grep -v '^\[kit\]' $W/batch.log | tail -40
[ -f $W/variant.log ] && tail -25 $W/variant.log
[ -f $W/solutions.txt ] && cat $W/solutions.txt
tar -C $W --exclude='*.so' --exclude='__pycache__' -czf "$OUT/state.tgz" \
  $(cd $W && ls -d class variant out variant-graded done *.log *.txt *.json 2>/dev/null)
ls -la "$OUT"
