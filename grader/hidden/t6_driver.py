"""t6's scenarios, run inside the sandboxed worker around the student's ``t6_kv_cache.py`` (kit code).

The student's cache is a class with state, used by the kit's model: no single function of the file can be called
with data and return data. So the worker runs these kit functions instead (the hidden suite's
``student_module(..., driver=SOURCE)``; requests ``{"driver": "t6_driver"}``): each takes the student's module
first, builds what the scenario needs from the kit's own code (the cache, stand-in kernels, the shipped checkpoint,
a random model, a CUDA graph) and returns plain tensors, numbers and strings. The checker computes every expected
value itself, in its own process.

How the student's cache dispatches to the kernels is the checker's record, not the worker's: the stand-in kernels
of ``dispatch_step`` (``StandInKernels``, here) send each call's tensors to the checker, where this file's
``RecordingKernels`` (the hidden suite's ``KitObject("kernels", ..., make=RecordingKernels)``, served by
grader/isolation/served.py) checks the arguments as the kit's wrappers do, records the call and computes the
answer in float64. What the other scenarios report about the cache object itself (its ``lengths``, whether
``update`` returned views, the launches the checkpoint scenario counted) is still the worker's, read beside the
outputs the checker checks, never instead of them.

The kernels: ``module.kernels`` is pointed at those stand-ins or at ``PrebuiltKernels``, the kit's wrappers over
what the checker built from the graded CUDA files and copied into /kit: each file's device module (a cubin) and
the kit's host library that launches it (no nvcc in the sandbox; the sources are not there either).

It lives with t6's hidden suite (grader/hidden/test_t6_hidden.py), its only caller, which hands it to the worker:
the generic sandbox layer (grader/isolation/) copies the file it is given into the worker's /kit beside worker.py
(read-only, as the rest of /kit) and runs the scenarios a request names. Imports only torch and the kit's own
``assignment`` copy there (the checker imports it too, for ``RecordingKernels`` and ``output_shift``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

SOURCE = Path(__file__).resolve()  # what the hidden suite hands the worker (client.student_module's ``driver``)
LIBRARIES = "libraries"  # beside this file: <stem>.cubin, <stem>.so, manifest.json (client.py writes them)
ENTRY_POINTS = (
    "update_scenario",
    "dispatch_setup",
    "dispatch_step",
    "cpu_model_scenario",
    "stand_in_model_scenario",
    "checkpoint_scenario",
    "timing_setup",
    "timing_step",
    "timing_echo",
)
_state: dict = {}  # loaded checkpoints (per device), the timing session, where the checkpoint is


def configure(checkpoint: str) -> None:
    """Called by the worker once: the shipped checkpoint's path in /kit (relative to this file's folder)."""
    _state["checkpoint_path"] = os.path.join(os.path.dirname(os.path.abspath(__file__)), checkpoint)


# --------------------------------------------------------------------------- kernels


def _kernels_module():
    from assignment import kernels

    return kernels


def _wrappers_module():
    from assignment.cuda import wrappers

    return wrappers


def _decode_task():
    """t6's code (assignment/tasks/t6.py): its workspace class and shape checks, as its wrappers use them."""
    from assignment.tasks import t6

    return t6


