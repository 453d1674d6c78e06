"""The sandboxed worker: what student Python can see and do, measured from the checker's side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from assignment.model import DEFAULT_CHECKPOINT, load_checkpoint
from grader.isolation import kit_folder, sandbox, served
from grader.isolation.client import KitObject, SeededGenerator, Worker, WorkerConfig, WorkerFailure, student_module

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
FULL, WHY = sandbox.probe(sandbox.find_bwrap())
needs_bwrap = pytest.mark.skipif(not FULL, reason=f"bubblewrap cannot run here: {WHY}")

PROBE = """
import os
import socket
import torch


def view():
    seen = sorted(os.listdir("{repo}")) if os.path.isdir("{repo}") else []
    return [sorted(os.listdir("/")), os.getuid(), seen, sorted(os.environ)]


def network():
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2).close()
        return "reachable"
    except OSError as exc:
        return str(exc)


def clear_refs():
    try:
        open("/proc/self/clear_refs", "w").write("5")
        return "written"
    except OSError as exc:
        return type(exc).__name__


def allocate(mb):
    block = torch.ones(mb * 2**18)  # mb MiB, touched
    return torch.tensor([float(block.sum())])


def forge():
    for fd in range(3, 64):
        try:
            os.write(fd, b"KITW" + bytes(16))
        except OSError:
            pass
    return torch.zeros(1)


def shout(n):
    print("x" * (n * 2**20), flush=True)
    return torch.ones(1)
"""


KIT_PROBE = """
import os
import torch


def describe(model, tokenizer, generator):
    return [type(model).__name__, str(model.device), model.vocab_size, model.max_seq_len,
            tokenizer.decode(tokenizer.encode("hé", add_bos=False)), generator.initial_seed()]


def kit_view():
    return sorted(os.path.relpath(os.path.join(root, name), "/kit") for root, _, files in os.walk("/kit")
                  for name in files if name.endswith((".py", ".json")))


def pieces(model, count):
    model.prefill(torch.tensor([[1, 2]]), torch.arange(2))
    for k in range(count):
        yield f"piece {k}"
        model.decode_one_token(torch.tensor([[3]]), torch.tensor([2 + k]))


def listed(model, count):
    return list(pieces(model, count))
"""


@pytest.fixture()
def probe_worker(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "probe.py").write_text(PROBE.replace("{repo}", str(REPO)))
    (folder / "kit_probe.py").write_text(KIT_PROBE)
    (folder / "broken.py").write_text("_helper = undefined_helper(3)\n")
    worker = Worker(WorkerConfig(student_dir=folder, deny=(str(REPO),), call_timeout_s=60), gpu=False)
    yield worker
    worker.stop()


def call(worker, function, *args):
    return worker.call("probe.py", function, args, {}).value


@needs_bwrap
def test_the_worker_sees_only_what_it_needs(probe_worker):
    listing, uid, repo_listing, env = call(probe_worker, "view")
    # Only the kit's virtual environment may show there (mounted at its own path when it lives in the repo).
    assert set(repo_listing) <= {".venv"}, f"the instructor's tree is visible in the sandbox: {repo_listing}"
    assert "submission" in listing and "kit" in listing
    assert not {"home", "var", "srv", "mnt", "boot", "media", "run"} & set(listing), listing
    if os.geteuid() == 0:
        assert uid == sandbox.SANDBOX_UID, "the worker still runs as root"
    assert not [name for name in env if name.startswith(("KIT_", "PYTEST", "IMPL"))], env
    assert call(probe_worker, "network") != "reachable"
    assert call(probe_worker, "clear_refs") in ("OSError", "PermissionError"), "the peak-memory counter can be reset"


@needs_bwrap
def test_peak_memory_is_measured_from_outside(probe_worker):
    small = probe_worker.call("probe.py", "allocate", (1,), {}, measure_memory=True)
    big = probe_worker.call("probe.py", "allocate", (300,), {}, measure_memory=True)
    assert small.peak_bytes is not None and big.peak_bytes is not None
    assert big.peak_bytes > 250 * 2**20 > small.peak_bytes, (small.peak_bytes, big.peak_bytes)


@needs_bwrap
def test_a_failed_import_fails_every_call_with_a_traceback_of_its_own(probe_worker):
    """The import's failure is kept and raised for every call: as a new exception each time, or its traceback would
    gather every earlier call's frames (pytest formats them all for every failed check)."""
    depths = []
    for _ in range(3):
        with pytest.raises(WorkerFailure) as info:
            probe_worker.call("broken.py", "anything", (), {})
        assert info.value.kind == "import" and "NameError" in str(info.value)
        depths.append(len(info.traceback))
    assert depths[0] == depths[1] == depths[2], depths


