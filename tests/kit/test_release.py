"""`make release`: the student bundle holds what a student runs and nothing of the instructor's, fails cleanly as
shipped, and passes with the reference solutions copied in (grader/release/release.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assignment.registry import load_registry
from grader.release import release

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kit


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    return release.build(REPO_ROOT, tmp_path_factory.mktemp("dist"), pdf=False, log=lambda _: None)


def copy_of(bundle: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "student"
    shutil.copytree(bundle, dest)
    return dest


def test_the_bundle_has_the_student_layout_and_passes_the_manifest_check(built):
    bundle, archive = built
    assert sorted(p.name for p in bundle.iterdir()) == sorted(
        [
            "starter",
            "assignment",
            "tests",
            "README.md",
            "Makefile",
            "pyproject.toml",
            "handout.html",
            ".gitignore",
            "MANIFEST.json",
        ]
    )
    registry = load_registry(bundle / "assignment" / "tasks.toml")
    assert registry.edition == "student" and all(len(t.hidden) == 0 for t in registry.tasks)
    assert registry.hidden_seed_salt is None and registry.theory.salt  # students draw theory questions, not seeds
    for name in registry.student_files:
        assert (bundle / "starter" / name).read_bytes() == (REPO_ROOT / "starter" / name).read_bytes()
    assert not (bundle / "tests" / "kit").exists() and not (bundle / "assignment" / "text").exists()
    assert release.check_bundle(bundle) == []
    manifest = json.loads((bundle / "MANIFEST.json").read_text())
    files = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - {"MANIFEST.json"}
    assert set(manifest["files"]) == files
    with zipfile.ZipFile(archive) as z:
        assert {n.removeprefix("student/") for n in z.namelist()} == files | {"MANIFEST.json"}
    readme = (bundle / "README.md").read_text()
    assert "make test T=t1" in readme and "make submit" in readme and "starter/" in readme
    assert "make starter" not in (bundle / "Makefile").read_text()


def test_the_bundle_is_a_copy_of_the_student_folders(built):
    # What ships is decided by the layout: assignment/ (less the handout's sources and the full registry), starter/
    # and the public tests, each file as the repository has it; the bundle adds only generated files.
    bundle, _ = built
    tracked = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "ls-files", "assignment", "starter", "tests"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    copied = [
        n for n in tracked if not n.startswith(("assignment/text/", "tests/kit/")) and n != "assignment/tasks.toml"
    ]
    assert [n for n in copied if (bundle / n).read_bytes() != (REPO_ROOT / n).read_bytes()] == []
    added = {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} - set(copied)
    assert {n for n in added if "/" in n} == {"assignment/tasks.toml"} | {
        f"assignment/cuda/kit/{Path(n).name}" for n in copied if n.startswith("starter/") and n.endswith(".cu")
    }


def test_every_module_of_the_bundle_imports_without_the_instructors_tree(built, tmp_path):
    bundle = copy_of(built[0], tmp_path)
    script = (
        "import importlib, pkgutil, assignment\n"
        "names = [m.name for m in pkgutil.walk_packages(assignment.__path__, 'assignment.')\n"
        "         if not m.name.endswith('__main__')]\n"
        "for name in names:\n    importlib.import_module(name)\n"
        "import sys\nassert not [m for m in sys.modules if m.split('.')[0] in ('grader', 'handout')]\n"
        "print(len(names))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("IMPL", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=bundle, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 40


def test_no_target_a_student_runs_rewrites_their_files(built):
    bundle, _ = built
    listed = subprocess.run(["make", "-C", str(bundle), "-pRrq", "PY=true"], capture_output=True, text=True).stdout
    targets = {
        line.split(":")[0]
        for line in listed.splitlines()
        if line and not line.startswith(("#", "\t", ".")) and ":" in line and "=" not in line.split(":")[0]
    }
    assert {"test", "bench", "report", "submit", "feedback"} <= targets
    assert not targets & {"starter", "check-starter", "release", "grade", "selfcheck"}


@pytest.mark.parametrize(
    "plant, expected",
    [
        (
            lambda b: (b / "solutions").mkdir() or (b / "solutions" / "t1_attention.py").write_text("x = 1\n"),
            "not part of a student bundle",
        ),
        (
            lambda b: (b / "tests" / "kit").mkdir() or (b / "tests" / "kit" / "test_x.py").write_text(""),
            "instructor-only",
        ),
        (
            lambda b: (b / "starter" / "notes.py").write_text(
                (REPO_ROOT / "solutions" / "t1_attention.py").read_text()
            ),
            "solution marker",
        ),
        (lambda b: (b / "README.md").write_text(load_registry().task("t3").timing[0].reasoning), "rubric reasoning"),
        (
            lambda b: (b / "assignment" / "extra.toml").write_text(
                (REPO_ROOT / "assignment" / "tasks.toml").read_text().split("[task.hidden]")[1][:400]
            ),
            "hidden shapes",
        ),
        (
            lambda b: (b / "assignment" / "tasks.toml").write_text(
                (REPO_ROOT / "assignment" / "tasks.toml").read_text()
            ),
            "student edition",
        ),
        (
            lambda b: (b / "starter" / "t2_softmax.cu").write_text(
                (REPO_ROOT / "solutions" / "t2_softmax.cu")
                .read_text()
                .replace("BEGIN SOLUTION", "")
                .replace("END SOLUTION", "")
            ),
            "(solution code)",
        ),
        (lambda b: (b / "handout.html").write_text("compare with solutions/t4_flash_attention.cu"), "solutions/"),
        (lambda b: (b / "assignment" / "seed.txt").write_text(load_registry().hidden_seed_salt), "hidden seeds' salt"),
        (
            lambda b: (b / "assignment" / "tasks.toml").write_text(
                (b / "assignment" / "tasks.toml").read_text() + '\n[hidden_seed]\nsalt = "a-salt-that-is-long-enough"\n'
            ),
            "the salt must never ship",
        ),
    ],
)
def test_the_manifest_check_refuses_what_must_not_ship(built, tmp_path, plant, expected):
    bundle = copy_of(built[0], tmp_path)
    plant(bundle)
    problems = release.check_bundle(bundle)
    assert any(expected in p for p in problems), problems


def _bundle_make_test(bundle: Path, report: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("IMPL", "PYTHONPATH")}
    return subprocess.run(
        [
            "make",
            "-C",
            str(bundle),
            "test",
            f"PY={sys.executable}",
            f"PYTEST_ARGS=-q -p no:cacheprovider --json-report --json-report-file={report}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )


@pytest.mark.slow  # the bundle's own make test, twice: make test-slow
def test_the_bundle_fails_cleanly_as_shipped_and_passes_with_the_solutions(built, tmp_path):
    bundle = copy_of(built[0], tmp_path)
    shipped = _bundle_make_test(bundle, tmp_path / "starter.json")
    assert shipped.returncode != 0, shipped.stdout[-2000:]
    report = json.loads((tmp_path / "starter.json").read_text())
    broken = [c for c in report["collectors"] if c["outcome"] != "passed"]
    assert not broken, f"collection errors in the bundle: {broken[:2]}"
    failed = [t for t in report["tests"] if t["outcome"] in ("failed", "error")]
    assert failed, "the starter passed tests it cannot pass"
    for test in failed:
        text = json.dumps(test)
        assert "NotImplementedError" in text or "TODO(t" in text, f"{test['nodeid']} fails without its TODO message"
    for name in load_registry().student_files:
        shutil.copy2(REPO_ROOT / "solutions" / name, bundle / "starter" / name)
    solved = _bundle_make_test(bundle, tmp_path / "solved.json")
    assert solved.returncode == 0, solved.stdout[-3000:]
    summary = json.loads((tmp_path / "solved.json").read_text())["summary"]
    assert summary.get("passed", 0) > 0 and not summary.get("failed") and not summary.get("error")


def _without_nvcc() -> str:
    """PATH less every folder that holds an nvcc: a student's laptop."""
    import os

    return os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists())


