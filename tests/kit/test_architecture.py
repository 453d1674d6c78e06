"""ARCHITECTURE.md stays a true map: every path it names exists in the kit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
# A path is a backticked name with a slash in it (grader/grade/seeds.py, assignment/cuda/) or a top-level file or
# folder.
_PATH = re.compile(r"`([A-Za-z_][\w.\-/]*?/[\w.\-/]*|[A-Za-z_][\w.\-]*\.(?:md|toml|py|sh|cu|cuh|mk))`")


def test_every_path_the_map_names_exists():
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = sorted(set(_PATH.findall(text)))
    assert len(paths) > 40, f"the map names only {len(paths)} paths: has the pattern stopped matching?"
    missing = [p for p in paths if not (REPO / p.rstrip("/")).exists()]
    assert not missing, f"ARCHITECTURE.md names paths that no longer exist (update the map): {missing}"
