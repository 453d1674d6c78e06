"""A throwaway single-node Slurm on this machine: munged, slurmctld and slurmd on localhost, every file in
one folder. The kit's CI grades through it, and an instructor can try the cluster flow on a laptop:

    sudo .venv/bin/python -m grader.classroom.slurm_local start --dir /tmp/kit-slurm [--gpus]   # prints SLURM_CONF
    export SLURM_CONF=/tmp/kit-slurm/slurm.conf
    make grade-all SUBMISSIONS=... OUT=... SLURM=1 [TASKS="t1 t7"]   # as yourself; without --gpus: CPU tasks only
    sudo .venv/bin/python -m grader.classroom.slurm_local stop --dir /tmp/kit-slurm

Needs Debian's (or Ubuntu's) ``slurmctld slurmd slurm-client munge`` packages
(``apt-get install --no-install-recommends slurmctld slurmd slurm-client munge``), and root to start and stop
it (slurmd runs each job as the user who submitted it; any user may submit). Nothing touches /etc or the
system's own munge or Slurm: the key, the sockets, the ports (free ones, picked at start), the state and the
logs all live under ``--dir``; ``stop`` ends only the daemons whose ids ``start`` recorded there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sinfo", "sbatch", "squeue", "scontrol", "scancel")
PACKAGES = "slurmctld slurmd slurm-client munge"
LOG_TAIL_CHARS = 3000


class LocalSlurmError(RuntimeError):
    """Slurm could not start here; ``step`` says which step failed, the message carries the log tail."""

    def __init__(self, step: str, message: str):
        super().__init__(f"{step}: {message}")
        self.step = step


@dataclass
class NodeFacts:
    name: str
    cpus: int
    memory_mb: int
    gpus: int = 0  # offered as the generic resource gpu (start --gpus)


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if not shutil.which(name)]


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return text[-chars:] if text.strip() else f"(empty log {path})"


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def nvidia_devices() -> list[Path]:
    return sorted((p for p in Path("/dev").glob("nvidia[0-9]*") if p.name[6:].isdigit()), key=lambda p: int(p.name[6:]))


def node_facts() -> NodeFacts:
    """This machine as slurmd sees it (``slurmd -C``), so the node's CPUs and memory are never more than it has."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    return NodeFacts(
        name=socket.gethostname().split(".")[0],
        cpus=int(fields.get("CPUs", os.cpu_count() or 1)),
        memory_mb=int(fields.get("RealMemory", 1024)),
    )


def slurm_conf(root: Path, node: NodeFacts, ctld_port: int, slurmd_port: int, partition: str = "kit") -> str:
    """A minimal slurm.conf: one node (this machine, reached on 127.0.0.1), one partition, no accounting, no
    cgroups (proctrack/linuxproc, task/none: runs in containers and on CI machines alike)."""
    return f"""# Written by grader/classroom/slurm_local.py: a single-node Slurm for trying the kit's cluster grading.
ClusterName=kitlocal
{"GresTypes=gpu" if node.gpus else "# no GresTypes: no GPU offered (start --gpus offers them)"}
SlurmctldHost={node.name}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root / "munge" / "munge.socket"}
StateSaveLocation={root / "state"}
SlurmdSpoolDir={root / "spool"}
SlurmctldPidFile={root / "slurmctld.pid"}
SlurmdPidFile={root / "slurmd.pid"}
SlurmctldLogFile={root / "log" / "slurmctld.log"}
SlurmdLogFile={root / "log" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName={node.name} NodeHostname={node.name} NodeAddr=127.0.0.1 CPUs={node.cpus} RealMemory={node.memory_mb} \\
  {f"Gres=gpu:{node.gpus} " if node.gpus else ""}State=UNKNOWN
PartitionName={partition} Nodes={node.name} Default=YES MaxTime=INFINITE State=UP
"""


