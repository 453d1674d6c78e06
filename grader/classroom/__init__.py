"""Grading a class: batch (with batch_queue, batch_worker, roster, ledger), slurm (slurm_local to try it),
gradescope's autograder, class_outputs and the beta testers' feedback_summary. Built on grader.grade."""
