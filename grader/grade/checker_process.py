"""One checker process: ``python -m pytest`` on a task's hidden suite with the grader's plugin, and what it left.

The runner (grader/grade/runner.py) may start several for one task: the checks, the rest of them after a check that
hung, one check rerun alone, the timing checks. Each gets its own files (``KIT_RESULTS_FILE``, ``KIT_EVENTS_FILE``,
``KIT_COLLECTED_FILE``, ``KIT_SELECT_FILE``: grader/grade/checker_plugin.py), so nothing one wrote is read as
another's. The runner trusts only what these files say and how the process ended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.grade.config import REPO_ROOT
from grader.isolation import sandbox


@dataclass
class Ended:
    """How one checker process ended and what it wrote."""

    code: int | None  # its exit code; None: stopped at the time it was given
    results: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    collected: list[str] | None = None  # what its collection found (None: it never finished collecting)
    positions: dict[str, int] = field(default_factory=dict)  # each one's place in the task's whole collection
    seconds: float = 0.0
    log: str = ""

    def first(self, kind: str) -> dict | None:
        return next((e for e in self.events if e.get("event") == kind), None)


class CheckerProcess:
    """A hidden suite's pytest run in a session of its own, started now; ``wait`` ends it and reads its files."""

    def __init__(
        self,
        name: str,
        suite: list[Path],
        marks: str,
        env: dict[str, str],
        workdir: Path,
        *,
        only: list[str] | None = None,
        skip: list[str] = (),
        select: str = "",
    ):
        self.files = {
            key: workdir / f"{name}.{suffix}"
            for key, suffix in (
                ("results", "results.jsonl"),
                ("events", "events.jsonl"),
                ("collected", "collected.json"),
                ("select", "select.json"),
                ("log", "log"),
            )
        }
        for path in self.files.values():
            path.unlink(missing_ok=True)
        self.files["select"].write_text(json.dumps({"only": only, "skip": list(skip)}))
        env = dict(
            env,
            KIT_RESULTS_FILE=str(self.files["results"]),
            KIT_EVENTS_FILE=str(self.files["events"]),
            KIT_COLLECTED_FILE=str(self.files["collected"]),
            KIT_SELECT_FILE=str(self.files["select"]),
        )
        command = [
            sys.executable,
            "-m",
            "pytest",
            *map(str, suite),
            "-m",
            marks,
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "grader.grade.checker_plugin",
            "--rootdir",
            str(REPO_ROOT),
            "-c",
            str(REPO_ROOT / "pyproject.toml"),
            *(["-k", select] if select else []),
        ]
        self.started = time.monotonic()
        self._log = open(self.files["log"], "wb")  # noqa: SIM115 - kept open while the process writes
        self.process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def events(self) -> list[dict]:
        return _json_lines(self.files["events"])

    def wait(self, seconds: float | None) -> Ended:
        """Wait at most ``seconds`` (None: until it ends); then stop it and every sandbox it started."""
        try:
            code = self.process.wait(timeout=None if seconds is None else max(0.0, seconds))
        except subprocess.TimeoutExpired:
            code = None
        self.stop()
        self._log.close()
        events = self.events()
        end_sandboxes(events)
        collected = json.loads(self.files["collected"].read_text()) if self.files["collected"].is_file() else None
        return Ended(
            code=code,
            results=_json_lines(self.files["results"]),
            events=events,
            collected=collected["ids"] if collected else None,
            positions=dict(zip(collected["ids"], collected["positions"])) if collected else {},
            seconds=time.monotonic() - self.started,
            log=self.files["log"].read_text(errors="replace")[-4000:],
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.process.wait()


def end_sandboxes(events: list[dict]) -> None:
    """Every sandboxed worker a checker started has ended, whatever became of the checker: what it recorded of each
    (grader/isolation/client.py) is killed and waited for. After this, no process of the student's holds the GPU."""
    for record in events:
        if record.get("event") == "sandbox":
            sandbox.end_process(int(record["pid"]), record.get("start"))


def _json_lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill
        if isinstance(value, dict):
            found.append(value)
    return found
