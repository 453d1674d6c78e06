"""The static rules for graded Python files (assignment.policy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from assignment.policy import Rules, check_source
from assignment.registry import load_registry

pytestmark = pytest.mark.kit
REPO = Path(__file__).resolve().parents[2]
T1 = load_registry().task("t1")
RULES = Rules("t1", T1.rules.imports, T1.rules.forbidden)


def test_the_solution_and_the_starter_follow_the_rules():
    for tree in ("solutions", "starter"):
        assert check_source((REPO / tree / "t1_attention.py").read_text(), RULES) == []


@pytest.mark.parametrize("code", [
    "import torch\nimport torch.nn.functional as F\nfrom torch.nn import functional\nimport math",
    "from __future__ import annotations\nfrom typing import Optional\nfrom dataclasses import dataclass",
    "x = q.chunk(2)\ny = torch.select(q, 0, 1)\nz = torch.trace(a)",
    "class C:\n    def __init__(self):\n        self._cache = None\n    def get(self):\n        return self._cache",
    "def f(q):\n    return type(q).__name__",
])
def test_plain_pytorch_is_accepted(code):
    assert check_source(code, RULES) == []


@pytest.mark.parametrize("code, why", [
    ("import numpy as np", "import of 'numpy'"),
    ("import os", "import of 'os'"),
    ("from torch.nn.functional import scaled_dot_product_attention", "forbidden in t1"),
    ("import torch\nF = torch.nn.functional\nF.scaled_dot_product_attention(q, k, v)", "forbidden in t1"),
    ("y = q.numpy()", "forbidden in t1"),
    ("x = torch.from_numpy(a)", "forbidden in t1"),
    ("m = torch.nn.MultiheadAttention(8, 2)", "forbidden in t1"),
    ("f = getattr(torch, 'compile')", "'getattr' is not allowed"),
    ("exec('import os')", "'exec' is not allowed"),
    ("__import__('os')", "'__import__' is not allowed"),
    ("open('/etc/passwd')", "'open' is not allowed"),
    ("torch.os.system('id')", "standard module"),
    ("torch.sys.modules", "standard module"),
    ("torch.ctypes.CDLL(None)", "standard module"),
    ("x = torch._C._nn", "private attribute"),
    ("x = torch.ops.aten.mm", "loads or builds other code"),
    ("x = torch.utils.cpp_extension", "loads or builds other code"),
    ("f = torch.compile(g)", "loads or builds other code"),
    ("s = q.__class__.__subclasses__()", "'__class__' is not allowed"),
    ("from . import helper", "relative imports"),
    ("from torch import *", "import *"),
    ("def broken(:\n    pass", "syntax error"),
])
def test_ways_around_the_task_are_rejected(code, why):
    found = check_source(code, RULES)
    assert found and any(why in str(v) for v in found), (code, found)
    assert all(v.line >= 1 for v in found)
