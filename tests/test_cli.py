"""The command line's contract: exit statuses, the JSON report's fields,
and clear errors for input that cannot be graded at all."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import SOLUTIONS, run_cli

from autograder.__main__ import _parser, _run_options, main
from autograder.exercises import EXERCISES
from autograder.nbgrader_ext import kernel
from autograder.schema.run import DEFAULT_OPTIONS, Limits, RunOptions


def test_a_correct_submission_exits_0_with_the_json_contract(tmp_path, no_leftover_ranks):
    report_path = tmp_path / "report.json"
    result = run_cli(
        "check",
        str(SOLUTIONS / "linear_regression_ddp.py"),
        "--exercise",
        "linear_regression",
        "--json",
        str(report_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(report_path.read_text())
    assert {
        "exercise",
        "world_size",
        "backend",
        "passed",
        "score",
        "max_score",
        "duration_s",
        "error",
        "ranks",
        "checks",
    } <= set(report)
    assert (report["exercise"], report["world_size"], report["backend"], report["error"]) == (
        "linear_regression",
        2,
        "gloo",
        None,
    )
    assert report["passed"] and report["score"] == report["max_score"] > 0
    assert {"rank", "exit_code", "error", "output"} <= set(report["ranks"][0])
    assert [r["exit_code"] for r in report["ranks"]] == [0, 0]
    assert "learned y = " in report["ranks"][0]["output"]
    check_ids = [c["id"] for c in report["checks"]]
    assert check_ids == list(EXERCISES["linear_regression"].checks)  # every check, in the report's order
    for check in report["checks"]:
        assert {"id", "status", "passed", "points", "max_points", "message"} <= set(check)
        assert check["status"] in ("passed", "skipped")
    # one line per check in the terminal report
    assert sum(line.startswith(("PASS", "SKIP")) for line in result.stdout.splitlines()) == len(check_ids)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "nowhere/missing.py", "--exercise", "mnist"], "There is no file at nowhere/missing.py"),
        (["check", "pyproject.toml", "--exercise", "mnist"], "neither a .py script nor a .ipynb notebook"),
        (
            ["check", "solutions/mnist_ddp.py", "--exercise", "mnist", "--world-size", "0"],
            "--world-size must be between 1 and 16",
        ),
        (
            ["check", "solutions/mnist_ddp.py", "--exercise", "mnist", "--timeout", "-3"],
            "--timeout must be a positive number",
        ),
        (
            ["check", "solutions/mnist_ddp.py", "--exercise", "mnist", "--backend", "nccl", "--world-size", "64"],
            "--world-size must be between",
        ),
        (
            ["check", "solutions/mnist_ddp.py", "--exercise", "mnist", "--memory-limit", "0"],
            "--memory-limit must be at least 1 MiB",
        ),
    ],
)
def test_input_that_cannot_be_graded_exits_2_with_a_reason(argv, message, capsys, monkeypatch):
    monkeypatch.chdir(SOLUTIONS.parent)
    assert main(argv) == 2
    assert message in capsys.readouterr().err.replace("\n", " ")


def test_nccl_without_enough_gpus_cannot_grade(capsys, monkeypatch):
    import torch

    monkeypatch.chdir(SOLUTIONS.parent)
    needed = torch.cuda.device_count() + 1
    assert (
        main(
            ["check", "solutions/mnist_ddp.py", "--exercise", "mnist", "--backend", "nccl", "--world-size", str(needed)]
        )
        == 2
    )
    assert f"--backend nccl needs {needed} GPUs, one per rank" in capsys.readouterr().err


def test_a_broken_notebook_file_cannot_be_graded(tmp_path, capsys):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{ this is not json")
    assert main(["check", str(broken), "--exercise", "linear_regression"]) == 2
    assert "is not a readable Jupyter notebook" in capsys.readouterr().err


def test_unknown_exercise_is_a_usage_error(capsys):
    assert main(["check", "solutions/mnist_ddp.py", "--exercise", "resnet"]) == 2
    assert "invalid choice: 'resnet'" in capsys.readouterr().err


def test_check_without_flags_grades_with_the_default_options_in_the_sandbox():
    args = _parser().parse_args(["check", "solutions/mnist_ddp.py", "--exercise", "mnist"])
    assert _run_options(args) == replace(DEFAULT_OPTIONS, sandbox="required")
    flags = ["--world-size", "3", "--timeout", "9", "--launcher", "process", "--unsafe-no-sandbox"]
    args = _parser().parse_args(["check", "x.py", "--exercise", "mnist", *flags, "--memory-limit", "0.5"])
    assert _run_options(args) == RunOptions(
        world_size=3, timeout_s=9.0, launcher="process", sandbox="off", limits=Limits(memory_bytes=2**29)
    )


def test_run_options_cross_to_the_warm_grader_and_back_unchanged():
    options = RunOptions(world_size=3, backend="gloo", sandbox="required", limits=Limits(cpu_seconds=7))
    assert RunOptions.from_dict(json.loads(json.dumps(options.to_dict()))) == options


def test_help_names_the_default_timeout_and_world_size(capsys):
    assert main(["check", "--help"]) == 0
    text = capsys.readouterr().out.replace("\n", " ")
    assert "default 120" in text and "default 2" in text


def test_autograde_where_the_kernel_cannot_be_sandboxed_says_why_and_what_to_do(tmp_path, capsys, monkeypatch):
    """An instructor who is neither root nor allowed user namespaces is told so before nbgrader starts,
    never left with "Kernel died"."""
    reason = "the grader is not root, and this system does not let it make user namespaces"
    monkeypatch.setattr(kernel, "why_unavailable", lambda: reason)
    assert main(["autograde", "linear_regression", "--course", str(tmp_path)]) == 1
    said = " ".join(capsys.readouterr().out.split())
    assert "Cannot autograde here: The autograding kernel cannot run in a sandbox here:" in said
    assert f"{reason}. Run the autograde as root (sudo, say), or on a machine that lets users make" in said
    with pytest.raises(kernel.KernelSandboxUnavailable, match="make user namespaces. Run the autograde as root"):
        kernel.SandboxedKernelManager(kernel_name="python3").format_kernel_cmd()  # nbgrader's own autograde
