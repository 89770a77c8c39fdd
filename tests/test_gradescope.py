"""The Gradescope autograder: the zip that `python -m autograder gradescope`
builds, its run_autograder run against a temporary root laid out like
/autograder, and `check --gradescope`. Every results.json is read back and
held to Gradescope's specification."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import mistakes
import pytest
from conftest import ROBUSTNESS, SOLUTIONS, run_cli

from autograder.__main__ import main
from autograder.exercises import EXERCISES
from autograder.gradescope import run as gradescope_run
from autograder.grading import judge
from autograder.judge.checks import by_id
from autograder.judge.records import RunRecords
from autograder.reports import gradescope
from autograder.schema.run import DEFAULT_WORLD_SIZE, HIDDEN_WORLD_SIZE
from autograder.submission import Submission
from tools.record_fixtures import FIXTURES, load

LR = EXERCISES["linear_regression"]
FULL = gradescope.max_score(LR)
GRADED = len(LR.graded_checks)
NUMBER = (int, float)


def spec_problems(results: dict) -> list[str]:
    """Gradescope's fields and types, written out here apart from the grader's own check of them."""
    found = [
        key
        for key, kind in (("score", NUMBER), ("execution_time", NUMBER), ("output", str))
        if not isinstance(results.get(key), kind)
    ]
    for test in results["tests"]:
        found += [
            f"{test.get('name')}: {key}"
            for key, kind in (("name", str), ("score", NUMBER), ("max_score", NUMBER), ("output", str))
            if not isinstance(test.get(key), kind)
        ]
        if test["status"] not in ("passed", "failed") or test["visibility"] not in ("visible", "after_published"):
            found.append(f"{test['name']}: status or visibility")
    return found


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The autograder zip, as the instructor uploads it."""
    output = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    result = run_cli("gradescope", "linear_regression", "-o", str(output))
    assert result.returncode == 0, result.stderr
    return output


def gradescope_root(bundle: Path, folder: Path, uploads: dict[str, str | Path]) -> Path:
    """A root laid out like /autograder: the zip in source/, the upload in submission/."""
    root = folder / "autograder"
    with zipfile.ZipFile(bundle) as unpacked:
        unpacked.extractall(root / "source")
        for member in unpacked.infolist():  # extractall drops the modes; Gradescope keeps them
            os.chmod(root / "source" / member.filename, (member.external_attr >> 16) & 0o777 or 0o644)
    (root / "submission").mkdir()
    (root / "results").mkdir()
    for name, content in uploads.items():
        target = root / "submission" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_text(content)
    return root


