"""On the PYTHONPATH of the processes a student's own launcher starts while it
is graded (autograder/rank/own_launcher.py): guard them before they import
the student's file again."""

import os

if os.environ.get("DDP_GRADER_OWN_LAUNCHER"):
    from autograder.rank.own_launcher import guard_spawned_rank

    guard_spawned_rank()
