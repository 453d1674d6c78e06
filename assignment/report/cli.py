"""``make report``: REPORT.md and REPORT.html, the write-up a student hands in, made from the student's own runs.

    python -m assignment.report [--task t4 ...] [--refresh] [--out DIR] [--build DIR] [--max-tokens 100]
                                [--quick-scaling] [--verbose]

``make_report`` runs (or reuses) the steps (``steps.py``), turns their results into views (``views.py``) and
renders them (``render.py``); ``main`` is the command line.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assignment.atomic import write_atomic
from assignment.impl import REPO_ROOT, ImplError, student_dir
from assignment.registry import load_registry
from assignment.report.render import render_html, render_markdown
from assignment.report.steps import DEFAULT_BUILD, Runner, Settings, command_runner, detect_gpu, run_steps, shown_path
from assignment.report.views import build_context


def make_report(
    settings: Settings,
    runner: Runner | None = None,
    gpu: dict[str, Any] | None = None,
    have_ncu: bool | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Run (or reuse) every step and write REPORT.md and REPORT.html into ``settings.out``."""
    say = say or (lambda line: print(f"[report] {line}", flush=True))
    registry = load_registry()
    unknown = [t for t in settings.tasks if t not in registry.ids]
    if unknown:
        raise ValueError(f"unknown task {unknown[0]!r} (the registry has {', '.join(registry.ids)})")
    gpu = detect_gpu() if gpu is None else gpu
    have_ncu = shutil.which("ncu") is not None if have_ncu is None else have_ncu
    say(f"implementation: {settings.impl}; GPU: {gpu.get('name') or 'none'}; cache: {shown_path(settings.build)}")
    results, todo = run_steps(registry, settings, runner or command_runner(), gpu, have_ncu, say)
    context = build_context(registry, settings, gpu, results, todo)
    markdown_text = render_markdown(context, html_mode=False)
    html_text = render_html(context)
    md_path, html_path = settings.out / "REPORT.md", settings.out / "REPORT.html"
    write_atomic(md_path, markdown_text)
    write_atomic(html_path, html_text)
    say(f"wrote {shown_path(md_path)} and {shown_path(html_path)} ({context.counts})")
    return md_path, html_path


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None, runner: Runner | None = None, gpu: dict[str, Any] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make report", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--task",
        action="append",
        default=[],
        metavar="tN",
        help="run only this task's steps (repeatable); other tasks come from the cache when valid",
    )
    parser.add_argument("--refresh", action="store_true", help="ignore the cache: run every step again")
    parser.add_argument("--out", type=Path, default=REPO_ROOT, help="where REPORT.md and REPORT.html go")
    parser.add_argument("--build", type=Path, default=DEFAULT_BUILD, help="the steps' outputs, logs and cache")
    parser.add_argument("--impl", help="the implementation (default: IMPL, else the kit's default)")
    parser.add_argument("--feedback", type=Path, default=REPO_ROOT / "feedback.json", help="the feedback answers")
    parser.add_argument("--max-tokens", type=int, default=100, help="tokens t7 generates for the report")
    parser.add_argument("--quick-scaling", action="store_true", help="the shorter scaling sweep (4 lengths)")
    parser.add_argument("--verbose", action="store_true", help="echo every step's output as it runs")
    args = parser.parse_args(argv)
    main_thread = threading.current_thread() is threading.main_thread()
    # A step runs in a session of its own: on SIGTERM (a batch system's time limit) take it down with us.
    previous = signal.signal(signal.SIGTERM, _interrupted) if main_thread else None
    try:
        settings = Settings(
            impl=student_dir(args.impl),
            out=args.out.resolve(),
            build=args.build.resolve(),
            feedback=args.feedback.resolve(),
            tasks=tuple(dict.fromkeys(args.task)),
            refresh=args.refresh,
            max_tokens=args.max_tokens,
            quick_scaling=args.quick_scaling,
        )
        make_report(settings, runner or command_runner(echo=args.verbose), gpu)
    except KeyboardInterrupt:
        print("\nreport: interrupted; the report was not written (finished steps are cached)", file=sys.stderr)
        return 1
    except (ValueError, ImplError) as exc:  # an unknown task, no implementation directory: no traceback
        print(f"report: the report could not be written: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 -- whatever stops the write-up: say what, exit 1
        traceback.print_exc()
        print(f"report: the report could not be written: {exc}", file=sys.stderr)
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    return 0
