"""t7, text generation: sampling (temperature, top-k, top-p, repetition penalty) and streaming on the model.

``make generate`` and the report's generation step run its sampling loop on the shipped checkpoint."""

from __future__ import annotations

from assignment.tasks import TaskCode


def sampling_loop():
    """``IMPL``'s t7_generate.py: its ``stream(model, tokenizer, prompt_tokens, max_new_tokens, ...)`` yields the
    generated text piece by piece."""
    from assignment.impl import load_python

    return load_python("t7_generate.py")


CODE = TaskCode(id="t7", generates=sampling_loop)
