"""The model card of a checkpoint train.py made: ``loss.png`` and ``MODEL_CARD.md``.

The card is written from what the run measured and from the files beside it (config.json,
SOURCES.json, words.txt.gz), after the saved checkpoint has been loaded back through
``load_checkpoint``: its sample continuations come from the weights as shipped (bfloat16, read by
the kit's own loader), so a card with samples is also proof that the directory loads.

``english_word_share`` is the measure of "recognisable English" the kit's tests apply to samples:
the share of generated words found in the training text's vocabulary (words.txt.gz).
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from assignment.model.checkpoint import LoadedModel, load_checkpoint
from grader.authoring.corpus import words_of

if TYPE_CHECKING:
    from grader.authoring.train import RunResult

PROMPTS = ("The history of", "Once upon a time", "The most important thing", "She said that", "In the morning")
SAMPLING = {"temperature": 0.8, "top_k": 40, "seed": 0}


@dataclass
class RunFacts:
    """What train.py knows about the run that the files on disk do not say."""

    settings: dict
    parameters: int
    result: RunResult
    train_tokens: int
    val_tokens: int
    train_bytes: int
    val_bytes: int
    device: str
    torch_version: str
    wall_seconds: float
    command: str


def load_vocabulary(path: Path) -> set[str]:
    """The words of words.txt.gz (one lowercase word a line)."""
    return set(gzip.decompress(path.read_bytes()).decode("utf-8").split())


def english_word_share(text: str, vocabulary: set[str]) -> float:
    """Share of the words of ``text`` (corpus.words_of) that are in ``vocabulary``; 1.0 for no words."""
    words = words_of(text)
    return sum(w in vocabulary for w in words) / len(words) if words else 1.0


@torch.no_grad()
def continue_prompt(
    loaded: LoadedModel,
    prompt: str,
    max_new_tokens: int,
    temperature: float | None = None,
    top_k: int = 0,
    seed: int = 0,
) -> str:
    """The model's continuation of ``prompt``: greedy without a temperature, else top-k sampling.

    A plain loop over the model's prefill/decode entry points, kept apart from t7 (the students'
    sampling loop) so the card never depends on a task's solution.
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer.encode(prompt)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    logits = model.prefill(torch.tensor([ids], device=model.device), torch.arange(len(ids), device=model.device))
    new: list[int] = []
    for position in range(len(ids), min(len(ids) + max_new_tokens, model.max_seq_len)):
        if temperature:
            scaled = logits[0] / temperature
            if top_k:
                scaled[scaled < scaled.topk(top_k).values[-1]] = -math.inf
            token = int(torch.multinomial(scaled.softmax(-1), 1, generator=generator))
        else:
            token = int(logits[0].argmax())
        if token in tokenizer.stop_ids:
            break
        new.append(token)
        logits = model.decode_one_token(
            torch.tensor([[token]], device=model.device), torch.tensor([position], device=model.device)
        )
    return tokenizer.decode(new)


def plot_losses(log: list[dict], path: Path) -> None:
    """Training and validation loss against tokens seen, the best validation point marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    trained = [r for r in log if r["train_loss"] != ""]
    ax.plot(
        [r["tokens"] / 1e6 for r in trained],
        [r["train_loss"] for r in trained],
        label="train (mean since the last point)",
    )
    val = [r for r in log if r["val_loss"] != ""]
    ax.plot([r["tokens"] / 1e6 for r in val], [r["val_loss"] for r in val], "o-", markersize=3, label="validation")
    best = min(val, key=lambda r: r["val_loss"])
    ax.annotate(
        f"best {best['val_loss']:.3f}",
        (best["tokens"] / 1e6, best["val_loss"]),
        textcoords="offset points",
        xytext=(0, 12),
        ha="center",
        arrowprops={"arrowstyle": "-"},
    )
    ax.set(xlabel="tokens seen (millions)", ylabel="cross-entropy (nats / token)", title="kit-tiny training loss")
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
            f"`{s['package']}` {s['version']}",
            s["description"],
            s["licence"],
            f"{s['train_bytes'] / 1e6:.2f} MB",
            f"{s['train_words']:,}",
            f"{s['val_bytes'] / 1e3:.0f} kB",
        )
        for s in sources["sources"]
    ]
    table = _table(
        ("Debian package", "text", "licence (its copyright file)", "train", "train words", "validation"), rows
    )
    return f"""## Data

English prose from Debian packages, fetched with `apt-get download` and cleaned by
`python -m grader.authoring.corpus` (paragraphs of running text only: no code, tables, tables of
contents or markup; duplicate paragraphs removed). Validation holds out whole documents (chapters,
pages, glossary sections), about {sources["val_fraction"]:.1%} of each source.

{table}

