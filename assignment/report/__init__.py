"""``make report``: REPORT.md and REPORT.html, the write-up a student hands in, made from the student's own runs.

Its modules, each importing only those below it:

    cli.py      make_report (the whole run) and the command line; ``python -m assignment.report`` (__main__.py)
    render.py   the Markdown and HTML, from the templates beside it (report.md.j2, report.html.j2)
    views.py    what each section of the report shows, as dataclasses the templates read (the prefill-and-decode
                section of the task whose bench times the model in decode_view.py)
    sections.py what the views share: the numbers as the report writes them, a bench step as they see it
    records.py  a bench step's JSON as typed records, read in this one place
    steps.py    the steps (bench, scaling, profile, generate), the runner, the cache of their results
"""
