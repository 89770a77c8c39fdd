"""The numbers of the ddp_intro quiz, drawn for each student, so that one
student's answers are wrong for another.

    from autograder.notebook.quiz import numbers
    q1 = numbers("q1")          # q1.world_size, q1.batch_per_gpu

The draw depends only on the student and the question. The student is the
one nbgrader's autograde grades (it runs the notebook in
autograded/<student>/<assignment>); while they work, the hub's user (on the
course's JupyterHub the user names are the nbgrader ids), else the login
name. The hidden tests draw again rather than read the notebook's variables,
which the student's code could have changed.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import random
from pathlib import Path
from types import SimpleNamespace

# A sampler by hand: samples over ranks that never divide evenly, so that the padding always shows.
UNEVEN_SPLITS = ((10, 3), (11, 3), (13, 3), (14, 3), (9, 4), (11, 4), (13, 4), (14, 4), (15, 4), (17, 4))
# question -> its scenarios, equally likely
QUESTIONS = {
    # A DDP job: how many GPUs, and each GPU's DataLoader batch size.
    "q1": [{"world_size": w, "batch_per_gpu": b} for w in (2, 3, 4, 6, 8, 16) for b in (16, 24, 32, 48, 64, 128)],
    # Which indices one rank gets: always a rank whose last index comes from the padding.
    "q4": [
        {"n_samples": n, "world_size": w, "rank": r}
        for n, w in UNEVEN_SPLITS
        for r in range(w - (-n % w), w)  # -n % w: the padded indices, which go to the last ranks
    ],
    # A serial recipe (batch size and learning rate) taken to W GPUs with the same batch on each.
    "q6": [
        {"batch_per_gpu": b, "lr": lr, "world_size": w}
        for b in (32, 64)
        for lr in (0.01, 0.02, 0.05, 0.1)
        for w in (2, 4, 8)
    ],
}


def student_id() -> str:
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        return Path.cwd().parent.name
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


def numbers(question: str, student: str | None = None) -> SimpleNamespace:
    """This student's numbers for the question, the same every time."""
    seed = hashlib.sha256(f"{student or student_id()}/{question}".encode()).digest()
    return SimpleNamespace(**random.Random(seed).choice(QUESTIONS[question]))
