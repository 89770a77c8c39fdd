"""The student's side in a real browser: JupyterLab on localhost, the released
linear_regression notebook, headless Chromium driven by Playwright.

A student types a program into the solution cell, runs the notebook, and
reads the check's report in the cell output; then presses nbgrader's
Validate button, which must agree with the check. Screenshots are saved
under artifacts/browser/.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
from conftest import CHROMIUM, CHROMIUM_FLAGS, ROOT

from autograder.exercises import EXERCISES

pytestmark = pytest.mark.browser

RELEASE = ROOT / "release" / "linear_regression"
SOURCE_NOTEBOOK = ROOT / "source" / "linear_regression" / "linear_regression.ipynb"
ARTIFACTS = ROOT / "artifacts" / "browser"
SOLUTION_CELL = "linear_regression_program"
CHECK_CELL = "check_program"
SAMPLER_LINES = (
    "        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)\n",
    "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)\n",
)

if not CHROMIUM.exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium (.ci/run installs it)", allow_module_level=True)
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright


def solution_text() -> str:
    """What a student who got it right types: the instructor's solution cell, without nbgrader's markers."""
    notebook = nbformat.read(SOURCE_NOTEBOOK, as_version=4)
    cell = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == SOLUTION_CELL)
    return "".join(
        line
        for line in cell.source.splitlines(keepends=True)
        if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
    )


def without_sampler(text: str) -> str:
    """The classic mistake: a plain shuffling DataLoader, no DistributedSampler."""
    assert all(line in text for line in SAMPLER_LINES), "the solution cell changed; update SAMPLER_LINES"
    text = text.replace(SAMPLER_LINES[0], "").replace(
        SAMPLER_LINES[1], "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)\n"
    )
    return "\n".join(line for line in text.splitlines() if "set_epoch" not in line) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab server over a fresh folder; yields (url, folder)."""
    root = tmp_path_factory.mktemp("lab")
    settings = root / ".settings" / "@jupyterlab"
    for extension, name, values in (
        # Render every cell: by default JupyterLab only puts the visible ones in the page.
        ("notebook-extension", "tracker", {"windowingMode": "none"}),
        # No "get notified about Jupyter news?" toast over the screenshots.
        ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
    ):
        (settings / extension).mkdir(parents=True)
        (settings / extension / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    port, token = free_port(), "browser-test"
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(root / ".settings"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    log = open(root / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--allow-root",
            "--LabApp.news_url=",
        ],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline and server.poll() is None, (root / "jupyterlab.log").read_text()
            time.sleep(0.5)
    # One workspace per student, so a page never restores another's open notebook.
    yield f"{url}/lab/workspaces/{{workspace}}/tree/{{path}}?reset&token={token}", root
    server.terminate()
    server.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def cell_index(grade_id: str) -> int:
    notebook = nbformat.read(RELEASE / "linear_regression.ipynb", as_version=4)
    return next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def work_as_student(browser, jupyterlab, name: str, program: str):
    """Open a fresh copy of the release, type `program` into the solution cell, run everything.
    Returns the page and the check cell, with its report shown."""
    url, root = jupyterlab
    folder = root / name
    shutil.copytree(RELEASE, folder)
    page = browser.new_page(viewport={"width": 1300, "height": 2400})  # tall enough for the whole report
    page.goto(url.format(workspace=name, path=f"{name}/linear_regression.ipynb"))
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")

    editor = cells.nth(cell_index(SOLUTION_CELL)).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(program)  # like pasting: the editor adds no indentation of its own

    page.locator(".lm-MenuBar-itemLabel", has_text="Run").click()
    page.get_by_text("Run All Cells", exact=True).click()
    check_cell = cells.nth(cell_index(CHECK_CELL))
    check_cell.locator(".jp-OutputArea-output tr[data-check]").first.wait_for(timeout=240_000)
    page.keyboard.press("Control+S")
    return page, check_cell, folder


def validate(page) -> str:
    """Press nbgrader's Validate button and return what its dialog says."""
    page.locator(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-NotebookPanel-toolbar [title='Validate Assignment']"
    ).click()
    dialog = page.locator(".jp-Dialog-content", has_text="Validation Results")
    dialog.wait_for(timeout=300_000)  # validation runs the notebook again, in a new kernel
    text = dialog.inner_text()
    page.locator(".jp-Dialog-button.jp-mod-accept").click()
    return text


def statuses(check_cell) -> dict[str, str]:
    rows = check_cell.locator("tr[data-check]")
    return {
        rows.nth(i).get_attribute("data-check"): rows.nth(i).get_attribute("data-status") for i in range(rows.count())
    }


def shoot(page, check_cell, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    check_cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    check_cell.screenshot(path=str(ARTIFACTS / f"{name}-report.png"))
    page.screenshot(path=str(ARTIFACTS / f"{name}-page.png"))


def test_a_correct_solution_shows_every_check_passing_and_validates(browser, jupyterlab):
    page, check_cell, _ = work_as_student(browser, jupyterlab, "correct", solution_text())
    shoot(page, check_cell, "correct")
    seen = statuses(check_cell)
    assert set(seen) == set(EXERCISES["linear_regression"].checks)
    assert {check: status for check, status in seen.items() if status == "failed"} == {}
    assert "ALL CHECKS PASSED" in check_cell.inner_text()
    assert "Success! Your notebook passes all the tests." in validate(page)
    page.close()


def test_a_missing_sampler_shows_that_failure_and_its_hint_and_validate_agrees(browser, jupyterlab):
    page, check_cell, _ = work_as_student(browser, jupyterlab, "no_sampler", without_sampler(solution_text()))
    shoot(page, check_cell, "no-sampler")
    seen = statuses(check_cell)
    assert seen["distributed_sampler"] == "failed"
    # Without a sampler, the checks of its use have nothing to judge and fail too.
    assert {check for check, status in seen.items() if status == "failed"} == {
        "distributed_sampler",
        "same_dataset",
        "set_epoch",
    }
    report = check_cell.inner_text()
    assert "without a DistributedSampler" in report
    assert "Hint: Give the DataLoader sampler=DistributedSampler(dataset" in report
    outcome = validate(page)
    assert "The following cell failed" in outcome and "without a DistributedSampler" in outcome
    page.close()
