"""The checker's side of the worker: student Python runs only in a sandboxed process it talks to.

Hidden tests use ``student_module("attention.py")`` where public tests import the file. The object
it returns looks like the module: ``student.naive_attention(q, k, v, causal=True)`` sends the tensors
to the worker as plain data, waits (with a timeout), checks the reply and returns plain tensors on
the inputs' device. Nothing the student wrote runs in this process.

Arguments that are not data are named. ``KitObject("scripted_model", {...})`` (the kit's models and tokenizers,
or an object of the checks' own such as a cache's stand-in kernels: grader/isolation/served.py) is built HERE, in the checker, for the call, and served to
the worker: the student's code gets a stand-in whose methods ask this process over the channel, which answers
them while it waits for the call's reply (within the call's time limit). So the evidence the checks judge is
recorded here as it happens: ``CallResult.calls`` is the record of the call's first served model (or kernels),
and with ``drain=True`` a stream's pieces arrive one frame each as the student's generator yields them,
``CallResult.steps`` holding how many model steps this process had served when each arrived.
``SeededGenerator(seed)`` becomes a ``torch.Generator`` in the worker.

What a student may be told about a failure is the checker's to say: the worker runs in the student's process,
so its error texts (exception messages, tracebacks, type names, exit codes) may carry hidden inputs the student's
code saw. ``WorkerFailure.feedback`` keeps to what the checker can vouch for: the kind of failure, an exception
type the checker knows by name, the kit's own messages (stub texts, tripwire names, what a served kit object
refused, with numbers masked), and a failed import's text while no call has yet sent the worker any data. The
full text stays in ``str(failure)`` and ``detail``, for the checks and the instructor's grading.json.

``student_module("x_cache.py", driver=Path(".../x_driver.py"), kernels=(...))`` stands for a kit driver instead:
its functions are the scenarios of that file (the task's own, kept with its hidden suite), run around the student's
module (a class with state that the kit's model drives). The file is copied into the worker's /kit, read-only, and
each call names it by its module name (the file's stem); this layer never imports it. ``kernels`` names the CUDA
files the worker's copy of the kit wrappers runs: the worker gets the kit's ``assignment.kernels`` (the student's file
imports it) with what it stands on and, on a GPU, the libraries this process built from ``IMPL``'s files (no sources,
no nvcc in the sandbox).

``memory_probe`` measures, from outside the worker, how much memory one call made it use: it resets
the worker's peak-RSS counter (``/proc/<pid>/clear_refs``) just before the call and reads it
(``VmHWM``) after. The worker cannot switch that counter off: it is the kernel's, and a CPU-only
worker's /proc is read-only inside the sandbox.

Configuration comes from ``KIT_WORKER_CONFIG`` (a JSON file the grader's runner writes). Without
it (the hidden tests run directly with pytest) the worker runs ``IMPL``'s files with the best
isolation this host has.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from grader.isolation import feedback, sandbox
from grader.isolation.kit_folder import CHECKPOINT_IN_KIT, driver_name, worker_kit_dir
from grader.isolation.wire import (  # noqa: F401 - the types a call takes and raises, where callers find them
    CallResult,
    KitObject,
    SeededGenerator,
    WorkerFailure,
    CallInFlight,
    canonical_device,
    decode_value,
    device_of,
    encode_value,
    error_text,
)
from grader.isolation.worker import MAX_DRAINED_ITEMS, ProtocolError, read_frame, write_frame

LOG_KEEP_BYTES = 32 * 1024  # of the worker's stderr: the first and the last this many bytes


@dataclass(frozen=True)
class WorkerConfig:
    student_dir: Path
    isolation: str = sandbox.FULL
    bwrap: str | None = None
    call_timeout_s: float = 120.0  # the task's deadline for one check; a grading scales it by the host's pace
    start_timeout_s: float = 120.0
    memory_cap_bytes: int = 8 * 2**30  # the worker is killed past this resident size
    max_result_bytes: int = 4 * 2**30
    forbidden: tuple[str, ...] = ()  # the task's forbidden names: tripwires in the worker
    deny: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()  # CUDA files whose kit wrappers the worker runs, see kit_folder.worker_kit_dir
    drivers: tuple[str, ...] = ()  # kit driver files (paths) copied into the worker's /kit, see student_module
    limits: sandbox.Limits = field(default_factory=sandbox.Limits)

    @property
    def call_deadline_s(self) -> float:
        """One call's time limit: ``call_timeout_s`` times the deadline scale the grader's runner gives the checker
        (the host's pace; grader/grade/pace.py)."""
        return self.call_timeout_s * float(os.environ.get("KIT_DEADLINE_SCALE", "1") or 1)

    @classmethod
    def from_environment(cls) -> WorkerConfig:
        path = os.environ.get("KIT_WORKER_CONFIG")
        if path:
            raw = json.loads(Path(path).read_text())
            limits = sandbox.Limits(**raw.pop("limits", {}))
            return cls(
                student_dir=Path(raw.pop("student_dir")),
                limits=limits,
                forbidden=tuple(raw.pop("forbidden", ())),
                deny=tuple(raw.pop("deny", ())),
                kernels=tuple(raw.pop("kernels", ())),
                drivers=tuple(raw.pop("drivers", ())),
                **raw,
            )
        from assignment.impl import REPO_ROOT, student_dir

        level, _ = sandbox.best_isolation()
        return cls(student_dir=student_dir(), isolation=level, deny=(str(REPO_ROOT),))

    def to_json(self) -> str:
        return json.dumps(
            {
                "student_dir": str(self.student_dir),
                "isolation": self.isolation,
                "bwrap": self.bwrap,
                "call_timeout_s": self.call_timeout_s,
                "start_timeout_s": self.start_timeout_s,
                "memory_cap_bytes": self.memory_cap_bytes,
                "max_result_bytes": self.max_result_bytes,
                "forbidden": list(self.forbidden),
                "deny": list(self.deny),
                "kernels": list(self.kernels),
                "drivers": list(self.drivers),
                "limits": self.limits.__dict__,
            },
            indent=1,
        )


class _CappedLog:
    """Keeps the head and the tail of a stream, counts the rest."""

    def __init__(self, stream):
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def _drain(self, stream) -> None:
        while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
            self.total += len(chunk)
            room = LOG_KEEP_BYTES - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail = (self.tail + chunk)[-LOG_KEEP_BYTES:]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {dropped} bytes not kept ...]\n" if dropped > 0 else ""
        return bytes(self.head).decode(errors="replace") + middle + bytes(self.tail).decode(errors="replace")


