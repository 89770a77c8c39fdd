"""Grading on Gradescope: the autograder zip (bundle.py) and what its
run_autograder runs for every upload (run.py). The results file itself is
one of the reports: autograder/reports/gradescope.py."""