def run_autograder(root: Path) -> dict:
    """The zip's own run_autograder, with this venv's Python (setup.sh makes /autograder/venv on Gradescope)."""
    environment = os.environ | {"DDP_GRADESCOPE_ROOT": str(root), "DDP_GRADESCOPE_PYTHON": sys.executable}
    done = subprocess.run(
        [str(root / "source" / "run_autograder")], env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((root / "results" / "results.json").read_text())
    assert spec_problems(results) == [] and gradescope.problems(results) == []
    return results


def by_name(results: dict) -> dict[str, dict]:
    return {test["name"]: test for test in results["tests"]}


def test_the_zip_holds_the_scripts_at_its_root_and_the_grader_it_installs(bundle, tmp_path):
    with zipfile.ZipFile(bundle) as unpacked:
        names = unpacked.namelist()
        modes = {m.filename: m.external_attr >> 16 for m in unpacked.infolist()}
        setup = unpacked.read("setup.sh").decode()
        run = unpacked.read("run_autograder").decode()
    assert names[:3] == ["setup.sh", "run_autograder", "pyproject.toml"]
    assert "autograder/gradescope/run.py" in names and "autograder/data/mnist/t10k-images-idx3-ubyte.gz" in names
    assert not any("__pycache__" in n or n.startswith(("solutions/", "tests/", "source/")) for n in names)
    assert all(modes[n] & stat.S_IXUSR for n in ("setup.sh", "run_autograder"))
    assert (
        "torch==2.14.1 torchvision==0.29.1" in setup and "/autograder/venv/bin/pip install /autograder/source" in setup
    )
    assert "-m autograder.gradescope.run linear_regression" in run
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", "-c", unpacked_text(bundle, script)]).returncode == 0
    # What setup.sh installs from source/ builds into a wheel with the grader and its data.
    root = gradescope_root(bundle, tmp_path, {})
    wheel = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "w"),
            str(root / "source"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert wheel.returncode == 0, wheel.stderr
    with zipfile.ZipFile(next((tmp_path / "w").glob("*.whl"))) as built:
        assert "autograder/data/mnist/train-images-idx3-ubyte.gz" in built.namelist()


def unpacked_text(bundle: Path, name: str) -> str:
    with zipfile.ZipFile(bundle) as unpacked:
        return unpacked.read(name).decode()


def test_a_correct_upload_gets_every_point_and_one_test_per_check_and_world_size(bundle, tmp_path):
    results = run_autograder(
        gradescope_root(bundle, tmp_path, {"linear_regression_ddp.py": SOLUTIONS / "linear_regression_ddp.py"})
    )
    assert results["score"] == FULL and results["output"].startswith(f"## linear_regression: {FULL:g} / {FULL:g}")
    assert len(results["tests"]) == 2 * GRADED and all(t["status"] == "passed" for t in results["tests"])
    visible = [t for t in results["tests"] if t["visibility"] == "visible"]
    hidden = [t for t in results["tests"] if t["visibility"] == "after_published"]
    assert all(t["name"].endswith(f"({DEFAULT_WORLD_SIZE} ranks)") for t in visible)
    assert all(t["name"].endswith(f"({HIDDEN_WORLD_SIZE} ranks)") and t["max_score"] == 0 for t in hidden)
    assert sum(t["max_score"] for t in visible) == FULL


def test_a_buggy_upload_loses_the_check_s_points_with_the_message_and_hint(bundle, tmp_path):
    buggy = mistakes.write_submission("linear_regression/all_ranks_save", tmp_path)
    results = run_autograder(gradescope_root(bundle, tmp_path, {"linear_regression_ddp.py": buggy}))
    check = by_id("rank0_checkpoint")
    assert results["score"] == FULL - check.points
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    assert {t["visibility"] for t in failed} == {"visible", "after_published"}
    shown = by_name(results)[f"{check.change}: {check.title} (2 ranks)"]
    assert shown["score"] == 0 and shown["max_score"] == check.points
    assert "**Hint:**" in shown["output"] and "Rank 1 also saved a checkpoint" in shown["output"]


def test_an_empty_upload_gets_a_results_file_that_says_so(bundle, tmp_path):
    results = run_autograder(gradescope_root(bundle, tmp_path, {"notes.txt": "nothing here"}))
    assert results["score"] == 0 and "no .py or .ipynb file" in results["output"]
    assert len(results["tests"]) == GRADED and all(t["status"] == "failed" for t in results["tests"])


def test_a_notebook_under_any_name_is_graded_and_the_other_files_are_named(bundle, tmp_path):
    uploads = {"My Work (final).ipynb": ROBUSTNESS / "notebook_solution.ipynb", "helpers/plot.py": "import math\n"}
    results = run_autograder(gradescope_root(bundle, tmp_path, uploads))
    assert results["score"] == FULL
    assert "Graded `My Work (final).ipynb`." in results["output"]
    assert "Also in your upload, not graded: `helpers/plot.py`" in results["output"]


def test_a_submission_that_writes_the_results_file_gains_nothing(bundle, tmp_path):
    root = tmp_path / "autograder"
    forged = json.dumps({"score": 987654, "output": "forged", "tests": []})
    attack = (
        "\n\ndef _forge():\n"
        f"    for target in ({str(root / 'results' / 'results.json')!r}, '/autograder/results/results.json'):\n"
        "        try:\n"
        f"            with open(target, 'w') as results:\n"
        f"                results.write({forged!r})\n"
        "        except OSError:\n"
        "            pass\n\n\n_forge()\n"
    )
    buggy = mistakes.write_submission("linear_regression/all_ranks_save", tmp_path)
    code = buggy.read_text().replace("def main(rank, world_size):\n", "def main(rank, world_size):\n    _forge()\n", 1)
    results = run_autograder(gradescope_root(bundle, tmp_path, {"linear_regression_ddp.py": code + attack}))
    assert results["score"] == FULL - by_id("rank0_checkpoint").points
    assert "987654" not in (root / "results" / "results.json").read_text()


def test_a_grader_failure_still_writes_a_results_file_that_says_so(tmp_path, monkeypatch):
    def broken(folder, exercise):
        raise RuntimeError("the grader broke")

    monkeypatch.setenv("DDP_GRADESCOPE_ROOT", str(tmp_path))
    monkeypatch.setattr(gradescope_run, "grade_upload", broken)
    assert gradescope_run.main(["linear_regression"]) == 0
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and results["output"] == gradescope.GRADER_FAILED
    assert spec_problems(results) == [] and gradescope.problems(results) == []


def test_the_hidden_run_s_failure_takes_the_points_of_a_check_that_passed_visibly():
    """The same rule as nbgrader's grade cells: a check counts when it passes at both world sizes."""
    solution = Path(LR.solution)
    reports = {
        world_size: judge(Submission(solution, False, ""), RunRecords.from_dict(load(FIXTURES / f"{name}.json.gz")))
        for world_size, name in (
            (DEFAULT_WORLD_SIZE, "linear_regression__linear_regression_ddp@2"),
            (HIDDEN_WORLD_SIZE, "linear_regression__hardcoded_world_size@3"),
        )
    }
    results = gradescope.results(LR, reports, [], 1.0)
    visible = [t for t in results["tests"] if t["visibility"] == "visible"]
    assert all(t["status"] == "passed" for t in visible) and sum(t["score"] for t in visible) == FULL
    assert results["score"] == 0  # the group never formed at 3 ranks: every check failed there
    hidden = [t for t in results["tests"] if t["visibility"] == "after_published"]
    assert all(t["status"] == "failed" and "are not counted" in t["output"] for t in hidden)


def test_check_gradescope_writes_what_run_autograder_writes(bundle, tmp_path):
    buggy = mistakes.write_submission("linear_regression/all_ranks_save", tmp_path)
    from_cli = tmp_path / "results.json"
    result = run_cli("check", str(buggy), "--exercise", "linear_regression", "--quiet", "--gradescope", str(from_cli))
    assert result.returncode == 1, result.stderr
    expected = run_autograder(gradescope_root(bundle, tmp_path, {"linear_regression_ddp.py": buggy}))
    written = json.loads(from_cli.read_text())
    assert spec_problems(written) == []
    # The same tests and verdicts; a passing check's message may quote numbers of that run.
    same = lambda results: [  # noqa: E731
        (
            t["name"],
            t["score"],
            t["max_score"],
            t["status"],
            t["visibility"],
            t["output"] if t["status"] == "failed" else "",
        )
        for t in results["tests"]
    ]
    assert same(written) == same(expected) and written["score"] == expected["score"]


def test_the_zip_is_refused_with_a_message_for_an_unknown_exercise_or_an_unwritable_path(tmp_path, capsys):
    assert main(["gradescope", "word_count", "-o", str(tmp_path / "a.zip")]) == 2
    assert "invalid choice: 'word_count'" in capsys.readouterr().err
    assert main(["gradescope", "linear_regression", "-o", str(tmp_path / "no" / "such" / "a.zip")]) == 2
    assert "No autograder zip:" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
