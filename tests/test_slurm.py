"""`python -m autograder autograde --slurm`: a class graded as a job array on a real one-node Slurm.

The module starts munge, slurmctld and slurmd (tests/slurm_cluster.py) and
stops them at its end. The course is test_class_grading's: four sample
students, one of them missing from the gradebook.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import slurm_cluster
from test_class_grading import ASSIGNMENT, EXPECTED, STUDENTS, grade_rows, prepared  # noqa: F401

from autograder.nbgrader_ext.gradebook import scores
from autograder.nbgrader_ext.slurm import RUNS_FOLDER, SlurmRun
from tools.demo import nbgrader, nbgrader_env

pytestmark = [pytest.mark.nbgrader, pytest.mark.slurm]


@pytest.fixture(scope="module")
def slurm_env(tmp_path_factory):
    why_not = slurm_cluster.available()
    if why_not:
        pytest.skip(why_not)
    with slurm_cluster.cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


@pytest.fixture
def course(prepared, tmp_path) -> Path:  # noqa: F811
    return Path(shutil.copytree(prepared, tmp_path / "course"))


def autograde(env: dict, course: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "autograder", "autograde", ASSIGNMENT, "--cpus-per-job", "1", *args],
        cwd=course,
        env=nbgrader_env() | {"SLURM_CONF": env["SLURM_CONF"]},
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        **popen,
    )


def graded(course: Path) -> dict[str, float | None]:
    """student -> their score of the assignment in the course's gradebook; None: not graded."""
    found = scores(course, STUDENTS, [ASSIGNMENT])
    return {student: found[student, ASSIGNMENT][0] for student in STUDENTS}


def the_run(course: Path) -> SlurmRun:
    [folder] = (course / RUNS_FOLDER).iterdir()
    return SlurmRun.load(folder)


def test_a_job_array_gives_the_gradebook_serial_nbgrader_gives(slurm_env, course, tmp_path):
    serial = Path(shutil.copytree(course, tmp_path / "serial"))
    nbgrader(serial, "autograde", ASSIGNMENT)
    done = autograde(slurm_env, course, "--slurm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Submitted Slurm job" in done.stdout and "Graded 4 students" in done.stdout, done.stdout
    run = the_run(course)
    script = (run.folder / "grade.sbatch").read_text()
    assert "#SBATCH --array=0-3" in script and "#SBATCH --cpus-per-task=1" in script
    assert "export CUDA_VISIBLE_DEVICES=" in script and "--gres" not in script  # gloo: no GPUs asked for
    assert run.merged and sorted(run.students) == sorted(STUDENTS)
    # Each task wrote only its own gradebook, and the merge put them all in the course's.
    assert sorted(p.stem for p in (run.folder / "gradebooks").iterdir()) == sorted(STUDENTS)
    assert grade_rows(course) == grade_rows(serial)
    assert graded(course) == EXPECTED
    again = autograde(slurm_env, course, "--slurm")
    assert again.returncode == 0 and "unchanged" in again.stdout and "Submitted" not in again.stdout


def test_no_wait_then_merge(slurm_env, course):
    done = autograde(slurm_env, course, "--slurm", "--no-wait", "--student", "ada", "--student", "cy")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"autograde {ASSIGNMENT} --merge" in done.stdout
    assert set(graded(course).values()) == {None}  # nothing merged yet
    merged = autograde(slurm_env, course, "--merge")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert graded(course) == {"ada": EXPECTED["ada"], "brook": None, "cy": EXPECTED["cy"], "eve": None}
    nothing_left = autograde(slurm_env, course, "--merge")
    assert nothing_left.returncode == 2 and "No Slurm run" in nothing_left.stderr


def test_a_task_slurm_kills_is_reported_and_leaves_the_others_merged(slurm_env, course):
    waiting = subprocess.Popen(
        [sys.executable, "-m", "autograder", "autograde", ASSIGNMENT, "--slurm", "--cpus-per-job", "1"]
        + ["--student", "ada", "--student", "eve"],
        cwd=course,
        env=nbgrader_env() | {"SLURM_CONF": slurm_env["SLURM_CONF"]},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (course / RUNS_FOLDER).is_dir() or not any((course / RUNS_FOLDER).glob("*/run.json")):
            assert time.monotonic() < deadline, "the job was never submitted"
            time.sleep(0.5)
        run = the_run(course)
        eve = run.students.index("eve")
        while not (run.folder / "gradebooks" / "eve.db").exists():  # her task has started grading
            assert time.monotonic() < deadline, "eve's task never started"
            time.sleep(0.5)
        subprocess.run(["scancel", f"{run.job_id}_{eve}"], env=slurm_env, check=True)
        output, _ = waiting.communicate(timeout=600)
    finally:
        waiting.kill()
    assert waiting.returncode == 1, output
    assert "eve: killed by" in output and "ada" in output, output
    assert graded(course) == {"ada": EXPECTED["ada"], "brook": None, "cy": None, "eve": None}  # eve's: as they were


def test_without_sbatch_it_says_so_and_writes_nothing(course):
    done = subprocess.run(
        [sys.executable, "-m", "autograder", "autograde", ASSIGNMENT, "--slurm"],
        cwd=course,
        env=nbgrader_env() | {"PATH": str(Path(sys.executable).parent)},  # nbgrader, no Slurm
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "--slurm needs Slurm's sbatch" in done.stderr and "login node" in done.stderr
    assert not (course / RUNS_FOLDER).exists()


def test_slurm_refusing_the_job_is_a_clear_error_and_leaves_no_run(slurm_env, course):
    done = autograde(slurm_env, course, "--slurm", "--partition", "no-such-partition")
    assert done.returncode == 2
    assert "Slurm refused the job" in done.stderr and "partition" in done.stderr
    assert not any((course / RUNS_FOLDER).iterdir())