def _bundle_run(bundle: Path, command: list[str], path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("IMPL", "PYTHONPATH", "KIT_CACHE_DIR")}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(command, cwd=bundle, capture_output=True, text=True, env=env, timeout=300)


def test_the_bundles_check_cuda_runs_the_region_rules_without_nvcc(built, tmp_path):
    """A deleted `// END TODO(t2)` is caught by make check-cuda on a host without the CUDA toolkit, not only by
    make submit; with the regions intact it says that nothing was compiled, and why."""
    bundle = copy_of(built[0], tmp_path)
    make = ["make", "--no-print-directory", "check-cuda", f"PY={sys.executable}"]
    intact = _bundle_run(bundle, make, _without_nvcc())
    assert intact.returncode != 0, intact.stdout + intact.stderr  # nothing was compiled: not a success
    assert "regions ok" in intact.stdout and "nvcc not found" in intact.stderr, intact.stdout + intact.stderr
    assert "Traceback" not in intact.stderr
    starter = bundle / "starter" / "t2_softmax.cu"
    lines = starter.read_text().splitlines(keepends=True)
    first_end = next(i for i, line in enumerate(lines) if line.strip() == "// END TODO(t2)")
    starter.write_text("".join(lines[:first_end] + lines[first_end + 1 :]))
    broken = _bundle_run(bundle, make, _without_nvcc())
    assert broken.returncode != 0 and "FAILED" in broken.stdout, broken.stdout + broken.stderr
    assert "nothing was compiled" not in broken.stderr  # the regions are the news, not the missing toolkit
    assert "t2_softmax.cu" in broken.stderr and "keep the '// END TODO(t2)' line" in broken.stderr, broken.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_bundles_check_cuda_compiles_an_untouched_starter_file(built, tmp_path):
    """In a bundle the kit's copy of a file is the starter itself, so an untouched file's device module is the kit's
    own: one build, where it once waited forever on its own lock."""
    bundle = copy_of(built[0], tmp_path)
    (bundle / "only").mkdir()
    shutil.copy2(bundle / "starter" / "t2_softmax.cu", bundle / "only" / "t2_softmax.cu")
    done = _bundle_run(bundle, [sys.executable, "-m", "assignment.cuda.check_all", "only", "--arch", "sm_80"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1/1 builds succeeded" in done.stdout


def test_a_release_refuses_a_starter_generated_at_other_levels(tmp_path, capsys):
    # An instructor sets t1 open in the registry and forgets `make starter`: the bundle would hand out t1's guided
    # regions while its registry tells the grader to splice the open one.
    import tomllib

    from assignment.registry import REGISTRY_PATH, parse_registry

    data = tomllib.loads(REGISTRY_PATH.read_text(encoding="utf-8"))
    for raw in data["task"]:
        if raw["id"] == "t1":
            raw["scaffolding"] = "open"
    opened = parse_registry(data, REGISTRY_PATH)
    stale = release.starter_out_of_sync(REPO_ROOT, opened)
    assert len(stale) == 1 and stale[0].startswith("starter/t1_attention.py: differs"), stale
    assert "t1 open" in stale[0] and "run make starter" in stale[0]
    assert release.starter_out_of_sync(REPO_ROOT) == [], "the committed starter is the registry's levels"
    assert release.starter_out_of_sync(tmp_path) == [], "a bundle (no solutions/) has nothing to compare"
