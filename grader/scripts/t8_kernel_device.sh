#!/usr/bin/env bash
# t8's reference kernel on a GPU host, one call (< 5 minutes): correctness, bench, variants, compute-sanitizer, each
# phase its own process (a crash in one leaves the others their CUDA context). Logs: $OUT/t8_check.log (all phases)
# and $OUT/phase_*.txt. From the repository root, with .whl/ and .deb/ carried (device_env.sh):
#
#   bash grader/scripts/t8_kernel_device.sh
#
# The kit builds are cached in KIT_CACHE_DIR; `python grader/scripts/t8_kernel_check.py --prebuild sm_90` fills it
# ahead of time on a machine without a GPU (same nvcc), so the GPU host compiles nothing.
set -uo pipefail
cd "$(dirname "$0")/../.."
source grader/scripts/device_env.sh
export OUT="${OUT:-build/t8_device}" KIT_CACHE_DIR="${KIT_CACHE_DIR:-$PWD/.kit_cache}" PYTHONUNBUFFERED=1
mkdir -p "$OUT"
S=grader/scripts/t8_kernel_check.py
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,driver_version --format=csv,noheader > "$OUT/phase_gpu.txt" 2>&1
for phase in correctness bench variants sanitize; do
  skip=$(echo correctness,bench,variants,sanitize | tr , '\n' | grep -vx "$phase" | paste -sd,)
  timeout 170 python3 "$S" --out "$OUT" --skip "$skip" > "$OUT/phase_$phase.txt" 2>&1
  echo "$phase: exit $?" | tee -a "$OUT/phase_status.txt"
done
