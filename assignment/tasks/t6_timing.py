"""t6's timed workloads (assignment/tasks/t6.py's ``timing_workload``): the decode kernel over a full cache, and one
decode step of a 1B model with the student's cache, timed from the grader's process with the student's path in the
sandboxed worker; and the ``KVCache`` class of an implementation's t6_kv_cache.py on kernels it is handed, which both
use."""

from __future__ import annotations

import time
from types import ModuleType

from assignment.tasks import attention

TASK_ID = "t6"
LAYOUTS = ("batch, head, dim", "batch, head")  # of O and of the LSE


def timing_workload(rule, student, reference, tolerance, base: int, student_model=None):
    """The decode kernel over a full cache, or (a rule on ``model``) one decode step of the model, timed from the
    grader's process with the student's path in the sandboxed worker (``student_model``)."""
    if "model" in rule.shape:
        return _decode_step_workload(rule, reference, student_model, base)
    return _decode_kernel_workload(rule, student, reference, tolerance, base)


def _decode_kernel_workload(rule, student, ref, tolerance, base: int):
    """The t6 kernel over a full cache (lengths = L = L_max), each candidate with its own preallocated workspace."""
    import torch

    from assignment.perf.workload import Workload, generator
    from assignment.testing import assert_close

    s = rule.shape
    B, H, H_kv, L, d = s["B"], s["H"], s.get("H_kv", s["H"]), s["L"], s["d"]

    def make(i):
        gen = generator(base + i)
        return (
            torch.randn(B, H, d, device="cuda", generator=gen),
            *(torch.randn(B, H_kv, L, d, device="cuda", generator=gen) for _ in range(2)),
            torch.full((1,), L, dtype=torch.int32, device="cuda"),
        )

    q_shape, cache_shape = torch.empty(B, H, d, device="cuda"), torch.empty(B, H_kv, L, d, device="cuda")
    ref_workspace = ref.decode_workspace(q_shape, cache_shape)
    workspaces: list = []  # the student's, made at its first call (a TODO left fails that call, not the workload)

    def student_call(x):
        if not workspaces:
            workspaces.append(student.decode_workspace(q_shape, cache_shape))
        return student.decode_attention(*x, workspace=workspaces[0])

    def reference_call(x):
        return ref.decode_attention(*x, workspace=ref_workspace)

    def check(name, x, output):  # O and LSE (the workspace is scratch), within the values checks' bound
        if name == "student":
            for what, got, want, layout in zip(("O", "LSE"), output, reference_call(x), LAYOUTS):
                assert_close(got, want, **tolerance, name=f"timed {what}", layout=layout)

    return Workload(make, student_call, reference_call, None, check, bytes_moved=2.0 * B * H_kv * L * d * 4)


def _decode_step_workload(rule, reference_kernels, student_model, base: int):
    """One decode step of a random model of the rule's preset at position ``context`` after a prompt of that many
    tokens (the same slot every call: the context stays fixed), against the naive path (a forward pass over all
    context + 1 tokens with the reference attention, the last logits) and the reference (the kit's cache on
    ``reference_kernels``, one captured step). Each call's token comes from its seed."""
    import torch

    from assignment.model.cuda_graph import GraphDecoder, SetupClock
    from assignment.model.presets import random_model, sharing_weights
    from assignment.perf.model_bench import decode_bytes
    from assignment.perf.workload import Workload, generator
    from assignment.registry import load_registry
    from assignment.testing import assert_close

    clock = SetupClock()
    s = rule.shape
    preset, context = s["model"], s["context"]
    max_seq_len = context + 8
    model_seed = (base + 11) % 2**62
    logits_tol = load_registry().task(TASK_ID).tol("logits")
    model = random_model(preset, seed=model_seed, device="cuda")
    vocab = model.vocab_size
    prompt = torch.randint(0, vocab, (1, context), device="cuda", generator=generator(base + 7))
    position = torch.tensor([context], device="cuda")
    clock.step("model")
    with torch.no_grad():
        kit = sharing_weights(model, attention(TASK_ID))  # ATTN=t6: the kit's cache attends
        kit.setup_caches(1, max_seq_len, cache_cls=load_kv_cache_class("solutions", reference_kernels))
        clock.step("caches")
        kit_runner = GraphDecoder(kit)
        clock.step("capture")
        kit_runner.prefill(prompt, torch.arange(context, device="cuda"))
        clock.step("prefill")

    def make(i):
        return torch.randint(0, vocab, (1, 1), device="cuda", generator=generator(base + i))

    def reference(token):
        with torch.no_grad():
            return kit_runner.decode_one_token(token, position)

    def naive(token):
        with torch.no_grad():
            return model(torch.cat([prompt, token], dim=1))[:, -1]

    notes: dict = {"checker_setup_s": clock.total_s, "checker_setup_steps_s": clock.steps}

    def start_student() -> None:
        """The student's path set up in the worker: only once the timing has the GPU (grader/grade/phases.py), so
        nothing of the student's runs while another task is timed."""
        began = time.perf_counter()  # the worker's start, its setup and its call overhead measured: one number
        info = student_model.setup(preset, model_seed, prompt, max_seq_len)
        notes["student_setup_s"] = round(time.perf_counter() - began, 2)
        notes["student_setup_steps_s"] = info.get("steps_s")
        notes["student_path"] = (
            "one decode step captured in a CUDA graph, replayed"
            if info.get("captured")
            else "the eager decode step: it could not be captured in a CUDA graph ("
            + str(info.get("reason", ""))[:300]
            + ")"
        )
        notes["student_runs_in"] = "the sandboxed worker; timed from the checker, the call's overhead included"
        if info.get("overhead_ms") is not None:
            notes["worker_call_overhead_ms"] = info["overhead_ms"]

    if student_model is not None:
        student = student_model.step
    else:

        def student(token):
            raise RuntimeError(f"{TASK_ID}'s model rule needs the student's decoder (the hidden suite passes one)")

    def check(name, token, logits):
        if name == "student":
            assert_close(logits, reference(token), **logits_tol, name="timed logits", layout="row, vocabulary id")

    return Workload(
        make,
        student,
        reference,
        naive,
        check,
        bytes_moved=float(decode_bytes(model.config, context + 1)),
        notes=notes,
        start_student=start_student if student_model is not None else None,
        end_student=student_model.close if student_model is not None else None,
    )


def load_kv_cache_class(impl: str | None, kernels) -> type:
    """The ``KVCache`` class of t6_kv_cache.py in implementation ``impl`` (None: ``IMPL``), running ``kernels`` (that
    same implementation's): the module's ``kernels``, the kit's module-level API (a module, the only one the file's
    rules let it import: IMPL's kernels, whatever IMPL is), is pointed at them, once (a file is loaded once)."""
    from assignment.impl import load_python

    module = load_python("t6_kv_cache.py", impl)
    if isinstance(getattr(module, "kernels", None), ModuleType):
        module.kernels = kernels
    return module.KVCache
