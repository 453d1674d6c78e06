"""Start a program that runs untrusted student Python, isolated from the grader.

Two levels, and the grader records which one ran:

``bwrap`` (full): Debian's bubblewrap. The program sees a read-only view of only what it needs (the
system's /usr and a few /etc files, the Python installation and its site packages, the driver
libraries, the submission's files at /submission and the worker script at /kit) and a private /tmp;
no network, its own PID, IPC and UTS namespaces, a scrubbed environment; it dies with the grader and
takes every process it started with it (its PID namespace ends). The instructor's tree, the hidden
tests, the outputs and the CUDA caches are simply not there. When the grader runs as root the worker
drops to an unprivileged uid (65534) before anything of the student's runs; otherwise bubblewrap maps
the grader's own uid in a user namespace. GPU workers get the device nodes, /sys and a writable /proc
(the driver needs it); CPU-only workers get a read-only /proc (so a program cannot reset the peak
memory counter the grader reads) and no GPU.

``process`` (fallback, where bubblewrap is missing or user namespaces are off): a child process in
its own session with the same rlimits and scrubbed environment, as the grader's own user (the
interpreter may live where an unprivileged uid cannot read it); it can read the file system and
reach the network, and nothing kills what it detaches. Grading untrusted submissions at this level
needs an explicit flag.

rlimits at both levels: CPU time, processes, file size, open files, no core dumps, and address space
for CPU-only workers. ``bwrap`` is found on PATH or through ``KIT_BWRAP`` (a wrapper script is fine:
the GPU hosts carry Debian's bubblewrap unpacked in /tmp with its own LD_LIBRARY_PATH).
"""

from __future__ import annotations

import json
import os
import resource
import site
import sys
from dataclasses import dataclass, field
from pathlib import Path

# bubblewrap's discovery and the read-only system view are the compile sandbox's too (assignment/cuda/confine.py).
from assignment.cuda.confine import (
    FALLBACK,
    FULL,
    SANDBOX_UID,
    find_bwrap,
    probe,  # noqa: F401
    processes_of,
    system_binds,
)

SUBMISSION_MOUNT = "/submission"
KIT_MOUNT = "/kit"
# Passed through when set: what the CUDA driver and PyTorch need to find the GPU. Nothing else leaks.
PASSTHROUGH_ENV = (
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_MODULE_LOADING",
)


@dataclass(frozen=True)
class Limits:
    """Per-worker limits. Defaults are stated once, here."""

    cpu_seconds: int = 900  # CPU time of the whole worker (threads included)
    processes: int = 256  # processes and threads of the sandbox user
    file_bytes: int = 64 * 2**20  # largest file it may write (its /tmp is private anyway)
    open_files: int = 1024
    address_space_bytes: int = 16 * 2**30  # CPU-only workers; CUDA reserves far more address space
    tmp_bytes: int = 256 * 2**20  # size of the private /tmp
    threads: int = 4  # OMP/MKL threads (results must not depend on the host's core count)


@dataclass(frozen=True)
class SandboxSpec:
    student_dir: Path
    kit_dir: Path  # holds worker.py; mounted read-only at /kit
    gpu: bool
    isolation: str = FULL
    bwrap: str | None = None  # path of bwrap (or a wrapper); None: find it
    limits: Limits = field(default_factory=Limits)
    deny: tuple[Path, ...] = ()  # never mounted even when on sys.path (the instructor tree, outputs)
    allow: tuple[Path, ...] = ()  # mounted although under a denied path (a venv inside the repo)


class SandboxUnavailable(RuntimeError):
    """Full isolation was asked for and cannot run here; the message says why."""


# --------------------------------------------------------------------------- what this host can do


def best_isolation(bwrap_setting: str | None = None) -> tuple[str, str]:
    """(level, detail): the strongest isolation this host offers, and why not more."""
    ok, detail = probe(find_bwrap(bwrap_setting))
    return (FULL, detail) if ok else (FALLBACK, detail)


# --------------------------------------------------------------------------- the command


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _python_paths() -> list[str]:
    paths = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    paths += site.getsitepackages() + [p for p in sys.path if p]
    return paths


def _mounts(spec: SandboxSpec) -> tuple[list[str], list[str]]:
    """bwrap arguments for the read-only view, and the sys.path entries it keeps."""
    args = system_binds()
    deny = [os.path.realpath(p) for p in spec.deny]
    allow = [os.path.realpath(p) for p in spec.allow]
    bound = ["/usr"]
    made: set[str] = {"/"}
    wanted = _python_paths() + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    kept_sys_path: list[str] = []
    for path in sorted({os.path.realpath(p) for p in wanted if os.path.isdir(p)}, key=len):
        if _under(path, bound):
            continue
        if _under(path, deny) and not _under(path, allow):
            continue
        parents = []
        parent = Path(path).parent
        while str(parent) not in made and str(parent) != "/":
            parents.append(str(parent))
            parent = parent.parent
        for directory in reversed(parents):
            args += ["--perms", "0755", "--dir", directory]
            made.add(directory)
        args += ["--ro-bind", path, path]
        bound.append(path)
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and _under(real, bound) and not (_under(real, deny) and not _under(real, allow)):
            kept_sys_path.append(real)
    return args, kept_sys_path


