"""Gradescope's autograder for the kit: ``make gradescope`` builds ``build/gradescope/autograder.zip``.

Gradescope's containers have no GPU. The zip grades what needs none (the registry's ``device = "any"``
tasks, t1 and t7, and the theory answers where the course has them) with the kit's own grader, and lists
every GPU task as "graded on the course's GPU machines": an entry with its points as the maximum and 0 as
the score until the instructor uploads the GPU scores that ``make grade-all`` computes (its class outputs'
Gradescope CSV). So a student sees the whole assignment's points from the first submission, and which of
their files arrived; Gradescope's total is the registry's.

Why entries with a maximum rather than output-only ones: Gradescope adds the tests' maxima into the
autograder's total, so entries with their points keep that total equal to the registry's (and to the
assignment's points on Gradescope); output-only entries would show 40 of 40 to a student who has 40 of 120.
The pending entries carry grader/grade/report.py's ``PENDING_STATUS`` (Gradescope knows passed and failed, and
would call an entry below its maximum with no status failed: one nobody has graded yet has not failed),
the tags ``pending`` and ``gpu``, and their name and output say they are pending and where they are graded.

The hidden seeds (grader/grade/seeds.py) are drawn for the submitter's SID, else their email, from Gradescope's
``submission_metadata.json``, so a resubmission of the same files, or a regrade, draws the same inputs. The
salt is the registry's, which the zip carries with the hidden suites; a course that keeps it in
``KIT_GRADING_SALT`` instead has it written into the zip's gradescope.json by ``make gradescope`` (Gradescope
passes no environment), where the autograder takes it from.

The zip (Gradescope unpacks it into ``/autograder/source``):

    setup.sh            run once when Gradescope builds the image (Ubuntu, root): Python >= 3.11 with venv,
                        bubblewrap, a CPU build of torch pinned as assignment/bootstrap.sh pins it, and the
                        kit's dependencies from pyproject.toml (requirements.txt, written at build time).
                        KIT_SETUP_DRY_RUN=1 prints what it would run.
    run_autograder      run per submission: grades /autograder/submission, writes
                        /autograder/results/results.json. AUTOGRADER_ROOT stands in for /autograder,
                        KIT_PYTHON for the Python setup.sh installs.
    gradescope.json     how this zip was built (visibility, isolation, the torch pin, the grader version).
    assignment/ grader/ pyproject.toml    the kit the grader needs: the registry, the model and its shipped
                        checkpoint (t7), the hidden suites. Not the handout texts, the reference solutions
                        (no CPU task needs them), the kit's own tests, records, device scripts or notes.

Student code runs in bubblewrap where the container allows it, else in the process fallback (Gradescope's
containers usually forbid new namespaces); which one ran is in the instructor's stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
import traceback
import zipfile
from dataclasses import replace
from pathlib import Path

from assignment.atomic import write_atomic
from assignment.registry import Registry, Task, load_registry
from grader.classroom import ledger
from grader.grade import seeds
from grader.grade.config import ISOLATION_CHOICES, REPO_ROOT, GradeConfig
from grader.grade.grade import PreflightError, grade_submission
from grader.grade.report import PENDING_STATUS, PENDING_TAG, gradescope_results, summary_lines

DEFAULT_OUT = REPO_ROOT / "build" / "gradescope"
VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
BUILD_INFO = "gradescope.json"
SALT_KEY = "hidden_seed_salt"  # in BUILD_INFO, only when the salt comes from the environment
# What the zip carries: these roots, less the excluded prefixes and any cache or hidden file.
KIT_ROOTS = ("assignment", "grader", "pyproject.toml")
EXCLUDED = (
    "assignment/text/",
    "grader/records/",
    "grader/scripts/",
    "grader/notes/",
    "grader/fixtures/",
    "grader/release/templates/",
)
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root on its Ubuntu image, when it builds the autograder: Python (3.11 or
# newer: the kit's TOML readers need it), bubblewrap (the grader's sandbox, where the container allows it),
# a CPU build of torch (the pin of assignment/bootstrap.sh), the kit's dependencies (requirements.txt, from
# pyproject.toml). KIT_SETUP_DRY_RUN=1 prints the commands instead of running them.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
VENV="${KIT_VENV:-$ROOT/kit-venv}"
TORCH="$(cat "$SOURCE/requirements-torch.txt")"
run() { if [ "${KIT_SETUP_DRY_RUN:-0}" = 1 ]; then echo "would run: $*"; else "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive
run apt-get update -qq
run apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip bubblewrap ca-certificates
PYTHON=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  # Ubuntu 22.04's python3 is 3.10; its python3.11 comes from the same archive.
  run apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv
  PYTHON=python3.11
fi
run "$PYTHON" -m venv "$VENV"
# The CPU wheel (about 200 MB) from PyTorch's own index; PyPI's Linux wheel would pull the CUDA libraries.
run "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$TORCH" --index-url __CPU_TORCH_INDEX__ \
  || run "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$TORCH"
run "$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$SOURCE/requirements.txt"
run "$VENV/bin/python" -c "import torch, jinja2, pytest_jsonreport; print('setup: torch', torch.__version__)"
""".replace("__CPU_TORCH_INDEX__", CPU_TORCH_INDEX)

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this once per submission (copied to /autograder/run_autograder, run from /autograder): the
# kit's grader on /autograder/submission, results in /autograder/results/results.json. AUTOGRADER_ROOT stands
# in for /autograder (tests, a dry run on a laptop), KIT_PYTHON for the Python setup.sh installed.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
PYTHON="${KIT_PYTHON:-$ROOT/kit-venv/bin/python}"
mkdir -p "$ROOT/results"
cd "$SOURCE" || exit 1
PYTHONPATH="$SOURCE" "$PYTHON" -m grader.classroom.gradescope run --root "$ROOT"
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
  # The grader could not start at all (no Python at $PYTHON?): Gradescope still gets results, and the
  # instructor's stdout above says why.
  MESSAGE="The autograder could not run on this submission (exit $status); this is not a verdict on your code:"
  cat > "$ROOT/results/results.json" <<EOF
{"score": 0, "output": "$MESSAGE the course staff will rerun it.", "stdout_visibility": "hidden", "tests": []}
EOF
fi
exit 0
"""


# --------------------------------------------------------------------------- building the zip


def torch_pin(bootstrap: Path = REPO_ROOT / "assignment" / "bootstrap.sh") -> str:
    """The torch version the kit's bootstrap installs (one pin for the kit and for Gradescope)."""
    match = re.search(r'"torch==([0-9][^"\s]*)"', bootstrap.read_text(encoding="utf-8"))
    if not match:
        raise RuntimeError(f"{bootstrap}: no torch==<version> pin found")
    return match.group(1)


