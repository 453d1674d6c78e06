"""The handout renderer: registry + task texts + solution files -> HTML and PDF.

    python -m handout.render [--out build/handout] [--no-pdf] [--audience instructor] [--hours SUMMARY]

Everything numeric (points, tolerances, thresholds, shapes, time limits, hours) comes from the
registry; "What to implement" is read from the solution and starter files, and "What you may use and
change" from the checks the grader runs (handout/rules.py), so the handout never drifts from the code
students receive. The course chapters (prerequisites, getting started, the model, submission,
debugging, references) are assignment/text/*.md and quote the toolchain through handout/facts.py.
"""