Each licence is the one the package's `/usr/share/doc/<package>/copyright` states; `SOURCES.json`
beside this card quotes the sentence of that file it was read from. The weights are a statistical
summary of this text: redistribute them on the terms of these licences.

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
    epochs = r.tokens_seen / facts.train_tokens
    bits_per_byte = r.best_val_loss * facts.val_tokens / (facts.val_bytes * math.log(2))
    optimiser = (
        f"AdamW, betas (0.9, 0.95), weight decay {s['weight_decay']} on matrices, gradient clipping {s['grad_clip']}"
    )
    schedule = (
        f"{s['peak_lr']:g} after {s['warmup_steps']} warm-up steps, then a cosine decay to "
        f"{s['min_lr_ratio'] * s['peak_lr']:g} over the planned {s['max_steps']:,} steps"
    )
    precision = (
        "float32" if facts.device.startswith("CPU") else "bfloat16 autocast, float32 weights and optimiser state"
    )
    timing = (
        f"{r.train_seconds / 60:.1f} min ({facts.wall_seconds / 60:.1f} min for the whole command: tokenizer, "
        "compilation and this card included)"
    )
    best = (
        f"**{r.best_val_loss:.3f}** nats/token at step {r.best_step:,} "
        f"(perplexity {math.exp(r.best_val_loss):.1f}, about {bits_per_byte:.2f} bits per byte)"
    )
    rows = [
        ("hardware", facts.device),
        ("PyTorch", facts.torch_version),
        ("steps", f"{r.steps:,} (stopped: {r.stopped_because})"),
        ("batch", f"{s['batch_size']} windows of {s['context']} tokens (random offsets in the token stream)"),
        ("tokens seen", f"{r.tokens_seen:,} ({epochs:.1f} passes over the training tokens)"),
        ("optimiser", optimiser),
        ("learning rate", schedule),
        ("precision", precision),
        ("torch.compile", "yes" if r.compiled else "no"),
        ("training time", timing),
        ("final training loss", f"{r.final_train_loss:.3f}"),
        ("best validation loss", best),
    ]
    return f"""## Training

```
{facts.command}
```

{_table(("", ""), rows)}

The saved weights are those of the best validation loss. `training_log.csv` has every logged step.

![training and validation loss](loss.png)"""


def _samples_section(samples: list[tuple[str, str, str]], vocabulary: set[str], max_new_tokens: int) -> str:
    generated = " ".join(g + " " + s for _, g, s in samples)
    share = english_word_share(generated, vocabulary)
    blocks = []
    for prompt, greedy, sampled in samples:
        blocks.append(f"**{prompt}**\n\n- greedy: {prompt}{_quote(greedy)}\n- sampled: {prompt}{_quote(sampled)}")
    return f"""## Samples

{max_new_tokens} new tokens at most for each prompt, from the weights as saved, loaded back with
`assignment.model.load_checkpoint`: greedy, and sampled with temperature {SAMPLING["temperature"]} and
top-k {SAMPLING["top_k"]} (seed {SAMPLING["seed"]}). {share:.0%} of the generated words are words of the
training text (`words.txt.gz`).

""" + "\n\n".join(blocks)


def _quote(text: str) -> str:
    """Generated text on one Markdown line, with Markdown's active characters escaped."""
    flat = (" " if text[:1].isspace() else "") + " ".join(text.split())  # the first word's space is the model's
    for ch in "\\`*_[]<>#|":
        flat = flat.replace(ch, "\\" + ch)
    return flat


def write_model_card(out: Path, facts: RunFacts) -> Path:
    """Render loss.png and MODEL_CARD.md into the checkpoint directory ``out``."""
    plot_losses(facts.result.log, out / "loss.png")
    loaded = load_checkpoint(out)
    length = facts.settings["sample_tokens"]
    samples = [(p, continue_prompt(loaded, p, length), continue_prompt(loaded, p, length, **SAMPLING)) for p in PROMPTS]
    vocabulary = load_vocabulary(out / "words.txt.gz")
    sources = json.loads((out / "SOURCES.json").read_text())
    config = json.loads((out / "config.json").read_text())
    weights_bytes = (out / "model.safetensors").stat().st_size
    card = f"""# kit-tiny: the course kit's small LLaMA

A {facts.parameters / 1e6:.1f} M-parameter LLaMA-architecture language model in the Hugging Face layout,
trained by the kit's own script so that `make generate` and the t6/t7 tasks have a real checkpoint that
runs offline on a CPU. It writes English-looking text, not facts: it is a test article for attention
kernels and sampling loops, not an assistant.

{_data_section(sources, facts)}

{_model_section(config, facts, weights_bytes)}

{_training_section(facts)}

{_samples_section(samples, vocabulary, length)}

## Reproduce

```
make corpus       # python -m grader.authoring.corpus --out build/corpus   (needs Debian's apt-get)
make train-tiny   # {facts.command}
```
"""
    path = out / "MODEL_CARD.md"
    path.write_text(card)
    return path
