"""Load a submission (.py script or .ipynb notebook) and check, before any
rank starts, that it can be graded: it compiles and defines main."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

# Cells in another language, whose body is not Python at all.
NON_PYTHON_CELL_MAGICS = {
    "bash",
    "sh",
    "script",
    "html",
    "javascript",
    "js",
    "latex",
    "markdown",
    "svg",
    "perl",
    "ruby",
    "writefile",
    "file",
}
SHIM_IMPORT = "from autograder.rank.notebook_shim import get_ipython  # notebook magics do nothing while grading\n"


@dataclass
class Submission:
    path: Path
    is_notebook: bool
    code: str
    # For notebooks: (first line in `code`, cell number) of each code cell.
    cell_starts: list[tuple[int, int]] = field(default_factory=list)
    written_files: dict[str, str] = field(default_factory=dict)  # %%writefile cells

    @property
    def module_file_name(self) -> str:
        return self.path.stem + ".py"

    def where(self, line: int) -> str:
        """'line 12', or 'cell 4, line 3' for a notebook."""
        if not self.is_notebook:
            return f"line {line}"
        cell, first = 0, 1
        for start, number in self.cell_starts:
            if start <= line:
                cell, first = number, start
        return f"cell {cell}, line {line - first + 1}"


@dataclass
class StudentProblem:
    """The submission cannot run: graded, and every check fails with this."""

    message: str
    hint: str


def _notebook_code(path: Path) -> tuple[str, list[tuple[int, int]], dict[str, str]]:
    from IPython.core.inputtransformer2 import TransformerManager

    from .errors import CannotGrade

    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = notebook["cells"]
    except (ValueError, KeyError, TypeError) as error:
        raise CannotGrade(
            f"{path.name} is not a readable Jupyter notebook ({error}).",
            "Save the notebook again from JupyterLab, or submit a .py file.",
        ) from None
    transformer = TransformerManager()
    pieces, starts, written = [SHIM_IMPORT], [], {}
    line = 2
    code_cells = [c for c in cells if c.get("cell_type") == "code"]
    for number, cell in enumerate(code_cells, start=1):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        first_line, _, body = source.partition("\n")
        if first_line.startswith("%%"):
            magic, _, argument = first_line[2:].partition(" ")
            if magic in ("writefile", "file"):
                written[argument.strip().split()[-1] if argument.strip() else ""] = body
            if magic in NON_PYTHON_CELL_MAGICS:
                continue
            source = body  # %%time, %%capture ...: the body is Python
        python = transformer.transform_cell(source)
        text = f"# cell {number}\n{python}\n"
        starts.append((line + 1, number))
        pieces.append(text)
        line += text.count("\n")
    return "".join(pieces), starts, {name: body for name, body in written.items() if name}


def load(path: str | Path) -> Submission:
    from .errors import CannotGrade

    path = Path(path)
    if not path.is_file():
        raise CannotGrade(
            f"There is no file at {path}.", "Check the path; a .py script or a .ipynb notebook is expected."
        )
    if path.suffix not in (".py", ".ipynb"):
        raise CannotGrade(f"{path.name} is neither a .py script nor a .ipynb notebook.")
    if path.suffix == ".py":
        try:
            return Submission(path, False, path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError) as error:
            raise CannotGrade(f"{path.name} could not be read as text ({error}).") from None
    code, starts, written = _notebook_code(path)
    return Submission(path, True, code, starts, written)


def _top_level(body):
    """Top-level statements, looking into top-level if/try blocks too."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _top_level(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


def _defines_main(tree: ast.Module) -> bool:
    for node in _top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main":
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "main" for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name) in ("main", "*") for a in node.names
        ):
            return True
    return False


def preflight(submission: Submission, needs_main: bool = True) -> StudentProblem | None:
    """What keeps the code from running at all. needs_main: the grader calls
    main(rank, world_size); a torchrun program runs as a script, and needs none."""
    try:
        tree = ast.parse(submission.code, filename=submission.module_file_name)
    except SyntaxError as error:
        where = submission.where(error.lineno or 0)
        return StudentProblem(
            f"Python cannot read your code: {error.msg} ({where}).",
            "Fix that line first; nothing runs until the whole file is valid Python.",
        )
    if needs_main and not _defines_main(tree):
        return StudentProblem(
            "No function main(rank, world_size) is defined.",
            "The grader starts the ranks and calls main(rank, world_size) in each one; define it at the top level.",
        )
    return None
