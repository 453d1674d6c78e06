"""The trials of a training run: its hyper-parameters, the model's initialisation and optimiser, the optimisation
loop with its log and evaluations, and the choice of the weights to keep.

Why this shape: about 11 M parameters, 22 MB in bfloat16, the most the repository should carry (the
checkpoint stays under 25 MB); its head dimension (64) is one the t4-t6 kernels support, and it has
fewer KV heads than query heads so that t6's grouped-query path runs on it.

Why trials: the corpus is small (about 3.8 M tokens), and a model this size starts to memorise it after
a few passes. The best length is not known in advance, so the run is a few trials of the same model
from fresh weights (``epochs``: 4, 8, 16 and 32 passes), each with its own warm-up and cosine decay, all
within ``--minutes`` of training (each trial gets a share of the budget in proportion to its planned
steps, and its decay ends when its share does), a trial stopping early when its validation loss has not
improved for ``patience`` evaluations. Every evaluation also continues the kit's bar prompt greedily
(model_card.BAR_PROMPT) and measures the text as the tests do, with the training text's vocabulary as the
dictionary. The weights kept are those of the lowest validation loss among the evaluations whose greedy
text met the bar, or of the lowest validation loss overall when none did; then, when the corpus carries the
tests' dictionary (``dictionary.txt.gz``), the lowest-loss evaluations' weights are saved in bfloat16,
loaded back on the CPU and held to the kit's whole bar (model_card.bar_failures, what the tests check), and
the first that meets it is kept instead.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from torch import nn

from assignment.model.checkpoint import load_checkpoint, save_checkpoint
from assignment.model.config import ModelConfig
from assignment.model.llama import Transformer
from grader.authoring.model_card import BAR_PROMPT, BAR_TOKENS, ProseMeasures, bar_failures, prose_measures
from grader.authoring.train_data import EOS, Data, random_windows, save_tokenizer

LOG_FIELDS = (
    "trial",
    "step",
    "tokens",
    "elapsed_s",
    "lr",
    "train_loss",
    "val_loss",
    "tokens_per_s",
    "bar_tokens",
    "bar_distinct",
    "bar_known",
)


@dataclass(frozen=True)
class Settings:
    """Every hyper-parameter of a run; FULL is the shipped checkpoint's, SMOKE the CI run's."""

    vocab_size: int = 4096
    hidden_size: int = 384
    intermediate_size: int = 1024  # ~8/3 of hidden (SwiGLU), rounded to a multiple of 64
    num_hidden_layers: int = 6
    num_attention_heads: int = 6  # head_dim = 384 / 6 = 64
    num_key_value_heads: int = 2
    rope_theta: float = 10000.0
    context: int = 512
    batch_size: int = 64
    peak_lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    epochs: tuple[float, ...] = (4.0, 8.0, 16.0, 32.0)  # one trial per entry: its passes over the training tokens
    max_steps: int | None = None  # ... unless a step count (per trial) is given instead
    log_every: int = 25
    eval_every: int = 100
    patience: int = 5  # evaluations without a better validation loss before a trial stops
    max_train_bytes: int | None = None  # read only the start of train.txt ...
    max_val_bytes: int | None = None  # ... and of val.txt
    sample_tokens: int = BAR_TOKENS  # per continuation in the model card
    check_tokens: int = BAR_TOKENS  # the greedy bar check at each evaluation
    candidates: int = 8  # the lowest-loss evaluations whose saved weights are checked against the kit's bar

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def steps_for(self, train_tokens: int, epochs: float) -> int:
        """A trial's length in steps: max_steps, or ``epochs`` passes over ``train_tokens``."""
        return self.max_steps or math.ceil(epochs * train_tokens / (self.batch_size * self.context))


FULL = Settings()
SMOKE = Settings(
    vocab_size=320,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    context=64,
    batch_size=8,
    peak_lr=3e-3,
    warmup_steps=5,
    epochs=(1.0, 2.0),
    max_steps=15,
    log_every=5,
    eval_every=10,
    patience=100,
    max_train_bytes=200_000,
    max_val_bytes=20_000,
    sample_tokens=8,
    check_tokens=8,
)


@dataclass
class TrialResult:
    """One trial of the run: the model from fresh weights, one warm-up and decay over ``epochs`` passes."""

    trial: int
    epochs: float
    planned_steps: int
    steps: int = 0
    tokens_seen: int = 0
    best_val_loss: float = math.inf
    best_step: int = 0
    bar_passed: bool = False  # the greedy bar check passed at one of its evaluations
    stopped_because: str = ""


