"""The students' package: `python -m autograder student-bundle -o FILE.zip`.

It holds what a student needs to work outside the hub: the released
assignments (release/, made by nbgrader generate_assignment) and the grader
(the autograder package, installable with pip). Never source/ (solutions and
hidden tests), solutions/, tests/ with its sample students, or the gradebook.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from .launch.contain import PACKAGE_DIR

TOP = "ddp-course-student"
LEFT_OUT = ("__pycache__", ".ipynb_checkpoints")
GUIDE = """# ddp-course, for students

1. Make a virtual environment and install the grader:
   `python3.11 -m venv .venv && .venv/bin/pip install .`
2. Start JupyterLab here: `.venv/bin/jupyter lab`, and open an assignment's notebook.
3. Fill in the stubs. The notebook's check cell runs your program with the grader and
   shows what each rank did; `python -m autograder check FILE --exercise NAME` does the
   same at a terminal.

Hand in the notebook through your course's hub (its Assignments tab) when you are done.
"""


def files_under(folder: Path):
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not any(part in LEFT_OUT for part in path.parts) and path.suffix != ".pyc":
            yield path


def build(course: Path, output: Path) -> list[str]:
    """Write the bundle; its member names, in order."""
    release = course / "release"
    if not any(release.glob("*/*.ipynb")):
        raise FileNotFoundError(f"{release} holds no released notebook: run nbgrader generate_assignment first.")
    members = []
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path in files_under(release):
            members.append(f"{TOP}/{path.relative_to(release)}")
            bundle.write(path, members[-1])
        for path in files_under(PACKAGE_DIR):
            members.append(f"{TOP}/autograder/{path.relative_to(PACKAGE_DIR)}")
            bundle.write(path, members[-1])
        members += [f"{TOP}/pyproject.toml", f"{TOP}/README.md"]
        bundle.write(course / "pyproject.toml", members[-2])
        bundle.writestr(members[-1], GUIDE)
    return members
