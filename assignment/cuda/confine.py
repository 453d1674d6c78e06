"""Run the CUDA compiler on a student's code, confined.

nvcc reads whatever a source asks it to (``#include "/anything"``), can be made to use gigabytes of memory
and minutes of CPU (a template or include bomb), and starts children (cicc, ptxas, the host compiler) that
outlive it when only it is killed. So every compile of code that holds student regions runs here:

``bwrap`` (bubblewrap, when installed): a read-only view of the system (/usr and the lib/bin links, a few
/etc files, the CUDA toolkit), the kit's include directory, and one private working directory holding the
source and receiving the output; nothing else of the host (no instructor tree, no hidden tests, no home),
no network, its own PID namespace (killing it kills every process it started) and a private /tmp. As root
the compiler runs as uid 65534 (setpriv), otherwise as the caller's own uid in a user namespace.

``process`` (where bubblewrap is missing): the same command in its own session, with the same limits, as the
caller, seeing the host's files. A student compiling their own code loses nothing by it; the grader refuses
it for student code unless told to accept weak isolation (``KIT_COMPILE_ISOLATION``).

At both levels: address-space, CPU-time, file-size, open-file and process limits (``CompileLimits``), no
core dumps, a wall-clock limit past which the whole process tree is killed, and output read back capped.

``KIT_COMPILE_ISOLATION``: ``auto`` (default: bwrap where it runs, else process), ``bwrap`` (refuse to run
without it) or ``process``. ``KIT_BWRAP`` names a bwrap (or a wrapper script) not on PATH.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FULL, FALLBACK = "bwrap", "process"
ISOLATION_SETTING = "KIT_COMPILE_ISOLATION"
SANDBOX_UID = 65534  # nobody
WORK_MOUNT = "/work"
INCLUDE_MOUNT = "/kit/include"
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/bin", "/sbin")
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
OUTPUT_TAIL_BYTES = 256 * 1024  # of the compiler's messages, read back (the first errors are the useful ones)


@dataclass(frozen=True)
class CompileLimits:
    """What one compiler run may use. Defaults are stated once, here; the kit's largest file (t4) needs about
    1.5 GB of address space and 10 s of CPU."""

    wall_seconds: float = 300.0
    cpu_seconds: int = 300
    address_space_bytes: int = 4 * 2**30
    file_bytes: int = 256 * 2**20
    open_files: int = 1024
    processes: int = 64  # besides those the sandbox user already has on the host
    tmp_bytes: int = 2 * 2**30  # the private /tmp nvcc writes its intermediate files to
    isolation: str | None = None  # auto, bwrap or process; None: KIT_COMPILE_ISOLATION (auto when unset)


DEFAULT_LIMITS = CompileLimits()


class IsolationUnavailable(RuntimeError):
    """``KIT_COMPILE_ISOLATION=bwrap`` and bubblewrap cannot run here; the message says why."""


@dataclass(frozen=True)
class Confined:
    returncode: int | None  # None: killed at the wall-clock limit
    output: str  # stdout and stderr together, the tail of it
    isolation: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


# --------------------------------------------------------------------------- what this host can do


def find_bwrap(setting: str | None = None) -> str | None:
    """bwrap from ``setting``, ``$KIT_BWRAP`` or PATH (a wrapper script is fine), or None."""
    candidate = setting or os.environ.get("KIT_BWRAP") or shutil.which("bwrap")
    if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return candidate
    return None


@cache
def probe(bwrap: str | None) -> tuple[bool, str]:
    """(True, version) when bubblewrap can start a sandbox here, else (False, why)."""
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap, or set KIT_BWRAP"
    args = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--unshare-net", "--die-with-parent"]
    if os.geteuid() != 0:
        args.append("--unshare-user")
    try:
        proc = subprocess.run(args + ["true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{bwrap} could not start: {exc}"
    if proc.returncode != 0:
        return False, f"{bwrap} cannot create namespaces here: {proc.stderr.strip()[:300]}"
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return True, version or "bubblewrap"


def isolation_level(setting: str | None = None) -> str:
    """The level compiles run at here: ``setting`` (else ``KIT_COMPILE_ISOLATION``, else auto) against what the
    host has. Raises IsolationUnavailable when bwrap is required and cannot run."""
    setting = (setting or os.environ.get(ISOLATION_SETTING) or "auto").strip().lower()
    if setting not in ("auto", FULL, FALLBACK):
        raise IsolationUnavailable(f"{ISOLATION_SETTING}={setting!r}: expected auto, bwrap or process")
    if setting == FALLBACK:
        return FALLBACK
    ok, why = probe(find_bwrap())
    if ok:
        return FULL
    if setting == FULL:
        raise IsolationUnavailable(f"student code is compiled only inside bubblewrap here, and it cannot run: {why}")
    return FALLBACK


# --------------------------------------------------------------------------- the command


def toolkit_root(nvcc: str) -> Path:
    """The CUDA toolkit an nvcc belongs to (its bin/'s parent), symlinks resolved."""
    return Path(os.path.realpath(nvcc)).parent.parent


def system_binds() -> list[str]:
    """bwrap arguments for the read-only system view every kit sandbox starts from (the worker's too)."""
    args: list[str] = []
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in ETC_FILES:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _under(path: Path, root: str) -> bool:
    return path == Path(root) or Path(root) in path.parents


def bwrap_command(argv: list[str], workdir: Path, include_dir: Path, toolkit: Path, limits: CompileLimits) -> list[str]:
    """bubblewrap around ``argv`` (whose paths name /work and /kit/include, and the toolkit at its real path)."""
    args = [
        find_bwrap() or "bwrap",
        "--size",
        str(limits.tmp_bytes),
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        *system_binds(),
    ]
    if not any(_under(toolkit, d) for d in SYSTEM_DIRS):
        args += ["--ro-bind", str(toolkit), str(toolkit)]
    args += [
        "--perms",
        "0755",
        "--dir",
        str(Path(INCLUDE_MOUNT).parent),
        "--ro-bind",
        str(include_dir),
        INCLUDE_MOUNT,
        "--bind",
        str(workdir),
        WORK_MOUNT,
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "compiler",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--chdir",
        WORK_MOUNT,
    ]
    root = os.geteuid() == 0
    if not root:
        args.append("--unshare-user")
    env = {"PATH": f"{toolkit / 'bin'}:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    for name, value in env.items():
        args += ["--setenv", name, value]
    setpriv = shutil.which("setpriv")
    drop = (
        [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups", "--"]
        if root and setpriv
        else []
    )
    return args + drop + argv


def processes_of(uid: int) -> int:
    """Processes and threads of ``uid`` on the host (what RLIMIT_NPROC counts)."""
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                count += len(list((entry / "task").iterdir())) if entry.stat().st_uid == uid else 0
            except OSError:
                continue
    return count


def _limit(limits: CompileLimits, uid: int):
    """preexec_fn: a session of its own and the limits, in the child before it execs (its children inherit
    them). The process limit counts every process of the uid the compiler runs as, host-wide."""
    nproc = limits.processes + processes_of(uid)

    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_AS, (limits.address_space_bytes, limits.address_space_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _sandbox_init(info: int) -> int | None:
    """The host pid of the sandbox's init, from bubblewrap's --info-fd ({"child-pid": N})."""
    ready, _, _ = select.select([info], [], [], 1.0)
    if not ready:
        return None
    try:
        return int(json.loads(os.read(info, 4096).decode() or "{}").get("child-pid"))
    except (ValueError, TypeError):
        return None


def _kill_tree(child: subprocess.Popen, sandbox_init: int | None) -> None:
    """Kill everything the run started and wait until it is gone. In bubblewrap, killing the namespace's init
    makes the kernel kill every process in it and reap them before the init itself is gone, and bubblewrap
    exits when its child does: once ``child`` is reaped, nothing of the compile is left. At the process level,
    the run's process group is killed, then waited for (a child nvcc started may take a moment to die)."""
    if sandbox_init is not None:
        try:
            os.kill(sandbox_init, signal.SIGKILL)
            child.wait(timeout=10)  # bubblewrap exits once its child, and so the whole namespace, is gone
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _group_alive(child.pid):
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    """Does any live (not zombie) process still belong to process group ``pgid``?"""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def run(
    argv: list[str], workdir: Path, include_dir: Path, nvcc: str, limits: CompileLimits = DEFAULT_LIMITS
) -> Confined:
    """Run ``argv`` (a compiler command written for the paths /work and /kit/include) confined, with ``workdir``
    as /work and ``include_dir`` as /kit/include. At the ``process`` level the two paths are rewritten to the
    host's. The whole process tree is killed at ``limits.wall_seconds``."""
    level = isolation_level(limits.isolation)
    if level == FULL:
        command = bwrap_command(argv, workdir, include_dir, toolkit_root(nvcc), limits)
        uid = SANDBOX_UID if os.geteuid() == 0 and shutil.which("setpriv") else os.getuid()
        if uid != os.getuid():  # the working directory is the compiler's to write its output into
            os.chown(workdir, uid, uid)
        cwd = None
    else:
        command = [a.replace(WORK_MOUNT, str(workdir)).replace(INCLUDE_MOUNT, str(include_dir)) for a in argv]
        uid, cwd = os.getuid(), str(workdir)
    start = time.monotonic()
    info_read, info_write = os.pipe() if level == FULL else (None, None)
    if level == FULL:  # bubblewrap says which host pid its sandbox's first process (the namespace's init) has
        command = [command[0], "--info-fd", str(info_write), *command[1:]]
    with tempfile.TemporaryFile() as log:
        try:
            child = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                preexec_fn=_limit(limits, uid),
                pass_fds=(info_write,) if level == FULL else (),
            )
        finally:
            if info_write is not None:
                os.close(info_write)
        try:
            code: int | None = child.wait(timeout=limits.wall_seconds)
        except subprocess.TimeoutExpired:
            code = None
            _kill_tree(child, _sandbox_init(info_read) if info_read is not None else None)
        finally:
            if info_read is not None:
                os.close(info_read)
            if child.poll() is None:
                _kill_tree(child, None)
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - OUTPUT_TAIL_BYTES))
        output = log.read().decode("utf-8", errors="replace")
    if level == FULL:  # paths inside the sandbox mean nothing to the reader: show the file names alone
        output = output.replace(WORK_MOUNT + "/", "").replace(INCLUDE_MOUNT + "/", "")
    return Confined(code, output, level, time.monotonic() - start)
