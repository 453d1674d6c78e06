"""The class grading's queue: the loop that runs its lanes on its workers (both planned in grader/classroom/lanes.py; its
progress on a terminal: grader/classroom/progress.py), and a submission's results put together.

**Lanes and workers.** One worker per GPU, each grading the GPU tasks of one submission at a time with only
its GPU visible (``CUDA_VISIBLE_DEVICES``), so timed checks never share a GPU; and CPU workers for the tasks
that need no GPU (t1, t7), run with no GPU visible: a submission's two *lanes* run side by side and are merged
into one set of results (``merge_parts``). ``split=False`` (``--no-split``) grades every task on the GPU
workers (t1/t7 then also check on the GPU, as a single ``make grade`` on a GPU host does). On a host without a
GPU everything is CPU work. The CPU workers are pinned to the cores the GPU workers leave (``place_workers``).
Each lane runs in a process of its own (``grader/classroom/batch_worker.py``) with a time limit from the registry
(``[task.grading] timeout_s`` of its tasks, times the time scale, plus the CUDA builds and
``LANE_OVERHEAD_S``): a crash or a hang is recorded as that submission's failure, with the reason
(``failed.json``), and retried on the next run; the batch goes on. A lane's process dies with the batch
(PR_SET_PDEATHSIG), and its checker with it.

**GPU workers' check.** Before grading, each GPU worker times the reference on its own GPU (the preflight's
reference-speed check, ``Batch.check_gpus``) and is warned about when a rule's reference time is more than
``SPEED_TOLERANCE`` away from the registry's figure, or when one GPU is that much slower than the others; a GPU
past the preflight's own limit is left out (unless the preflight is skipped). The checks go to
``OUT/workers/<run>.json``, into each graded submission's grading.json and into the class summary.

**Resume.** A submission is done when its marker's key (grader/classroom/ledger.py) is this run's. Results are written
whole (temporary name, then rename) and the marker last; a lane that finished before an interruption is kept
and reused; a student's folder is locked while it is graded. So a ``kill -9`` or a reboot loses nothing, and
the same command run again grades what is missing, once.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from assignment.registry import Registry, Task
from grader.classroom import ledger
from grader.classroom.lanes import (
    grading_args,
    grading_id,
    grading_settings,
    Job,
    Lane,
    lane_time_limit,
    last_line,
    place_workers,
    plan_lanes,
    Running,
    theory_lane,
    Worker,
    pin_to_cores,
    log_tail,
    worker_env,
)
from grader.classroom.progress import Progress, duration_text
from grader.classroom.roster import Submission
from grader.grade.config import REPO_ROOT, THEORY, GradeConfig

# A GPU worker whose reference runs more than 10% away from the registry's figure (or from the other GPUs) is
# reported: the rubric's noise allowance is 15% (full points up to 1.15x the reference, which timed against
# itself gives 1.00-1.02x), so a GPU 10% off would eat most of it. Ratios are timed interleaved on one GPU and
# survive a uniformly slower GPU; the speedup and time-between-tokens rules, and a GPU whose speed changes during
# the batch (another tenant, clocks), do not. The preflight refuses a GPU past 1.25x (grader/grade/preflight.py).
SPEED_TOLERANCE = 0.10
POLL_S = 0.2


# --------------------------------------------------------------------------- the batch


class Batch:
    def __init__(
        self,
        subs: list[Submission],
        out: Path,
        registry: Registry,
        tasks: list[Task],
        config: GradeConfig,
        *,
        gpus: list[str],
        jobs: int,
        split: bool,
        skip_preflight: bool,
        seed: int | None,
        host_facts: dict,
        gpu_names: dict[str, str],
        theory: bool = False,
        seeding: str = "",
        log=print,
    ):
        self.subs, self.out, self.registry, self.tasks, self.config = subs, Path(out), registry, tasks, config
        self.skip_preflight, self.fixed_seed, self.log = skip_preflight, seed, log
        self.host_facts = host_facts
        self.lanes = plan_lanes(tasks, gpus, jobs, split)
        self.theory = theory
        self.settings = grading_settings(tasks, self.lanes, config, theory, seeding)
        self.version = ledger.grader_version()
        self.run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        kinds = {lane.name for lane in self.lanes}
        self.workers = [
            Worker(f"gpu{i}", "gpu", device, gpu_names.get(device, ""))
            for i, device in enumerate(gpus)
            if "gpu" in kinds
        ]
        self.workers += [Worker(f"cpu{i}", "cpu") for i in range(jobs if "cpu" in kinds else 0)]
        place_workers(self.workers)
        self.counts = {"graded": 0, "failed": 0, "skipped": 0, "locked": 0}
        self.walls: list[float] = []
        self.running: list[Running] = []

    # ------------------------------------------------------------------ GPU workers' reference check

    def check_gpus(self) -> list[str]:
        """Time the reference on each GPU worker's GPU, side by side; returns the problems that leave a GPU out."""
        gpu_workers = [w for w in self.workers if w.kind == "gpu"]
        if not gpu_workers:
            return []
        task_args = [a for t in self.tasks for a in ("--task", t.id)]
        procs = []
        with tempfile.TemporaryDirectory(prefix="kit-batch-") as tmp:
            for worker in gpu_workers:
                path = Path(tmp) / f"{worker.name}.json"
                cmd = [
                    sys.executable,
                    "-m",
                    "grader.classroom.batch_worker",
                    "gpu-check",
                    "--json",
                    str(path),
                    *task_args,
                    *grading_args(self.config),
                ]
                proc = subprocess.Popen(
                    cmd,
                    cwd=REPO_ROOT,
                    env=worker_env(worker),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                pin_to_cores(proc, worker)
                procs.append((worker, path, proc))
            for worker, path, proc in procs:
                output, _ = proc.communicate()
                try:
                    worker.check = json.loads(path.read_text())
                except (OSError, ValueError):
                    why = f"the reference check did not finish: {last_line(output)}"
                    worker.check = {"ok": False, "problems": [why], "speeds": []}
        problems = []
        for worker in gpu_workers:
            worker.gpu_name = worker.check.get("gpu") or worker.gpu_name
            warnings = worker.check.setdefault("warnings", [])
            for speed in worker.check.get("speeds", []):
                if speed.get("measured_ms") and speed.get("recorded_ms"):
                    speed["ratio"] = speed["measured_ms"] / speed["recorded_ms"]
                    if abs(speed["ratio"] - 1) > SPEED_TOLERANCE:
                        warnings.append(
                            f"{speed['task']} '{speed['rule']}': the reference takes "
                            f"{speed['measured_ms']:.3f} ms, {speed['ratio']:.2f}x the registry's "
                            f"{speed['recorded_ms']} ms (more than {SPEED_TOLERANCE:.0%} off)"
                        )
            if not worker.check.get("ok", False):
                problems += [f"{worker.name} (CUDA device {worker.device}): {p}" for p in worker.check["problems"]]
        means = {w.name: _mean([s["ratio"] for s in w.check.get("speeds", []) if "ratio" in s]) for w in gpu_workers}
        means = {k: v for k, v in means.items() if v is not None}
        if len(means) > 1:
            fastest = min(means.values())
            for worker in gpu_workers:
                if worker.name in means and means[worker.name] > fastest * (1 + SPEED_TOLERANCE):
                    worker.check["warnings"].append(
                        f"its reference runs {means[worker.name] / fastest:.2f}x slower than on the fastest GPU "
                        "of this batch (clocks, another tenant?)"
                    )
        for worker in gpu_workers:
            for line in worker.check["warnings"]:
                self.log(f"warning: {worker.name} ({worker.gpu_name or 'GPU ' + worker.device}): {line}")
        if problems and not self.skip_preflight:
            for worker in gpu_workers:
                if not worker.check.get("ok", False):
                    self.workers.remove(worker)
        record = {
            "run": self.run_id,
            "time": ledger.now(),
            "host": platform.node(),
            "tolerance": SPEED_TOLERANCE,
            "workers": [
                {"name": w.name, "device": w.device, "gpu": w.gpu_name, "left_out": w not in self.workers, **w.check}
                for w in gpu_workers
            ],
        }
        ledger.write_json(self.out / "workers" / f"{self.run_id}.json", record)
        return problems

    # ------------------------------------------------------------------ planning

    def plan(self, only: list[str] | None, keep_done: bool) -> list[Job]:
        jobs = []
        for sub in self.subs:
            if only is not None and sub.id not in only:
                continue
            content = ledger.submission_hash(sub.path)
            key = ledger.grading_key(content, self.version, self.settings)
            marker = ledger.read_marker(self.out, sub.id)
            if marker and marker.get("key") == key and (only is None or keep_done):
                self.counts["skipped"] += 1
                continue
            jobs.append(Job(sub, content, key, self.fixed_seed, self.lanes, ledger.StudentLock(self.out, sub.id)))
        return jobs

    def _open(self, job: Job) -> bool:
        """Lock the student's folder and take up the lanes already graded for this key; False when another batch
        holds the lock."""
        if not job.lock.acquire():
            self.counts["locked"] += 1
            self.log(f"{job.sub.id}: being graded by another batch (its folder is locked); left to it")
            return False
        folder = ledger.student_dir(self.out, job.sub.id)
        for stray in [*folder.glob(".*.tmp"), *folder.glob(f"{ledger.PARTS}/.*.tmp")]:
            stray.unlink(missing_ok=True)  # a write cut short by a kill (the lock says no one else writes here)
        for lane in job.lanes:
            part = ledger.read_part(self.out, job.sub.id, lane.name, job.key)
            if part is not None:
                job.parts[lane.name] = part
            else:
                job.waiting.append(lane.name)
        if job.parts:
            self.log(f"{job.sub.id}: reusing the {', '.join(job.parts)} lane graded before the interruption")
        return True

    # ------------------------------------------------------------------ running lanes

    def _start(self, job: Job, lane: Lane, worker: Worker) -> Running:
        part_dir = ledger.student_dir(self.out, job.sub.id) / ledger.PARTS
        log_path = ledger.student_dir(self.out, job.sub.id) / "logs" / f"{lane.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "grader.classroom.batch_worker",
            "grade",
            str(Path(job.sub.path).resolve()),
            "--part-dir",
            str(part_dir),
            "--lane",
            lane.name,
            "--key",
            job.key,
            *(["--seed", str(job.seed)] if job.seed is not None else []),
            # A lane with no task grades the theory answers alone (grade-all TASKS=theory).
            *[a for task_id in lane.ids or [THEORY] for a in ("--task", task_id)],
            *grading_args(self.config),
            "--parallel",
            str(worker.checkers),
            "--theory" if self.theory and lane.name == theory_lane(self.lanes) else "--no-theory",
        ]
        sid = next((s.sid for s in job.sub.students if s.sid), job.sub.id)  # picks the theory questions
        cmd += ["--student-id", sid, "--grading-id", grading_id(job.sub)]
        ledger.log_attempt(
            self.out, job.sub.id, event="start", lane=lane.name, run=self.run_id, key=job.key, worker=worker.name
        )
        with open(log_path, "wb") as log_file:
            # The child stays in the batch's process group (killing the batch's group kills it); it also dies with
            # the batch alone (batch_worker sets PR_SET_PDEATHSIG), and its checker with it (checker_plugin).
            process = subprocess.Popen(
                cmd,
                cwd=REPO_ROOT,
                env=worker_env(worker),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        pin_to_cores(process, worker)
        running = Running(job, lane, worker, process, log_path, lane_time_limit(lane, self.config))
        job.running.add(lane.name)
        worker.busy = running
        return running

    def _reap(self, running: Running, timed_out: bool) -> None:
        job, lane, worker = running.job, running.lane, running.worker
        code = running.process.returncode
        wall = time.monotonic() - running.started
        worker.busy = None
        job.running.discard(lane.name)
        part = None if timed_out or code != 0 else ledger.read_part(self.out, job.sub.id, lane.name, job.key)
        ledger.log_attempt(
            self.out,
            job.sub.id,
            event="end",
            lane=lane.name,
            run=self.run_id,
            ok=part is not None,
            exit_code=code,
            wall_s=round(wall, 1),
        )
        if part is not None:
            # The wall time as the batch saw it: the lane's process from start to end, Python's start-up included.
            part.meta.update(worker=worker.name, gpu=worker.gpu_name, wall_s=round(wall, 1))
            job.parts[lane.name] = part
            return
        tail = log_tail(running.log_path)
        if timed_out:
            reason = (
                f"the {lane.name} lane ({', '.join(lane.ids)}) ran past its {running.limit_s:.0f} s limit "
                f"(the registry's timeouts x {self.config.timeout_scale:g}, builds and start-up) and was killed"
            )
        elif code == 3:
            reason = f"the host refused to grade: {last_line(tail)}"
        elif code != 0:
            why = f"signal {-code}" if code < 0 else f"exit code {code}"
            reason = f"the grader failed on the {lane.name} lane ({why}): {last_line(tail)}"
        else:
            reason = f"the grader ended without writing its result for the {lane.name} lane"
        job.failures.append(
            {
                "lane": lane.name,
                "worker": worker.name,
                "exit_code": code,
                "reason": reason,
                "wall_s": round(wall, 1),
                "log_tail": tail,
            }
        )

    # ------------------------------------------------------------------ finishing a submission

    def _finish(self, job: Job, progress: Progress) -> None:
        try:
            if job.failures:
                self._record_failure(job, progress)
            else:
                self._record_grade(job, progress)
        finally:
            job.lock.release()

    def _record_failure(self, job: Job, progress: Progress) -> None:
        previous = ledger.read_failure(self.out, job.sub.id) or {}
        attempts = previous.get("attempts", 0) + 1 if previous.get("key") == job.key else 1
        reason = "; ".join(f["reason"] for f in job.failures)
        ledger.write_json(
            ledger.student_dir(self.out, job.sub.id) / ledger.FAILED,
            {
                "id": job.sub.id,
                "key": job.key,
                "run": self.run_id,
                "time": ledger.now(),
                "attempts": attempts,
                "reason": reason,
                "lanes": job.failures,
                "kept": sorted(job.parts),
            },
        )  # lanes that did finish: reused by the next run
        ledger.log_attempt(self.out, job.sub.id, event="failed", run=self.run_id, key=job.key, reason=reason)
        self.counts["failed"] += 1
        progress.finished(f"{job.sub.id}: FAILED: {reason} (retried on the next run)", ok=False)

    def _record_grade(self, job: Job, progress: Progress) -> None:
        from grader.grade.report import phases_text, write_all

        result = merge_parts([job.parts[lane.name] for lane in job.lanes], self.registry)
        walls = {name: part.meta.get("wall_s", 0.0) for name, part in job.parts.items()}
        result.grading["preflight"] = {**self.host_facts, **result.grading.get("preflight", {})}
        result.grading["batch"] = {
            "run": self.run_id,
            "grader_version": self.version,
            "submission_hash": job.content_hash,
            "key": job.key,
            "settings": self.settings,
            "lanes": {
                name: {
                    "tasks": part.meta.get("tasks"),
                    "worker": part.meta.get("worker"),
                    "gpu": part.meta.get("gpu"),
                    "wall_s": part.meta.get("wall_s"),
                    "phases": part.result.grading.get("phases", {}),
                }
                for name, part in job.parts.items()
            },
            "gpu_check": self._gpu_check_for(job),
        }
        out_dir = ledger.student_dir(self.out, job.sub.id)
        write_all(result, self.registry, out_dir)
        status = "unreadable" if "unreadable" in result.grading else "graded"
        max_score = result.max_score(self.registry)
        ledger.write_json(
            out_dir / ledger.MARKER,
            {
                "id": job.sub.id,
                "key": job.key,
                "submission_hash": job.content_hash,
                "grader_version": self.version,
                "settings": self.settings,
                "graded_at": ledger.now(),
                "run": self.run_id,
                "seeds": result.grading.get("seeds", {}),
                "status": status,
                "score": round(result.score, 4),
                "max_score": max_score,
                "lanes": result.grading["batch"]["lanes"],
                "wall_s": round(sum(walls.values()), 1),
            },
        )
        (out_dir / ledger.FAILED).unlink(missing_ok=True)
        ledger.clear_parts(self.out, job.sub.id)
        ledger.log_attempt(
            self.out, job.sub.id, event="graded", run=self.run_id, key=job.key, score=round(result.score, 4)
        )
        self.counts["graded"] += 1
        self.walls.append(sum(walls.values()))
        tasks = ", ".join(
            f"{ts.task.id} {ts.score:.2f}" + ("" if ts.status == "ran" else f" ({ts.status})") for ts in result.tasks
        )
        if getattr(result, "theory", None) is not None:
            tasks += f", theory {result.theory.score:.2f}"
        extra = f"; unreadable: {result.grading['unreadable']}" if status == "unreadable" else ""
        extra += "".join(f"; {name}: {phases_text(part.result.grading)}" for name, part in job.parts.items())
        progress.finished(
            f"{job.sub.id}: {result.score:.2f}/{max_score:g} ({tasks}) in {duration_text(sum(walls.values()))}{extra}",
            ok=True,
        )

    def stop(self) -> None:
        """Kill the lanes still running (their checkers die with them); what they did is graded again next run."""
        for item in self.running:
            if item.process.poll() is None:
                item.process.kill()
                item.process.wait()
            ledger.log_attempt(
                self.out,
                item.job.sub.id,
                event="end",
                lane=item.lane.name,
                run=self.run_id,
                ok=False,
                exit_code=None,
                interrupted=True,
            )
        self.running.clear()

    def _gpu_check_for(self, job: Job) -> dict | None:
        part = job.parts.get("gpu")
        worker = next((w for w in self.workers if part and w.name == part.meta.get("worker")), None)
        if worker is None or not worker.check:
            return None
        return {"worker": worker.name, "gpu": worker.gpu_name, "warnings": worker.check.get("warnings", [])}

    # ------------------------------------------------------------------ the loop

    def run(self, jobs: list[Job], progress: Progress) -> None:
        queue = list(jobs)
        open_jobs: list[Job] = []
        running = self.running
        window = max(1, len(self.workers)) + 1
        while queue or open_jobs:
            while queue and len(open_jobs) < window:
                job = queue.pop(0)
                if self._open(job):
                    open_jobs.append(job)
            for worker in self.workers:
                if worker.busy is not None:
                    continue
                for job in open_jobs:
                    lane = next(
                        (lane for lane in job.lanes if lane.name in job.waiting and lane.name == worker.kind), None
                    )
                    if lane is not None:
                        job.waiting.remove(lane.name)
                        running.append(self._start(job, lane, worker))
                        break
            for item in list(running):
                timed_out = False
                if item.process.poll() is None:
                    if time.monotonic() - item.started <= item.limit_s:
                        continue
                    item.process.kill()  # its checker and sandbox die with it (PDEATHSIG, bwrap --die-with-parent)
                    item.process.wait()
                    timed_out = True
                running.remove(item)
                self._reap(item, timed_out)
            for job in list(open_jobs):
                if not job.waiting and not job.running:
                    open_jobs.remove(job)
                    self._finish(job, progress)
            kinds = {w.kind for w in self.workers}
            for job in open_jobs:  # a lane whose kind has no worker (every GPU left out) fails rather than waits
                for name in [name for name in job.waiting if name not in kinds]:
                    job.waiting.remove(name)
                    job.failures.append({"lane": name, "reason": f"no {name} worker is available in this batch"})
            progress.now([f"{r.job.sub.id} ({r.lane.name})" for r in running])
            if running:
                time.sleep(POLL_S)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def merge_parts(parts: list[ledger.Part], registry: Registry):
    """One SubmissionScore from its lanes: the tasks in registry order, each note once, the durations added."""
    from grader.grade.scoring import SubmissionScore

    order = {t.id: i for i, t in enumerate(registry.tasks)}
    results = [p.result for p in parts]
    tasks = sorted((ts for r in results for ts in r.tasks), key=lambda ts: order.get(ts.task.id, len(order)))
    notes = list(dict.fromkeys(n for r in results for n in r.notes))
    grading = {}
    for r in reversed(results):  # the first lane's facts win
        grading.update(r.grading)
    files = {}
    for r in results:
        files.update(r.grading.get("submission_files", {}))
    if files:
        grading["submission_files"] = files
    merged = SubmissionScore(results[0].name, tasks, notes, sum(r.duration_s for r in results), grading)
    theory = next((r.theory for r in results if getattr(r, "theory", None) is not None), None)
    if theory is not None:  # graded in one lane only (theory_lane)
        merged.theory = theory
    return merged
