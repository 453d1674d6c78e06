"""The training run's text as the model sees it: the corpus' documents, the tokenizer, the token streams.

The tokenizer is byte-level BPE trained here with the ``tokenizers`` package and saved beside the weights
(``tokenizer.json``, and the ``tokenizer_config.json`` with the chat template that transformers and the kit
read); the documents become one stream of ids each (BOS, the document, EOS), and training draws random windows
from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from grader.authoring.corpus_text import DOC_SEPARATOR

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
# A plain transcript format of the kit's own: the model never saw it in training (the corpus has no
# dialogues in this form), it is there so that the kit's --chat path has a template to render.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] | trim }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] | trim }}\n"
    "{% else %}Assistant: {{ message['content'] | trim }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def read_documents(corpus: Path, name: str, max_bytes: int | None) -> list[str]:
    """The documents of ``train.txt`` or ``val.txt`` (see corpus_text.DOC_SEPARATOR), whole ones up to max_bytes."""
    path = corpus / name
    if not path.is_file():
        raise SystemExit(f"train: {path} is missing: build the corpus first (python -m grader.authoring.corpus)")
    documents, size = [], 0
    for document in path.read_text(encoding="utf-8").split(DOC_SEPARATOR):
        if max_bytes is not None and documents and size + len(document) > max_bytes:
            break
        documents.append(document.strip("\n"))
        size += len(document.encode())
    return [d for d in documents if d]


def train_tokenizer(documents: list[str], vocab_size: int) -> HFTokenizer:
    """Byte-level BPE: every UTF-8 string maps to tokens and back unchanged (no unknown token).

    The encoder adds BOS in front of every text (the post-processor), as Llama 3's does: the model
    always saw documents start after BOS, so a prompt should too.
    """
    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer)
    bos_id = tokenizer.token_to_id(BOS)
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
            ),
        ]
    )
    return tokenizer


def save_tokenizer(tokenizer: HFTokenizer, out: Path, context: int) -> None:
    """tokenizer.json and the tokenizer_config.json that transformers' AutoTokenizer and the kit read."""
    tokenizer.save(str(out / "tokenizer.json"))
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": context,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")


def token_stream(tokenizer: HFTokenizer, documents: list[str], device: torch.device) -> torch.Tensor:
    """All documents as one 1-D tensor of ids, each as BOS, its tokens, EOS (what generation starts from)."""
    bos, eos = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(documents, add_special_tokens=False):
        ids.extend((bos, *encoding.ids, eos))
    return torch.tensor(ids, dtype=torch.long, device=device)


def random_windows(stream: torch.Tensor, batch: int, context: int, generator: torch.Generator):
    """(inputs, targets), each (batch, context): windows at random offsets, targets shifted by one."""
    starts = torch.randint(0, len(stream) - context - 1, (batch,), generator=generator, device=stream.device)
    rows = stream[starts[:, None] + torch.arange(context + 1, device=stream.device)]
    return rows[:, :-1], rows[:, 1:]


@dataclass
class Data:
    """The run's text, its tokenizer and the token streams (on the training device)."""

    tokenizer: HFTokenizer
    train_stream: torch.Tensor
    val_stream: torch.Tensor
    train_bytes: int
    val_bytes: int
