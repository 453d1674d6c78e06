"""Class grading (grader/classroom/batch.py, roster.py, ledger.py, class_outputs.py with class_records.py and
class_tables.py), on the CPU: real gradings of t7 (the hidden suite cut to one check with --select, so that a grading
costs seconds, not a minute), a folder class and a
Gradescope export read, the gradebook and the upload CSV; a batch killed with SIGKILL in the middle and rerun
grades every submission exactly once; a changed submission, --only and a changed grader are regraded, a failed
grading is recorded and retried; the class outputs (leaderboard, timing plots, escaping) from recorded gradings."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.classroom import batch, class_records, ledger, roster
from grader.grade.config import REPO_ROOT

pytestmark = [pytest.mark.kit, pytest.mark.slow]  # end to end: make test-slow
SOLUTION = (REPO_ROOT / "solutions" / "t7_generate.py").read_text()
STARTER = (REPO_ROOT / "starter" / "t7_generate.py").read_text()
BROKEN = "def sample(:\n"  # a syntax error: the grader rejects the file before running anything
GRADING = ["--task", "t7", "--select", "greedy_first", "--allow-weak-isolation"]
# The grader's version, pinned: a colleague editing the grader while these tests run must not look like a new
# grader (test_grader_version_hashes_what_grades checks the real hash; the last regrade test changes the pin).
VERSION = "kit-test-v1"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _pinned_version(monkeypatch):
    monkeypatch.setenv("KIT_GRADER_VERSION", VERSION)


def student(root: Path, name: str, source: str, **extra: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "t7_generate.py").write_text(source)
    for filename, text in extra.items():
        (folder / filename).write_text(text)
    return folder


def zipped(root: Path, name: str, source: str) -> Path:
    path = root / f"{name}.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("t7_generate.py", source)
    return path


def run_batch(subs: Path, out: Path, *args: str, env: dict | None = None, timeout: float = 300):
    command = [sys.executable, "-m", "grader.classroom.batch", str(subs), "--out", str(out), *GRADING, *args]
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "KIT_GRADER_VERSION": VERSION, **(env or {})}
    return subprocess.run(
        command, cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=timeout, check=False
    )


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def graded_events(out: Path, sid: str) -> list[dict]:
    return [e for e in ledger.read_attempts(out, sid) if e.get("event") == "graded"]


def started(out: Path, sid: str) -> list[dict]:
    return [e for e in ledger.read_attempts(out, sid) if e.get("event") == "start"]


def leftovers(out: Path) -> list[Path]:
    """Temporary files of an atomic write, and lanes kept for a grading that never finished."""
    return [p for p in out.rglob("*") if p.name.endswith(".tmp") or ledger.PARTS in p.parts]


# --------------------------------------------------------------------------- a folder class


@pytest.fixture(scope="module")
def folder_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs, out = root / "submissions", root / "out"
    student(subs, "alice", SOLUTION, **{"leaderboard.txt": "Speedy <b>\n"})
    student(subs, "carol", BROKEN)
    zipped(subs, "dave", STARTER)  # the starter, handed in as a zip
    zipped(subs, "alice", STARTER)  # a second submission for alice: reported and ignored
    (subs / "eve.zip").write_text("not a zip archive")
    (subs / "notes.txt").write_text("not a submission")
    proc = run_batch(subs, out, "--jobs", "2")
    return subs, out, proc


def test_folder_class_gradebook_and_upload_csv(folder_class):
    subs, out, proc = folder_class
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "alice.zip: a second submission for alice" in proc.stderr
    assert "eve.zip: not a zip archive" in proc.stderr and "notes.txt: not a folder or a .zip; ignored" in proc.stderr
    assert "4 to grade" in proc.stdout and re.search(r"^graded 4 .*, failed 0,", proc.stdout, re.MULTILINE), proc.stdout
    book = {row["id"]: row for row in read_csv(out / "class" / "gradebook.csv")}
    assert set(book) == {"alice", "carol", "dave", "eve"}
    assert (book["alice"]["t7"], book["alice"]["total"], book["alice"]["status"]) == ("10.00", "10.00", "graded")
    assert (book["dave"]["total"], book["dave"]["status"], book["dave"]["task_status"]) == ("0.00", "graded", "")
    assert (book["carol"]["total"], book["carol"]["task_status"]) == ("0.00", "t7:rejected")
    assert book["eve"]["status"] == "unreadable" and "neither a folder nor a .zip" in book["eve"]["why"]
    assert all(float(row["wall_s"]) > 0 for row in book.values())
    # Only t7 was graded: an upload would set each student's total (or their GPU tasks' points) to a part of it,
    # so both upload files leave everyone out, and the summary says why.
    for name in ("gradescope_scores.csv", "gradescope_gpu_scores.csv"):
        assert (out / "class" / name).read_text().splitlines() == ["Name,SID,Email,Total Score"], name
    summary = json.loads((out / "class" / "summary.json").read_text())
    assert any(
        line.startswith("alice: t1 not graded, t2 not graded") and line.endswith("theory not graded")
        for line in summary["left_out_of_upload"]
    ), summary["left_out_of_upload"]
    gpu = [t.id for t in load_registry().available if t.needs_gpu]
    assert "eve: " + ", ".join(f"{t} not graded" for t in gpu) in summary["left_out_of_gpu_upload"]
    rates = {row["check"]: row for row in read_csv(out / "class" / "pass_rates.csv")}
    (rate,) = rates.values()  # the one selected check, over the two submissions whose t7 ran (alice, dave)
    assert (rate["passed"], rate["ran"]) == ("1", "2")
    for sid in book:  # make grade's files, the marker, exactly one grading, nothing left half-done
        folder = out / "students" / sid
        for name in ("results.json", "grading.json", "done.json"):
            json.loads((folder / name).read_text())
        assert (folder / "report.html").is_file() and (folder / "grades.csv").is_file()
        assert len(graded_events(out, sid)) == 1
    assert leftovers(out) == []
    assert (out / "class" / "figures" / "score_t7.png").read_bytes().startswith(PNG)
    html = (out / "class" / "summary.html").read_text()
    assert "data:image/png;base64," in html and "eve.zip: not a zip archive" in html
    assert batch.pending(subs, out) == []  # a rerun skips them all (the kill test's rerun shows it)


# --------------------------------------------------------------------------- a Gradescope export

METADATA = """\
submission_101:
  :submitters:
  - :name: Ada Lovelace
    :sid: '9001'
    :email: ada@example.edu
  - :name: =HYPERLINK("http://x")
    :sid: '9002'
    :email: grace@example.edu
  :created_at: 2026-03-01 10:00:00.000000000 -08:00
  :score: 0.0
