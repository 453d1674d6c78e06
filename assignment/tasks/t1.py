"""t1, attention in Python: the naive and the tiled (FlashAttention) forward in PyTorch, on any device.

Its checks are its tests; the kit runs no bench, profile or sanitizer for it."""

from __future__ import annotations

from assignment.tasks import TaskCode

CODE = TaskCode(id="t1")
