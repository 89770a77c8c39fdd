"""The package's shape holds: no import cycles, one event schema that both
sides keep to, and exercise records that the course agrees with."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.exercises import ASSIGNMENTS, EXERCISES, LEFT_BY_RUNNING
from autograder.judge import events
from autograder.judge.checks import CHECKS
from autograder.launch import LAUNCHERS
from autograder.launch.channel import RecordChannel
from autograder.rank.probes.state import RankState

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "autograder"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every autograder module this file imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found |= submodules or {base}  # `from pkg import mod` depends on mod; `from mod import f` on mod
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    return {module for module in found if module in known} - ancestors  # a package runs before its modules


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, name, set(files)) - {name} for name, path in files.items()}


def test_no_import_cycle_inside_the_package():
    graph = import_graph()
    assert "autograder.judge.checks" in graph["autograder.exercises"]  # the graph sees imports at all
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph[module]):
            assert state.get(imported) != "open", "import cycle: " + " -> ".join([*path, imported])
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_rank_side_and_the_judge_do_not_import_each_others_internals():
    graph = import_graph()
    for module, imported in graph.items():
        if module.startswith("autograder.judge"):
            assert not any(m.startswith("autograder.rank") for m in imported), module
        if module.startswith("autograder.rank"):
            assert {m for m in imported if m.startswith("autograder.judge")} <= {
                "autograder.judge.events",
                "autograder.judge",
            }, module


def _sources(*folders: str) -> str:
    return "\n".join(p.read_text() for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_every_event_kind_is_written_by_a_probe_and_read_by_the_judge():
    rank_side = _sources("autograder/rank")
    written = set(re.findall(r'record\(\s*"(\w+)"', rank_side)) | set(
        re.findall(r'_recording_iter\([^)]*?"(\w+)"', rank_side)
    )
    readers = _sources("autograder/judge", "autograder/reports") + (PACKAGE / "grading.py").read_text()
    read = set(re.findall(r'(?:all|first)\("(\w+)"\)', readers))
    assert written == set(events.EVENTS), "written but not declared, or declared but never written"
    assert read == set(events.EVENTS), f"declared but read by no check or report: {sorted(set(events.EVENTS) - read)}"


def test_a_probe_cannot_record_what_the_schema_does_not_declare(tmp_path):
    (tmp_path / "channel").mkdir()
    channel = RecordChannel(tmp_path / "channel")
    state = RankState(0, 1, "gloo", str(tmp_path / "store"), str(tmp_path), channel.path, False)
    state.record("torch_save", path="/x.pt")
    with pytest.raises(events.UnknownEvent, match="undeclared fields"):
        state.record("torch_save", path="/x.pt", size=3)
    with pytest.raises(events.UnknownEvent, match="no event kind"):
        state.record("set_epoch", epoch=1)
    state.close()
    channel.close()
    assert [e["kind"] for e in channel.events("rank", 0)] == ["torch_save"]


def test_the_judge_reads_missing_fields_as_their_defaults():
    assert events.parse({"kind": "rank_done"}) == {
        "kind": "rank_done",
        "time": 0.0,
        "step": 0,
        "failed": True,
    }
    assert events.parse({"kind": "rank_done", "failed": False, "forged": 1})["failed"] is False
    assert "forged" not in events.parse({"kind": "rank_done", "forged": 1})
    assert events.parse({"kind": "no_such_kind"}) is None and events.parse(["rank_done"]) is None


@pytest.mark.parametrize("exercise", list(EXERCISES.values()), ids=list(EXERCISES))
def test_each_exercise_record_matches_the_course(exercise):
    assert (ROOT / exercise.solution).is_file()
    assert exercise.launcher in LAUNCHERS
    assert set(exercise.checks) <= {c.id for c in CHECKS}
    assert exercise.assignment in ASSIGNMENTS
    for folder in ("source", "release"):
        notebook = nbformat.read(ROOT / folder / exercise.assignment / f"{exercise.assignment}.ipynb", as_version=4)
        assert any(cell.source.startswith(f"%%writefile {exercise.program}") for cell in notebook.cells), folder
    assert len({e.grade_id_prefix for e in EXERCISES.values()}) == len(EXERCISES)


def test_nbgrader_config_ignores_what_running_the_notebooks_leaves():
    config = PyFileConfigLoader("nbgrader_config.py", str(ROOT)).load_config()
    assert set(LEFT_BY_RUNNING) <= set(config.CourseDirectory.ignore)
    assert {e.program for e in EXERCISES.values()} <= set(config.CourseDirectory.ignore)
    assert [folder.name for folder in sorted((ROOT / "source").iterdir()) if folder.is_dir()] == sorted(ASSIGNMENTS)
