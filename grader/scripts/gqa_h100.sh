#!/usr/bin/env bash
# Device job for issue 12 item 1 (grouped-query attention in the t4/t5 kernel). One call, < 9 minutes:
#
#   run(command="bash grader/scripts/gqa_h100.sh", carry=[".whl", ".deb"], timeout_s=600)
#
# Steps, most important first (each one's exit code goes to $OUT/steps.tsv; a failing step does not stop the
# next; a step that would start after DEADLINE seconds is skipped, and each is cut to the time left):
#   gpu            the GPU, clocks, torch, nvcc
#   compile        every .cu for sm_80 and sm_90 (solutions and starter)
#   public         the t4 and t5 public tests on the solutions (GQA shapes included)
#   hidden         the t4 and t5 hidden suites on the solutions (values, GQA sharing, structure, the timing
#                  rubric; compute-sanitizer is the next step) + the kit's configuration-coverage test
#   starter        the t4 and t5 public tests on the starter (pytest fails: exit code 1 is expected) and
#   starter_clean  the verdict: every one of them failed with NotImplementedError
#   sanitize       make sanitize T=t4 and T=t5 (compute-sanitizer memcheck and racecheck, the same runs as the
#                  hidden suites' test_compute_sanitizer; GQA launches with exact-size K/V buffers included)
#   model          the shipped GQA checkpoint (4 query heads over 2 KV heads) with attention t5 vs reference:
#                  full pass, prefill, a chunk after the cache (Lq < Lk), decode steps
#   bench_t4/t5    python -m assignment.commands.bench --task t4 / t5 (the registry's timing shapes, then the GQA
#                  rows: B 1, H 32, H_kv 8, L 8192, d 64 and 128, each kernel on grouped K/V and on K/V repeated)
#   hidden2        the hidden value checks again with a second seed (other drawn shapes, H_kv drawn from the
#                  divisors of H)
#   grade          python -m grader.grade.grade solutions --task t4 --task t5 (the splice path), if time is left
# Then $OUT/summary.txt: step codes, test counts, the timing rules' values, the GQA/MHA time ratios.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-build/gqa_device}"
mkdir -p "$OUT"
DEADLINE="${DEADLINE:-530}"          # seconds: stop starting steps after this (the call's limit is 600)
export PYTHONUNBUFFERED=1 KIT_CACHE_DIR="${KIT_CACHE_DIR:-/tmp/kit_cache_gqa}"
exec > >(tee "$OUT/gqa_device.log") 2>&1
printf 'step\trc\tseconds\n' > "$OUT/steps.tsv"

say() { printf '\n===== %s (%s s)\n' "$*" "$SECONDS"; }
left() { echo $(( DEADLINE - SECONDS )); }
# step NAME LIMIT_S CMD...: run CMD under timeout min(LIMIT_S, time left), log to $OUT/NAME.txt, record the code.
step() {
  local name="$1" limit="$2"; shift 2
  local budget; budget=$(left)
  (( budget < limit )) && limit=$budget
  if (( limit < 20 )); then
    say "$name: SKIPPED (no time left)"; printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"; return 0
  fi
  say "$name (limit ${limit} s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.txt"
  (( rc == 124 || rc == 137 )) && echo "!!!!! $name TIMED OUT after $limit s"
  (( rc != 0 )) && echo "!!!!! $name FAILED with exit code $rc"
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( SECONDS - start ))" >> "$OUT/steps.tsv"
  return 0
}

say "setup"
source grader/scripts/device_env.sh  # carried wheels on PYTHONPATH, carried bubblewrap as KIT_BWRAP
SEED1="${SEED1:-$(( (RANDOM << 15) | RANDOM ))}"
SEED2="${SEED2:-$(( (RANDOM << 15) | RANDOM ))}"
echo "hidden seeds: KIT_SEED=$SEED1 and KIT_SEED=$SEED2 (replay with SEED1=... SEED2=...)"
PYTEST=(python3 -m pytest -q -p no:cacheprovider -rfE)
json() { echo --json-report --json-report-file="$OUT/$1.json" --json-report-omit log streams; }

step gpu 60 bash -c 'nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv;
  python3 -c "import torch, sys; print(\"python\", sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name())";
  nvcc --version | tail -2; command -v compute-sanitizer'

step compile 150 python3 -m assignment.cuda.check_all --jobs 12

step public 150 env IMPL=solutions "${PYTEST[@]}" tests/test_t4_flash_attention.py tests/test_t5_causal.py \
  --durations=5 $(json public)

step hidden 240 env IMPL=solutions KIT_SEED="$SEED1" "${PYTEST[@]}" grader/hidden/test_t4_hidden.py \
  grader/hidden/test_t5_hidden.py tests/kit/test_hidden_coverage.py -k "not compute_sanitizer" --durations=10 \
  $(json hidden)

step starter 90 env IMPL=starter "${PYTEST[@]}" tests/test_t4_flash_attention.py tests/test_t5_causal.py $(json starter)
step starter_clean 30 python3 - "$OUT/starter.json" <<'PY'
import json, sys
tests = json.load(open(sys.argv[1]))["tests"]
skipped = [t["nodeid"] for t in tests if t["outcome"] == "skipped"]
unclean = [t["nodeid"] for t in tests if t["outcome"] != "skipped"
           and not (t.get("call") or t.get("setup") or {}).get("crash", {}).get("message", "").startswith("NotImplementedError")]
clean = len(tests) - len(unclean) - len(skipped)
print(f"starter: {len(tests)} public t4/t5 tests, {clean} failed with NotImplementedError, {len(skipped)} skipped, "
      f"{len(unclean)} otherwise")
for nodeid in unclean[:10]:
    print("  not clean:", nodeid)
