"""``make demo``: the kit's main job on its embedded default.

Grades the reference solutions as a sample submission (the tasks this host can
run: CPU tasks everywhere, GPU tasks where a GPU is present), prints the score
table, renders the handout and says where everything went.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from assignment.registry import load_registry
from grader.config import REPO_ROOT, GradeConfig
from grader.grade import grade_submission
from grader.report import summary_lines
from grader.runner import gpu_available

OUT = REPO_ROOT / "build" / "demo"


def main() -> int:
    registry = load_registry()
    print(f"== {registry.title}: demo ==")
    print(f"GPU: {'yes' if gpu_available() else 'none (GPU tasks are reported as not run)'}")
    print(f"1/2 grading the reference solutions as a sample submission -> {OUT / 'grade'}")
    # The reference solutions are trusted code: no preflight refusal, and any isolation this host has.
    config = replace(GradeConfig(), allow_weak_isolation=True, preflight=False)
    result = grade_submission(REPO_ROOT / "solutions", OUT / "grade", config, registry)
    print("\n".join(summary_lines(result)))
    print(f"total {result.score:.2f} / {result.max_score(registry):g}\n")
    print("2/2 rendering the handout")
    from handout import render

    # Where no Chromium can be had (a GPU node without network), keep the HTML.
    os.environ.setdefault("HANDOUT_PDF", "optional")
    code = render.main([])
    failed = [ts for ts in result.tasks if ts.status == "ran" and ts.score < ts.max_score - 1e-9]
    print("\nOutputs:")
    print(f"  Gradescope results: {OUT / 'grade' / 'results.json'}")
    print(f"  CSV gradebook row:  {OUT / 'grade' / 'grades.csv'}")
    print(f"  instructor record:  {OUT / 'grade' / 'grading.json'} (isolation: {result.grading['isolation']})")
    print(f"  feedback page:      {OUT / 'grade' / 'report.html'}")
    print(f"  handout:            {REPO_ROOT / 'build' / 'handout' / 'handout.html'} (and handout.pdf)")
    if failed:
        print("demo: the reference solutions did not score full marks on " + ", ".join(t.task.id for t in failed))
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
