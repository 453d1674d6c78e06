"""The theory part, per student: questions whose numbers are drawn from the student's id.

``questions`` numbers and prints them (``kinds``, ``kinds_tensor_cores`` and ``kinds_hopper`` draw and word
each kind), ``answers`` reads and writes the answers file, ``__main__`` is ``make theory``
(``python -m assignment.theory``). Nothing here computes an answer: the key is the grader's.
"""
