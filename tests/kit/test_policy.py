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


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nimport torch.nn.functional as F\nfrom torch.nn import functional\nimport math",
        "from __future__ import annotations\nfrom typing import Optional\nfrom dataclasses import dataclass",
        "x = q.chunk(2)\ny = torch.select(q, 0, 1)\nz = torch.trace(a)",
        "class C:\n    def __init__(self):\n        self._cache = None\n    def get(self):\n        return self._cache",
        "def f(q):\n    return type(q).__name__",
    ],
)
def test_plain_pytorch_is_accepted(code):
    assert check_source(code, RULES) == []


@pytest.mark.parametrize(
    "code, why",
    [
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
    ],
)
def test_ways_around_the_task_are_rejected(code, why):
    found = check_source(code, RULES)
    assert found and any(why in str(v) for v in found), (code, found)
    assert all(v.line >= 1 for v in found)


def test_a_file_saved_with_a_byte_order_mark_and_windows_line_endings_is_read_as_python_reads_it(tmp_path):
    from assignment.policy import check_bytes, check_file, python_text

    solution = (REPO / "solutions" / "t1_attention.py").read_bytes()
    for data in (
        b"\xef\xbb\xbf" + solution.replace(b"\n", b"\r\n"),
        solution.replace(b"\n", b"\r"),
        b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'\n",
    ):
        path = tmp_path / "t1_attention.py"
        path.write_bytes(data)
        assert check_file(path, RULES) == [], data[:40]
        assert "\r" not in python_text(data) and not python_text(data).startswith("\ufeff")
    # A rule broken in such a file is still found, on its own line.
    (violation,) = check_bytes(b"\xef\xbb\xbfimport torch\r\nimport os\r\n", RULES)
    assert violation.line == 2 and "import of 'os'" in violation.message
    (violation,) = check_bytes(b"\xef\xbb\xbfdef broken(:\r\n    pass\r\n", RULES)
    assert violation.line == 1 and violation.message.startswith("syntax error: ") and len(violation.message) > 14
    (violation,) = check_bytes(b"x = '\xff\xfe'\n", RULES)
    assert "not text in its encoding" in violation.message