sys.exit(1 if unclean or skipped or not tests else 0)
PY

step sanitize 200 env IMPL=solutions bash -c 'rc=0; for t in t4 t5; do echo "== make sanitize T=$t"; python3 -m assignment.commands.sanitize --task $t || rc=1; done; exit $rc'

step model 120 env IMPL=solutions python3 - <<'PY'
# The model's attention seam with the t5 kernel on the shipped GQA checkpoint (or, without the tokenizers /
# safetensors packages, the same configuration with random weights): K/V go to the kernel with H_kv heads (no
# repeat). Logits must agree with the float32 PyTorch reference attention.
import copy

import torch

from assignment.model import DEFAULT_CHECKPOINT
from assignment.model.config import ModelConfig
from assignment.model.llama import Transformer, decode_one_token, prefill

torch.backends.cuda.matmul.allow_tf32 = False
try:
    from assignment.model.checkpoint import load_checkpoint
    reference = load_checkpoint(device="cuda", attention="reference", max_seq_len=512).model
    print(f"weights: {DEFAULT_CHECKPOINT.name}")
except ImportError as exc:
    print(f"weights: random ({exc}); configuration of {DEFAULT_CHECKPOINT.name}")
    torch.manual_seed(0)
    reference = Transformer(ModelConfig.from_file(DEFAULT_CHECKPOINT / "config.json")).to("cuda").eval()
    for param in reference.parameters():
        param.requires_grad_(False)
    reference.setup_caches(1, 512)
t5 = copy.deepcopy(reference)
t5.attention_impl = "t5"
models = {"reference": reference, "t5": t5}
cfg = reference.config
print(f"{cfg.num_attention_heads} query heads over {cfg.num_key_value_heads} KV heads, head_dim {cfg.head_dim}")
gen = torch.Generator(device="cuda").manual_seed(0)
tokens = torch.randint(0, cfg.vocab_size, (1, 300), device="cuda", generator=gen)
worst = 0.0


def compare(what, run):
    global worst
    with torch.no_grad():
        a, b = (run(models[n]) for n in ("reference", "t5"))
    err = (a - b).abs().max().item()
    worst = max(worst, err)
    print(f"{what:<48} max |logit difference| {err:.2e}")


compare("full causal pass, 300 tokens (no cache)", lambda m: m(tokens))
compare("prefill 200 tokens", lambda m: prefill(m, tokens[:, :200], torch.arange(200, device="cuda")))
compare("chunk of 60 after the cache (Lq 60, Lk 260)",
        lambda m: m._run(tokens[:, 200:260], torch.arange(200, 260, device="cuda"), last_only=False))
for p in range(260, 266):
    compare(f"decode at position {p}", lambda m: decode_one_token(m, tokens[:, p:p + 1], torch.tensor([p], device="cuda")))
print(f"worst {worst:.2e}")
assert worst < 2e-3, f"t5 attention in the model differs from the reference by {worst:.2e}"
print("model: OK")
PY

step bench_t4 180 env IMPL=solutions python3 -m assignment.commands.bench --task t4 --out "$OUT/bench"
step bench_t5 180 env IMPL=solutions python3 -m assignment.commands.bench --task t5 --out "$OUT/bench"

step hidden2 90 env IMPL=solutions KIT_SEED="$SEED2" "${PYTEST[@]}" grader/hidden/test_t4_hidden.py \
  grader/hidden/test_t5_hidden.py -k "values" $(json hidden2)

step grade 150 python3 -m grader.grade.grade solutions --task t4 --task t5 --skip-preflight --seed "$SEED1" --out "$OUT/grade"

say "summary"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
print("steps (rc 0 = ok; starter's 1 is expected, starter_clean gives the verdict):")
print((out / "steps.tsv").read_text())
for name in ("public", "hidden", "hidden2", "starter"):
    try:
        report = json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        print(f"{name}: no json report")
        continue
    print(f"{name}: {report.get('summary')}")
    for t in report["tests"]:
        if t["outcome"] not in ("passed", "skipped") and name != "starter":
            print(f"  {t['outcome'].upper()}: {t['nodeid']}")
        timing = (t.get("metadata") or {}).get("timing")
        if timing:
            print(f"  timing {t['nodeid'].split('::')[-1]}: {json.dumps(timing)}")
for task in ("t4", "t5"):
    path = out / "bench" / f"{task}.json"
    if not path.is_file():
        print(f"bench {task}: no results")
        continue
    bench = json.loads(path.read_text())
    print(f"\nbench {task} on {bench['gpu'].get('name')} (copy {bench['copy_gbps']:.0f} GB/s):")
    for row in bench["cases"]:
        res = {n: r["median_ms"] for n, r in row["results"].items()}
        line = "  ".join(f"{n} {ms:.3f}" for n, ms in res.items())
        print(f"  {row['label']}: {line} ms" + (f"  ERROR {row['error']}" if row.get("error") else ""))
        for who in ("student", "reference"):
            if who in res and f"{who} MHA" in res:
                print(f"      {who}: GQA / MHA time = {res[who] / res[who + ' MHA']:.3f}")
        if "reference" in res and "naive cuda" in res:
            print(f"      naive cuda / reference = {res['naive cuda'] / res['reference']:.2f}x")
        if "reference" in res and "SDPA" in res:
            print(f"      SDPA / reference = {res['SDPA'] / res['reference']:.2f}x")
grading = out / "grade" / "grading.json"
if grading.is_file():
    g = json.loads(grading.read_text())
    for task, v in g.get("tasks", {}).items():
        print(f"grade {task}: {v.get('score')} / {v.get('max_score')} ({v.get('status')}, {v.get('duration_s')} s)"
              + (f" failed: {v.get('failed')}" if v.get("failed") else ""))
PY
say "done"