@needs_bwrap
def test_a_forged_reply_is_a_protocol_failure(probe_worker):
    with pytest.raises(WorkerFailure) as info:
        call(probe_worker, "forge")
    assert info.value.kind == "protocol"


@needs_bwrap
def test_output_floods_are_capped_and_the_call_still_answers(probe_worker):
    assert torch.equal(call(probe_worker, "shout", 40), torch.ones(1))
    log = probe_worker.log.text()
    assert len(log) < 100_000 and "bytes not kept" in log


def kit_call(worker, function, *args, **options):
    return worker.call("kit_probe.py", function, args, {}, **options)


@needs_bwrap
def test_kit_objects_are_served_by_the_checker_and_the_kit_folder_holds_only_the_worker(probe_worker):
    model = KitObject("scripted_model", {"vocab_size": 40, "max_seq_len": 9})
    described = kit_call(probe_worker, "describe", model, KitObject("byte_tokenizer"), SeededGenerator(77)).value
    assert described == ["ServedObject", "cpu", 40, 9, "hé", 77]
    # No model code, no weights, no scripted model: nothing in the worker can say what the model answers.
    assert kit_call(probe_worker, "kit_view").value == ["worker.py"]
    with pytest.raises(ValueError, match="unknown kit object"):
        kit_call(probe_worker, "describe", KitObject("the_grader"), KitObject("byte_tokenizer"), SeededGenerator(1))


@needs_bwrap
def test_the_shipped_checkpoint_is_served_by_the_checker(probe_worker):
    if not DEFAULT_CHECKPOINT.is_dir():
        pytest.skip("the shipped checkpoint is not in this checkout")
    for max_seq_len in (24, 30):  # loaded once, its cache set up for each call's length
        model = KitObject("checkpoint_model", {"max_seq_len": max_seq_len})
        described = kit_call(probe_worker, "describe", model, KitObject("checkpoint_tokenizer"), SeededGenerator(5))
        assert described.value[2:] == [load_checkpoint(DEFAULT_CHECKPOINT).model.vocab_size, max_seq_len, "hé", 5]


@needs_bwrap
def test_a_drained_stream_is_stamped_by_the_checker_which_keeps_the_call_log(probe_worker):
    model = KitObject("scripted_model", {"vocab_size": 8})
    result = kit_call(probe_worker, "pieces", model, 3, drain=True)
    assert result.value == ["piece 0", "piece 1", "piece 2"] and result.steps == [1, 2, 3]
    assert [c["op"] for c in result.calls] == ["prefill", "decode", "decode", "decode"]
    assert {k: result.calls[0][k] for k in ("op", "positions", "tokens")} == {
        "op": "prefill",
        "positions": [0, 1],
        "tokens": [1, 2],
    }
    assert [c["at"] for c in result.calls] == sorted(c["at"] for c in result.calls)
    with pytest.raises(WorkerFailure, match="an iterator") as info:
        kit_call(probe_worker, "pieces", model, 3)
    assert info.value.kind == "result"
    with pytest.raises(WorkerFailure, match="not an iterator"):
        kit_call(probe_worker, "listed", model, 3, drain=True)


DRIVER = """
import os

ENTRY_POINTS = ("around",)


def configure(checkpoint):
    pass


def around(module, kernels, x):
    return [module.NAME, kernels.double(x), __file__, os.access(__file__, os.W_OK)]


def not_an_entry_point(module):
    return "ran"
"""


class Doubling:
    """An object of a task's checks, served to the worker: its class lists what it answers and keeps the record."""

    METHODS = ("double",)

    def __init__(self, offset: float):
        self.offset, self.calls = offset, []

    def double(self, x):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"double takes a tensor, got {type(x).__name__}")
        self.calls.append({"op": "double", "x": x.tolist()})
        return 2 * x + self.offset


