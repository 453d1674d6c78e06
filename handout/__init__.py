"""The handout renderer: registry + task texts + solution files -> HTML and PDF.

    python -m handout.render [--out build/handout] [--no-pdf]

Everything numeric (points, tolerances, thresholds, shapes) comes from the
registry; "What to implement" is read from the solution and starter files, so
the handout never drifts from the code students receive.
"""