submission_102:
  :submitters:
  - :name: Late Larry
    :sid: '9003'
    :email: larry@example.edu
  :created_at: 2026-03-03 09:00:00.000000000 -08:00
submission_103:
  :submitters:
  - :name: Missing Mo
    :sid: '9004'
    :email: mo@example.edu
  :created_at: 2026-03-01 09:00:00.000000000 -08:00
"""


def test_gradescope_export(tmp_path):
    export = tmp_path / "assignment_42_export"
    student(export, "submission_101", BROKEN)
    student(export, "submission_102", BROKEN)
    (export / "submission_metadata.yml").write_text(METADATA)
    out = tmp_path / "out"  # beside the export: the export is still found on the next run
    proc = run_batch(tmp_path, out, "--jobs", "2", "--due", "2026-03-02T00:00:00-08:00")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(gradescope)" in proc.stdout
    assert "submission_103 (Missing Mo): listed in submission_metadata.yml but not in the export" in proc.stderr
    book = read_csv(out / "class" / "gradebook.csv")
    rows = {row["sid"]: row for row in book}
    assert set(rows) == {"9001", "9002", "9003"}  # one row per member of a group
    assert rows["9001"]["id"] == rows["9002"]["id"] == "submission_101"
    assert (rows["9001"]["name"], rows["9001"]["email"], rows["9001"]["late"]) == (
        "Ada Lovelace",
        "ada@example.edu",
        "no",
    )
    assert rows["9002"]["name"].startswith("'=")  # a spreadsheet formula stays text
    assert rows["9003"]["late"] == "yes" and rows["9003"]["submitted_at"].startswith("2026-03-03T09:00:00")
    assert read_csv(out / "class" / "gradescope_scores.csv") == []  # t7 alone: no total to upload
    # --only takes a SID or an email as well as a submission id; the group is one grading.
    ids, unknown = batch._select_only(["9002", "larry@example.edu", "nobody"], roster.discover(tmp_path))
    assert (ids, unknown) == (["submission_101", "submission_102"], ["nobody"])


def test_roster_problems(tmp_path):
    export = tmp_path / "export"
    student(export, "submission_101", BROKEN)
    student(export, "submission_999", BROKEN)
    (export / "submission_metadata.yml").write_text(METADATA)
    found = roster.scan(export)
    assert [s.id for s in found.submissions] == ["submission_101", "submission_999"]
    assert found.submissions[0].late is None  # no --due, no :late: key
    assert "submission_999: not in submission_metadata.yml; graded without names" in found.problems
    shutil.rmtree(export)
    (tmp_path / "a").mkdir()
    (tmp_path / "a.zip").write_bytes(b"PK")
    (tmp_path / "link").symlink_to(tmp_path / "a")
    found = roster.scan(tmp_path)
    assert [s.id for s in found.submissions] == ["a"]
    assert any("a.zip: a second submission for a" in p for p in found.problems)
    assert any("link: a symbolic link" in p for p in found.problems)
    with pytest.raises(roster.RosterError, match="no such folder"):
        roster.scan(tmp_path / "nope")
    bad = tmp_path / "export"
    bad.mkdir()
    (bad / "submission_metadata.yml").write_text("[unclosed")
    with pytest.raises(roster.RosterError, match="not valid YAML"):
        roster.scan(bad)


# --------------------------------------------------------------------------- kill -9, resume, regrade


def _processes_tagged(tag: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.fixture(scope="module")
def killed_class(tmp_path_factory):
    """Two submissions graded one at a time; SIGKILL to the batch's whole process group once the first is graded
    and while the second runs; then the same command again."""
    root = tmp_path_factory.mktemp("killed")
    subs, out = root / "submissions", root / "out"
    for sid, source in (("s1", BROKEN), ("s2", STARTER)):
        student(subs, sid, source)
    tag = f"KIT_TEST_TAG_{uuid.uuid4().hex}"
    command = [sys.executable, "-m", "grader.classroom.batch", str(subs), "--out", str(out), *GRADING, "--jobs", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), BATCH_TEST_TAG=tag, KIT_GRADER_VERSION=VERSION)
    with open(root / "killed.log", "wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 240
        state = None
        while time.monotonic() < deadline and proc.poll() is None:
            done = [s for s in ("s1", "s2") if graded_events(out, s)]
            busy = [s for s in ("s1", "s2") if started(out, s) and not graded_events(out, s)]
            if done and busy:
                time.sleep(1.0)  # into the second grading (its checker starts after about 2 s)
                state = {"done": done, "busy": busy}
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.1)
        proc.wait()
    assert state, "the batch never had one submission graded while another ran: " + (root / "killed.log").read_text()
    for _ in range(100):  # the lane's checker dies with it (PR_SET_PDEATHSIG), the sandbox with the checker
        orphans = _processes_tagged(tag)
        if not orphans:
            break
        time.sleep(0.1)
    after_kill = {"orphans": orphans, "markers": {s: ledger.read_marker(out, s) for s in ("s1", "s2")}}
    rerun = run_batch(subs, out, "--jobs", "1", "--no-collect")
    return subs, out, state, after_kill, rerun


def test_kill_and_resume_grades_each_submission_once(killed_class):
    subs, out, state, after_kill, rerun = killed_class
    assert after_kill["orphans"] == [], "processes of the killed batch still run"
    for sid in state["done"]:  # kept: its marker survived the kill and the rerun did not touch it
        assert after_kill["markers"][sid] is not None
        assert ledger.read_marker(out, sid)["run"] == after_kill["markers"][sid]["run"]
        assert len(started(out, sid)) == 1
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "1 to grade, 1 already graded" in rerun.stdout
    for sid in ("s1", "s2"):
        assert len(graded_events(out, sid)) == 1, ledger.read_attempts(out, sid)
        for name in ("results.json", "grading.json", "done.json"):
            json.loads((out / "students" / sid / name).read_text())
    for sid in state["busy"]:  # started twice (the killed lane, then the rerun's), graded once
        assert len(started(out, sid)) == 2
    assert leftovers(out) == []
    assert batch.pending(subs, out) == []


def test_changed_submission_failure_only_and_grader_version(killed_class, monkeypatch):
    subs, out, _, _, _ = killed_class
    # A changed submission is graded again, the other not; a grading that fails (here the grader cannot make its
    # folder) is recorded with its reason, and retried by the next run.
    (subs / "s1" / "t7_generate.py").write_text(BROKEN + "# changed\n")
    assert batch.pending(subs, out) == ["s1"]
    (out / "students" / "s1" / ledger.PARTS).write_text("a file where the lanes' folder goes")
    proc = run_batch(subs, out, "--jobs", "1", "--no-collect")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert (
        "1 to grade, 1 already graded" in proc.stdout and "s1: FAILED: the grader failed on the cpu lane" in proc.stdout
    ), proc.stdout
    failure = ledger.read_failure(out, "s1")
    assert failure["attempts"] == 1 and "exit code 1" in failure["reason"] and failure["lanes"][0]["log_tail"]
    assert batch.pending(subs, out) == ["s1"]
    (out / "students" / "s1" / ledger.PARTS).unlink()
    # The retry, and --only regrading a student who is done (named by id; a SID or an email would do).
    proc = run_batch(subs, out, "--jobs", "2", "--only", "s1", "s2", "--no-collect")
    assert proc.returncode == 0 and "2 to grade, 0 already graded" in proc.stdout, proc.stdout + proc.stderr
    assert [len(graded_events(out, s)) for s in ("s1", "s2")] == [2, 2]
    assert ledger.read_failure(out, "s1") is None

    # A new grader version (a changed hidden suite, registry or reference solution): every grade is stale, pending,
    # and graded again.
    monkeypatch.setenv("KIT_GRADER_VERSION", "kit-test-v2")
    assert batch.pending(subs, out) == ["s1", "s2"]
    summary = batch.collect(subs, out)
    assert summary["counts"]["stale"] == 2
    assert read_csv(out / "class" / "gradescope_scores.csv") == []  # stale grades are not uploaded
    proc = run_batch(subs, out, "--jobs", "2", "--no-collect", env={"KIT_GRADER_VERSION": "kit-test-v2"})
    assert proc.returncode == 0 and "2 to grade, 0 already graded" in proc.stdout, proc.stdout + proc.stderr
    assert [len(graded_events(out, s)) for s in ("s1", "s2")] == [3, 3]
    assert batch.pending(subs, out) == []


def test_grader_version_hashes_what_grades(tmp_path):
    for rel in (
        "grader/hidden/test_t7_hidden.py",
        "grader/classroom/batch.py",
        "assignment/tasks.toml",
        "assignment/text/t7.md",
        "solutions/t7_generate.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / rel, tmp_path / rel)
    before = ledger.tree_hash(tmp_path)
    for rel, changes in (
        ("grader/classroom/batch.py", False),
        ("assignment/text/t7.md", False),
        ("grader/hidden/test_t7_hidden.py", True),
        ("assignment/tasks.toml", True),
        ("solutions/t7_generate.py", True),
    ):
        with open(tmp_path / rel, "a") as handle:
            handle.write("\n# edited\n")
        after = ledger.tree_hash(tmp_path)
        assert (after != before) == changes, rel
        before = after


# --------------------------------------------------------------------------- class outputs from recorded gradings


def _record_grading(out: Path, sub: Path, sid: str, tflops: float | None, correct: bool, ms: float) -> None:
    """A grading of t4 and t6 as the batch leaves it (marker, results.json, grading.json), without running one."""
    registry = load_registry()
    t4, t6 = registry.task("t4"), registry.task("t6")
    folder = out / "students" / sid
    folder.mkdir(parents=True)
    settings = {"tasks": ["t4", "t6"]}
    content = ledger.submission_hash(sub)
    version = ledger.grader_version()
    tests = [
        {
            "name": "t4 values",
            "score": 1,
            "max_score": 1,
            "status": "passed" if correct else "failed",
            "tags": ["t4", "correctness"],
        },
        {"name": "t6 values", "score": 1, "max_score": 1, "status": "passed", "tags": ["t6", "correctness"]},
    ]
    timing4 = {"rule": t4.timing[1].name, "metric": "time_vs_reference", "value": 1.1, "student_ms": 14.0}
    if tflops is not None:
        timing4["student_tflops"] = tflops
    timing6 = {"rule": t6.timing[1].name, "metric": "speedup_vs_naive", "value": 12.0, "student_ms": ms}
    grading = {
        "tasks": {
            "t4": {"status": "ran", "score": 20.0, "timing": [timing4]},
            "t6": {"status": "ran", "score": 15.0, "timing": [timing6]},
        },
        "review": [],
    }
    (folder / "results.json").write_text(json.dumps({"score": 35.0, "tests": tests}))
    (folder / "grading.json").write_text(json.dumps(grading))
    (folder / "done.json").write_text(
        json.dumps(
            {
                "key": ledger.grading_key(content, version, settings),
                "submission_hash": content,
                "grader_version": version,
                "settings": settings,
                "status": "graded",
                "max_score": 45,
                "graded_at": "2026-03-04T10:00:00",
                "wall_s": 90,
            }
        )
    )


def test_class_outputs_leaderboard_and_timing(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "out"
    alias = "<script>alert(1)</script>"
    rows = {
        "fast": (40.5, True, 2.4, alias),
        "slow": (20.0, True, 3.0, "Slowpoke"),
        "wrong": (50.0, False, 2.0, "Cheat"),
        "shy": (45.0, True, 2.1, None),
    }
    for sid, (tflops, correct, ms, name) in rows.items():
        extra = {} if name is None else {"leaderboard.txt": name + "\n"}
        folder = student(subs, sid, SOLUTION, **extra)
        _record_grading(out, folder, sid, tflops, correct, ms)
    student(subs, "late", STARTER)  # never graded
    summary = batch.collect(subs, out)
    assert summary["counts"] == {"graded": 4, "unreadable": 0, "stale": 0, "failed": 0, "pending": 1}
    board = read_csv(out / "class" / "leaderboard.csv")
    # Opted in only (not "shy"); the t4 value of an incorrect t4 is not shown; ranked by t4 TFLOP/s.
    assert [(r["rank"], r["name"]) for r in board] == [("1", alias), ("2", "Slowpoke"), ("3", "Cheat")]
    t4_column = next(k for k in board[0] if k.startswith("t4"))
    assert [r[t4_column] for r in board] == ["40.5", "20", ""]
    html = (out / "class" / "summary.html").read_text()
    assert alias not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    for rule in (1,):
        assert (out / "class" / "figures" / f"timing_t4_rule{rule}.png").read_bytes().startswith(PNG)
    t4_timing = next(r for r in summary["timing"] if r["task"] == "t4" and r["index"] == 1)
    assert t4_timing["n"] == 4 and t4_timing["median"] == pytest.approx(1.1)
    assert read_csv(out / "class" / "gradescope_gpu_scores.csv") == []  # t2, t3 and t5 not graded: nothing to upload
    assert batch.pending(subs, out) == ["late"]
    assert class_records.read_opt_in(subs / "shy") is None
    (subs / "shy" / "leaderboard.txt").write_text("no\n")
    assert class_records.read_opt_in(subs / "shy") is None
    (subs / "shy" / "leaderboard.txt").write_text("\n\n")
    assert class_records.read_opt_in(subs / "shy") == "anonymous"
    assert batch.pending(subs, out) == ["late", "shy"]  # a changed submission, even by its opt-in file


def _record(out: Path, sub: Path, sid: str, tasks: dict[str, dict], theory: float | None = 10.0) -> None:
    """A recorded grading (marker, results.json, grading.json) holding ``tasks``' records and the theory's score."""
    folder = out / "students" / sid
    folder.mkdir(parents=True)
    content, version, settings = ledger.submission_hash(sub), ledger.grader_version(), {"tasks": sorted(tasks)}
    grading = {"tasks": tasks, "review": []}
    if theory is not None:
        grading["theory"] = {"score": theory, "max_score": 20.0}
    score = sum(t["score"] for t in tasks.values()) + (theory or 0.0)
    (folder / "results.json").write_text(json.dumps({"score": score, "tests": []}))
    (folder / "grading.json").write_text(json.dumps(grading))
    (folder / "done.json").write_text(
        json.dumps(
            {
                "key": ledger.grading_key(content, version, settings),
                "submission_hash": content,
                "grader_version": version,
                "settings": settings,
                "status": "graded",
                "max_score": 120,
                "graded_at": "2026-03-04T10:00:00",
                "wall_s": 90,
            }
        )
    )


def test_what_did_not_run_is_never_a_zero_in_the_class_files(tmp_path):
    registry = load_registry()
    subs, out = tmp_path / "subs", tmp_path / "out"

    def ran(task, score, not_run=0.0):
        return {
            "status": "ran",
            "score": score,
            "max_score": registry.task(task).points.total,
            "not_run_points": not_run,
        }

    complete = {t.id: ran(t.id, 5.0) for t in registry.available}
    gpu = [t.id for t in registry.available if t.needs_gpu]
    cpu_host = {
        **complete,
        **{
            t: {
                "status": "not_run",
                "score": 0.0,
                "max_score": registry.task(t).points.total,
                "reason": "this grading host has no CUDA GPU",
            }
            for t in ("t2", "t3", "t4", "t5")
        },
        "t6": ran("t6", 0.86, not_run=11.14),
    }
    for sid, tasks in (
        ("whole", complete),
        ("cpu_host", cpu_host),
        ("gpu_only", {t: complete[t] for t in gpu}),
    ):
        _record(out, student(subs, sid, SOLUTION), sid, tasks)
    summary = batch.collect(subs, out)
    upload = {row["SID"]: row["Total Score"] for row in read_csv(out / "class" / "gradescope_scores.csv")}
    gpu_upload = {row["SID"]: row["Total Score"] for row in read_csv(out / "class" / "gradescope_gpu_scores.csv")}
    assert upload == {"whole": f"{5.0 * len(registry.available) + 10:.2f}"}
    five_each = f"{5.0 * len(gpu):.2f}"  # the GPU tasks at 5 points each
    assert gpu_upload == {"whole": five_each, "gpu_only": five_each}
    assert "cpu_host: t2 not run, t3 not run, t4 not run, t5 not run, t6 not run" in summary["left_out_of_gpu_upload"]
    assert any(line.startswith("gpu_only: t1 not graded") for line in summary["left_out_of_upload"])
    book = {row["id"]: row for row in read_csv(out / "class" / "gradebook.csv")}
    assert (book["cpu_host"]["t2"], book["cpu_host"]["t6"], book["cpu_host"]["t1"]) == (
        "not run",
        "0.86 (11.14 not run)",
        "5.00",
    )
    assert "t2:not_run" in book["cpu_host"]["task_status"] and "t6:partly not run" in book["cpu_host"]["task_status"]
    assert book["gpu_only"]["t1"] == "" and book["whole"]["task_status"] == ""
    t2 = next(row for row in summary["tasks"] if row["task"] == "t2")
    assert t2["graded"] == 2 and t2["statuses"] == {"ran": 2, "not_run": 1}  # the not-run t2 is no 0 of the histogram


def test_the_theory_answers_alone_are_gradable(tmp_path):
    from grader.grade.theory import reference_answers

    registry = load_registry()
    subs, out = tmp_path / "subs", tmp_path / "out"
    student(subs, "s7654321", SOLUTION, **{registry.theory.answers_file: reference_answers("s7654321", registry)})
    command = [
        sys.executable,
        "-m",
        "grader.classroom.batch",
        str(subs),
        "--out",
        str(out),
        "--task",
        "theory",
        "--jobs",
        "1",
        "--allow-weak-isolation",
    ]
    proc = subprocess.run(
        command,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "KIT_GRADER_VERSION": VERSION},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = read_csv(out / "class" / "gradebook.csv")
    numeric = registry.theory.points - registry.theory.proof_points
    assert row["theory"] == f"{numeric:.2f}" and all(row[t.id] == "" for t in registry.tasks)
    grading = json.loads((out / "students" / "s7654321" / "grading.json").read_text())
    assert grading["tasks"] == {} and grading["theory"]["student_id"] == "s7654321"