@dataclass
class RunResult:
    """What the model card reports about a run (training_run.json's "result", less the log)."""

    steps: int = 0
    tokens_seen: int = 0
    best_val_loss: float = math.inf
    best_step: int = 0
    best_trial: int = 0
    final_train_loss: float = math.nan
    train_seconds: float = 0.0
    stopped_because: str = ""
    compiled: bool = False
    selection: str = ""
    trials: list[TrialResult] = field(default_factory=list)
    log: list[dict] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# Model


def model_config(settings: Settings, vocab_size: int, bos_id: int, eos_id: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=settings.hidden_size,
        intermediate_size=settings.intermediate_size,
        num_hidden_layers=settings.num_hidden_layers,
        num_attention_heads=settings.num_attention_heads,
        num_key_value_heads=settings.num_key_value_heads,
        head_dim=settings.head_dim,
        rope_theta=settings.rope_theta,
        max_position_embeddings=settings.context,
        tie_word_embeddings=True,
        bos_token_id=bos_id,
        eos_token_id=[eos_id],
        torch_dtype="bfloat16",
    )


def init_weights(model: Transformer) -> None:
    """GPT-2's initialisation: N(0, 0.02), the residual outputs scaled down by sqrt(2 * layers).

    PyTorch's defaults would give the tied embedding N(0, 1) and so logits of size ~16 at the start.
    """
    residual_std = 0.02 / math.sqrt(2 * model.config.num_hidden_layers)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            std = residual_std if name.endswith(("o_proj", "down_proj")) else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight is counted once


