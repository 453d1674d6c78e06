"""t7, text generation: sampling (temperature, top-k, top-p, repetition penalty) and streaming on the model.

The report's generation step runs it on the shipped checkpoint."""

from __future__ import annotations

from assignment.tasks import TaskCode

CODE = TaskCode(id="t7", generates=True)
