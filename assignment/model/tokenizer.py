"""A checkpoint's tokenizer: ``tokenizer.json`` through the ``tokenizers`` package, with the special tokens,
stop tokens and chat template taken from the checkpoint's config files, as transformers reads them.

    tok = Tokenizer.from_dir("path/to/checkpoint")
    ids = tok.encode("The history of")          # BOS first when the tokenizer adds one
    tok.decode(ids)                             # special tokens dropped; a cut UTF-8 character reads as U+FFFD
    tok.apply_chat_template([{"role": "user", "content": "Hi"}])   # the text to encode, from the template
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from .config import CheckpointError, read_json

TOKENIZER_FILE = "tokenizer.json"


class Tokenizer:
    def __init__(
        self,
        backend: _HFTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        add_bos: bool | None = None,
        stop_ids: tuple[int, ...] = (),
        chat_template: str | None = None,
    ):
        self._backend = backend
        self.bos_token, self.eos_token = bos_token, eos_token
        self.bos_id = backend.token_to_id(bos_token) if bos_token else None
        self.eos_id = backend.token_to_id(eos_token) if eos_token else None
        self.add_bos = add_bos
        stops = list(stop_ids) + ([self.eos_id] if self.eos_id is not None else [])
        self.stop_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))
        self.chat_template = chat_template

    @property
    def vocab_size(self) -> int:
        return self._backend.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_dir(cls, path: str | Path, config=None) -> Tokenizer:
        """Read tokenizer.json, tokenizer_config.json and generation_config.json of a checkpoint directory."""
        path = Path(path)
        file = path / TOKENIZER_FILE
        if not file.is_file():
            raise CheckpointError(
                f"{path}: {TOKENIZER_FILE} is missing (only fast tokenizers in the Hugging Face "
                "layout are read; tokenizer.model alone is not enough)"
            )
        try:
            backend = _HFTokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - the tokenizers package raises its own exception type
            raise CheckpointError(f"{file}: cannot be read by the tokenizers package ({exc})") from None
        settings = read_json(path / "tokenizer_config.json")
        generation = read_json(path / "generation_config.json")
        template = settings.get("chat_template")
        if isinstance(template, list):  # a list of named templates: take the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text()
        stop_ids = _ids(generation.get("eos_token_id")) + (list(config.eos_token_id) if config else [])
        return cls(
            backend,
            bos_token=_token_text(settings.get("bos_token")),
            eos_token=_token_text(settings.get("eos_token")),
            add_bos=settings.get("add_bos_token"),
            stop_ids=tuple(stop_ids),
            chat_template=template,
        )

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_bos`` the tokenizer's own special tokens (its BOS) are added."""
        ids = self._backend.encode(text, add_special_tokens=add_bos and self.add_bos is not False).ids
        if add_bos and self.add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int]) -> str:
        return self._backend.decode(list(ids), skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text for a conversation, rendered from the checkpoint's jinja2 chat template.

        Encode the result with ``add_bos=False``: templates write their BOS themselves.
        """
        if not self.chat_template:
            raise ValueError(
                "this checkpoint has no chat template (tokenizer_config.json 'chat_template'): run without --chat"
            )
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str):
            raise TemplateError(message)

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
        return env.from_string(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )


def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or {"content": "..."}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _ids(value) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]
