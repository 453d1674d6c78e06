"""The grader against the kit's own adversarial fixtures: known cheats and known honest bugs.

    python -m grader.tools.adversarial [--cpu | --gpu] [--only NAME ...] [--list]

Each fixture in ``grader/fixtures/*.toml`` (one file per family of defences) is a submission (the reference solutions with one
planted trick or bug, or a malformed submission) and what the grader must make of it: a status, a
failed check of some kind, a score below full marks, a note, nothing leaked into the student's
report, no process left behind. The runner grades each one through the real grader (``--cpu``: the
ones that need no GPU, run in CI; ``--gpu``: the rest, run by grader/scripts/device_check.sh) and prints a
table of the class, the defence and the verdict; it exits 1 when any fixture got through.

A fixture's graded file is written as UTF-8, with a byte-order mark when ``bom`` is set and ``newline``
between its lines (CR LF for a file saved on Windows). ``expect = { regrade_same = true }`` grades it with
seeds derived from the course's salt (not the runner's fixed seed): twice as one student, whose every check
must score the same both times, and once as another, whose seeds must differ (``REGRADE_IDS``). A fixture's
``full`` means full marks of what ran on this host (a t6 fixture on a host without a GPU runs its CPU checks);
``correctness_full`` every correctness and structure check's points, whatever the timing rules gave.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import tomllib
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from assignment.registry import load_registry
from grader.grade.config import REPO_ROOT, GradeConfig
from grader.grade.grade import check_host, grade_submission
from grader.grade.scoring import SubmissionScore

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"
# The grading ids a regrade_same fixture is graded as: the first twice, the second once.
REGRADE_IDS = ("fixture-student-a", "fixture-student-b")
# The submission-format attacks (links, zips) carry the first task's file: what any submission may hold.
FIRST_FILE = load_registry().tasks[0].files[0]


@dataclass
class Fixture:
    name: str
    cls: str
    task: str
    defence: str
    expect: dict
    gpu: bool = False
    file: str = ""
    append: str = ""
    replace: list = field(default_factory=list)
    source: str = ""
    rules: bool = True
    select: str = ""
    submission: str = ""  # a builder for a malformed submission (see BUILDERS)
    timeout_scale: float = 1.0
    bom: bool = False  # the graded file starts with a UTF-8 byte-order mark
    newline: str = "\n"  # between the graded file's lines

    @property
    def judged_on_the_whole_host(self) -> bool:
        """Its judge looks at every process on the host (no_process), so it must be graded alone: another
        grading's worker running beside it would count as something it left behind."""
        return "no_process" in self.expect

    @property
    def hostile(self) -> bool:
        """Its code skips the static rules and only the sandbox holds it: under the process fallback it
        would act on the grading host itself."""
        return not self.rules


def load_fixtures(paths: list[Path] | None = None) -> list[Fixture]:
    """Every fixture of ``paths`` (default: each ``grader/fixtures/*.toml``, in name order)."""
    fixtures = []
    for path in paths if paths is not None else sorted(FIXTURES_DIR.glob("*.toml")):
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
        for item in raw.get("fixture", []):
            item = dict(item)
            item["cls"] = item.pop("class")
            fixtures.append(Fixture(**item))
    return fixtures


# --------------------------------------------------------------------------- building a submission


def _graded_file(fixture: Fixture) -> str:
    return fixture.file or load_registry().task(fixture.task).files[0]


def planted_text(fixture: Fixture) -> str:
    """The fixture's version of its graded file."""
    name = _graded_file(fixture)
    if fixture.source:
        return (FIXTURES_DIR / fixture.source).read_text(encoding="utf-8")
    text = (REPO_ROOT / "solutions" / name).read_text(encoding="utf-8")
    for old, new in fixture.replace:
        if old not in text:
            raise ValueError(f"fixture {fixture.name}: {old[:60]!r} is not in solutions/{name} (update the fixture)")
        text = text.replace(old, new, 1)
    if fixture.append:
        text = text.rstrip("\n") + "\n\n" + fixture.append.strip("\n") + "\n"
    return text.replace("@REPO@", str(REPO_ROOT))