def prebuilt_kernels():
    """The kit's wrappers (assignment/kernels.py, on assignment/cuda/wrappers.py) over the libraries in
    /kit/libraries."""
    if "prebuilt" in _state:
        return _state["prebuilt"]
    kernels, wrappers = _kernels_module(), _wrappers_module()
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARIES)
    manifest_path = os.path.join(folder, "manifest.json")
    manifest = {}
    if os.path.isfile(manifest_path):
        with open(manifest_path) as file:
            manifest = json.load(file)
    loaded: dict[str, object] = {}  # module path -> wrappers.LoadedKernels

    class PrebuiltKernels(kernels.Kernels):
        """Counts its calls of the two attention kernels (a private attribute: a graded file may not reach it)."""

        def __init__(self):
            super().__init__()
            self._launches: dict[str, int] = {}

        def flash_attention(self, *args, **kwargs):
            self._launches["flash_attention"] = self._launches.get("flash_attention", 0) + 1
            return super().flash_attention(*args, **kwargs)

        def decode_attention(self, *args, **kwargs):
            self._launches["decode_attention"] = self._launches.get("decode_attention", 0) + 1
            return super().decode_attention(*args, **kwargs)

        def require(self, export, tasks, kernel):
            entry = manifest.get(export.file)
            if entry is None:
                raise RuntimeError(
                    f"{kernel}: {export.file} was not built for the grader's worker (a GPU worker "
                    "gets the builds of the files its suite names)"
                )
            if "module" not in entry:
                raise RuntimeError(f"{kernel}: {export.file} could not be built: {entry.get('error', '?')}")
            for task in tasks:
                lines = entry.get("todo", {}).get(task)
                if lines:
                    where = f"KIT_TODO({task}) on line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
                    raise NotImplementedError(
                        f"{task}: TODO({task}) in {export.file} is not implemented yet "
                        f"({where}; {kernel} was not launched)"
                    )
            return wrappers.FileState(os.path.join(folder, entry["module"]), 0, 0, tuple(tasks))

        def function(self, export, state):
            key = (state.path, export.symbol)
            if key not in wrappers._functions:
                if state.path not in loaded:
                    entry = next(e for e in manifest.values() if e.get("module") == os.path.basename(state.path))
                    loaded[state.path] = wrappers.load_module(os.path.join(folder, entry["host"]), state.path)
                wrappers._functions[key] = wrappers.bind(loaded[state.path], export)
            return wrappers._functions[key]

    _state["prebuilt"] = PrebuiltKernels()
    return _state["prebuilt"]


def _use_prebuilt(module) -> None:
    prebuilt = prebuilt_kernels()
    module.kernels = prebuilt
    _wrappers_module().run_under_test(prebuilt)  # the calls that name no implementation run them too


def _attention64(q, k, v, causal: bool, scale: float | None, lengths=None):
    """float64 attention (assignment.testing.reference_attention: grouped K/V heads, causal bottom-right, a row that
    sees no key gets 0 and -inf); ``lengths`` (a list, one per row) keeps row b to its first lengths[b] keys, never
    reading the others (a cache past its length may hold anything)."""
    from assignment.testing import reference_attention

    if lengths is not None:
        rows = [
            _attention64(q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n], causal, scale)
            for b, n in enumerate(lengths)
        ]
        return torch.cat([o for o, _ in rows]), torch.cat([l for _, l in rows])
    return reference_attention(q, k, v, causal=causal, scale=scale)


class StandInKernels:
    """The kernels of t4/t5 and t6 as the student's cache sees them in the worker: each call goes to the checker
    (``served``: the worker's stand-in for a ``RecordingKernels`` there), which records it and computes the answer
    in float64. Only what the checker cannot see from the data is checked here, as the real wrappers check it: the
    tensors' layout (they cross the channel contiguous) and where a workspace came from."""

    def __init__(self, served):
        self._served = served
        self._kernels = _kernels_module()

    @staticmethod
    def _require_contiguous(kernel: str, **tensors) -> None:
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and not t.is_contiguous():
                raise ValueError(f"{kernel}: {name} must be contiguous (call .contiguous()), got strides {t.stride()}")

    @staticmethod
    def _written(o, l, out, lse):
        return (o if out is None else out.copy_(o)), (l if lse is None else lse.copy_(l))

    def flash_attention(self, q, k, v, causal=False, scale=None, out=None, lse=None):
        self._require_contiguous("t4_flash_attention_forward", q=q, k=k, v=v)
        o, l = self._served.flash_attention(q, k, v, bool(causal), None if scale is None else float(scale))
        return self._written(o, l, out, lse)

    def decode_workspace(self, q, k_cache, num_splits=None):
        splits = self._served.decode_workspace(q, k_cache, num_splits)
        return _decode_task().DecodeWorkspace(
            torch.empty(0, device=q.device), int(splits), int(q.shape[0]), int(q.shape[1]), int(q.shape[-1])
        )

    def decode_attention(
        self, q, k_cache, v_cache, lengths, scale=None, out=None, lse=None, workspace=None, num_splits=None
    ):
        kernel = "t6_decode_attention"
        self._require_contiguous(kernel, q=q, k_cache=k_cache, v_cache=v_cache, lengths=lengths)
        if workspace is not None and not isinstance(workspace, _decode_task().DecodeWorkspace):
            raise TypeError(f"{kernel}: workspace must come from decode_workspace(q, k_cache)")
        o, l = self._served.decode_attention(
            q, k_cache, v_cache, lengths, None if scale is None else float(scale), workspace is not None
        )
        return self._written(o, l, out, lse)


