"""Does GPU work a process left queued outlive it? The construction behind the grader's timing (issue 35, item 6).

The grader ends every sandboxed worker (kills it and waits until it has exited: grader/isolation/sandbox.py
``end_process``) before it times anything. That holds only if a process's queued GPU work ends with the process.
This measures it on a GPU host: a child queues a long spin kernel on a stream of its own and reports; the GPU is
timed here while the child lives (the two contexts share the GPU by time slices), right after the child has been
ended, and once more a second later. Run on the GPU host: ``python3 grader/scripts/worker_teardown_check.py``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

from grader.isolation import sandbox

CHILD = """
import sys, time, torch
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    for _ in range(20):
        torch.cuda._sleep(200_000_000)  # about 0.1 s each at 2 GHz: 2 s queued in all
print("queued", flush=True)
time.sleep(120)
"""


def probe_ms(repeats: int = 5) -> float:
    """A short kernel's wall time here (about 0.5 ms on an idle GPU)."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        torch.cuda._sleep(1_000_000)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def compute_apps() -> str:
    result = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"], capture_output=True, text=True
    )
    return result.stdout.strip().replace("\n", "; ") or "(none listed)"


def main() -> int:
    torch.cuda.init()
    idle = probe_ms()
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert child.stdout.readline().strip() == "queued"
    start = sandbox.process_start(child.pid)
    busy = probe_ms(3)
    listed = compute_apps()
    began = time.perf_counter()
    ended = sandbox.end_process(child.pid, start)
    ending_ms = (time.perf_counter() - began) * 1e3
    after = probe_ms()
    time.sleep(1.0)
    later = probe_ms()
    child.wait()
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    print(f"a short kernel here, idle GPU: {idle:.3f} ms")
    print(f"  while the child's 2 s of queued work runs: {busy:.3f} ms (compute apps: {listed})")
    print(f"ending the child took {ending_ms:.1f} ms (ended: {ended}); compute apps now: {compute_apps()}")
    print(f"  right after it ended: {after:.3f} ms; one second later: {later:.3f} ms")
    outlived = after > 3 * idle + 1.0
    print(
        "VERDICT: queued work OUTLIVED its process"
        if outlived
        else "VERDICT: a process's queued GPU work ends with it (nothing of it ran once it had exited)"
    )
    return 1 if outlived else 0


if __name__ == "__main__":
    sys.exit(main())
