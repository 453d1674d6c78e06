"""The layout stays what ARCHITECTURE.md says: measured records apart from the code, each one indexed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
RECORDS = REPO / "grader" / "records"


def test_every_record_has_a_line_in_the_index():
    index = (RECORDS / "README.md").read_text(encoding="utf-8")
    indexed = set(re.findall(r"^\| `([^`]+)` \|", index, re.MULTILINE))
    present = {p.name + ("/" if p.is_dir() else "") for p in RECORDS.iterdir() if p.name != "README.md"}
    assert present - indexed == set(), "records without a line in grader/records/README.md's index"
    assert indexed - present == set(), "index lines of records that are not in grader/records/"


def test_records_hold_no_code():
    code = [p.relative_to(REPO).as_posix() for p in RECORDS.rglob("*") if p.suffix in (".py", ".sh", ".patch")]
    assert not code, f"code among the records (device scripts go to grader/scripts/): {code}"
