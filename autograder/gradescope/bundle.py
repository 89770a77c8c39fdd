"""The zip that Gradescope's "Upload Autograder" takes:

    python -m autograder gradescope EXERCISE -o autograder.zip

At the zip's root: setup.sh (run once, as root, when Gradescope builds the
image: Python 3.11, the CPU build of torch, and the grader with its pinned
dependencies), run_autograder (run for every upload), and the grader itself
(the autograder package and pyproject.toml), which Gradescope unpacks into
/autograder/source.
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

from ..bundle import files_under
from ..exercises import Exercise
from ..launch.contain import PACKAGE_DIR

TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
EXECUTABLE = (stat.S_IFREG | 0o755) << 16  # a zip member's mode lives in the high bits of external_attr

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
apt-get install -y --no-install-recommends python3.11 python3.11-venv
python3.11 -m venv /autograder/venv
# The CPU build of torch first: the grader's own pins then find it installed.
/autograder/venv/bin/pip install --index-url {index} torch=={torch} torchvision=={torchvision}
/autograder/venv/bin/pip install /autograder/source
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this, as root, for every upload of {exercise}. The grader runs
# the student's ranks in its sandbox, each as a user of its own with no rights,
# and writes /autograder/results/results.json itself, whatever happens.
exec "${{DDP_GRADESCOPE_PYTHON:-/autograder/venv/bin/python}}" -m autograder.gradescope.run {exercise}
"""


def _pinned(pyproject: str, name: str) -> str:
    line = next(line for line in pyproject.splitlines() if line.strip().startswith(f'"{name}=='))
    return line.split("==")[1].split('"')[0]


def _executable(bundle: zipfile.ZipFile, name: str, text: str) -> None:
    member = zipfile.ZipInfo(name)
    member.external_attr = EXECUTABLE
    member.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(member, text)


def build(course: Path, exercise: Exercise, output: Path) -> list[str]:
    """Write the zip; its member names, in order."""
    pyproject = (course / "pyproject.toml").read_text()
    setup = SETUP.format(
        index=TORCH_CPU_INDEX, torch=_pinned(pyproject, "torch"), torchvision=_pinned(pyproject, "torchvision")
    )
    members = ["setup.sh", "run_autograder", "pyproject.toml"]
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as bundle:
        _executable(bundle, "setup.sh", setup)
        _executable(bundle, "run_autograder", RUN.format(exercise=exercise.name))
        bundle.writestr("pyproject.toml", pyproject)
        for path in files_under(PACKAGE_DIR):
            members.append(f"autograder/{path.relative_to(PACKAGE_DIR)}")
            bundle.write(path, members[-1])
    return members