def worker_environment(spec: SandboxSpec) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "OMP_NUM_THREADS": str(spec.limits.threads),
        # getpass.getuser() reads these first: the sandbox user need not be in the host's passwd file.
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "MKL_NUM_THREADS": str(spec.limits.threads),
    }
    for name in PASSTHROUGH_ENV:
        if name in os.environ:
            env[name] = os.environ[name]
    if not spec.gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def command(spec: SandboxSpec, worker_config: dict) -> list[str]:
    """The argv that starts worker.py with ``worker_config`` under ``spec``."""
    root = os.geteuid() == 0
    if spec.isolation == FALLBACK:  # runs as the grader's user: the interpreter may sit where uid 65534 cannot read
        config = dict(worker_config, uid=None, gid=None, student_dir=str(spec.student_dir), sys_path=[])
        return [sys.executable, "-I", str(spec.kit_dir / "worker.py"), json.dumps(config)]
    config = dict(worker_config, uid=SANDBOX_UID if root else None, gid=SANDBOX_UID if root else None)
    bwrap = find_bwrap(spec.bwrap)
    ok, detail = probe(bwrap)
    if not ok:
        raise SandboxUnavailable(detail)
    mounts, sys_path = _mounts(spec)
    # The private /tmp first: the read-only binds that follow may lie under /tmp on the host (a kit
    # cloned into /tmp keeps its virtual environment there), and a later mount would hide them.
    args = [
        bwrap,
        "--size",
        str(spec.limits.tmp_bytes),
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        *mounts,
        "--ro-bind",
        str(spec.student_dir),
        SUBMISSION_MOUNT,
        "--ro-bind",
        str(spec.kit_dir),
        KIT_MOUNT,
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--chdir",
        "/tmp",
    ]
    if not root:
        args.append("--unshare-user")
    if spec.gpu:
        args += ["--dev-bind", "/dev", "/dev", "--ro-bind", "/sys", "/sys", "--proc", "/proc"]
    else:
        args += ["--dev", "/dev", "--proc", "/proc", "--remount-ro", "/proc"]
    for name, value in worker_environment(spec).items():
        args += ["--setenv", name, value]
    config |= {"student_dir": SUBMISSION_MOUNT, "sys_path": sys_path}
    return args + [sys.executable, "-I", f"{KIT_MOUNT}/worker.py", json.dumps(config)]


def limit_child(spec: SandboxSpec):
    """preexec_fn: rlimits and a new session, in the child before it execs."""
    limits = spec.limits
    nproc = limits.processes
    if os.geteuid() != 0:  # the limit counts every process of this uid on the host, not only the sandbox's
        nproc += processes_of(os.getuid())

    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        if not spec.gpu:
            resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))

    return apply


def environment_for_launcher(spec: SandboxSpec) -> dict[str, str]:
    """What bwrap itself (or the fallback's python) starts with; bwrap clears it for the worker."""
    if spec.isolation == FULL:
        return dict(os.environ)
    return worker_environment(spec)


# --------------------------------------------------------------------------- ending a sandbox for good


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc's field 22): with the pid, it names one process,
    whatever later reuses the number. None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _exited(pid: int, start: int | None) -> bool:
    """Process ``pid`` (the one that started at ``start``) has finished exiting: gone, reused, or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0] in ("Z", "X") or (start is not None and int(fields[19]) != start)


def end_process(pid: int, start: int | None, timeout_s: float = 30.0) -> bool:
    """Kill process ``pid`` (and its process group) and wait until it has finished exiting; True when it has.

    For a bubblewrap sandbox ``pid`` is the sandbox's init (pid 1 of its PID namespace): the kernel kills every other
    process of the namespace when it dies, and lets it finish exiting only once they all have, so its end is the
    end of every process the student started, their open files (a GPU context's device files among them) closed."""
    import signal
    import time

    if _exited(pid, start):
        return True
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _exited(pid, start):
            return True
        time.sleep(0.01)
    return False


def note_launch(pid: int | None) -> None:
    """Tell the grader's runner (its events file, when it set one) about a sandbox this process started, so that the
    runner can end it whatever becomes of this process (grader/grade/checker_process.py)."""
    path = os.environ.get("KIT_EVENTS_FILE")
    if path and pid:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"event": "sandbox", "pid": pid, "start": process_start(pid)}) + "\n")
