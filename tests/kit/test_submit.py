"""make submit: the checks before packing (missing, oversize, rejected or uncompilable files are errors; TODOs
left and missing reports are warnings), the zip's layout and manifest, and the zip grading as the folder does."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from assignment import feedback, submit
from assignment.registry import load_registry
from grader.isolation import sandbox

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
REGISTRY = load_registry()
ARCH = "sm_90a"  # one architecture keeps the builds short (sm_90 GPUs build for sm_90a); without it a host
# with no GPU checks every one
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: no CUDA file can be compiled")


def make_bundle(root: Path, source: str = "solutions") -> Path:
    """A student bundle's layout: the student files in starter/, the report files beside it."""
    student = root / "starter"
    student.mkdir(parents=True)
    for name in REGISTRY.student_files:
        shutil.copyfile(REPO / source / name, student / name)
    (root / "REPORT.md").write_text("# My report\n\nt4 reaches 0.9x the reference.\n")
    version = feedback.load_form().schema_version
    (root / "feedback.json").write_text(json.dumps({"schema_version": version, "answers": {}}))  # started, not finished
    return student


def run_submit(root: Path, capsys, *extra: str) -> tuple[int, str]:
    code = submit.main(["--impl", str(root / "starter"), "--root", str(root), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture(autouse=True)
def one_arch(monkeypatch):
    monkeypatch.setenv("KIT_CUDA_ARCH", ARCH)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """The solutions as a bundle, packed once through the command line: (bundle root, zip, output)."""
    root = tmp_path_factory.mktemp("bundle")
    make_bundle(root)
    proc = subprocess.run(
        [sys.executable, "-m", "assignment.submit", "--impl", str(root / "starter"), "--root", str(root)],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "KIT_CUDA_ARCH": ARCH},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, root / "submission.zip", proc.stdout + proc.stderr


def test_zip_holds_the_files_at_the_top_level_with_their_hashes(packed):
    root, archive, output = packed
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
        contents = {name: zf.read(name) for name in names}
    assert sorted(names) == sorted([*REGISTRY.student_files, "REPORT.md", "feedback.json", "MANIFEST.json"])
    manifest = json.loads(contents["MANIFEST.json"])
    assert manifest["kit_version"] and manifest["course"] == REGISTRY.title
    assert manifest["registry_sha256"] == hashlib.sha256(REGISTRY.path.read_bytes()).hexdigest()
    assert manifest["todo_regions_left"] == {} and manifest["created"]
    listed = {entry["name"]: entry for entry in manifest["files"]}
    assert set(listed) == set(names) - {"MANIFEST.json"}
    for name, entry in listed.items():
        on_disk = (root / "starter" / name) if entry["tasks"] else (root / name)
        assert contents[name] == on_disk.read_bytes()
        assert entry["sha256"] == hashlib.sha256(contents[name]).hexdigest() and entry["bytes"] == len(contents[name])
        assert entry["sha256"] in output, "the printed manifest shows every hash"
    assert "TODO" not in output.split("warnings:")[-1].split("wrote")[0]
    assert "REPORT.html: not found" in output and "feedback.json: " in output and "make feedback" in output
    if shutil.which("nvcc"):
        assert re.search(rf"t4_flash_attention\.cu .* t4 t5 +ok: spliced, compiled \({ARCH}\)", output), output
    else:
        assert "nvcc not found" in output
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")], "the temporary zip is renamed or removed"


def test_the_integrity_note_is_packed_and_asked_for_by_name_when_missing(tmp_path, capsys):
    """The integrity policy asks for a note on collaboration, sources and AI use: make submit packs it (the
    registry's notes_file) and, when it is missing, says what belongs in it."""
    note = REGISTRY.notes_file
    assert note and note in REGISTRY.submit_files and f"`{note}`" in REGISTRY.integrity_policy
    make_bundle(tmp_path, "starter")
    code, output = run_submit(tmp_path, capsys)
    assert code == 0, output
    warning = next(line for line in output.splitlines() if line.strip().startswith(f"{note}:"))
    assert "integrity policy" in warning and "AI" in warning and "next to the Makefile" in warning, warning
    (tmp_path / note).write_text("Discussed tiling with Ana; used a chat assistant to explain ldmatrix.\n")
    code, output = run_submit(tmp_path, capsys)
    assert code == 0 and not any(line.strip().startswith(f"{note}:") for line in output.splitlines()), output
    with zipfile.ZipFile(tmp_path / "submission.zip") as zf:
        assert zf.read(note) == (tmp_path / note).read_bytes()


@pytest.mark.slow  # two gradings end to end (make test-slow)
def test_the_grader_scores_the_zip_as_the_folder(packed, tmp_path):
    """t1 grades on a CPU: each of the two gradings runs once (a fixed seed: both draw the same hidden shapes)."""
    root, archive, _ = packed
    flags = [] if sandbox.best_isolation()[0] == sandbox.FULL else ["--allow-weak-isolation"]
    scores = {}
    for label, submission in (("folder", root / "starter"), ("zip", archive)):
        out = tmp_path / label
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "grader.grade.grade",
                str(submission),
                "--out",
                str(out),
                "--task",
                "t1",
                "--seed",
                "11",
                *flags,
            ],
            check=False,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        results = json.loads((out / "results.json").read_text())
        scores[label] = sum(t["score"] for t in results["tests"] if "t1" in t["tags"])
    assert scores["zip"] == scores["folder"] == pytest.approx(10.0), scores


def test_starter_files_pack_with_their_todos_listed_per_task(tmp_path, capsys):
    student = make_bundle(tmp_path, "starter")
    code, output = run_submit(tmp_path, capsys)
    assert code == 0, output
    expected = {}
    for name in REGISTRY.student_files:  # one "TODO(tN): ..." comment opens each region of the starter
        for task in re.findall(r"^\s*(?:#|//) TODO\((t[0-9]+)\):", (student / name).read_text(), re.MULTILINE):
            expected[task] = expected.get(task, 0) + 1
    assert set(expected) == set(REGISTRY.ids)
    for task, count in expected.items():
        assert re.search(rf"^  {task}: {count} TODO regions? not implemented \(", output, re.MULTILINE), (task, output)
    assert "t6: 7 TODO regions not implemented (t6_kv_cache.py: 2, t6_decode_attention.cu: 5)" in output
    with zipfile.ZipFile(tmp_path / "submission.zip") as zf:
        assert json.loads(zf.read("MANIFEST.json"))["todo_regions_left"] == expected
    assert "not built (TODO left)" in output


def test_a_missing_student_file_is_an_error_and_the_old_zip_stays(tmp_path, capsys):
    student = make_bundle(tmp_path, "starter")
    (student / "t6_kv_cache.py").unlink()
    old = tmp_path / "submission.zip"
    old.write_bytes(b"an earlier submission")
    code, output = run_submit(tmp_path, capsys)
    assert code == 1
    assert "t6_kv_cache.py: not found in" in output and "(a file of t6)" in output
    assert re.search(r"t6_kv_cache\.py +- +t6 +MISSING", output), output
    assert "no zip written" in output and "left as it was" in output
    assert old.read_bytes() == b"an earlier submission"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["REPORT.md", "feedback.json", "starter", "submission.zip"]


def test_a_file_over_the_graders_cap_is_refused(tmp_path, capsys):
    student = make_bundle(tmp_path, "starter")
    limit = REGISTRY.max_file_bytes
    padded = student / "t7_generate.py"
    padded.write_bytes(padded.read_bytes() + b"#" * limit)
    code, output = run_submit(tmp_path, capsys, "--out", str(tmp_path / "out" / "mine.zip"))
    assert code == 1
    size = padded.stat().st_size
    assert f"t7_generate.py: {size:,} bytes; the grader takes at most {limit:,} bytes per file" in output
    assert re.search(r"t7_generate\.py .* TOO LARGE", output) and not (tmp_path / "out").exists()


def test_a_python_file_that_breaks_its_rules_is_an_error(tmp_path, capsys):
    student = make_bundle(tmp_path, "starter")
    (student / "t1_attention.py").write_text("import numpy\n" + (student / "t1_attention.py").read_text())
    code, output = run_submit(tmp_path, capsys)
    assert code == 1 and "t1_attention.py: line 1: import of 'numpy'" in output, output


def test_python_files_saved_with_a_byte_order_mark_and_windows_line_endings_pack(tmp_path, capsys):
    student = make_bundle(tmp_path, "starter")
    for name in ("t1_attention.py", "t7_generate.py"):
        path = student / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    code, output = run_submit(tmp_path, capsys)
    assert code == 0 and "REJECTED" not in output, output
    assert re.search(r"^  t1: 2 TODO regions not implemented \(", output, re.MULTILINE), output
    (student / "t1_attention.py").write_bytes(b"x = '\xff'\r\n")
    code, output = run_submit(tmp_path, capsys)
    assert code == 1 and "t1_attention.py: the file is not text in its encoding" in output, output


@needs_nvcc
def test_a_cuda_file_that_does_not_compile_is_an_error_with_nvccs_first_lines(tmp_path, capsys):
    student = make_bundle(tmp_path)
    path = student / "t2_softmax.cu"
    text = path.read_text()
    broken = "    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));"
    assert broken in text
    path.write_text(text.replace(broken, broken.replace("offset)", "ofset)")))
    line = text[: text.index(broken)].count("\n") + 1
    code, output = run_submit(tmp_path, capsys)
    assert code == 1 and not (tmp_path / "submission.zip").exists()
    assert f"t2_softmax.cu: nvcc rejects your t2 regions in the kit's file ({ARCH}):" in output
    assert f't2_softmax.cu:{line}: error: identifier "ofset" is undefined' in output
    assert f"{line:5d} | {broken.replace('offset)', 'ofset)')}" in output
    assert re.search(r"t2_softmax\.cu .* COMPILE ERROR", output)


def as_a_bundle(tmp_path, monkeypatch):
    """The kit's CUDA files as a student bundle has them: no solutions/, the starter's copy in assignment/cuda/kit/."""
    from assignment.cuda import compiler

    kit = tmp_path / "kit-copies"
    kit.mkdir()
    for source in (REPO / "starter").glob("*.cu"):
        (kit / source.name).write_text(source.read_text())
    monkeypatch.setattr(compiler, "SOLUTIONS_DIR", tmp_path / "no-solutions-here")
    monkeypatch.setattr(compiler, "BUNDLE_KIT_DIR", kit)


@pytest.mark.parametrize("bundle", [False, True], ids=["instructor-tree", "student-bundle"])
def test_a_region_the_grader_cannot_splice_is_an_error(tmp_path, capsys, monkeypatch, bundle):
    """A preprocessor line compiles in the file alone, but the grader refuses it inside a region; a student bundle
    checks the region against its own copy of the kit's file, as the grader does with its."""
    if bundle:
        as_a_bundle(tmp_path, monkeypatch)
    student = make_bundle(tmp_path / "bundle", "starter")
    path = student / "t3_gemm.cu"
    marker = re.search(r"^\s*// TODO\(t3\):.*\n", path.read_text(), re.MULTILINE)
    text = path.read_text()
    path.write_text(text[: marker.end()] + "#include <cstdio>\n" + text[marker.end() :])
    code, output = run_submit(tmp_path / "bundle", capsys)
    assert code == 1, output
    assert "t3_gemm.cu" in output and "preprocessor lines are not allowed in a TODO region" in output
    assert re.search(r"t3_gemm\.cu .* REJECTED", output)


def test_a_bundle_checks_the_regions_against_its_copy_of_the_kits_files(tmp_path, capsys, monkeypatch):
    as_a_bundle(tmp_path, monkeypatch)
    student = make_bundle(tmp_path / "bundle", "starter")
    code, output = run_submit(tmp_path / "bundle", capsys)
    assert code == 0 and "ok: spliced, not built (TODO left)" in output, output
    path = student / "t4_flash_attention.cu"  # a student who deleted t5's markers loses t5
    path.write_text(re.sub(r"^\s*// (END )?TODO\(t5\).*\n", "", path.read_text(), flags=re.MULTILINE))
    code, output = run_submit(tmp_path / "bundle", capsys)
    assert code == 1 and "TODO regions do not match the starter's" in output, output