def _status_kib(pid: int, field_name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


class Worker:
    """One sandboxed worker process (started on first use, restarted after a crash or a timeout)."""

    def __init__(self, config: WorkerConfig, gpu: bool):
        self.config, self.gpu = config, gpu
        self.proc: subprocess.Popen | None = None
        self.log: _CappedLog | None = None
        self.pid: int | None = None  # the worker's pid on this host (inside bwrap's namespace)
        self.init_pid: int | None = None  # bwrap's process that is pid 1 in the sandbox
        self.next_id = 0
        self.killed_for = ""
        self.info: dict = {}
        self.imported: dict[str, WorkerFailure | None] = {}  # file -> its import's failure (None: imported)
        self.exposed = False  # a call has sent this worker data: a later import's text may carry some of it
        self.ends: list[tuple[int, int | None]] = []  # (pid, start) whose end is the end of the whole sandbox
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def spec(self) -> sandbox.SandboxSpec:
        from assignment.impl import REPO_ROOT

        deny = tuple(Path(p) for p in self.config.deny) or (REPO_ROOT,)
        kit_dir = worker_kit_dir(
            tuple(self.config.kernels), self.gpu and bool(self.config.kernels), tuple(self.config.drivers)
        )
        return sandbox.SandboxSpec(
            student_dir=self.config.student_dir,
            kit_dir=kit_dir,
            gpu=self.gpu,
            isolation=self.config.isolation,
            bwrap=self.config.bwrap,
            limits=self.config.limits,
            deny=deny,
            allow=(Path(sys.prefix),),
        )

    def prestart(self) -> None:
        """Launch the worker now and let it import torch in its sandbox (seconds) while other work goes
        on; the first call waits for it. Launched from the calling thread on purpose: bubblewrap's
        --die-with-parent kills the sandbox when the thread that started it ends."""
        with self._lock:
            if not self.alive():
                self._launch()

    def _launch(self) -> None:
        spec = self.spec()
        worker_config = {
            "forbidden": list(self.config.forbidden),
            "max_payload": self.config.max_result_bytes,
            "checkpoint": str(CHECKPOINT_IN_KIT),
            "drivers": [driver_name(path) for path in self.config.drivers],
        }
        argv = sandbox.command(spec, worker_config)
        info_r = info_w = None
        if spec.isolation == sandbox.FULL:
            info_r, info_w = os.pipe()
            argv = [argv[0], "--info-fd", str(info_w), *argv[1:]]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=sandbox.environment_for_launcher(spec),
            preexec_fn=sandbox.limit_child(spec),
            pass_fds=(info_w,) if info_w is not None else (),
        )
        self.log = _CappedLog(self.proc.stderr)
        self.killed_for = ""
        self.imported = {}
        if info_w is not None:
            os.close(info_w)
            self.init_pid = self._read_info(info_r)
            os.close(info_r)
            self.pid = self._wait_for_child(self.init_pid)
        else:
            self.pid = self.proc.pid
        self.ends = [(pid, sandbox.process_start(pid)) for pid in (self.init_pid or self.proc.pid,)]
        sandbox.note_launch(self.init_pid or self.proc.pid)
        self.info = {}
        self._watch = threading.Thread(target=self._watch_memory, args=(self.proc,), daemon=True)
        self._watch.start()

    def _handshake(self) -> None:
        self.info = self._request({"op": "hello"}, b"", timeout=self.config.start_timeout_s)[0]

    def _read_info(self, fd: int) -> int | None:
        ready, _, _ = select.select([fd], [], [], self.config.start_timeout_s)
        if not ready:
            return None
        data = b""
        while chunk := os.read(fd, 4096):
            data += chunk
            try:
                return int(json.loads(data)["child-pid"])
            except (ValueError, KeyError):
                continue
        return None

    def _wait_for_child(self, init_pid: int | None) -> int | None:
        if init_pid is None:
            return None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            kids = _children(init_pid)
            if kids:
                return kids[0]
            time.sleep(0.005)
        return None

    def stop(self, reason: str = "") -> None:
        """Kill the worker and wait until every process of its sandbox has ended: after this, nothing of the
        student's runs or holds the GPU (a timing that follows has it to itself)."""
        if self.proc is None:
            return
        if reason:
            self.killed_for = reason
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid, start in self.ends:
            sandbox.end_process(pid, start)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _sandbox_pids(self) -> list[int]:
        if self.init_pid is None:
            return [self.pid] if self.pid else []
        pids, todo = [], [self.init_pid]
        while todo:
            pid = todo.pop()
            pids.append(pid)
            todo.extend(_children(pid))
        return pids

    def _watch_memory(self, proc: subprocess.Popen) -> None:
        cap_kib = self.config.memory_cap_bytes // 1024
        while proc.poll() is None:
            rss = sum(_status_kib(pid, "VmRSS") or 0 for pid in self._sandbox_pids())
            if rss > cap_kib:  # how much is not said: the student's code could choose it to tell a hidden number
                self.stop(f"used more memory than its limit of {self.config.memory_cap_bytes / 2**30:.0f} GiB")
                return
            time.sleep(0.1)

    # ------------------------------------------------------------------ requests
    def _request(
        self, header: dict, payload: bytes, timeout: float, call: CallInFlight | None = None
    ) -> tuple[dict, bytes]:
        """Send a request and wait for its reply, serving the call's kit objects and taking its streamed pieces as
        their frames come; one deadline for all of it."""
        if not self.alive():
            raise WorkerFailure("crash", "the worker is not running")
        call = call or CallInFlight("cpu")
        self.next_id += 1
        header = dict(header, id=self.next_id)
        try:
            write_frame(self.proc.stdin, header, payload)
        except (BrokenPipeError, OSError):
            raise self._died() from None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                self.stop(f"took longer than {timeout:.0f} s")
                raise WorkerFailure("timeout", f"the call took longer than {timeout:.0f} s (an infinite loop?)")
            try:  # unbuffered: a buffer would take in the frames behind this one, out of select's sight
                frame, data = read_frame(self.proc.stdout.raw, self.config.max_result_bytes)
            except (EOFError, OSError):
                raise self._died() from None
            except (ProtocolError, ValueError) as exc:
                self.stop("protocol error")
                raise WorkerFailure(
                    "protocol",
                    f"the worker's reply could not be read ({exc})",
                    feedback="the worker's reply could not be read",
                ) from None
            op = frame.get("op")
            if op == "serve":
                answer, answer_data = call.answer(frame, data)
                try:
                    write_frame(self.proc.stdin, answer, answer_data)
                except (BrokenPipeError, OSError):
                    raise self._died() from None
                continue
            if op == "piece":
                if not call.take_piece(frame):
                    self.stop("streamed too many pieces")
                    raise WorkerFailure("result", f"the stream yielded more than {MAX_DRAINED_ITEMS} pieces")
                continue
            if op is None and frame.get("id") == header["id"]:
                return frame, data
            # A stale or forged frame: the worker's own replies always carry the request's id.
            self.stop("out-of-order reply")
            raise WorkerFailure("protocol", "the worker sent a reply to no request (something wrote to its channel)")

    def _died(self) -> WorkerFailure:
        code = self.proc.wait(timeout=10) if self.proc else None
        self.proc = None
        for pid, start in self.ends:  # whatever the student's code left behind in the sandbox ends with it
            sandbox.end_process(pid, start, timeout_s=10)
        if self.killed_for:
            return WorkerFailure("killed", f"the worker was stopped: it {self.killed_for}")
        if code is not None and code < 0:
            signal_number = -code
        elif code is not None and code > 128 and self.init_pid is not None:
            signal_number = code - 128  # bubblewrap exits with 128 + the signal that ended the worker
        else:
            signal_number = None
        why = f"signal {signal_number}" if signal_number else f"exit code {code}"
        # The student's code picks its exit code and can signal itself: only well-known crashes are named.
        known = feedback.CRASH_SIGNALS.get(signal_number)
        told = f"signal {signal_number}: {known}" if known else "a signal" if signal_number else "it exited"
        return WorkerFailure(
            "crash",
            f"the student's code crashed the worker ({why})",
            self.log.text() if self.log else "",
            f"the student's code crashed the worker ({told})",
        )

    def _import(self, filename: str) -> None:
        """Import the student's file in the worker on its own (once per worker process), before any call sends it
        data; a failed import fails every call of the file without sending it anything."""
        if filename not in self.imported:
            reply, _ = self._request({"op": "import", "file": filename}, b"", self.config.call_deadline_s)
            self.imported[filename] = None if reply.get("ok") else self._failure(reply.get("error") or {}, filename)
        failed = self.imported[filename]
        if failed is not None:
            # A new exception each time: the one kept would gather every raise's frames in its traceback, and
            # pytest formats them all for every failed check (quadratic in the checks: 55 of them took 15 s).
            raise WorkerFailure(failed.kind, str(failed), failed.detail, failed.feedback)

    def call(
        self,
        filename: str,
        function: str,
        args: tuple,
        kwargs: dict,
        *,
        track: bool = False,
        measure_memory: bool = False,
        drain: bool = False,
        device: str | None = None,
        driver: str | None = None,
    ) -> CallResult:
        """One call of the student's function. ``device``: where the worker puts the call's tensors and the checker
        the call's kit objects (default: the device of the first tensor argument, else the CPU); ``drain``: the
        result is an iterator whose items the worker streams here as they come (see the module docstring);
        ``driver``: call that kit driver's scenario ``function`` with the student's module instead (the module name
        of one of the config's ``drivers``, which the worker's /kit holds)."""
        with self._lock:
            if not self.alive():
                self._launch()
            if not self.info:
                self._handshake()
            self._import(filename)
            tensors: dict[str, torch.Tensor] = {}
            device = canonical_device(device or device_of(args, kwargs))
            in_flight = CallInFlight(device)
            request = {
                "op": "call",
                "file": filename,
                "function": function,
                "device": device,
                "track": track,
                "drain": drain,
                "driver": driver,
                "args": encode_value(list(args), tensors, in_flight),
                "kwargs": encode_value(dict(kwargs), tensors, in_flight),
            }
            from safetensors.torch import save

            payload = save(tensors) if tensors else b""
            baseline = None
            if measure_memory:
                baseline = self._reset_peak()
            started = time.monotonic()
            self.exposed = True
            reply, data = self._request(request, payload, self.config.call_deadline_s, in_flight)
            seconds = time.monotonic() - started
            peak = None
            if measure_memory and baseline is not None:
                hwm = _status_kib(self.pid, "VmHWM")
                peak = None if hwm is None else max(0, hwm - baseline) * 1024
            if not reply.get("ok"):
                raise self._failure(reply.get("error") or {}, filename, function, in_flight)
            from safetensors.torch import load

            received = load(data) if data else {}
            value = in_flight.pieces if drain else decode_value(reply.get("result"), received, device)
            return CallResult(
                value, peak, reply.get("largest"), seconds, in_flight.arrivals if drain else None, in_flight.record()
            )

    def _failure(
        self, error: dict, filename: str, function: str = "", in_flight: CallInFlight | None = None
    ) -> WorkerFailure:
        """The failure a worker's error reply stands for, with what a student may be told about it."""
        kind = str(error.get("kind", "exception"))
        refusal = in_flight.refusal(str(error.get("type"))) if in_flight is not None and kind == "exception" else None
        return WorkerFailure(
            kind,
            error_text(error),
            str(error.get("traceback", ""))[-4000:],
            feedback.told(
                kind,
                error,
                filename,
                function,
                self.exposed,
                self.config.forbidden,
                refusal,
                in_flight.offers() if in_flight is not None else "",
            ),
        )

    def _reset_peak(self) -> int | None:
        if self.pid is None:
            return None
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return None
        return _status_kib(self.pid, "VmRSS")


