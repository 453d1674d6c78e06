"""``make release``: the student bundle, ``dist/student/`` and ``dist/student.zip``, checked before it is written.

    python -m grader.release.release [--out dist] [--no-pdf]
    python -m grader.release.release --check dist/student     # the manifest check alone, on a built bundle

The bundle is what a student runs and nothing else. What ships is decided by the layout: three folders are
copied as they are (``FOLDERS``), and the rest is written from templates and the registry:

    starter/          the student files (generated from solutions/, TODO regions), copied
    assignment/       the package the tests and the student's code run on, copied: it holds nothing of the
                      instructor's (the starter generator and the model's training tools live in grader/authoring/),
                      less the handout's sources (assignment/text/, rendered into handout.html) and the registry,
                      whose student edition is written in its place (no hidden shapes, no rubric reasoning, no
                      proof rubric); plus assignment/cuda/kit/, the kit's copy of each CUDA file (the starter as
                      shipped). assignment/theory/ draws the theory questions (their key is grader/grade/theory.py's)
    tests/            the public tests, copied (not tests/kit/)
    handout.html/.pdf the handout for students (the rubric as students can measure it)
    README.md         for the student: two commands to set up, then the loop
    Makefile          the student's targets (assignment/student.mk) and `make test`
    pyproject.toml    the packages the bootstrap installs
    MANIFEST.json     every file with its size and SHA-256

Files come from what git tracks (a clean clone's view), so nothing lying around in the instructor's tree leaks.
The manifest check is the safety net behind the layout: it refuses a bundle with anything outside that layout, a
solution region's code, a hidden shape, a line of the rubric's reasoning, a pointer into the grader, a starter that
differs from the repository's, or the salt of the hidden tests' seeds (grader/grade/seeds.py: the registry's
``[hidden_seed]`` table, or ``KIT_GRADING_SALT`` when it is set while the bundle is built) anywhere in it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from datetime import datetime, UTC
from pathlib import Path

import jinja2

from assignment.atomic import replacing
from assignment.registry import Registry, RegistryError, load_registry
from grader.release.student_edition import hidden_table_texts, student_edition
from grader.authoring.starter import check_starter, solution_lines
from grader.grade.seeds import SALT_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = Path(__file__).resolve().parent / "templates"
# The folders copied into the bundle as they are, each less the paths it names, and the files copied beside them.
FOLDERS = {"starter": (), "assignment": ("assignment/text/", "assignment/tasks.toml"), "tests": ("tests/kit/",)}
FILES = ("pyproject.toml",)
# What the manifest check allows, independently of what the build copies.
TOP_LEVEL = {
    "starter",
    "assignment",
    "tests",
    "README.md",
    "Makefile",
    "pyproject.toml",
    "handout.html",
    "handout.pdf",
    ".gitignore",
    "MANIFEST.json",
}
FORBIDDEN_PREFIXES = ("solutions/", "grader/", "tests/kit/", "assignment/text/", "scratch/", "build/")
# Paths into the instructor's tree: a student has none of them.
FORBIDDEN_STRINGS = ("grader/hidden", "grader/notes", "grader/records", "grader/scripts", "grader/fixtures")
# Paths to the reference a student does not have, in what a student reads (the kit's code may name solutions/ as
# the instructor's default implementation).
READ_BY_STUDENTS = {"handout.html", "README.md", "assignment/tasks.toml"}
# The kit's own modules that define the solution-marker syntax (they parse it; they hold no solution).
MARKER_SYNTAX_FILES = {"assignment/markers.py", "assignment/cuda/regions.py"}
# A solution line this short (`return out;`) is too common to prove a leak.
MIN_LEAK_CHARS = 30
BUNDLE_GITIGNORE = ".venv/\nbuild/\n.kit_cache/\n__pycache__/\n.pytest_cache/\nsubmission.zip\n"


class ReleaseError(RuntimeError):
    """The bundle cannot be built, or it fails the manifest check (the message lists every problem)."""


# --------------------------------------------------------------------------- what goes in


def tracked_files(repo: Path) -> list[str]:
    """The repository's files as a clean clone has them (git's view; a plain walk without git)."""
    if (repo / ".git").exists() and shutil.which("git"):
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
        names = [n for n in out.decode().split("\0") if n]
        return sorted(n for n in names if (repo / n).is_file())
    skipped = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".kit_cache", "scratch"}
    found = []
    for path in repo.rglob("*"):
        rel = path.relative_to(repo)
        if path.is_file() and not set(rel.parts) & skipped:
            found.append(rel.as_posix())
    return sorted(found)


def shipped(name: str) -> bool:
    """Is this tracked file copied into the bundle as it is?"""
    folder, _, rest = name.partition("/")
    if rest and folder in FOLDERS:
        return not name.startswith(FOLDERS[folder])  # an empty tuple leaves nothing out
    return name in FILES


def course_gpus(registry: Registry) -> str:
    gpus = sorted({rule.student.gpu for t in registry.available for rule in t.timing if rule.student})
    return " and ".join(f"an {g}" for g in gpus) or "the course's GPU"


def render_readme(registry: Registry) -> str:
    from handout.texts import add_filters

    env = add_filters(
        jinja2.Environment(
            loader=jinja2.FileSystemLoader(TEMPLATES),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
    )
    return env.get_template("README.md.j2").render(registry=registry, course_gpus=course_gpus(registry))


def write_bundle(repo: Path, dest: Path, pdf: bool = True, log=print) -> list[str]:
    """Write the bundle's files into ``dest`` (empty); the notes worth telling the instructor."""
    from handout import render

    notes: list[str] = []
    copied = [name for name in tracked_files(repo) if shipped(name)]
    for name in copied:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    # The kit's own copy of each CUDA file, as shipped (the starter before the student edits it): the device build
    # splices the student's regions into it and its host code launches them, as the grader does with its own.
    kit_copies = dest / "assignment" / "cuda" / "kit"
    for name in copied:
        if name.startswith("starter/") and name.endswith(".cu"):
            kit_copies.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, kit_copies / Path(name).name)
    student_registry = student_edition((repo / "assignment" / "tasks.toml").read_text(encoding="utf-8"))
    (dest / "assignment" / "tasks.toml").write_text(student_registry, encoding="utf-8")
    registry = load_registry(dest / "assignment" / "tasks.toml")
    shutil.copy2(TEMPLATES / "Makefile", dest / "Makefile")
    (dest / "README.md").write_text(render_readme(registry), encoding="utf-8")
    (dest / ".gitignore").write_text(BUNDLE_GITIGNORE, encoding="utf-8")
    html = dest / "handout.html"
    html.write_text(
        render.render_html(registry=load_registry(repo / "assignment" / "tasks.toml"), root=repo, audience="student"),
        encoding="utf-8",
    )
    if pdf:
        from handout.pdf import html_to_pdf

        html_to_pdf(html, dest / "handout.pdf")
    else:
        notes.append("handout.pdf left out (--no-pdf)")
    write_manifest(dest)
    return notes


