"""The grader against the kit's adversarial fixtures (grader/fixtures): each CPU fixture is caught.

The GPU fixtures run in grader/device_check.sh; here every fixture is at least built, so a change to a
solution that a fixture's patch no longer matches fails in CI, not on the device.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from assignment.registry import load_registry
from grader.adversarial import build_submission, load_fixtures, planted_text, run_fixture
from grader.config import GradeConfig
from grader.grade import check_host

pytestmark = pytest.mark.kit
FIXTURES = load_fixtures()
CPU = [pytest.param(f, id=f.name) for f in FIXTURES if not f.gpu]
CONFIG = replace(GradeConfig(), preflight=False, seed=20261122, allow_weak_isolation=True)


@pytest.fixture(scope="module")
def host():
    return check_host(CONFIG, load_registry())


def test_every_class_of_the_issue_has_fixtures():
    classes = {f.cls for f in FIXTURES}
    for wanted in ("student code in the checker's process", "reading and writing the instructor's tree", "timing",
                   "structure checks a student can defeat", "leaks through feedback", "submission handling",
                   "crashes, hangs and out-of-memory", "student CUDA outside device code", "honest bug",
                   "rubric consistency"):
        assert wanted in classes, wanted
    assert len({f.name for f in FIXTURES}) == len(FIXTURES), "fixture names must be unique"


@pytest.mark.parametrize("fixture", [pytest.param(f, id=f.name) for f in FIXTURES])
def test_every_fixture_can_be_built(fixture, tmp_path):
    if not fixture.submission:
        assert planted_text(fixture) != (load_registry().task(fixture.task).files[0] and "")
    assert build_submission(fixture, tmp_path).exists()


@pytest.mark.parametrize("fixture", CPU)
def test_cpu_fixture_is_caught(fixture, tmp_path, host):
    verdict = run_fixture(fixture, CONFIG, tmp_path, host)
    assert verdict.caught, f"{fixture.name} ({fixture.cls}) got through: {verdict.problems}"
