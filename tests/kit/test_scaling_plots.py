"""make bench T=t4's sweep plots (assignment/perf/scaling.py), drawn from a saved sweep without a GPU."""

from __future__ import annotations

import pytest

from assignment.perf import scaling

pytestmark = pytest.mark.kit


def _point(L: int, d: int, student_ms: float, sdpa_ms: float) -> dict:
    flops = 4.0 * L * L * d
    return {
        "B": 1,
        "H": 16,
        "H_kv": 16,
        "L": L,
        "d": d,
        "flops": flops,
        "ideal_bytes": 16.0 * L * d,
        "results": {
            "student": {"ms": student_ms, "tflops": flops / student_ms / 1e9},
            "SDPA": {"ms": sdpa_ms, "tflops": flops / sdpa_ms / 1e9},
        },
    }


def test_the_sweep_plots_include_the_speedup_over_each_baseline(tmp_path):
    data = {
        "task": "t4",
        "causal": False,
        "kv_heads": scaling.HEADS,
        "gpu": {"name": "test GPU"},
        "copy_gbps": 3000.0,
        "fp32_peak_tflops": 60.0,
        "points": [_point(L, d, 1.0 * L / 128, 1.2 * L / 128) for L in (128, 512) for d in (64, 128)],
    }
    written = scaling.plot(data, tmp_path)
    names = sorted(p.name for p in written)
    assert names == ["t4_roofline.png", "t4_speedup.png", "t4_tflops.png", "t4_time.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    for point in data["points"]:  # no student results (a TODO): no speedup plot, the others still drawn
        del point["results"]["student"]
    (tmp_path / "baselines").mkdir()
    assert sorted(p.name for p in scaling.plot(data, tmp_path / "baselines")) == [
        "t4_roofline.png",
        "t4_tflops.png",
        "t4_time.png",
    ]