def make_optimizer(model: nn.Module, settings: Settings, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (norm gains are not decayed)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": settings.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=settings.peak_lr, betas=(0.9, 0.95), fused=device.type == "cuda")


def learning_rate(step: int, progress: float, settings: Settings) -> float:
    """Linear warm-up over steps, then a cosine decay to min_lr_ratio as ``progress`` goes from 0 to 1.

    The run is planned in steps (``epochs`` of data) and also limited in minutes (the step rate depends
    on the GPU), so progress is the larger of the two fractions used up: the decay completes whichever
    limit comes first.
    """
    if step <= settings.warmup_steps:
        return settings.peak_lr * step / settings.warmup_steps
    floor = settings.min_lr_ratio
    return settings.peak_lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


@torch.no_grad()
def evaluate(model: Transformer, stream: torch.Tensor, context: int, batch: int, autocast) -> float:
    """Mean cross-entropy (nats per token) over consecutive, non-overlapping windows of the stream."""
    model.eval()
    count = (len(stream) - 1) // context
    inputs = stream[: count * context].view(count, context)
    targets = stream[1 : count * context + 1].view(count, context)
    total = 0.0
    for i in range(0, count, batch):
        with autocast():
            logits = model(inputs[i : i + batch])
        total += F.cross_entropy(logits.flatten(0, 1), targets[i : i + batch].flatten(), reduction="sum").item()
    model.train()
    return total / (count * context)


def maybe_compile(model: Transformer, sample: torch.Tensor, autocast) -> tuple[nn.Module, bool]:
    """torch.compile where it works (a CUDA host with a working Triton); the eager model otherwise.

    Compilation happens at the first call, so that call is made here, inside the guard.
    """
    try:
        compiled = torch.compile(model)
        with autocast():
            compiled(sample).float().mean().backward()
        model.zero_grad(set_to_none=True)
        return compiled, True
    except Exception as exc:  # noqa: BLE001 - any compiler failure means: train eagerly
        print(
            f"train: torch.compile unavailable ({type(exc).__name__}: {str(exc)[:200]}); training eagerly",
            file=sys.stderr,
        )
        model.zero_grad(set_to_none=True)
        return model, False


@torch.no_grad()
def greedy_check(
    model: Transformer, tokenizer: HFTokenizer, vocabulary: set[str], tokens: int, autocast
) -> ProseMeasures:
    """The greedy continuation of BAR_PROMPT, measured as the tests measure the shipped model's.

    A plain loop of full forward passes (no KV cache: the training model has none), in the training precision;
    the training text's vocabulary stands in for the tests' dictionary.
    """
    model.eval()
    ids = tokenizer.encode(BAR_PROMPT).ids  # BOS first, as the kit's tokenizer adds it
    start, stopped = len(ids), False
    eos = tokenizer.token_to_id(EOS)
    for _ in range(tokens):
        with autocast():
            logits = model(torch.tensor([ids[-model.config.max_position_embeddings :]], device=model.device))
        token = int(logits[0, -1].argmax())
        if token == eos:
            stopped = True
            break
        ids.append(token)
    model.train()
    new = ids[start:]
    return prose_measures(tokenizer.decode(new), len(new), stopped, vocabulary)


class Trainer:
    """The trials of a run: the optimisation step, the periodic log and evaluation, the weights to keep."""

    def __init__(
        self,
        model: Transformer,
        data: Data,
        vocabulary: set[str],
        settings: Settings,
        device: torch.device,
        seed: int,
    ):
        self.model, self.settings, self.device, self.seed = model, settings, device, seed
        self.train_stream, self.val_stream = data.train_stream, data.val_stream
        self.tokenizer, self.vocabulary = data.tokenizer, vocabulary
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.bf16 = device.type == "cuda"
        self.optimizer = make_optimizer(model, settings, device)
        self.step_model: nn.Module = model
        self.result = RunResult()
        self.trial: TrialResult | None = None
        self.best_state: dict[str, torch.Tensor] = {}
        self.best_key: tuple[bool, float] = (False, -math.inf)  # (greedy bar met, -validation loss): larger is better
        # The evaluations' weights with the lowest validation losses, on the host in bfloat16 (as they would ship),
        # for the final check of the kit's bar on the CPU: (validation loss, trial, step, weights).
        self.candidates: list[tuple[float, int, int, dict[str, torch.Tensor]]] = []
        self.stale = 0  # evaluations since the trial's best one
        self.loss_sum, self.steps_summed = torch.zeros((), device=device), 0

    def autocast(self):
        return torch.autocast(self.model.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        return random_windows(self.train_stream, self.settings.batch_size, self.settings.context, self.generator)

    def step(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = self.batch()
        with self.autocast():
            logits = self.step_model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_sum += loss.detach()  # summed on the device: no host sync per step
        self.steps_summed += 1
        self.trial.tokens_seen += inputs.numel()
        self.result.tokens_seen += inputs.numel()

    def record(self, step: int, lr: float, elapsed: float, interval: float, evaluate_now: bool) -> dict:
        """Log the mean training loss since the last record and, when asked, the validation loss and bar check."""
        train_loss = self.loss_sum.item() / self.steps_summed if self.steps_summed else ""
        tokens = self.steps_summed * self.settings.batch_size * self.settings.context
        row = dict.fromkeys(LOG_FIELDS, "")
        row.update(
            trial=self.trial.trial,
            step=step,
            tokens=self.trial.tokens_seen,
            elapsed_s=round(elapsed, 2),
            lr=lr,
            train_loss=train_loss,
            tokens_per_s=round(tokens / interval) if tokens else "",
        )
        self.loss_sum.zero_()
        self.steps_summed = 0
        if evaluate_now:
            s = self.settings
            row["val_loss"] = evaluate(self.model, self.val_stream, s.context, s.batch_size, self.autocast)
            check = greedy_check(self.model, self.tokenizer, self.vocabulary, s.check_tokens, self.autocast)
            row.update(bar_tokens=check.tokens, bar_distinct=round(check.distinct, 3), bar_known=round(check.known, 3))
            self.keep_if_best(step, row["val_loss"], check.passes(tokens=s.check_tokens) and step > 0)
        self.result.log.append(row)
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()), flush=True)
        return row

    def keep_if_best(self, step: int, val_loss: float, bar_met: bool) -> None:
        trial = self.trial
        trial.bar_passed |= bar_met
        if val_loss < trial.best_val_loss:
            trial.best_val_loss, trial.best_step, self.stale = val_loss, step, 0
        else:
            self.stale += 1
        if step > 0:
            state = {k: v.detach().to("cpu", torch.bfloat16, copy=True) for k, v in self.model.state_dict().items()}
            self.candidates = sorted([*self.candidates, (val_loss, trial.trial, step, state)], key=lambda c: c[0])
            del self.candidates[self.settings.candidates :]
        key = (bar_met, -val_loss)
        if step > 0 and key > self.best_key:
            self.best_key = key
            self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            r = self.result
            r.best_val_loss, r.best_step, r.best_trial = val_loss, step, trial.trial

    def start_trial(self, number: int, epochs: float, planned_steps: int) -> None:
        """Fresh weights and optimiser state; the compiled step keeps working (the parameters change in place)."""
        torch.manual_seed(self.seed + number)
        init_weights(self.model)
        self.optimizer = make_optimizer(self.model, self.settings, self.device)
        self.trial = TrialResult(number, epochs, planned_steps)
        self.result.trials.append(self.trial)
        self.stale = 0
        self.record(0, 0.0, 0.0, 1.0, evaluate_now=True)  # the untrained model's loss: each curve's first point

    def run_trial(self, budget_s: float) -> None:
        settings, trial = self.settings, self.trial
        start = last_record = time.perf_counter()
        step, stop = 0, ""
        while not stop:
            step += 1
            progress = max((time.perf_counter() - start) / budget_s, step / trial.planned_steps)
            lr = learning_rate(step, progress, settings)
            self.step(lr)
            out_of_time = time.perf_counter() - start >= budget_s
            last = out_of_time or step == trial.planned_steps
            if step % settings.log_every == 0 or step % settings.eval_every == 0 or last:
                self.record(
                    step,
                    lr,
                    time.perf_counter() - start,
                    time.perf_counter() - last_record,
                    evaluate_now=step % settings.eval_every == 0 or last,
                )
                last_record = time.perf_counter()
            if out_of_time:
                stop = "its share of the time budget"
            elif step == trial.planned_steps:
                stop = f"planned steps ({trial.planned_steps:,})"
            elif self.stale >= settings.patience:
                stop = f"no better validation loss in {self.stale} evaluations"
        trial.steps, trial.stopped_because = step, stop
        self.result.steps += step

    def run(self, budget_s: float, use_compile: bool) -> RunResult:
        """Every trial within the time budget (compilation is not timed), then the weights to keep restored."""
        settings, train_tokens = self.settings, len(self.train_stream)
        plans = [(e, settings.steps_for(train_tokens, e)) for e in settings.epochs]
        total_steps = sum(steps for _, steps in plans)
        if use_compile:
            self.step_model, self.result.compiled = maybe_compile(self.model, self.batch()[0], self.autocast)
        start = time.perf_counter()
        for number, (epochs, steps) in enumerate(plans, 1):
            self.start_trial(number, epochs, steps)
            self.run_trial(budget_s * steps / total_steps)
        r = self.result
        r.train_seconds = time.perf_counter() - start
        r.final_train_loss = next(row["train_loss"] for row in reversed(r.log) if row["train_loss"] != "")
        r.stopped_because = "; ".join(f"trial {t.trial}: {t.stopped_because}" for t in r.trials)
        met = self.best_key[0]
        r.selection = (
            "the lowest validation loss among the evaluations whose greedy continuation of "
            f'"{BAR_PROMPT}" met the tests\' bar ({settings.check_tokens} tokens, known and distinct words)'
            if met
            else "the lowest validation loss (no evaluation's greedy continuation met the tests' bar)"
        )
        self.model.load_state_dict(self.best_state)
        return r


def check_candidates(
    trainer: Trainer, tokenizer: HFTokenizer, dictionary: set[str], context: int, budget_s: float = 60.0
) -> None:
    """Keep the lowest-loss candidate whose weights, saved in bfloat16 and loaded back on the CPU as the kit loads
    them, meet the kit's bar with the tests' dictionary (model_card.bar_failures); the trainer's choice otherwise.

    The check during training ran in the training precision on the GPU with the training text's vocabulary:
    greedy text can take another turn on the CPU, and this check is the one the tests will make.
    """
    model, result = trainer.model, trainer.result
    chosen = {k: v.clone() for k, v in trainer.best_state.items()}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kit-tiny-candidate-") as tmp:
        for val_loss, trial, step, state in trainer.candidates:
            if time.perf_counter() - start > budget_s:
                break
            model.load_state_dict(state)
            save_checkpoint(model, Path(tmp), dtype=torch.bfloat16)
            save_tokenizer(tokenizer, Path(tmp), context)
            failures = bar_failures(load_checkpoint(Path(tmp), max_seq_len=2 * BAR_TOKENS), dictionary)
            print(
                f"train: candidate trial {trial} step {step} (validation loss {val_loss:.4f}): "
                + ("meets the bar" if not failures else "misses " + "; ".join(failures)),
                flush=True,
            )
            if not failures:
                result.best_val_loss, result.best_trial, result.best_step = val_loss, trial, step
                result.selection = (
                    "the lowest validation loss among the evaluations whose weights, saved in bfloat16 and loaded back "
                    "on the CPU, met the kit's bar (model_card.bar_failures, the tests' dictionary)"
                )
                return
    model.load_state_dict(chosen)
    result.selection += "; no candidate met the kit's bar on the CPU"