def _solutions_copy(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for path in (REPO_ROOT / "solutions").iterdir():
        if path.is_file():
            shutil.copyfile(path, folder / path.name)


def _zip(path: Path, entries: dict[str, bytes], **kwargs) -> Path:
    with zipfile.ZipFile(path, "w", **kwargs) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


def _symlink_to(target: str):
    def build(root: Path) -> Path:
        folder = root / "alice"
        folder.mkdir()
        os.symlink(target, folder / FIRST_FILE)
        return folder

    return build


def _set_entry_field(path: Path, local_at: int, central_at: int, value: bytes) -> Path:
    """Overwrite one field of the first entry's local and central headers (offsets from each signature)."""
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", local_at), (b"PK\x01\x02", central_at)):
        at = data.find(signature) + offset
        data[at : at + len(value)] = value
    path.write_bytes(bytes(data))
    return path


def _zip_bomb(root: Path) -> Path:
    # 64 MB of zeros that deflate to about 64 KB.
    return _zip(root / "bomb.zip", {FIRST_FILE: b"\0" * (64 << 20)}, compression=zipfile.ZIP_DEFLATED)


def _lying_zip(root: Path) -> Path:
    # The same bomb, its declared size 1 KB (what a size check that trusts the header sees).
    return _set_entry_field(_zip_bomb(root), 22, 24, (1024).to_bytes(4, "little"))


def _corrupt_zip(root: Path) -> Path:
    good = _zip(root / "good.zip", {FIRST_FILE: (REPO_ROOT / "solutions" / FIRST_FILE).read_bytes()})
    path = root / "corrupt.zip"
    data = good.read_bytes()
    path.write_bytes(data[:30] + b"\xff" * 200 + data[230:])
    return path


def _encrypted_zip(root: Path) -> Path:
    # General-purpose flag bit 0: the entry is encrypted.
    return _set_entry_field(_zip(root / "secret.zip", {FIRST_FILE: b"x = 1\n"}), 6, 8, (1).to_bytes(2, "little"))


def _unsupported_zip(root: Path) -> Path:
    # Compression method 97: no such method.
    return _set_entry_field(_zip(root / "odd.zip", {FIRST_FILE: b"x = 1\n"}), 8, 10, (97).to_bytes(2, "little"))


def _zip_symlink(root: Path) -> Path:
    path = root / "links.zip"
    with zipfile.ZipFile(path, "w") as archive:
        info = zipfile.ZipInfo(FIRST_FILE)
        info.create_system = 3
        info.external_attr = 0o120777 << 16  # a symbolic link entry
        archive.writestr(info, str(REPO_ROOT / "solutions" / FIRST_FILE))
    return path


def _formula_name(root: Path) -> Path:
    folder = root / '=HYPERLINK("http://x")'
    _solutions_copy(folder)
    return folder


BUILDERS = {
    "symlink-passwd": _symlink_to("/etc/passwd"),
    "symlink-solution": _symlink_to(str(REPO_ROOT / "solutions" / FIRST_FILE)),
    "zip-bomb": _zip_bomb,
    "lying-zip": _lying_zip,
    "corrupt-zip": _corrupt_zip,
    "encrypted-zip": _encrypted_zip,
    "unsupported-zip": _unsupported_zip,
    "zip-symlink": _zip_symlink,
    "formula-name": _formula_name,
}


def build_submission(fixture: Fixture, root: Path) -> Path:
    if fixture.submission:
        return BUILDERS[fixture.submission](root)
    folder = root / fixture.name
    _solutions_copy(folder)
    text = planted_text(fixture).replace("\n", fixture.newline)
    (folder / _graded_file(fixture)).write_bytes(b"\xef\xbb\xbf" * fixture.bom + text.encode("utf-8"))
    return folder


# --------------------------------------------------------------------------- judging the result


def _processes_with(*markers: str) -> list[str]:
    """The processes whose command line holds every one of ``markers``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(marker in cmdline for marker in markers):
                found.append(f"{entry.name}: {cmdline.strip()}")
    return found


def judge(fixture: Fixture, result: SubmissionScore, out: Path, work_root: Path) -> list[str]:
    """What went wrong (empty: the grader did what the fixture expects). ``work_root``: the grading's working
    folder, what ``@WORK@`` stands for in a ``no_process`` entry."""
    expect = fixture.expect
    (ts,) = [t for t in result.tasks if t.task.id == fixture.task]
    problems = []
    kinds = {t.check.get("kind") for t in (ts.run.tests if ts.run else []) if t.outcome == "failed"}
    texts = json.dumps(json.loads((out / "results.json").read_text())) + (out / "report.html").read_text()
    notes = " ".join(result.notes + ts.notes)
    if "status" in expect and ts.status != expect["status"]:
        problems.append(f"status {ts.status!r}, expected {expect['status']!r} ({ts.reason[:200]})")
    if expect.get("below_full") and ts.score >= ts.max_score - 1e-9:
        problems.append(f"scored full marks ({ts.score:g})")
    if expect.get("zero") and ts.score > 1e-9:
        problems.append(f"scored {ts.score:g}, expected 0")
    if expect.get("full") and ts.status == "ran" and ts.score < ts.max_ran - 1e-9:
        problems.append(f"scored {ts.score:g} of the {ts.max_ran:g} that ran, expected full marks")
    if expect.get("correctness_full"):  # every correctness and structure check passed (timing may fall short)
        lost = [t.name for t in ts.tests if "performance" not in t.tags and t.ran and t.score < t.max_score - 1e-9]
        if ts.status != "ran" or lost:
            problems.append(f"correctness points lost ({ts.status}): {lost[:3]}")
    if "score_at_most" in expect and ts.score > expect["score_at_most"] + 1e-9:
        problems.append(f"scored {ts.score:g}, expected at most {expect['score_at_most']:g}")
    if expect.get("not_run_reported"):
        problems += _not_run_problems(ts, json.loads((out / "results.json").read_text()))
    if "kind" in expect and expect["kind"] not in kinds:
        problems.append(f"no failed check of kind {expect['kind']!r} (kinds: {sorted(k for k in kinds if k)})")
    if "passed_at_least" in expect and ts.passed < expect["passed_at_least"]:
        problems.append(f"{ts.passed} checks passed, expected at least {expect['passed_at_least']} (the others ran?)")
    if "timing_at_most" in expect:
        rule, most = expect["timing_at_most"]
        values = [t.timing.get("value") for t in (ts.run.tests if ts.run else []) if rule in t.timing.get("rule", "")]
        if not values or any(v is None or v > most for v in values):
            problems.append(f"the timing rule '{rule}' measured {values}, expected at most {most:g}")
    if "performance_at_least" in expect and ts.performance < expect["performance_at_least"] - 1e-9:
        problems.append(f"performance {ts.performance:g}, expected at least {expect['performance_at_least']:g}")
    if "rule_zero" in expect:
        earned = [t.score for t in ts.tests if "performance" in t.tags and expect["rule_zero"] in t.name]
        if not earned or any(e > 0 for e in earned):
            problems.append(f"the timing rule '{expect['rule_zero']}' earned {earned}, expected 0")
    for text in expect.get("output_contains", []):
        if text not in texts:
            problems.append(f"the student's report does not say {text!r}")
    for text in expect.get("output_lacks", []):
        if text in texts:
            problems.append(f"the student's report leaks {text!r}")
    if "note" in expect and expect["note"] not in notes:
        problems.append(f"no note containing {expect['note']!r} (notes: {notes[:300]!r})")
    for entry in expect.get("no_process", []):  # a marker, or markers a process's command line holds all of
        markers = [entry] if isinstance(entry, str) else list(entry)
        left = _processes_with(*(m.replace("@WORK@", str(work_root)) for m in markers))
        if left:
            problems.append(f"processes left behind: {left[:3]}")
    for path in (p.replace("@REPO@", str(REPO_ROOT)) for p in expect.get("no_file", [])):
        if Path(path).exists():
            problems.append(f"the submission planted {path}")
            Path(path).unlink()
    return problems


def _not_run_problems(ts, results: dict) -> list[str]:
    """A task with checks that did not run here says so: points counted as not run, and results.json entries for
    them with no score and no status (neither 0 nor passed)."""
    if ts.complete:
        return ["every check ran: this host cannot show what a check that did not run looks like"]
    entries = [t for t in results["tests"] if ts.task.id in t.get("tags", []) and "not run" in t.get("tags", [])]
    wrong = [t["name"] for t in entries if {"score", "max_score", "status"} & set(t)]
    return ([] if entries else ["results.json has no entry tagged 'not run'"]) + [
        f"a check that did not run has a score or a status: {name}" for name in wrong[:3]
    ]


def _regrade_problems(fixture: Fixture, first: SubmissionScore, config: GradeConfig, root: Path, host) -> list[str]:
    """``first`` was graded as REGRADE_IDS[0] with derived seeds: graded again as that student, the same points for
    every check; as REGRADE_IDS[1], other seeds."""

    def graded(result: SubmissionScore) -> tuple[list, dict]:
        (ts,) = [t for t in result.tasks if t.task.id == fixture.task]
        return [(t.name, round(t.score, 9)) for t in ts.tests], result.grading.get("seeds", {})

    again = []
    for attempt, grading_id in enumerate(REGRADE_IDS):
        folder = root / f"regrade{attempt}"
        result = grade_submission(
            build_submission(fixture, folder),
            folder / "out",
            replace(config, grading_id=grading_id),
            log=lambda *a, **k: None,
            host=host,
        )
        again.append(graded(result))
    (points, seeds), (points_again, seeds_again), (_, other_seeds) = graded(first), *again
    problems = []
    if points != points_again:
        moved = [f"{a[0]}: {a[1]:g} then {b[1]:g}" for a, b in zip(points, points_again) if a != b]
        problems.append(f"a regrade of the same files changed the points: {moved[:3] or 'other checks'}")
    if not seeds or seeds != seeds_again:
        problems.append(f"the regrade's seeds were {seeds} then {seeds_again}")
    if seeds.get(fixture.task) == other_seeds.get(fixture.task):
        problems.append("two students got the same hidden seed")
    return problems


@dataclass
class Verdict:
    fixture: Fixture
    problems: list[str]
    score: str
    seconds: float

    @property
    def caught(self) -> bool:
        return not self.problems


def run_fixture(fixture: Fixture, config: GradeConfig, work: Path, host) -> Verdict:
    root = work / fixture.name
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    submission = build_submission(fixture, root)
    fixture_config = replace(
        config,
        tasks=(fixture.task,),
        select=fixture.select,
        python_rules=fixture.rules,
        cuda_rules=fixture.rules,
        timeout_scale=config.timeout_scale * fixture.timeout_scale,
        # The grading works in a folder of its own, whose path every worker it starts carries on its command line:
        # a worker left behind is told from those of gradings running beside this one (another test process, say).
        work_root=root / "work",
    )
    fixture_config.work_root.mkdir(exist_ok=True)
    if fixture.expect.get("regrade_same"):  # seeds derived from the salt, as a course grades, not the runner's seed
        fixture_config = replace(fixture_config, seed=None, grading_id=REGRADE_IDS[0])
    out = root / "out"
    result = grade_submission(submission, out, fixture_config, log=lambda *a, **k: None, host=host)
    (ts,) = [t for t in result.tasks if t.task.id == fixture.task]
    problems = judge(fixture, result, out, fixture_config.work_root)
    if fixture.expect.get("regrade_same"):
        problems += _regrade_problems(fixture, result, fixture_config, root, host)
    return Verdict(fixture, problems, f"{ts.score:g}/{ts.max_score:g} {ts.status}", time.monotonic() - started)


def run_all(fixtures: list[Fixture], config: GradeConfig | None = None, log=print) -> list[Verdict]:
    config = config or replace(GradeConfig(), preflight=False, seed=20261122)
    host = check_host(config, load_registry())
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="kit-adversarial-") as tmp:
        for fixture in fixtures:
            verdict = run_fixture(fixture, config, Path(tmp), host)
            verdicts.append(verdict)
            mark = "caught" if verdict.caught else "GOT THROUGH"
            log(
                f"{mark:<12} {fixture.name:<28} {fixture.task} {verdict.score:<22} {verdict.seconds:5.1f} s  "
                f"[{fixture.cls}] {fixture.defence}" + ("" if verdict.caught else f"\n    {verdict.problems}")
            )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--cpu", action="store_true", help="only the fixtures that need no GPU")
    which.add_argument("--gpu", action="store_true", help="only the fixtures that need a GPU")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    fixtures = load_fixtures()
    if args.cpu or args.gpu:
        fixtures = [f for f in fixtures if f.gpu == args.gpu]
    if args.only:
        fixtures = [f for f in fixtures if f.name in args.only]
    if args.list:
        for f in fixtures:
            print(f"{f.name:<28} {f.task} {'gpu' if f.gpu else 'cpu'} [{f.cls}] {f.defence}")
        return 0
    verdicts = run_all(fixtures)
    missed = [v for v in verdicts if not v.caught]
    print(f"\n{len(verdicts) - len(missed)}/{len(verdicts)} fixtures caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
