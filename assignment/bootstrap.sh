#!/usr/bin/env bash
# Create .venv with everything the kit needs, from a fresh clone, with no
# other step. Reuses a PyTorch that is already importable (GPU hosts usually
# have one, and often no network); otherwise installs torch==2.13.0, pinned so
# that pip never resolves an open range to a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.kit-installed"

if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt assignment/bootstrap.sh ]; then
  exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
  if "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    echo "bootstrap: reusing the PyTorch of $PYTHON ($("$PYTHON" -c 'import torch; print(torch.__version__)'))"
    "$PYTHON" -m venv --system-site-packages "$VENV"
  else
    "$PYTHON" -m venv "$VENV"
  fi
fi

PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "bootstrap: installing torch==2.13.0"
  "${PIP[@]}" "torch==2.13.0"
fi

# The project's dependencies, read from pyproject.toml (torch is already there).
mapfile -t DEPS < <("$VENV/bin/python" - <<'PY'
import re, sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for dep in deps:
    name = re.split(r"[<>=;\s\[]", dep, 1)[0].lower()
    if name == "torch":
        continue
    if name == "tomli" and sys.version_info >= (3, 11):
        continue
    print(dep.split(";")[0].strip())
PY
)
echo "bootstrap: installing ${DEPS[*]}"
"${PIP[@]}" "${DEPS[@]}"
touch "$STAMP"
echo "bootstrap: ready ($VENV, torch $("$VENV/bin/python" -c 'import torch; print(torch.__version__)'))"