class StudentModule:
    """Stands in for a student's Python module: attribute access gives functions that call the worker (with a
    ``driver``: the driver's scenarios, each run around the student's module)."""

    def __init__(self, filename: str, worker: Worker, driver: str | None = None):
        self._filename, self._worker, self._driver = filename, worker, driver

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            return self._worker.call(self._filename, name, args, kwargs, driver=self._driver).value

        call.__name__ = name
        return call

    def call(
        self,
        function: str,
        *args,
        track: bool = False,
        measure_memory: bool = False,
        drain: bool = False,
        device: str | None = None,
        **kwargs,
    ) -> CallResult:
        """Like ``student.function(...)``, with the measurements and evidence: ``.value``, ``.peak_bytes``,
        ``.largest``, ``.steps``, ``.calls`` (the options are Worker.call's, so they are not the student's)."""
        return self._worker.call(
            self._filename,
            function,
            args,
            kwargs,
            track=track,
            measure_memory=measure_memory,
            drain=drain,
            device=device,
            driver=self._driver,
        )

    @property
    def worker(self) -> Worker:
        return self._worker


_workers: dict[tuple, Worker] = {}


def student_module(
    filename: str,
    *,
    gpu: bool | None = None,
    forbidden: tuple[str, ...] | None = None,
    driver: Path | None = None,
    kernels: tuple[str, ...] = (),
) -> StudentModule:
    """The student's ``filename`` behind a sandboxed worker (one worker per GPU/CPU kind, reused); with ``driver``
    (a kit driver's file, which its task keeps) and ``kernels``, see the module docstring."""
    config = WorkerConfig.from_environment()
    if forbidden is not None:
        config = replace(config, forbidden=tuple(forbidden))
    if kernels:
        config = replace(config, kernels=tuple(kernels))
    if driver is not None:
        config = replace(config, drivers=(str(Path(driver).resolve()),))
    use_gpu = torch.cuda.is_available() if gpu is None else gpu and torch.cuda.is_available()
    key = (config.to_json(), use_gpu)
    if key not in _workers:
        _workers[key] = Worker(config, use_gpu)
    return StudentModule(filename, _workers[key], None if driver is None else driver_name(driver))


@atexit.register
def stop_all(keep_unused: bool = False) -> None:
    """End every worker this process started, each waited for until its sandbox has ended. ``keep_unused``: keep a
    worker that has imported no student file yet (started ahead, it has run nothing but the kit's own start-up:
    no student code, no CUDA context)."""
    for worker in _workers.values():
        if keep_unused and worker.alive() and not worker.imported:
            continue
        worker.stop()
