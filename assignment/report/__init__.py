"""``make report``: REPORT.md and REPORT.html, the write-up a student hands in, made from the student's own runs.

``python -m assignment.report`` runs it (``__main__.py``).
"""
