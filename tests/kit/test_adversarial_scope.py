"""The adversarial tool's check for processes a fixture left behind can see that grading's processes only (``@WORK@``):
gradings beside it (another test process grading a class, say) start workers with the same marker on their command
line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.tools.adversarial import _processes_with, load_fixtures

pytestmark = [
    pytest.mark.kit,
    pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads the process table from /proc"),
]


def test_the_left_behind_check_is_scoped_to_the_gradings_own_folder(tmp_path):
    marker = f"/kit/worker.py-{tmp_path.name}"
    mine, theirs = tmp_path / "mine" / "kit-grade-a", tmp_path / "theirs" / "kit-grade-b"
    sleeper = "import time; time.sleep(30)"
    started = [subprocess.Popen([sys.executable, "-c", sleeper, marker, str(folder)]) for folder in (mine, theirs)]
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(_processes_with(marker)) < 2:
            time.sleep(0.05)
        assert len(_processes_with(marker)) == 2, "both stand-in workers carry the marker"
        found = _processes_with(marker, str(tmp_path / "mine"))
        assert len(found) == 1 and str(mine) in found[0], found
        assert _processes_with(marker, str(tmp_path / "elsewhere")) == []
        fork_bomb = next(f for f in load_fixtures() if f.name == "fork-bomb")
        assert ["/kit/worker.py", "@WORK@"] in fork_bomb.expect["no_process"], "the fork bomb's check is scoped"
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
