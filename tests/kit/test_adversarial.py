"""The grader against the kit's adversarial fixtures (grader/fixtures): each CPU fixture is caught.

The GPU fixtures run in grader/scripts/device_check.sh; here every fixture is at least built, so a change to a
solution that a fixture's patch no longer matches fails in CI, not on the device.

A grading is mostly two processes importing torch, so the CPU fixtures are graded side by side, one per
core, where that cannot change a verdict: in bubblewrap (no fixture reaches another's files) and without a
GPU (no timed check shares one). The fixtures whose judge looks at every process on the host (nothing left
running) are graded alone afterwards, where another fixture's worker would look like a leftover.

Without bubblewrap the fixtures that skip the static rules (hostile code that only the sandbox holds) are
not run: under the process fallback they would write to this host (one rewrites every file on the disk
whose name starts with "grades", grader/classroom/gradescope.py included).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from assignment.registry import load_registry
from grader.tools.adversarial import build_submission, load_fixtures, planted_text, run_fixture
from grader.grade.config import GradeConfig
from grader.grade.grade import check_host
from grader.isolation import sandbox
from grader.grade.runner import gpu_available

pytestmark = [pytest.mark.kit, pytest.mark.slow]  # end to end: make test-slow
FIXTURES = load_fixtures()
CPU = [pytest.param(f, id=f.name) for f in FIXTURES if not f.gpu]
# One thread for each checker and worker: the gradings run side by side, one per core, and torch's parallel regions
# with more threads than cores wait for threads that are not running (three times the CPU time).
CONFIG = replace(GradeConfig(), preflight=False, seed=20261122, allow_weak_isolation=True, threads=1)


@pytest.fixture(scope="module")
def host():
    return check_host(CONFIG, load_registry())


def needs_the_sandbox(fixture, host) -> bool:
    return fixture.hostile and host.isolation != sandbox.FULL


@pytest.fixture(scope="module")
def verdicts(request, host, tmp_path_factory):
    """fixture name -> its verdict (or the exception its grading raised), for every CPU fixture this
    session selected; graded on the first use."""
    wanted = [
        item.callspec.params["fixture"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_cpu_fixture_is_caught" and hasattr(item, "callspec")
    ]
    wanted = [f for f in wanted if not needs_the_sandbox(f, host)]
    work = tmp_path_factory.mktemp("adversarial")
    side_by_side = host.isolation == sandbox.FULL and not gpu_available()
    jobs = max(1, min(4, os.cpu_count() or 1)) if side_by_side else 1
    together = [f for f in wanted if not f.judged_on_the_whole_host]
    alone = [f for f in wanted if f.judged_on_the_whole_host]

    def grade(fixture):
        try:
            return run_fixture(fixture, CONFIG, work, host)
        except Exception as exc:  # re-raised in that fixture's own test
            return exc

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = dict(zip([f.name for f in together], pool.map(grade, together)))
    results |= {f.name: grade(f) for f in alone}
    return results


def test_every_class_of_the_issue_has_fixtures():
    classes = {f.cls for f in FIXTURES}
    for wanted in (
        "student code in the checker's process",
        "reading and writing the instructor's tree",
        "timing",
        "structure checks a student can defeat",
        "leaks through feedback",
        "submission handling",
        "crashes, hangs and out-of-memory",
        "student CUDA outside device code",
        "honest bug",
        "rubric consistency",
        # issue 25: the classes of attack and of honest file it names
        "lexer mismatch",
        "preprocessor escape",
        "includes out of the sandbox",
        "compiler resource bomb",
        "forged outputs and evidence",
        "fake streaming",
        "regrade drift",
        "honest file",
        # issue 35: region rules that no region can switch off
        "rules switched off from a region",
        "inline PTX",
    ):
        assert wanted in classes, wanted
    assert len({f.name for f in FIXTURES}) == len(FIXTURES), "fixture names must be unique"


@pytest.mark.parametrize("fixture", [pytest.param(f, id=f.name) for f in FIXTURES])
def test_every_fixture_can_be_built(fixture, tmp_path):
    if not fixture.submission:
        assert planted_text(fixture) != (load_registry().task(fixture.task).files[0] and "")
    assert build_submission(fixture, tmp_path).exists()


@pytest.mark.parametrize("fixture", CPU)
def test_cpu_fixture_is_caught(fixture, host, verdicts):
    if needs_the_sandbox(fixture, host):
        pytest.skip(
            f"needs bubblewrap: {fixture.name} runs hostile code past the static rules, which the process "
            "fallback would let loose on this host"
        )
    verdict = verdicts[fixture.name]
    if isinstance(verdict, Exception):
        raise verdict
    assert verdict.caught, f"{fixture.name} ({fixture.cls}) got through: {verdict.problems}"