def requirements(pyproject: Path = REPO_ROOT / "pyproject.toml") -> list[str]:
    """pyproject's dependencies, torch left out (setup.sh installs the pinned CPU build first)."""
    import tomllib

    deps = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]
    return [dep for dep in deps if re.split(r"[<>=!~;\s\[]", dep, maxsplit=1)[0].lower() != "torch"]


def kit_files(repo: Path = REPO_ROOT) -> list[str]:
    """The kit's files the zip carries, as paths relative to the repository."""
    names = []
    for root in KIT_ROOTS:
        base = repo / root
        if base.is_file():
            names.append(root)
            continue
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                rel = Path(directory, name).relative_to(repo).as_posix()
                if name.startswith(".") or name.endswith((".pyc", ".pyo")):
                    continue
                if any(rel.startswith(prefix) for prefix in EXCLUDED):
                    continue
                names.append(rel)
    return names


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # a fixed time: the same kit, the same zip
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    archive.writestr(info, data)


def build(
    out: Path = DEFAULT_OUT,
    *,
    visibility: str = "visible",
    isolation: str = "auto",
    allow_weak_isolation: bool = True,
    repo: Path = REPO_ROOT,
) -> Path:
    """Write ``out/autograder.zip``; returns its path."""
    if visibility not in VISIBILITIES:
        raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}, got {visibility!r}")
    if isolation not in ISOLATION_CHOICES:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_CHOICES)}, got {isolation!r}")
    registry = load_registry()
    salt = seeds.resolve_salt(registry)  # an autograder that could not derive its seeds would fail every submission
    info = {
        "visibility": visibility,
        "isolation": isolation,
        "allow_weak_isolation": allow_weak_isolation,
        "torch": torch_pin(repo / "assignment" / "bootstrap.sh"),
        "grader_version": ledger.grader_version(),
        "graded_here": [t.id for t in cpu_tasks(registry)],
        "pending": [t.id for t in gpu_tasks(registry)],
        "theory": registry.theory is not None,
        "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "salt_fingerprint": salt.fingerprint,
    }
    if salt.source == seeds.SALT_ENV:  # the registry in the zip does not hold it
        info[SALT_KEY] = salt.value
    out.mkdir(parents=True, exist_ok=True)
    target = out / "autograder.zip"
    with tempfile.NamedTemporaryFile(dir=out, prefix=".autograder.", suffix=".zip", delete=False) as handle:
        tmp = Path(handle.name)
    try:
        with zipfile.ZipFile(tmp, "w") as archive:
            _add(archive, "setup.sh", SETUP_SH.encode(), executable=True)
            _add(archive, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
            _add(archive, "requirements-torch.txt", f"torch=={info['torch']}\n".encode())
            _add(
                archive,
                "requirements.txt",
                "".join(f"{dep}\n" for dep in requirements(repo / "pyproject.toml")).encode(),
            )
            _add(archive, BUILD_INFO, json.dumps(info, indent=2).encode())
            for name in kit_files(repo):
                _add(archive, name, (repo / name).read_bytes())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


# --------------------------------------------------------------------------- grading one submission


def cpu_tasks(registry: Registry) -> list[Task]:
    return [t for t in registry.available if not t.needs_gpu]


def gpu_tasks(registry: Registry) -> list[Task]:
    return [t for t in registry.available if t.needs_gpu]


def build_info() -> dict:
    try:
        return json.loads((REPO_ROOT / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return {}  # the repository itself (not an unpacked zip): the defaults


def _users(root: Path) -> list[dict]:
    try:
        users = json.loads((root / "submission_metadata.json").read_text()).get("users") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [user for user in users if isinstance(user, dict)] if isinstance(users, list) else []


def student_id(root: Path) -> str | None:
    """The submitter's student id from Gradescope's submission_metadata.json (it picks the theory questions)."""
    return next((str(u["sid"]).strip() for u in _users(root) if str(u.get("sid") or "").strip()), None)


def grading_id(root: Path) -> str | None:
    """Who the hidden seeds are drawn for: the submitter's SID, else their email (as the class roster does)."""
    return student_id(root) or next(
        (str(u["email"]).strip() for u in _users(root) if str(u.get("email") or "").strip()), None
    )


def submission_source(submission: Path, registry: Registry) -> Path:
    """The folder Gradescope filled, or the one .zip in it when none of the student files is there loose
    (a student who uploaded `make submit`'s submission.zip, kept whole)."""
    wanted = set(registry.student_files)
    if any(p.name in wanted for p in submission.rglob("*") if p.is_file()):
        return submission
    zips = sorted(p for p in submission.glob("*.zip") if p.is_file())
    return zips[0] if len(zips) == 1 else submission


def pending_entry(task: Task, found: dict[str, str], visibility: str) -> dict:
    files = []
    for name in task.files:
        where = found.get(name)
        files.append(
            f"{name}: received" + (f" (as {where})" if where and where != name else "")
            if where
            else f"{name}: NOT in this submission; without it this task scores 0 on the GPU machines too"
        )
    return {
        "name": f"{task.id} {task.title}: {PENDING_TAG}, graded on the course's GPU machines",
        "number": f"{task.number}",
        "score": 0.0,
        "max_score": task.points.total,
        "status": PENDING_STATUS,
        "visibility": visibility,
        "output": (
            f"Pending: {task.title} needs a CUDA GPU, which Gradescope's machines do not have: the course staff "
            f"grades it on the course's GPU machines after the deadline and uploads its {task.points.total:g} "
            "points here; until then it shows 0 (pending, not failed). Run its public tests and `make bench "
            f"T={task.id}` yourself on a GPU.\n" + "\n".join(files)
        ),
        "tags": [task.id, "gpu", PENDING_TAG],
    }


def results_for(result, registry: Registry, visibility: str) -> dict:
    """Gradescope's results.json: the grader's own entries (grader/grade/report.py), the GPU tasks pending, the
    visibility chosen at build time."""
    results = gradescope_results(result)
    for test in results["tests"]:
        test["visibility"] = visibility
    found = result.grading.get("submission_files", {}) or {}
    pending = gpu_tasks(registry)
    results["tests"] += [pending_entry(task, found, visibility) for task in pending]
    results["tests"].sort(key=lambda t: [int(part) for part in str(t.get("number", "0")).split(".") if part.isdigit()])
    results["visibility"] = visibility
    here = ", ".join(t.id for t in cpu_tasks(registry)) + (" and the theory answers" if result.theory else "")
    waiting = sum(t.points.total for t in pending)
    if pending:
        results["output"] = (
            f"Graded here (Gradescope, no GPU): {here}. {', '.join(t.id for t in pending)} need a "
            "GPU: they are graded on the course's GPU machines after the deadline, and their "
            f"{waiting:g} points show as 0 until the staff uploads them.\n\n" + results["output"]
        )
    return results


def failure_results(why: str, registry: Registry | None, visibility: str) -> dict:
    """Results when the grader itself failed: no verdict on the student's code, the staff reruns it."""
    tests = []
    if registry is not None:
        tests = [pending_entry(task, {}, visibility) for task in gpu_tasks(registry)]
    return {
        "score": 0.0,
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "tests": tests,
        "output": f"The autograder failed on this submission ({why}); this is not a verdict on your code: the "
        "course staff will rerun it.",
    }


def run(root: Path, log=print) -> int:
    """Grade ``root/submission`` into ``root/results/results.json`` (Gradescope's layout)."""
    results_path = root / "results" / "results.json"
    info = build_info()
    visibility = info.get("visibility", "visible")
    registry = None
    try:
        registry = load_registry()
        if info.get(SALT_KEY) and seeds.SALT_ENV not in os.environ:
            os.environ[seeds.SALT_ENV] = info[SALT_KEY]  # the checker's and the worker's environments drop it
        sid = student_id(root)
        config = replace(
            GradeConfig(),
            tasks=tuple(t.id for t in cpu_tasks(registry)),
            theory=True,
            student_id=sid,
            grading_id=grading_id(root),
            isolation=info.get("isolation", "auto"),
            allow_weak_isolation=info.get("allow_weak_isolation", True),
        )
        source = submission_source(root / "submission", registry)
        log(
            f"gradescope: grading {source} ({', '.join(config.tasks)}{', theory' if registry.theory else ''}; "
            f"student id {sid or 'not in the metadata'}); pending on the GPU machines: "
            f"{', '.join(t.id for t in gpu_tasks(registry))}"
        )
        with tempfile.TemporaryDirectory(prefix="kit-gradescope-") as tmp:
            result = grade_submission(source, Path(tmp) / "grade", config, registry)
        results = results_for(result, registry, visibility)
        log("\n".join(summary_lines(result)))
        log(
            f"gradescope: isolation {result.grading.get('isolation')}, {result.duration_s:.1f} s, score "
            f"{results['score']:g} of {sum(t['max_score'] for t in results['tests']):g}"
        )
        for line in result.review:
            log(f"REVIEW {line}")
        status = 0
    except PreflightError as exc:
        log(f"gradescope: this image cannot grade: {exc}")
        results, status = failure_results("the grading machine failed its checks", registry, visibility), 1
    except Exception:  # the grader's own failure: Gradescope must still get results
        log("gradescope: the grader failed:\n" + traceback.format_exc())
        results, status = failure_results("an internal error", registry, visibility), 1
    write_atomic(results_path, json.dumps(results, indent=2))
    log(f"gradescope: wrote {results_path}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Gradescope's autograder for the kit (no GPU: t1, t7, the theory).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="write build/gradescope/autograder.zip")
    p_build.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p_build.add_argument(
        "--visibility",
        choices=VISIBILITIES,
        default="visible",
        help="when students see the tests' results (Gradescope's setting; default visible)",
    )
    p_build.add_argument(
        "--isolation",
        choices=ISOLATION_CHOICES,
        default="auto",
        help="bwrap: refuse to grade where bubblewrap cannot run (default auto: it, else the process fallback)",
    )
    p_run = sub.add_parser("run", help="grade ROOT/submission into ROOT/results/results.json (run_autograder)")
    p_run.add_argument("--root", type=Path, default=Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            target = build(
                args.out,
                visibility=args.visibility,
                isolation=args.isolation,
                allow_weak_isolation=args.isolation != "bwrap",
            )
        except seeds.SaltError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        with zipfile.ZipFile(target) as archive:
            count = len(archive.namelist())
        print(
            f"wrote {target} ({target.stat().st_size / 2**20:.1f} MiB, {count} files): upload it on Gradescope's "
            "Configure Autograder page (a Python base image, Ubuntu 22.04 or newer)"
        )
        return 0
    return run(args.root)


if __name__ == "__main__":
    sys.exit(main())
