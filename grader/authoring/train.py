"""Train the kit's tiny LLaMA (``checkpoints/kit-tiny``): its BPE tokenizer, then the model.

    PYTHONPATH=. python -m grader.authoring.train --corpus build/corpus \\
        --out assignment/model/checkpoints/kit-tiny --minutes 5 --device cuda

reads the text ``python -m grader.authoring.corpus`` built, and writes a Hugging Face checkpoint
directory: ``tokenizer.json`` and ``tokenizer_config.json`` (byte-level BPE trained here with the
``tokenizers`` package), ``config.json``, ``model.safetensors`` (bfloat16) and ``generation_config.json``
(checkpoint.save_checkpoint), the run's record ``training_run.json`` and ``training_log.csv``, the
corpus' ``SOURCES.json`` and ``words.txt.gz``, and then ``loss.png`` and ``MODEL_CARD.md``
(model_card.py, which can write them again from these files alone).

The tokenizer and the token streams are train_data.py's; the model's shape, the trials and the choice of the
weights kept (and why) are trainer.py's. This module is the command: it reads the corpus, runs the trainer and
writes the checkpoint directory with the run's record.

``--smoke`` trains a tiny model for a few dozen steps on the start of the corpus, on the CPU in
seconds: CI runs it to prove every file is produced and loads.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import shlex
import shutil
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from assignment.model.checkpoint import save_checkpoint
from assignment.model.llama import Transformer
from grader.authoring.model_card import LOG_FILE, RUN_FILE, load_vocabulary, write_model_card
from grader.authoring.train_data import (
    BOS,
    EOS,
    Data,
    read_documents,
    save_tokenizer,
    token_stream,
    train_tokenizer,
)
from grader.authoring.trainer import (
    FULL,
    LOG_FIELDS,
    SMOKE,
    RunResult,
    Settings,
    Trainer,
    check_candidates,
    count_parameters,
    model_config,
)

CORPUS_FILES = ("SOURCES.json", "words.txt.gz")
DICTIONARY_FILE = "dictionary.txt.gz"  # the tests' word list, carried by the corpus (corpus.write_dictionary)


def write_log(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()})"


# ----------------------------------------------------------------------------------------------
# The command


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("build/corpus"), help="what grader.authoring.corpus wrote")
    parser.add_argument("--out", type=Path, required=True, help="the checkpoint directory to write")
    parser.add_argument("--minutes", type=float, default=5.0, help="training time budget (compilation excluded)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="a tiny model for a few steps: the CI check")
    parser.add_argument(
        "--epochs",
        type=lambda text: tuple(float(e) for e in text.split(",")),
        help=f"passes over the training tokens, one trial each, comma-separated (default "
        f"{','.join(f'{e:g}' for e in FULL.epochs)})",
    )
    parser.add_argument("--max-steps", type=int, help="train this many steps a trial instead")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (it is tried on CUDA only)")
    return parser.parse_args(argv)


def prepare_data(corpus: Path, settings: Settings, device: torch.device) -> Data:
    train_docs = read_documents(corpus, "train.txt", settings.max_train_bytes)
    val_docs = read_documents(corpus, "val.txt", settings.max_val_bytes)
    tokenizer = train_tokenizer(train_docs, settings.vocab_size)
    data = Data(
        tokenizer=tokenizer,
        train_stream=token_stream(tokenizer, train_docs, device),
        val_stream=token_stream(tokenizer, val_docs, device),
        train_bytes=sum(len(d.encode()) for d in train_docs),
        val_bytes=sum(len(d.encode()) for d in val_docs),
    )
    print(
        f"train: {len(train_docs)} documents, {len(data.train_stream):,} training and {len(data.val_stream):,} "
        f"validation tokens (vocabulary {tokenizer.get_vocab_size()})",
        flush=True,
    )
    return data


def save_run(model: Transformer, data: Data, settings: Settings, corpus: Path, out: Path, facts: dict) -> None:
    """The checkpoint directory, less the model card: weights, tokenizer, corpus records, the run's record."""
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(
        model, out, dtype=torch.bfloat16, generation_config={"do_sample": True, "temperature": 0.8, "top_p": 0.95}
    )
    save_tokenizer(data.tokenizer, out, settings.context)
    for name in CORPUS_FILES:
        shutil.copyfile(corpus / name, out / name)
    (out / RUN_FILE).write_text(json.dumps(facts, indent=2) + "\n")


def run_facts(
    settings: Settings,
    model: Transformer,
    data: Data,
    result: RunResult,
    device: torch.device,
    wall_s: float,
    command: str,
) -> dict:
    """training_run.json: what model_card.RunFacts reads back."""
    summary = {k: v for k, v in asdict(result).items() if k not in ("log", "trials")}
    return {
        "settings": asdict(settings),
        "parameters": count_parameters(model),
        "result": summary,
        "trials": [asdict(t) for t in result.trials],
        "train_tokens": len(data.train_stream),
        "val_tokens": len(data.val_stream),
        "train_bytes": data.train_bytes,
        "val_bytes": data.val_bytes,
        "device": device_name(device),
        "torch_version": torch.__version__,
        "wall_seconds": round(wall_s, 1),
        "command": command,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "grader.authoring.train", *(sys.argv[1:] if argv is None else argv)])
    settings = SMOKE if args.smoke else FULL
    settings = replace(settings, epochs=args.epochs or settings.epochs, max_steps=args.max_steps or settings.max_steps)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    wall_start = time.perf_counter()

    data = prepare_data(args.corpus, settings, device)
    tokenizer = data.tokenizer
    config = model_config(settings, tokenizer.get_vocab_size(), tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS))
    model = Transformer(config, attention_impl="sdpa").to(device)
    plans = ", ".join(
        f"{e:g} passes ({settings.steps_for(len(data.train_stream), e):,} steps)" for e in settings.epochs
    )
    print(f"train: {count_parameters(model):,} parameters on {device_name(device)}; trials of {plans}", flush=True)
    vocabulary = load_vocabulary(args.corpus / "words.txt.gz")
    trainer = Trainer(model, data, vocabulary, settings, device, args.seed)
    result = trainer.run(args.minutes * 60, use_compile=device.type == "cuda" and not args.no_compile)
    if (args.corpus / DICTIONARY_FILE).is_file():
        check_candidates(trainer, tokenizer, load_vocabulary(args.corpus / DICTIONARY_FILE), settings.context)
    facts = run_facts(settings, model, data, result, device, time.perf_counter() - wall_start, command)
    save_run(model, data, settings, args.corpus, args.out, facts)
    write_log(result.log, args.out / LOG_FILE)
    write_model_card(args.out)
    print(
        f"train: wrote {args.out} (validation loss {result.best_val_loss:.3f}, trial {result.best_trial} step "
        f"{result.best_step}; kept: {result.selection}; stopped: {result.stopped_because})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
