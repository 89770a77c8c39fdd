"""The package's shape holds: no import cycles, one event schema that both
sides keep to, and exercise records that the course agrees with."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import conftest
import nbformat
import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder.exercises import ASSIGNMENTS, EXERCISES, LEFT_BY_RUNNING
from autograder.judge.checks import all_checks
from autograder.launch import LAUNCHERS
from autograder.launch.channel import RecordChannel
from autograder.rank.probes.state import RankState
from autograder.schema import events

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


# The pipeline's arrows: each part of the package (a top-level module or package
# of autograder/) and the parts it may import. launch -> rank -> judge -> reports,
# with schema (the event schema and the run's types) below them all and importing
# nothing. A new arrow is a decision: add it here, where it is seen.
ALLOWED_IMPORTS = {
    "schema": set(),
    "_process": set(),
    "_files": set(),
    "errors": set(),
    "linux": {"_process"},
    "model_state": set(),
    "wording": {"schema"},
    "submission": {"errors"},
    "datasets": {"_files"},
    "disk": {"model_state"},
    "rank": {"schema", "linux", "model_state", "_process"},
    "launch": {"schema", "linux", "rank", "_process", "errors"},
    "judge": {"schema", "disk", "submission", "wording"},
    "exercises": {"datasets", "judge"},
    "reports": {"schema", "judge", "exercises", "wording", "_files"},
    "grading": {"schema", "launch", "judge", "disk", "exercises", "submission", "errors", "wording"},
    "notebook": {"schema", "grading", "launch", "judge", "reports", "wording", "errors", "_process"},
    "bundle": {"launch"},
    "gradescope": {"schema", "grading", "launch", "reports", "exercises", "submission", "bundle", "errors"},
    "nbgrader_ext": {
        *("schema", "linux", "launch", "judge", "reports", "notebook", "exercises", "wording", "errors"),
        *("_process", "_files"),
    },
    "__main__": {
        *("schema", "grading", "launch", "reports", "nbgrader_ext", "gradescope", "bundle", "exercises", "errors"),
    },
}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "autograder"


def test_every_import_between_parts_of_the_package_is_an_allowed_arrow():
    graph = import_graph()
    parts = {_part(m) for m in graph} - {"autograder"}
    assert parts == set(ALLOWED_IMPORTS), f"parts with no row in ALLOWED_IMPORTS: {parts ^ set(ALLOWED_IMPORTS)}"
    unexpected = sorted(
        f"{module} -> {imported}"
        for module, imports in graph.items()
        for imported in imports
        if _part(module) not in (_part(imported), "autograder")
        and _part(imported) not in ALLOWED_IMPORTS[_part(module)]
    )
    assert not unexpected, f"imports the pipeline does not allow (see ALLOWED_IMPORTS): {unexpected}"


def test_the_rank_side_the_judge_and_the_reports_load_no_launcher():
    graph = import_graph()

    def closure(module: str) -> set[str]:
        seen, todo = set(), [module]
        while todo:
            for imported in graph[todo.pop()] - seen:
                seen.add(imported)
                todo.append(imported)
        return seen

    for module in graph:
        if _part(module) in ("rank", "judge", "reports"):
            loaded = {_part(m) for m in closure(module)}
            assert not loaded & {"launch", "grading"}, (module, loaded)
            if _part(module) != "rank":
                assert not loaded & {"rank", "linux"}, (module, loaded)  # no ctypes to read a report


def test_the_schema_imports_only_the_standard_library_and_itself():
    for path in (PACKAGE / "schema").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, (path.name, node.module)  # from .events, never from ..launch
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
                for name in names:
                    assert name.split(".")[0] in sys.stdlib_module_names and name != "ctypes", (path.name, name)


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 60  # one idea per file; a function one screen long


def test_every_module_is_one_idea_and_every_function_one_screen():
    long_modules, long_functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        where, lines = path.relative_to(ROOT), text.count("\n")
        if lines > MAX_MODULE_LINES:
            long_modules.append(f"{where} ({lines} lines)")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    assert not long_modules, f"modules over {MAX_MODULE_LINES} lines: split them along their seams: {long_modules}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def _sources(*folders: str) -> str:
    return "\n".join(p.read_text() for folder in folders for p in (ROOT / folder).rglob("*.py"))


def test_every_event_kind_is_written_by_a_probe_and_read_by_the_judge_or_a_launcher():
    rank_side = _sources("autograder/rank")
    written = set(re.findall(r'record\(\s*"(\w+)"', rank_side)) | set(
        re.findall(r'_recording_iter\([^)]*?"(\w+)"', rank_side)
    )
    readers = _sources("autograder/judge", "autograder/reports") + (PACKAGE / "grading.py").read_text()
    read = set(re.findall(r'(?:all|first)\("(\w+)"\)', readers))
    # A torchrun agent's records (how its workers exited) are read by its launcher, into the workers' outcomes.
    read |= set(re.findall(r'get\("kind"\) == "(\w+)"', (PACKAGE / "launch" / "torchrun.py").read_text()))
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
    assert set(exercise.checks) <= {c.id for c in all_checks()}
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


def test_a_quick_test_that_starts_a_process_is_told_it_belongs_to_the_slow_tier():
    """The guard of tests/conftest.py: the quick tier cannot quietly grow slow tests."""
    with pytest.raises(conftest.StartsAProcess, match="belongs to the slow tier.*PROCESS_FIXTURES"):
        subprocess.run(["true"], check=False)
    with pytest.raises(conftest.StartsAProcess):
        os.posix_spawn("/bin/true", ["true"], {})