def write_manifest(bundle: Path) -> dict:
    files = {}
    for path in sorted(p for p in bundle.rglob("*") if p.is_file() and p.name != "MANIFEST.json"):
        data = path.read_bytes()
        files[path.relative_to(bundle).as_posix()] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"built": datetime.now(UTC).isoformat(timespec="seconds"), "files": files}
    (bundle / "MANIFEST.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest


# --------------------------------------------------------------------------- the manifest check


@dataclass(frozen=True)
class Secret:
    text: str
    what: str  # where it comes from, for the message


def secrets(repo: Path) -> list[Secret]:
    """Strings that must never appear in a bundle: solution code, hidden shapes, the rubric's reasoning."""
    found: list[Secret] = []
    registry_text = (repo / "assignment" / "tasks.toml").read_text(encoding="utf-8")
    solutions = repo / "solutions"
    starter = repo / "starter"
    for path in sorted(solutions.rglob("*")) if solutions.is_dir() else []:
        if not path.is_file():
            continue
        rel = path.relative_to(solutions).as_posix()
        starter_text = (starter / rel).read_text(encoding="utf-8") if (starter / rel).is_file() else ""
        for number, line in solution_lines(path.read_text(encoding="utf-8", errors="replace"), f"solutions/{rel}"):
            code = line.strip()
            if len(code) >= MIN_LEAK_CHARS and code not in starter_text:
                found.append(Secret(code, f"solutions/{rel}:{number} (solution code)"))
    for where, text in hidden_table_texts(registry_text):
        found.append(Secret(text, f"assignment/tasks.toml {where} (hidden shapes)"))
    registry = load_registry(repo / "assignment" / "tasks.toml")
    for task in registry.tasks:
        reasons = [r for rule in task.timing for r in (rule.reasoning, rule.open_reasoning)]
        reasons += [task.grading.reasoning, task.grading.open_reasoning]
        for reason in filter(None, reasons):
            for sentence in re.split(r"(?<=[.;:])\s+", reason):
                if len(sentence) >= 40:
                    found.append(Secret(sentence, f"{task.id}'s rubric reasoning"))
    for item in registry.theory.rubric if registry.theory else ():
        found.append(Secret(item.criterion, "the theory proof's rubric"))
    for salt, where in ((registry.hidden_seed_salt, "[hidden_seed] salt"), (os.environ.get(SALT_ENV), SALT_ENV)):
        if salt and salt.strip():
            found.append(Secret(salt.strip(), f"the hidden seeds' salt ({where})"))
    return found


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # a binary file (weights, a PDF printed from the checked HTML)


def starter_out_of_sync(repo: Path, registry: Registry | None = None) -> list[str]:
    """The repository's starter files that are not what the generator writes at the registry's levels: a task set to
    ``scaffolding = "open"`` (or back) needs ``make starter`` before a release, or the bundle would hand out the other
    level's regions while its registry tells the grader to splice this one's."""
    if not (repo / "solutions").is_dir():
        return []
    registry = registry if registry is not None else load_registry(repo / "assignment" / "tasks.toml")
    problems = check_starter(repo / "solutions", repo / "starter", registry)
    if not problems:
        return []
    levels = ", ".join(f"{t.id} {t.scaffolding}" for t in registry.tasks)
    return [
        f"{problem.splitlines()[0].rstrip(':')} (the registry's levels: {levels}): run make starter, then make release"
        for problem in problems
    ]


def check_bundle(bundle: Path, repo: Path = REPO_ROOT) -> list[str]:
    """Every reason the bundle must not ship (empty: it may)."""
    problems: list[str] = []
    for entry in sorted(bundle.iterdir()):
        if entry.name not in TOP_LEVEL:
            problems.append(f"{entry.name}: not part of a student bundle")
    files = sorted(p for p in bundle.rglob("*") if p.is_file())
    names = [p.relative_to(bundle).as_posix() for p in files]
    for name in names:
        if name.startswith(FORBIDDEN_PREFIXES):
            problems.append(f"{name}: instructor-only")
    try:
        registry = load_registry(bundle / "assignment" / "tasks.toml")
    except RegistryError as exc:
        return problems + [f"assignment/tasks.toml: {exc}"]
    if registry.edition != "student":
        problems.append("assignment/tasks.toml: not the registry's student edition")
    if registry.hidden_seed_salt is not None:
        problems.append("assignment/tasks.toml: holds the hidden seeds' salt ([hidden_seed])")
    for task in registry.tasks:
        if len(task.hidden):
            problems.append(f"assignment/tasks.toml: {task.id} has hidden shapes")
        grading_notes = task.grading.reasoning or task.grading.open_reasoning
        if any(rule.reasoning or rule.open_reasoning for rule in task.timing) or grading_notes:
            problems.append(f"assignment/tasks.toml: {task.id} has the rubric's reasoning")
    for filename in registry.student_files:
        shipped_file, ours = bundle / "starter" / filename, repo / "starter" / filename
        if not shipped_file.is_file():
            problems.append(f"starter/{filename}: missing")
        elif ours.is_file() and shipped_file.read_bytes() != ours.read_bytes():
            problems.append(f"starter/{filename}: differs from the repository's starter (run make starter)")
    known = secrets(repo)
    for path, name in zip(files, names):
        text = text_of(path)
        if text is None:
            continue
        for forbidden in FORBIDDEN_STRINGS:
            if forbidden in text:
                problems.append(f"{name}: contains {forbidden!r}")
        if name in READ_BY_STUDENTS and "solutions/" in text:
            problems.append(f"{name}: names a file of the reference solutions (solutions/)")
        if name not in MARKER_SYNTAX_FILES:
            for number, line in enumerate(text.splitlines(), start=1):
                if "BEGIN SOLUTION" in line or "END SOLUTION" in line:
                    problems.append(f"{name}:{number}: a solution marker")
        if re.search(r"^\s*(?:open_)?reasoning\s*=", text, re.MULTILINE) and name.endswith(".toml"):
            problems.append(f"{name}: has a reasoning field")
        for secret in known:
            if secret.text in text:
                problems.append(f"{name}: contains {secret.what}: {secret.text[:70]!r}")
    return problems


# --------------------------------------------------------------------------- build, atomically


def build(repo: Path, out: Path, pdf: bool = True, log=print) -> tuple[Path, Path]:
    """Write ``out/student/`` and ``out/student.zip``; nothing is replaced unless the new bundle passes."""
    stale = starter_out_of_sync(repo)
    if stale:
        raise ReleaseError("starter/ does not hold the registry's scaffolding levels:\n  " + "\n  ".join(stale))
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".student-", dir=out))
    try:
        for note in write_bundle(repo, staging, pdf=pdf, log=log):
            log(f"release: {note}")
        problems = check_bundle(staging, repo)
        if problems:
            raise ReleaseError("the bundle fails the manifest check:\n  " + "\n  ".join(problems))
        with replacing(out / "student.zip") as zip_tmp:
            with zipfile.ZipFile(zip_tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                    archive.write(path, f"student/{path.relative_to(staging).as_posix()}")
            final = out / "student"
            if final.exists():
                old = out / ".student-old"
                shutil.rmtree(old, ignore_errors=True)
                final.rename(old)
                shutil.rmtree(old, ignore_errors=True)
            staging.rename(final)
        return final, out / "student.zip"
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the student bundle (dist/student/, dist/student.zip).")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist")
    parser.add_argument("--no-pdf", action="store_true", help="leave out handout.pdf (no Chromium here)")
    parser.add_argument("--check", type=Path, metavar="BUNDLE", help="only check a built bundle")
    args = parser.parse_args(argv)
    if args.check:
        problems = check_bundle(args.check)
        for problem in problems:
            print(f"release: {problem}", file=sys.stderr)
        print(f"release: {args.check} {'fails' if problems else 'passes'} the manifest check")
        return 1 if problems else 0
    if not (REPO_ROOT / "solutions").is_dir():
        print("release: no solutions/ here: the bundle is built from the instructor's tree", file=sys.stderr)
        return 2
    try:
        bundle, archive = build(REPO_ROOT, args.out, pdf=not args.no_pdf)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    count = sum(1 for p in bundle.rglob("*") if p.is_file())
    print(
        f"release: wrote {bundle} ({count} files) and {archive} ({archive.stat().st_size / 2**20:.1f} MiB); "
        "the manifest check passed"
    )
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