@needs_bwrap
def test_a_driver_the_checks_hand_over_runs_read_only_in_the_kit_folder_and_only_its_entry_points(tmp_path):
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "cache.py").write_text("NAME = 'the student cache'\n")
    driver = tmp_path / "probe_driver.py"
    driver.write_text(DRIVER)
    config = WorkerConfig(student_dir=folder, deny=(str(REPO),), call_timeout_s=60, drivers=(str(driver),))
    worker = Worker(config, gpu=False)
    try:
        kernels = KitObject("kernels", {"offset": 5.0}, make=Doubling)
        result = worker.call("cache.py", "around", (kernels, torch.tensor([1.0, 2.0])), {}, driver="probe_driver")
        name, doubled, where, writable = result.value
        assert name == "the student cache" and torch.equal(doubled, torch.tensor([7.0, 9.0])), result.value
        assert (where, writable) == ("/kit/probe_driver.py", False), (
            "the driver must be the kit folder's read-only copy"
        )
        assert [(c["op"], c["x"]) for c in result.calls] == [("double", [1.0, 2.0])], "the record is the checker's"
        for driver_name, function in (
            ("worker", "around"),
            ("cache", "around"),
            ("probe_driver", "not_an_entry_point"),
        ):
            with pytest.raises(WorkerFailure) as info:
                worker.call("cache.py", function, (), {}, driver=driver_name)
            assert info.value.kind == "kit", f"{driver_name}.{function} ran: a request may call only a listed driver"
    finally:
        worker.stop()


def test_a_brought_objects_own_checks_are_the_kits_to_show():
    kernels = served.brought(Doubling(0.0), "kernels")
    with pytest.raises(ValueError):
        kernels.serve("double", ["not a tensor"], {})
    with pytest.raises(AttributeError):
        kernels.serve("offset", [], {})  # not in METHODS: never called
    refusal = kernels.refusals[0]
    assert refusal.kit_message and "takes a tensor" in refusal.feedback(), refusal
    with pytest.raises(ValueError, match="not worker.py"):
        kit_folder.driver_name("/somewhere/worker.py")


def test_without_bubblewrap_the_fallback_is_stated(monkeypatch):
    sandbox.probe.cache_clear()
    monkeypatch.setenv("KIT_BWRAP", "/nonexistent/bwrap")
    monkeypatch.setenv("PATH", "/nonexistent")
    level, why = sandbox.best_isolation()
    assert level == sandbox.FALLBACK and "not installed" in why
    sandbox.probe.cache_clear()


def test_student_module_runs_the_reference(monkeypatch):
    monkeypatch.setenv("IMPL", "solutions")
    student = student_module("t1_attention.py", gpu=False)
    q = torch.randn(1, 2, 20, 8)
    out = student.naive_attention(q, q, q, causal=True)
    assert type(out) is torch.Tensor and out.shape == q.shape


def test_the_wrappers_a_t6_worker_gets_import_only_what_it_gets():
    """The CUDA wrapper files a t6 worker is given (kit_folder.CUDA_WRAPPER_FILES) import, at module level, only kit
    modules it is given too: a module moved out of one of them (cuda/toolchain.py out of compiler.py) must travel. So
    does every kit module t6's driver imports (grader/hidden/t6_driver.py, anywhere in it: its scenarios import
    inside their functions), and it imports nothing of the grader's, which the worker's /kit does not hold."""
    import ast

    from grader.hidden import t6_driver
    from grader.isolation import kit_folder

    shipped = {f"assignment.{name.removesuffix('.py').replace('/', '.')}" for name in kit_folder.CUDA_WRAPPER_FILES}
    shipped = {name.removesuffix(".__init__") for name in shipped} | {"assignment", "assignment.cuda"}
    readings = [
        (name, ast.parse((kit_folder.ASSIGNMENT / name).read_text(encoding="utf-8")).body)
        for name in kit_folder.CUDA_WRAPPER_FILES
    ]
    driver = ast.parse(t6_driver.SOURCE.read_text(encoding="utf-8"))
    readings.append((t6_driver.SOURCE.name, list(ast.walk(driver))))
    missing = []
    for name, nodes in readings:
        for node in nodes:  # a wrapper's module level (what importing the file runs); all of the driver
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("assignment", "grader")):
                module = node.module
                for alias in node.names:
                    target = f"{module}.{alias.name}"
                    if module.startswith("assignment.model") or module.startswith("assignment.tasks"):
                        continue  # the model package and every task's code are copied whole
                    if target not in shipped and module not in shipped:
                        missing.append(f"{name} imports {target}")
            elif isinstance(node, ast.Import):
                missing += [
                    f"{name} imports {a.name}"
                    for a in node.names
                    if a.name.startswith(("assignment.", "grader")) and a.name not in shipped
                ]
    assert not missing, f"a t6 worker would fail to import these (add them to kit_folder.CUDA_WRAPPER_FILES): {missing}"
