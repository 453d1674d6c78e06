"""The kit's commands: what loops over the tasks or looks one up by its id, above the task modules.

    bench.py     make bench       a task's bench tables, then where the student stands on its timing rules
    scaling.py   (make bench)     a task's attention kernel swept over lengths and head dimensions, with plots
    profile.py   make profile     Nsight Compute counters of a task's representative launch
    sanitize.py  make sanitize    compute-sanitizer on a task's scenario
    generate.py  make generate    text from a checkpoint through the student's sampling loop

Each is ``python -m assignment.commands.<name>``. A command finds the task's code (``assignment.tasks.code``) and
hands what the layers below need to them as arguments: a task's bench cases, its profile launch, its sanitizer
scenario, its timing rules' cases. ``assignment/perf/``, ``assignment/model/`` and ``assignment/cuda/`` never import
the tasks (tests/kit/test_layout.py).
"""
