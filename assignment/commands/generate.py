"""``make generate``: stream text from a checkpoint through the student's t7 loop, then its timings.

    python -m assignment.commands.generate --prompt "The history of" [--ckpt DIR] [--max-tokens 100]
        [--temperature 0.8] [--top-p 0.95] [--top-k 50] [--seed 0] [--device cpu|cuda] [--chat]
        [--attention reference|sdpa|<task id>] [--threads N]

Runs the shipped checkpoint by default (no network, no GPU needed). The sampling loop is the task's whose code
``generates`` (``assignment/tasks/``: t7's ``t7_generate.py``), in the implementation ``IMPL`` names (solutions in
an instructor's tree, the student's own file in a bundle); ``--attention`` takes the kit's attentions and each
task's that runs the model's attention (``model_attention``). Temperature 0 is greedy. Settings not given come from the checkpoint's
generation_config.json. TTFT is the time from the request to the first token (tokenizing and the
prefill, after one untimed warm-up step); the time between tokens is the mean over the decode steps.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from assignment import tasks
from assignment.impl import ImplError
from assignment.model.attention_choice import KIT_IMPLEMENTATIONS, task_attention
from assignment.model.config import DEFAULT_CHECKPOINT, CheckpointError

# On a CPU, one thread per this many parameters: decoding a token multiplies every weight matrix by one vector, so a
# model of P parameters is 2P flops a token, and a thread needs about 50 MFLOP (some milliseconds) before splitting
# the work pays for waking it. The shipped model (under 10 M) gets one thread: with a thread per core of a shared
# host it took 183 ms between tokens, with one 7 ms (seed 000's tester; tests/kit/test_generate_cli.py).
PARAMETERS_PER_THREAD = 25_000_000
THREADS_SETTING = "KIT_CPU_THREADS"  # the user's own count (make generate THREADS=n) wins, as does OMP_NUM_THREADS
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # a container's CPU quota: "max 100000" or "150000 100000"


@dataclass
class TimedModel:
    """Stands in front of the model and notes when each prefill and decode step has finished."""

    model: object
    start: float = 0.0
    done: list[float] = field(default_factory=list)

    def __getattr__(self, name):
        return getattr(self.model, name)

    def _timed(self, fn, *args):
        logits = fn(*args)
        if logits.is_cuda:
            torch.cuda.synchronize(logits.device)
        self.done.append(time.perf_counter())
        return logits

    def prefill(self, tokens, input_pos):
        return self._timed(self.model.prefill, tokens, input_pos)

    def decode_one_token(self, token, input_pos):
        return self._timed(self.model.decode_one_token, token, input_pos)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--ckpt", default=str(DEFAULT_CHECKPOINT), help="a Hugging Face checkpoint directory")
    parser.add_argument("--max-tokens", type=int, default=100)
    parser.add_argument("--temperature", type=float, default=None, help="0 is greedy")
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--repetition-penalty", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (a GPU when there is one)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--attention", default="reference", help=attention_help())
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the checkpoint's chat template")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help=f"CPU threads (default: {THREADS_SETTING} or OMP_NUM_THREADS, else one per "
        f"{PARAMETERS_PER_THREAD // 10**6} M parameters, at most the cores this process may use)",
    )
    return parser.parse_args(argv)


def available_cores() -> int:
    """The cores this process may run on (its affinity), at most its container's CPU quota (cgroup v2 cpu.max)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def cpu_threads(parameters: int) -> int:
    """Threads to generate with on a CPU: KIT_CPU_THREADS, else OMP_NUM_THREADS, when set; else one per
    PARAMETERS_PER_THREAD parameters, at least one and at most the available cores (PyTorch's own default, a thread
    per core it sees, oversubscribes a shared host with a small model)."""
    for name in (THREADS_SETTING, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, min(available_cores(), parameters // PARAMETERS_PER_THREAD))


def device_problem(device: str, attention: str) -> str:
    """Why this host cannot run the model on ``device`` with ``attention``, in make generate's words ('' if it
    can): asked before anything loads, so the answer is a line, not a traceback from deep inside PyTorch."""
    try:
        kind = torch.device(device).type
    except RuntimeError:
        return f"DEVICE={device} is not a device: use DEVICE=cpu or DEVICE=cuda, or leave DEVICE out (a GPU if any)"
    gpu = torch.cuda.is_available()
    if kind == "cuda" and not gpu:
        return (
            f"DEVICE={device} needs a CUDA GPU, and PyTorch sees none on this host (torch.cuda.is_available() is "
            "False): leave DEVICE out or use DEVICE=cpu here, or run on a GPU host"
        )
    try:
        spec = task_attention(tasks.attention(attention))
    except ValueError as exc:
        return str(exc)
    if spec is None or not spec.cuda or kind == "cuda":
        return ""
    here = [*(f"ATTN={name}" for name in KIT_IMPLEMENTATIONS)] + [
        f"ATTN={c.id}" for c in tasks.with_model_attention() if not c.model_attention.cuda
    ]
    if gpu:
        return f"ATTN={attention} ({spec.label}) runs on the GPU: leave DEVICE={device} out"
    return (
        f"ATTN={attention} ({spec.label}) needs a CUDA GPU, and PyTorch sees none on this host: run it on a GPU "
        f"host, or use {', '.join(here)} here"
    )


def attention_help() -> str:
    """The --attention choices: "reference, sdpa, t1 (your Python), ... or t6 (your KV cache and decode kernel)"."""
    names = [*KIT_IMPLEMENTATIONS, *(f"{c.id} ({c.model_attention.label})" for c in tasks.with_model_attention())]
    return ", ".join(names[:-1]) + " or " + names[-1]


def sampling_loop():
    """The module whose ``stream`` is the sampling loop: ``IMPL``'s file of the task whose code generates."""
    generating = [c for c in tasks.available() if c.generates is not None]
    if not generating:
        raise ValueError("no available task of the registry writes the sampling loop (TaskCode.generates)")
    return generating[0].generates()


def sampling_settings(args: argparse.Namespace, generation_config: dict) -> dict:
    """The command line wins; then the checkpoint's generation_config.json (do_sample false: greedy); then
    plain sampling at temperature 1."""

    def pick(value, key, default):
        return value if value is not None else generation_config.get(key, default)

    greedy_default = generation_config.get("do_sample") is False
    temperature = (
        pick(args.temperature, "temperature", 1.0) if args.temperature is not None or not greedy_default else 0.0
    )
    return {
        "temperature": float(temperature),
        "top_k": pick(args.top_k, "top_k", None) or None,
        "top_p": pick(args.top_p, "top_p", None),
        "repetition_penalty": float(pick(args.repetition_penalty, "repetition_penalty", 1.0)),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from assignment.model.checkpoint import DTYPES, load_checkpoint

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.max_tokens < 0:
        print("generate: --max-tokens must be >= 0", file=sys.stderr)
        return 2
    problem = device_problem(device, args.attention)
    if problem:
        print(f"generate: {problem}", file=sys.stderr)
        return 2
    try:
        loop = sampling_loop()
        attention = tasks.attention(args.attention)
        loaded = load_checkpoint(args.ckpt, device=device, dtype=DTYPES[args.dtype], attention=attention)
    except (ImplError, CheckpointError, ValueError) as exc:
        print(f"generate: {exc}", file=sys.stderr)
        return 2
    if torch.device(device).type == "cpu":
        torch.set_num_threads(args.threads or cpu_threads(sum(p.numel() for p in loaded.model.parameters())))
    tokenizer, settings = loaded.tokenizer, sampling_settings(args, loaded.generation_config)
    warm_up(loaded.model)
    try:
        start = time.perf_counter()
        text = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
        prompt_tokens = tokenizer.encode(text, add_bos=not args.chat)
        needed = len(prompt_tokens) + args.max_tokens
        if needed > loaded.model.max_seq_len:
            loaded.model.setup_caches(1, min(needed, loaded.config.max_position_embeddings))
        model = TimedModel(loaded.model, start)
        generator = torch.Generator(device).manual_seed(args.seed)
        print(text, end="", flush=True)
        for piece in loop.stream(
            model,
            tokenizer,
            prompt_tokens,
            args.max_tokens,
            stop_tokens=tokenizer.stop_ids,
            generator=generator,
            **settings,
        ):
            print(piece, end="", flush=True)
    except NotImplementedError as exc:
        print(f"\ngenerate: the sampling loop is not written yet: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"\ngenerate: {exc}", file=sys.stderr)
        return 2
    print()
    print(report(model, len(prompt_tokens), device, args, settings), file=sys.stderr)
    return 0


def warm_up(model) -> None:
    """One untimed prefill and decode step, so that TTFT measures the model and not the process's first
    CUDA call (context creation, cuBLAS handles, kernel loading: about 0.3 s on an H100)."""
    with torch.no_grad():
        token = torch.zeros((1, 1), dtype=torch.long, device=model.device)
        model.prefill(token, torch.arange(1, device=model.device))
        model.decode_one_token(token, torch.tensor([1], device=model.device))
    if model.device.type == "cuda":
        torch.cuda.synchronize(model.device)


def report(model: TimedModel, prompt_tokens: int, device: str, args: argparse.Namespace, settings: dict) -> str:
    done = model.done
    if not done:
        return f"-- prompt tokens: {prompt_tokens}; nothing generated"
    ttft = done[0] - model.start
    steps = len(done) - 1
    generated = len(done)  # the prefill gives the first token, each decode step one more (the last may stop)
    between = (done[-1] - done[0]) / steps if steps else float("nan")
    total = done[-1] - model.start
    count = torch.get_num_threads()
    threads = f", {count} CPU thread{'s' if count != 1 else ''}" if torch.device(device).type == "cpu" else ""
    mode = (
        "greedy"
        if settings["temperature"] == 0
        else ", ".join(
            f"{k.replace('_', '-')} {v}" for k, v in settings.items() if v not in (None, 1.0) or k == "temperature"
        )
    )
    return (
        f"-- prompt tokens: {prompt_tokens} | model calls: 1 prefill + {steps} decode | TTFT {ttft * 1e3:.1f} ms | "
        f"time between tokens {between * 1e3:.2f} ms | {generated / total:.1f} tokens/s\n"
        f"-- {device}, {args.dtype}, attention {args.attention}, {mode}, seed {args.seed}{threads}"
    )


if __name__ == "__main__":
    sys.exit(main())
