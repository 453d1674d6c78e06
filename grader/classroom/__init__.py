"""Grading a class: batch (with batch_queue, batch_worker, roster, ledger), slurm (slurm_local to try it),
gradescope's autograder, class_outputs (with class_records and class_tables) and the beta testers'
feedback_summary. Built on grader.grade."""
