# Sourced from the repository root by the GPU-host scripts (grader/scripts/*.sh: device_check.sh and the others): what a
# bare GPU machine lacks and the call carried. Wheels in .whl/ (pytest-json-report) are installed once into
# /tmp/site, which goes on PYTHONPATH after the repository; Debian's bubblewrap and libcap2 in .deb/ are unpacked
# into /tmp/kit-bwrap behind a wrapper that KIT_BWRAP names (the kit finds bwrap on PATH or there).
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -f /tmp/site/.kit-installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.kit-installed \
    || echo "!!!!! pip install of .whl/ failed: the json reports (device_check.sh's tests stage) need it"
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${KIT_BWRAP:-}" ] && ! command -v bwrap >/dev/null && ls .deb/bubblewrap_*.deb >/dev/null 2>&1; then
  mkdir -p /tmp/kit-bwrap && for deb in .deb/*.deb; do dpkg -x "$deb" /tmp/kit-bwrap; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/kit-bwrap/usr/lib/x86_64-linux-gnu exec /tmp/kit-bwrap/usr/bin/bwrap "$@"\n' \
    > /tmp/kit-bwrap/bwrap && chmod +x /tmp/kit-bwrap/bwrap
  export KIT_BWRAP=/tmp/kit-bwrap/bwrap
fi
