"""The ddp_intro quiz: numbers of each student's own, answers that the
release never shows, and a solution that is right for every draw."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from torch.utils.data.distributed import DistributedSampler

from autograder.notebook import quiz

ROOT = Path(__file__).resolve().parents[1]
SOURCE, RELEASE = (ROOT / folder / "ddp_intro" / "ddp_intro.ipynb" for folder in ("source", "release"))
STUDENTS = [f"student{n}" for n in range(200)]


def cells(path: Path) -> dict[str, str]:
    """The notebook's code cells, by grade id."""
    notebook = nbformat.read(path, as_version=4)
    return {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in notebook.cells
        if c.cell_type == "code" and "nbgrader" in c.metadata
    }


def expected(student: str) -> dict:
    """Every question's right answer for this student."""
    q1, q4, q6 = (quiz.numbers(q, student) for q in ("q1", "q4", "q6"))
    shard = DistributedSampler(list(range(q4.n_samples)), num_replicas=q4.world_size, rank=q4.rank, shuffle=False)
    return {
        "effective_batch_size": q1.world_size * q1.batch_per_gpu,
        "checkpoint_rank": 0,
        "sampler_answer": "b",
        "samples_per_rank": len(shard),
        "rank_indices": list(shard),
        "ddp_key_prefix": "module.",
        "scaled_lr": q6.lr * q6.world_size,
    }


def test_a_student_gets_the_same_numbers_every_time_and_students_get_different_ones():
    assert all(quiz.numbers(q, "ada") == quiz.numbers(q, "ada") for q in quiz.QUESTIONS)
    for question, scenarios in quiz.QUESTIONS.items():
        drawn = {tuple(sorted(vars(quiz.numbers(question, s)).items())) for s in STUDENTS}
        assert len(drawn) >= 0.8 * len(scenarios), f"{question}: 200 students drew only {len(drawn)} scenarios"
    pairs = sum(expected(a) == expected(b) for a, b in zip(STUDENTS, STUDENTS[1:], strict=False))
    assert pairs <= 2, f"{pairs} of 199 neighbours could copy each other's whole quiz"


def test_the_student_is_the_one_autograde_grades_else_the_hub_user(tmp_path, monkeypatch):
    folder = tmp_path / "autograded" / "dana" / "ddp_intro"
    folder.mkdir(parents=True)
    monkeypatch.chdir(folder)
    monkeypatch.setenv("JUPYTERHUB_USER", "brook")
    assert quiz.student_id() == "brook"
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quiz.student_id() == "dana"


@pytest.mark.parametrize("scenario", quiz.QUESTIONS["q4"], ids=str)
def test_every_sampler_question_shows_the_padding_and_the_solution_gets_it_right(scenario):
    q4 = type("Numbers", (), scenario)
    right = list(DistributedSampler(list(range(q4.n_samples)), q4.world_size, q4.rank, shuffle=False))
    assert right[-1] < right[0], "the rank's last index comes from the padding, the start of the list again"
    solution = cells(SOURCE)["q4_sampler_by_hand"]
    found: dict = {"q4": q4}
    exec(solution, found)
    assert (found["samples_per_rank"], found["rank_indices"]) == (len(right), right)


def test_the_source_s_solutions_answer_right_for_any_student():
    source = cells(SOURCE)
    for student in STUDENTS[:20]:
        found = {q: quiz.numbers(q, student) for q in quiz.QUESTIONS}
        for grade_id in (
            "q1_effective_batch_size",
            "q2_checkpoint_rank",
            "q3_sampler_answer",
            "q5_ddp_key_prefix",
            "q6_scaled_lr",
        ):
            exec(source[grade_id], found)
        exec(source["q4_sampler_by_hand"], found)
        assert {name: found[name] for name in expected(student)} == expected(student), student


def test_no_released_quiz_cell_holds_an_answer():
    """What a student sees checks the form of an answer only: no expected value is written in it,
    for the fixed questions or for any student's drawn ones."""
    answers = [answer for student in STUDENTS for answer in expected(student).values()]
    for grade_id, source in cells(RELEASE).items():
        if not grade_id.startswith("q"):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Constant, ast.List)):
                value = ast.literal_eval(node) if isinstance(node, ast.List) else node.value
                if isinstance(value, str) and len(value) > 1:
                    continue  # a message: its words are not an answer (a one-letter string could be)
                assert value not in answers, f"release cell {grade_id} holds {value!r}, an expected answer"