def output_shift(seed: int, heads: int, head_dim: int) -> torch.Tensor:
    """(heads, head_dim) float64: what stand-in kernels built with ``shift_seed=seed`` add to every output row of each
    query head. The seed never leaves the checker, so only a cache that returns what its kernels returned (not
    attention it computed itself) passes the shift on to its output and the model's logits."""
    return torch.randn(heads, head_dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


class RecordingKernels:
    """The checker's half of the stand-in kernels (grader.isolation.served serves it to the worker's
    ``StandInKernels``): the kit wrappers' argument checks, float64 attention on exactly the tensors the student's
    cache passed (shifted by ``output_shift(shift_seed, H, d)`` per query head when ``shift_seed`` is given), and
    ``calls``, the record the t6 checks judge (which kernel each step called, with how many queries and keys,
    causal or not, the scale, which lengths and where they lived). Built by the checker for each call, so the record
    holds that call's kernel calls only, and nothing in the worker can write to it."""

    METHODS = ("flash_attention", "decode_workspace", "decode_attention")

    def __init__(self, shift_seed: int | None = None):
        self.calls: list[dict] = []
        self.shift_seed = shift_seed

    def _answer(self, o: torch.Tensor) -> torch.Tensor:
        """o (B, H, T, d) float64, with the shift of each query head added when there is one."""
        if self.shift_seed is None:
            return o
        return o + output_shift(self.shift_seed, o.shape[1], o.shape[3]).to(o.device)[None, :, None, :]

    def flash_attention(self, q, k, v, causal: bool, scale):
        _wrappers_module().attention_shapes("t4_flash_attention_forward", q, k, v)
        self.calls.append(
            {
                "op": "flash_attention",
                "causal": bool(causal),
                "keys": int(k.shape[2]),
                "queries": int(q.shape[2]),
                "scale": None if scale is None else float(scale),
            }
        )
        o, l = _attention64(q, k, v, bool(causal), scale)
        return self._answer(o).to(q.dtype), l.float()

    def decode_workspace(self, q, k_cache, num_splits):
        _decode_task()._decode_shapes("t6_decode_attention", q, k_cache, k_cache)
        self.calls.append({"op": "decode_workspace"})
        return int(num_splits or 1)

    def decode_attention(self, q, k_cache, v_cache, lengths, scale, workspace: bool):
        kernel = "t6_decode_attention"
        B, _, _, L_max, _ = _decode_task()._decode_shapes(kernel, q, k_cache, v_cache)
        if (
            not isinstance(lengths, torch.Tensor)
            or lengths.dtype not in (torch.int32, torch.int64)
            or lengths.dim() != 1
            or lengths.shape[0] not in (B, 1)
        ):
            raise TypeError(f"{kernel}: lengths must be an int32 or int64 tensor of shape ({B},) or (1,)")
        values = [min(max(int(x), 0), L_max) for x in lengths.tolist()]
        self.calls.append(
            {
                "op": "decode_attention",
                "capacity": int(L_max),
                "lengths": values,
                "lengths_device": str(lengths.device),
                "lengths_dtype": str(lengths.dtype),
                "workspace": bool(workspace),
                "scale": None if scale is None else float(scale),
            }
        )
        q4 = q if q.dim() == 4 else q[:, :, None]
        o, l = _attention64(q4, k_cache, v_cache, False, scale, values * B if len(values) == 1 else values)
        return self._answer(o).to(q.dtype).reshape(q.shape), l.float().reshape(q.shape[:-1])


# --------------------------------------------------------------------------- the cache on its own (CPU or GPU)


def _new_cache(
    module, max_batch: int, max_seq_len: int, n_kv_heads: int, head_dim: int, device: str, fill: float | None
):
    cache = module.KVCache(max_batch, max_seq_len, n_kv_heads, head_dim, torch.float32, torch.device(device))
    if fill is not None:
        with torch.no_grad():
            cache.k_cache.fill_(fill)
            cache.v_cache.fill_(fill)
    return cache


def _lengths_report(cache, device: str) -> dict:
    lengths = getattr(cache, "lengths", None)
    if not isinstance(lengths, torch.Tensor):
        return {"lengths": None, "lengths_device": "", "lengths_dtype": type(lengths).__name__}
    return {
        "lengths": lengths.detach().to(device).clone(),
        "lengths_device": str(lengths.device),
        "lengths_dtype": str(lengths.dtype),
    }


def update_scenario(
    module, max_batch: int, max_seq_len: int, n_kv_heads: int, head_dim: int, fill: float, steps: list
) -> dict:
    """Writes through ``update`` into a cache whose buffers hold ``fill``: ``steps`` are (input_pos, k, v). After
    each: what update returned (and whether those are views of the buffers) and ``lengths``; then the buffers."""
    device = str(steps[0][1].device)
    cache = _new_cache(module, max_batch, max_seq_len, n_kv_heads, head_dim, device, fill)
    reports = []
    with torch.no_grad():
        for input_pos, k, v in steps:
            k_all, v_all = cache.update(input_pos, k, v)
            reports.append(
                {
                    "k_all": k_all.clone(),
                    "v_all": v_all.clone(),  # as they are now, not at the end
                    "views": bool(
                        k_all.data_ptr() == cache.k_cache.data_ptr() and v_all.data_ptr() == cache.v_cache.data_ptr()
                    ),
                    **_lengths_report(cache, device),
                }
            )
    return {"steps": reports, "k_cache": cache.k_cache, "v_cache": cache.v_cache}


def dispatch_setup(module, max_batch: int, max_seq_len: int, n_kv_heads: int, head_dim: int, device: str) -> None:
    """A fresh cache for the ``dispatch_step`` calls that follow (one worker runs one scenario at a time)."""
    _state["dispatch"] = _new_cache(module, max_batch, max_seq_len, n_kv_heads, head_dim, device, None)


def dispatch_step(module, kernels, q, k, v, input_pos, scale: float, kv_len) -> torch.Tensor:
    """``attend`` of the new tokens q, k, v at ``input_pos`` (kv_len None, as in a captured decode step) on the cache
    of ``dispatch_setup``, its kernels the stand-ins of ``kernels``: the checker's record of this call is the kernel
    calls of this step."""
    module.kernels = StandInKernels(kernels)
    with torch.no_grad():
        return _state["dispatch"].attend(q, k, v, input_pos, scale, kv_len)


# --------------------------------------------------------------------------- the cache in the kit's model


def cpu_model_scenario(module, preset: str, seed: int, tokens, prompt: int, max_seq_len: int) -> list:
    """The kit's random model with its reference attention over the student's cache (``update`` only): the
    prompt's last logits, then one row per decoded token. Runs on any device."""
    from assignment.model.presets import random_model

    return _prefill_then_decode(
        random_model(preset, seed=seed, device=tokens.device), module, tokens, prompt, max_seq_len
    )


def stand_in_model_scenario(module, kernels, preset: str, seed: int, tokens, prompt: int, max_seq_len: int) -> list:
    """The kit's random model with attention "t6" (the cache's ``attend``, on CUDA only) over the student's cache,
    its kernels the stand-ins of ``kernels``, which the checker serves and whose answers it may shift: the prompt's
    last logits, then one row per decoded token."""
    from assignment import tasks
    from assignment.model.presets import random_model

    module.kernels = StandInKernels(kernels)
    model = random_model(preset, seed=seed, device=tokens.device, attention_impl=tasks.attention("t6"))
    return _prefill_then_decode(model, module, tokens, prompt, max_seq_len)


def _prefill_then_decode(model, module, tokens, prompt: int, max_seq_len: int) -> list:
    """tokens[:, :prompt] prefilled on the student's cache, then the rest decoded one at a time: the logits of each."""
    model.setup_caches(tokens.shape[0], max_seq_len, cache_cls=module.KVCache)
    with torch.no_grad():
        logits = [model.prefill(tokens[:, :prompt], torch.arange(prompt, device=tokens.device))]
        for p in range(prompt, tokens.shape[1]):
            logits.append(model.decode_one_token(tokens[:, p : p + 1], torch.tensor([p], device=tokens.device)))
    return logits


def _checkpoint(device: str):
    key = ("checkpoint", device)
    if key not in _state:
        from assignment.model import load_checkpoint

        _state[key] = load_checkpoint(_state["checkpoint_path"], device=device, max_seq_len=1).model
    return _state[key]


def checkpoint_scenario(module, tokens, prompt_chunks: list, max_seq_len: int, graph: bool = False) -> dict:
    """The shipped checkpoint with attention "t6" on the student's cache and the graded kernels: prefill the
    prompt in ``prompt_chunks`` ((first, last) runs), then decode tokens[:, last:] one at a time (eagerly, or by
    replaying one step captured in a CUDA graph). The logits after each chunk, then of each decoded token."""
    from assignment import tasks
    from assignment.model.cuda_graph import GraphDecoder

    device = str(tokens.device)
    model = _checkpoint(device)
    _use_prebuilt(module)
    model.attention_impl = tasks.attention("t6")
    model.setup_caches(tokens.shape[0], max_seq_len, cache_cls=module.KVCache)
    launches = prebuilt_kernels()._launches
    before = dict(launches)
    with torch.no_grad():
        runner = GraphDecoder(model, batch_size=tokens.shape[0]) if graph else model
        logits = [runner.prefill(tokens[:, a:b], torch.arange(a, b, device=device)) for a, b in prompt_chunks]
        for p in range(prompt_chunks[-1][1], tokens.shape[1]):
            logits.append(runner.decode_one_token(tokens[:, p : p + 1], torch.tensor([p], device=device)))
    made = {name: launches.get(name, 0) - before.get(name, 0) for name in ("flash_attention", "decode_attention")}
    return {"prefill": logits[: len(prompt_chunks)], "decode": logits[len(prompt_chunks) :], "launches": made}


# --------------------------------------------------------------------------- timing (one session per worker)


def timing_setup(module, preset: str, seed: int, prompt, max_seq_len: int) -> dict:
    """The random model of the timing rule on the student's cache and kernels, its prompt prefilled once, and one
    decode step captured in a CUDA graph (or, when it cannot be captured, the eager step: said so)."""
    from assignment import tasks
    from assignment.model.cuda_graph import GraphCaptureError, GraphDecoder, SetupClock
    from assignment.model.presets import random_model

    _state.pop("timing", None)
    device = str(prompt.device)
    clock = SetupClock(device)  # where the setup's time went (the grading record shows it)
    _use_prebuilt(module)
    model = random_model(preset, seed=seed, device=device, attention_impl=tasks.attention("t6"))
    clock.step("model")
    model.setup_caches(1, max_seq_len, cache_cls=module.KVCache)
    clock.step("caches")
    captured, reason = True, ""
    with torch.no_grad():
        try:
            runner = GraphDecoder(model)
        except GraphCaptureError as exc:
            captured, reason, runner = False, str(exc)[:600], model
        clock.step("capture")
        runner.prefill(prompt, torch.arange(prompt.shape[1], device=device))
        clock.step("prefill")
    _state["timing"] = {"runner": runner, "position": torch.tensor([prompt.shape[1]], device=device)}
    return {"captured": captured, "reason": reason, "steps_s": clock.steps}


def timing_step(module, token) -> torch.Tensor:
    """One timed decode step: ``token`` (1, 1) at the position after the prompt (the same slot every call, so the
    context stays the prompt); its logits (1, V)."""
    session = _state["timing"]
    with torch.no_grad():
        return session["runner"].decode_one_token(token, session["position"])


def timing_echo(module, token) -> torch.Tensor:
    """A call with a timed step's traffic and no decode (the checker measures the worker's per-call overhead)."""
    session = _state["timing"]
    if "echo" not in session:
        session["echo"] = timing_step(module, token)
    return session["echo"].clone()