class LocalSlurm:
    """The daemons of one folder. ``start()`` leaves them running (their ids in ``pids.json``), ``stop()``
    ends them; as a context manager it does both."""

    def __init__(self, root: Path | str):
        self.root = Path(root).resolve()
        self.conf = self.root / "slurm.conf"
        self.pids_file = self.root / "pids.json"
        self.node: NodeFacts | None = None  # known once started

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm's client commands (sbatch, squeue, ...) to talk to these daemons."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def log(self, daemon: str) -> Path:
        return self.root / "log" / f"{daemon}.log"

    def _spawn(self, daemon: str, argv: list[str]) -> int:
        console = open(self.root / "log" / f"{daemon}.console", "ab")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.env,
        )
        console.close()
        pids = self._pids()
        pids[daemon] = proc.pid
        self.pids_file.write_text(json.dumps(pids))
        time.sleep(0.3)
        if proc.poll() is not None:
            raise LocalSlurmError(
                f"starting {daemon}", f"exited with {proc.returncode} at once:\n" + self._daemon_logs(daemon)
            )
        return proc.pid

    def _daemon_logs(self, daemon: str) -> str:
        parts = []
        for path in (self.log(daemon), self.root / "log" / f"{daemon}.console"):
            if path.exists() and path.stat().st_size:
                parts.append(f"--- {path} ---\n{log_tail(path)}")
        return "\n".join(parts) or f"(no log from {daemon})"

    def _pids(self) -> dict[str, int]:
        try:
            return json.loads(self.pids_file.read_text())
        except (OSError, ValueError):
            return {}

    def start(self, timeout_s: float = 60.0, gpus: bool = False) -> LocalSlurm:
        """Start munged, slurmctld and slurmd; ``gpus`` offers this machine's NVIDIA GPUs as ``gpu`` (so that
        ``--gres=gpu:1`` jobs run, one GPU each; CUDA_VISIBLE_DEVICES set by Slurm)."""
        missing = missing_programs()
        if missing:
            raise LocalSlurmError(
                "finding the programs",
                f"{', '.join(missing)} not on PATH (install Debian's "
                f"{PACKAGES}: apt-get install --no-install-recommends {PACKAGES})",
            )
        if os.geteuid() != 0:
            raise LocalSlurmError("checking the user", "a local Slurm needs root (slurmd runs jobs as their owner)")
        if self._alive():
            raise LocalSlurmError(
                "checking the folder",
                f"daemons from {self.root} still run ({self._alive()}): "
                f"python -m grader.classroom.slurm_local stop --dir {self.root}",
            )
        for sub in ("munge", "munge-key", "state", "spool", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # Any user's sbatch reaches munged's socket; only root reads the key.
        self.root.chmod(0o755)
        (self.root / "munge").chmod(0o755)
        (self.root / "munge-key").chmod(0o700)
        key = self.root / "munge-key" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.node = node = node_facts()
        if gpus:
            devices = nvidia_devices()
            if not devices:
                raise LocalSlurmError("finding the GPUs", "--gpus: no /dev/nvidiaN device on this machine")
            node.gpus = len(devices)
            # slurmd reads gres.conf beside slurm.conf: the device files give each job its GPUs.
            (self.root / "gres.conf").write_text("".join(f"Name=gpu File={d}\n" for d in devices))
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(slurm_conf(self.root, node, ctld_port, slurmd_port))
        self.pids_file.write_text("{}")
        try:
            munge = self.root / "munge"
            self._spawn(
                "munged",
                [
                    "munged",
                    "--foreground",
                    "--force",
                    f"--key-file={key}",
                    f"--socket={munge / 'munge.socket'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--seed-file={self.root / 'munge-key' / 'munged.seed'}",
                    f"--log-file={self.log('munged')}",
                ],
            )
            self._wait_for(lambda: (munge / "munge.socket").exists(), 10, "starting munged", "munged")
            # -c: a fresh state (no jobs from an earlier run of this folder); -i: ignore a state it cannot read.
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)])
            self._wait_for(
                lambda: self._run(["scontrol", "ping"]).stdout.count("UP") > 0,
                timeout_s,
                "starting slurmctld",
                "slurmctld",
            )
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])
            self._wait_for(
                lambda: self.node_state() in ("idle", "mixed", "allocated"),
                timeout_s,
                "waiting for the node to be idle (sinfo)",
                "slurmd",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=30)

    def node_state(self) -> str:
        out = self._run(["sinfo", "--noheader", "--Node", "--format=%t"]).stdout.split()
        return out[0].rstrip("*~#!%$@^-") if out else ""

    def _wait_for(self, ready, timeout_s: float, step: str, daemon: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            pid = self._pids().get(daemon)
            if pid and not _running(pid):
                break
            time.sleep(0.5)
        extra = f" (node state: {self.node_state() or 'unknown'})" if daemon == "slurmd" else ""
        raise LocalSlurmError(step, f"not ready after {timeout_s:g} s{extra}:\n" + self._daemon_logs(daemon))

    def _alive(self) -> dict[str, int]:
        return {name: pid for name, pid in self._pids().items() if _running(pid)}

    def stop(self, timeout_s: float = 15.0) -> None:
        """End the daemons this folder started (slurmd, slurmctld, munged: that order), by their recorded ids."""
        pids = self._pids()
        if pids.get("slurmctld") and _running(pids["slurmctld"]) and self.conf.exists():
            try:  # this cluster's own jobs first, so slurmd ends their processes before it goes
                jobs = self._run(["squeue", "--noheader", "--format=%A"]).stdout.split()
                if jobs:
                    self._run(["scancel", *sorted(set(jobs))])
                    time.sleep(1.0)
            except (OSError, subprocess.SubprocessError):
                pass
        for daemon in ("slurmd", "slurmctld", "munged"):
            pid = pids.get(daemon)
            if pid and _running(pid):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + timeout_s
                while _running(pid) and time.monotonic() < deadline:
                    time.sleep(0.2)
                if _running(pid):
                    os.kill(pid, signal.SIGKILL)
        if self.root.exists():
            self.pids_file.write_text("{}")

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _running(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it, or it stays a zombie
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie from another parent counts as ended
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A single-node Slurm in one folder (munged, slurmctld, slurmd).")
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("--dir", type=Path, default=Path("/tmp/kit-slurm"), help="where its files live")
    parser.add_argument("--gpus", action="store_true", help="offer this machine's NVIDIA GPUs to jobs (--gres=gpu:1)")
    args = parser.parse_args(argv)
    cluster = LocalSlurm(args.dir)
    if args.action == "start":
        try:
            cluster.start(gpus=args.gpus)
        except LocalSlurmError as exc:
            print(f"error: a local Slurm could not start: {exc}", file=sys.stderr)
            return 1
        print(
            f"Slurm runs (node {cluster.node_state()}); for sbatch, squeue and the kit:\n"
            f"  export SLURM_CONF={cluster.conf}\n"
            f"stop it with: python -m grader.classroom.slurm_local stop --dir {args.dir}"
        )
    elif args.action == "stop":
        cluster.stop()
        print(f"stopped the daemons of {cluster.root}")
    else:
        alive = cluster._alive()
        print(
            f"{cluster.root}: "
            + (", ".join(f"{k} {v}" for k, v in alive.items()) or "no daemon runs")
            + (f"; node {cluster.node_state()}" if alive else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
