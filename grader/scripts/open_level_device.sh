#!/usr/bin/env bash
# Tasks at the open scaffolding level on a CUDA host. In a copy of this tree (this one is left alone) each named task's
# registry entry gets scaffolding = "open" and the starters are regenerated; then, per task: the solutions' public and
# hidden tests at that level (the grader's splice takes the open body, the ONLY open text), the open starter's public
# tests (each must stop at its TODO), and the solutions and the open starter graded (full marks, and zero cleanly).
# FIXTURES=1 also grades each of the task's honest simpler designs (grader/fixtures/open/, written as submissions by
# open_levels --write) at the open level; ONLY_FIXTURES=1 grades those alone.
#   OUT=dir [FIXTURES=1] [ONLY_FIXTURES=1] bash grader/scripts/open_level_device.sh t8 [t3 ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="$(mkdir -p "${OUT:-build/device}" && cd "${OUT:-build/device}" && pwd)"
PY="${PY:-python3}"
[ $# -gt 0 ] || { echo "usage: OUT=dir bash grader/scripts/open_level_device.sh t8 [t3 ...]" >&2; exit 2; }
COPY="${OPEN_LEVEL_TREE:-/tmp/kit-open-level}"
rm -rf "$COPY" && mkdir -p "$COPY" && tar --exclude=./.git --exclude=./.venv --exclude=./build -cf - . | tar -xf - -C "$COPY" \
  && cd "$COPY" || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" KIT_CACHE_DIR="$PWD/.kit_cache"
source grader/scripts/device_env.sh
exec > >(tee "$OUT/open_level.log") 2>&1
say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }
say "GPU"; nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader

say "registry: scaffolding = \"open\" for $*; starters regenerated"
$PY - "$@" <<'PY' || exit 1
import re, sys
from pathlib import Path
path = Path("assignment/tasks.toml")
text = path.read_text(encoding="utf-8")
for task in sys.argv[1:]:
    text, n = re.subn(rf'(?m)^(id = "{task}"\n)(?:scaffolding = "\w+"\n)?', rf'\1scaffolding = "open"\n', text)
    if n != 1:
        sys.exit(f"no [[task]] with id = \"{task}\" in {path}")
path.write_text(text, encoding="utf-8")
from assignment.registry import load_registry
print({t.id: t.scaffolding for t in load_registry().tasks})
PY
$PY -m grader.authoring.starter | tail -2

for task in "$@"; do
  if [ -n "${FIXTURES:-}${ONLY_FIXTURES:-}" ]; then
    say "$task: its honest simpler designs graded at the open level"
    rm -rf /tmp/kit-open-fixtures && $PY -m grader.tools.open_levels --write /tmp/kit-open-fixtures --task "$task" | tail -1
    for sub in /tmp/kit-open-fixtures/*/; do
      name="$(basename "$sub")"
      echo "== $name"
      $PY -m grader.grade.grade "$sub" --task "$task" --out "$OUT/grade_open_${task}_fixture_$name" --skip-preflight \
          --no-theory | tail -3 | head -1
      $PY - "$OUT/grade_open_${task}_fixture_$name/grading.json" <<'PY'
import json, sys
for task in json.load(open(sys.argv[1]))["tasks"].values():
    for timing in task.get("timing", []):
        print(f"   {timing['rule']}: {timing.get('value', float('nan')):.3f} ({timing.get('student_ms', float('nan')):.3f} ms)")
PY
    done
  fi
  [ -n "${ONLY_FIXTURES:-}" ] && continue
  files="$(ls tests/test_${task}_*.py) grader/hidden/test_${task}_hidden.py"
  say "$task: public and hidden tests of the solutions at the open level"
  $PY -m pytest $files -q -p no:cacheprovider | tail -3
  say "$task: the open starter's public tests (each must stop at its TODO)"
  IMPL=starter $PY -m pytest $(ls tests/test_${task}_*.py) -q -p no:cacheprovider | tail -2
  say "$task: the solutions and the open starter graded"
  for who in solutions starter; do
    $PY -m grader.grade.grade "$who" --task "$task" --out "$OUT/grade_open_${task}_$who" --skip-preflight --no-theory \
        | tail -4
  done
done
say "done"
