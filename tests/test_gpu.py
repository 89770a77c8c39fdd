"""GPU runs (NCCL). Skipped, with the reason, on machines without the GPUs a
test needs; they run wherever those GPUs are visible.

NCCL cannot put two ranks on one GPU, so an NCCL run has at most as many
ranks as there are GPUs.
"""

from __future__ import annotations

import pytest
from conftest import SOLUTIONS, failed_ids

from autograder import RunOptions, grade
from autograder.launch.backend import visible_gpus

GPUS = visible_gpus()


def needs_gpus(count: int):
    return pytest.mark.skipif(GPUS < count, reason=f"needs {count} CUDA GPU(s), one per rank; this machine has {GPUS}")


pytestmark = pytest.mark.gpu


@needs_gpus(1)
@pytest.mark.parametrize(
    "solution, exercise", [("linear_regression_ddp.py", "linear_regression"), ("mnist_ddp.py", "mnist")]
)
def test_reference_solutions_pass_on_nccl_with_a_gpu_per_rank(solution, exercise, no_leftover_ranks):
    world_size = min(GPUS, 4)
    report = grade(SOLUTIONS / solution, exercise, RunOptions(world_size=world_size))
    assert report.backend == "nccl"
    assert report.passed, [(v.id, v.message) for v in report.checks if not v.passed]
    assert report.check("gpu_device").status == "passed"


@needs_gpus(2)
def test_the_torchrun_solution_passes_on_nccl_with_each_worker_in_a_slot_of_its_own(no_leftover_ranks):
    """On a GPU the agents are commands and each worker is exec'd in its own sandbox slot (worker_template.py)."""
    report = grade(SOLUTIONS / "fault_tolerance.py", "fault_tolerance", RunOptions(world_size=2))
    assert report.backend == "nccl"
    assert report.passed, [(v.id, v.message) for v in report.checks if not v.passed]


@needs_gpus(1)
def test_gloo_on_a_gpu_machine_hides_the_gpus_so_the_cpu_path_runs(tmp_path, no_leftover_ranks):
    source = (SOLUTIONS / "linear_regression_ddp.py").read_text()
    probe = source.replace(
        "    setup(rank, world_size)\n",
        "    setup(rank, world_size)\n    print('cuda visible:', torch.cuda.is_available())\n",
        1,
    )
    (tmp_path / "probe.py").write_text(probe)
    report = grade(tmp_path / "probe.py", "linear_regression", RunOptions(backend="gloo"))
    assert report.backend == "gloo" and report.passed
    assert "cuda visible: False" in report.ranks[0].output


@needs_gpus(2)
def test_ranks_sharing_one_device_fail_gpu_device(tmp_path, no_leftover_ranks):
    source = (SOLUTIONS / "linear_regression_ddp.py").read_text()
    shared = source.replace("torch.cuda.set_device(rank)", "torch.cuda.set_device(0)")
    (tmp_path / "shared_gpu.py").write_text(shared)
    report = grade(tmp_path / "shared_gpu.py", "linear_regression", RunOptions(backend="nccl"))
    assert "gpu_device" in failed_ids(report)
