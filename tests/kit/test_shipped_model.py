"""The checkpoint the kit ships (assignment/model/checkpoints/kit-tiny) loads offline and writes English.

The bar from its model card: greedy and sampled continuations of ordinary prompts are recognisable
English, measured as the share of generated words found in a dictionary (/usr/share/dict/words where
the host has one) or in the training text's word list shipped beside the checkpoint (words.txt.gz).
The loop is the model card's (``model_card.continue_prompt``), so the bar does not depend on any student file.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from assignment.impl import REPO_ROOT
from assignment.model import DEFAULT_CHECKPOINT, load_checkpoint
from grader.authoring.model_card import continue_prompt

pytestmark = [
    pytest.mark.kit,
    pytest.mark.skipif(
        not (DEFAULT_CHECKPOINT / "config.json").is_file(), reason=f"no shipped checkpoint at {DEFAULT_CHECKPOINT}"
    ),
]
PROMPTS = ("The history of", "Once upon a time", "The most important thing", "In the morning")
ENGLISH_BAR = 0.8
# Sampled text must also vary: a model that repeats a few words ("time time time") passes the word bar.
# kit-tiny's sampled continuations have 76-83% distinct words; its greedy ones loop (22-44%), as greedy does.
DISTINCT_BAR = 0.5
SIZE_LIMIT_BYTES = 16 * 2**20
WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    words = set(gzip.decompress((DEFAULT_CHECKPOINT / "words.txt.gz").read_bytes()).decode().split())
    system = Path("/usr/share/dict/words")
    if system.is_file():
        words |= {w.strip().lower() for w in system.read_text(errors="replace").splitlines()}
    return frozenset(words)


def english_fraction(text: str) -> tuple[float, list[str]]:
    words = [w.lower() for w in WORD.findall(text)]
    unknown = [w for w in words if w not in known_words() and w.split("'")[0] not in known_words()]
    return (1 - len(unknown) / len(words) if words else 0.0), unknown


@lru_cache(maxsize=1)
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT, max_seq_len=128)


def continue_text(prompt: str, temperature: float, tokens: int = 60, seed: int = 0) -> str:
    """The continuation the model card shows: greedy at temperature 0, else plain sampling at that temperature."""
    return continue_prompt(shipped(), prompt, tokens, temperature=temperature or None, seed=seed)


def test_the_checkpoint_is_small_and_complete():
    files = {p.name: p.stat().st_size for p in DEFAULT_CHECKPOINT.iterdir()}
    for needed in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "generation_config.json",
        "MODEL_CARD.md",
        "words.txt.gz",
    ):
        assert needed in files, f"the shipped checkpoint lacks {needed}"
    assert sum(files.values()) <= SIZE_LIMIT_BYTES, f"the shipped checkpoint takes {sum(files.values())} bytes"
    assert shipped().config.head_dim in (32, 64, 128), "the shipped model must suit the t4-t6 kernels"


@pytest.mark.parametrize("temperature", [0.0, 0.8], ids=["greedy", "sampled"])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_continuations_are_english(prompt, temperature):
    text = continue_text(prompt, temperature)
    fraction, unknown = english_fraction(text)
    assert fraction >= ENGLISH_BAR, (
        f"{prompt!r} (temperature {temperature}) continued as {text!r}: only "
        f"{fraction:.0%} English words (unknown: {unknown[:10]})"
    )
    if temperature > 0:
        words = [w.lower() for w in WORD.findall(text)]
        distinct = len(set(words)) / len(words)
        assert distinct >= DISTINCT_BAR, f"{prompt!r} sampled as {text!r}: only {distinct:.0%} distinct words"


def test_make_generate_prints_english_from_the_shipped_model():
    """What `make generate PROMPT="The history of"` runs, with the reference t7 loop, on the CPU."""
    env = {**os.environ, "IMPL": "solutions", "PYTHONPATH": str(REPO_ROOT)}
    if not (REPO_ROOT / "solutions" / "t7_generate.py").is_file():
        pytest.skip("no solutions/t7_generate.py in this tree")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "assignment.model.generate",
            "--prompt",
            "The history of",
            "--max-tokens",
            "40",
            "--device",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("The history of")
    fraction, unknown = english_fraction(done.stdout)
    assert fraction >= ENGLISH_BAR, f"make generate printed {done.stdout!r} ({fraction:.0%} English; {unknown[:10]})"
    assert "TTFT" in done.stderr and "time between tokens" in done.stderr, done.stderr
