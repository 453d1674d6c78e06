#!/usr/bin/env bash
# After moving the attention kernels' shared device helpers into kit.cuh: compile, t4/t5/t6 tests on the
# solutions and starters, sanitizer on t4 and t6, and the t4/t5 timing rules' bench rows.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m assignment.cuda.check_all --jobs 8 2>&1 | tail -2
python3 -m pytest tests/test_t4_flash_attention.py tests/test_t5_causal.py tests/test_t6_decode_attention.py grader/hidden/test_t4_hidden.py grader/hidden/test_t5_hidden.py -q -p no:cacheprovider -k "not timing" 2>&1 | tail -2
IMPL=starter python3 -m pytest tests/test_t4_flash_attention.py tests/test_t5_causal.py tests/test_t6_decode_attention.py -q -p no:cacheprovider 2>&1 | tail -1
for t in t4 t6; do python3 -m assignment.commands.sanitize --task $t 2>&1 | grep -E "clean|ERROR SUMMARY|RACECHECK SUMMARY"; done
python3 -m pytest grader/hidden/test_t4_hidden.py grader/hidden/test_t5_hidden.py -q -p no:cacheprovider -k timing -s 2>&1 | grep -E "value|passed|failed" | tail -5
python3 -m assignment.commands.bench --task t6 2>&1 | tail -9
