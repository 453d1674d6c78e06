"""t5, causal masking: t4's kernel with the causal mask (bottom-right aligned) and the tiles above it skipped."""

from __future__ import annotations

from assignment.tasks.t4 import attention_code

CODE = attention_code("t5", causal=True, builds_on=("t4",))
