"""The launcher seam: the launchers, all one skeleton (autograder/launch/skeleton.py),
give the same verdicts, keep the deadline and leave nothing behind, and a
rank can be started from its command line alone, as an agent would."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import SOLUTIONS, processes_mentioning, robustness_case

from autograder import RunOptions, grade
from autograder.launch import Job, launcher
from autograder.launch.channel import RecordChannel
from autograder.schema.run import RankStatus


@pytest.mark.parametrize("kind", ["mp", "process"])
def test_each_launcher_passes_the_reference(kind, no_leftover_ranks):
    report = grade(
        SOLUTIONS / "linear_regression_ddp.py", "linear_regression", RunOptions(backend="gloo", launcher=kind)
    )
    assert report.passed and report.score == report.max_score, report.error


def test_the_students_own_spawn_starts_each_process_as_spawn_does(tmp_path, no_leftover_ranks):
    """The processes of the student's mp.spawn come warm from a fork server, yet
    each imports the file again and has the launcher's environment at the call."""
    submission = robustness_case("spawned_as_spawn_does.py", tmp_path)
    for world_size in (2, 3):
        report = grade(submission, "linear_regression", RunOptions(world_size=world_size, backend="gloo"))
        assert report.score == report.max_score, [c.message for c in report.checks if not c.passed]


def test_a_launch_that_fails_half_way_through_starting_stops_what_it_started(tmp_path):
    """The skeleton's start-failure path: the process already started is killed and
    reaped, its output closed, and the result says why nothing ran."""
    from autograder.launch.process import ProcessLauncher
    from autograder.launch.supervise import start_command

    started_pids = []

    class HalfStarted(ProcessLauncher):
        def start(self, launch, started):
            sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
            started.append(start_command(sleeper, launch.spec.output_paths[0]))
            started_pids.append(started[-1].pid)
            raise OSError("no more processes")

    job = Job(
        world_size=2,
        backend="gloo",
        hide_gpus=False,
        timeout_s=60.0,
        module_path=robustness_case("hang_recv.py", tmp_path),
        workdir=tmp_path,
        is_notebook=False,
    )
    result = HalfStarted().launch(job, tmp_path / "private")
    assert result.start_error == "OSError: no more processes" and result.ranks == []
    with pytest.raises(ProcessLookupError):
        os.kill(started_pids[0], 0)  # killed and reaped, not left running


def test_the_process_launcher_keeps_the_deadline_and_stops_every_rank(tmp_path):
    submission = robustness_case("hang_recv.py", tmp_path)
    job = Job(
        world_size=2,
        backend="gloo",
        hide_gpus=False,
        timeout_s=5.0,
        module_path=submission,
        workdir=tmp_path,
        is_notebook=False,
    )
    private = tmp_path / "private"
    private.mkdir()
    result = launcher("process").launch(job, private)
    assert [r.status for r in result.ranks] == [RankStatus.HUNG, RankStatus.HUNG]
    assert 5.0 <= result.duration_s < 30
    assert "hang_recv.py" in result.ranks[0].stack  # its faulthandler stack, asked for at the deadline
    assert not processes_mentioning(str(private / "spec.json"))


def test_a_rank_starts_from_its_command_line_with_the_rank_from_the_environment(tmp_path):
    """What a torchrun or srun agent does: it knows only the spec file and RANK."""
    (tmp_path / "work").mkdir()
    (tmp_path / "channel").mkdir()
    channel = RecordChannel(tmp_path / "channel")
    code = tmp_path / "linear_regression_ddp.py"
    code.write_text((SOLUTIONS / "linear_regression_ddp.py").read_text())
    spec = {
        "world_size": 1,
        "backend": "gloo",
        "hide_gpus": False,
        "is_notebook": False,
        "module_path": str(code),
        "workdir": str(tmp_path / "work"),
        "store_path": str(tmp_path / "store"),
        "channel_path": channel.path,
        "output_paths": [str(tmp_path / "rank0.out")],
        "stack_paths": [str(tmp_path / "rank0.stack")],
        "inherited_fds": [],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, "-m", "autograder.rank", str(tmp_path / "spec.json")],
        timeout=120,
        env=os.environ | {"RANK": "0"},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, (tmp_path / "rank0.out").read_text()[-2000:]
    channel.close()
    kinds = [e["kind"] for e in channel.events("rank", 0)]
    assert kinds[0] == "init_process_group" and kinds[-1] == "rank_done"
    assert "linear_regression.pt" in os.listdir(tmp_path / "work")
