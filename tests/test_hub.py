"""The course as it is really run, end to end, in a real browser on a real hub (`python -m hub`):

* the instructor (a Unix user, not root) releases linear_regression through the exchange;
* ann logs in, fetches it in the Assignments tab, writes a correct program into the
  %%writefile cell, runs the notebook, reads the check's report, validates and submits;
  ben does the same with a classic mistake (no DistributedSampler) and submits;
* the instructor collects, grades with `python -m autograder autograde`, generates and
  releases feedback;
* each student fetches their feedback in the Assignments tab and reads their own score and
  the message for each lost point, and nothing of the other's;
* the gradebook holds the exact scores; Ctrl-C stops the hub and leaves nothing running.

Screenshots go to artifacts/hub/; the time of each step to artifacts/hub/timings.json.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from conftest import CHROMIUM_FLAGS, ROOT
from nbgrader.api import Gradebook
from sample_grades import TOTAL, points_of
from test_browser import CHECK_CELL, SOLUTION_CELL, cell_index, free_port, solution_text, validate, without_sampler
from test_exchange import Folders

from autograder._files import chown_tree
from autograder.exercises import EXERCISES
from hub.__main__ import COURSE_ID
from hub.users import ensure_account, remove_account, run_as

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(os.geteuid() != 0, reason="starts a hub with Unix users: needs root"),
    pytest.mark.skipif(
        not (shutil.which("configurable-http-proxy") or shutil.which("npm")),
        reason="needs configurable-http-proxy, or npm to install it (.ci/run installs it)",
    ),
]
sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright

ASSIGNMENT = "linear_regression"
ARTIFACTS = ROOT / "artifacts" / "hub"
NO_SAMPLER_FAILS = ("distributed_sampler", "same_dataset", "set_epoch")
TIMINGS: dict[str, float] = {}
LAB_SETTINGS = {  # what a student may set in JupyterLab's settings; here, for the screenshots
    "notebook-extension/tracker": {"windowingMode": "none"},  # every cell in the page
    "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
}


class timed:
    """Time one step of the walk-through."""

    def __init__(self, step: str):
        self.step = step

    def __enter__(self):
        self.started = time.monotonic()

    def __exit__(self, *_):
        TIMINGS[self.step] = round(time.monotonic() - self.started, 1)


class Hub:
    def __init__(self, base: Path, port: int, accounts: dict):
        self.base, self.port, self.accounts = base, port, accounts
        self.url = f"http://127.0.0.1:{port}"
        self.log = base / "hub.log"
        self.process = None

    @functools.cached_property
    def settings(self) -> dict:
        return json.loads((self.base / "state" / "settings.json").read_text())

    @property
    def course(self) -> Path:
        return Path(self.settings["course_dir"])

    def as_instructor(self, *command: str, timeout: float = 900):
        return run_as(self.accounts["teacher"], self.settings, [sys.executable, "-m", *command], self.course, timeout)


def _lab_settings(account) -> None:
    settings = account.home / ".jupyter"
    for name, values in LAB_SETTINGS.items():
        extension, plugin = name.split("/")
        path = settings / "lab" / "user-settings" / "@jupyterlab" / extension / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    chown_tree(settings, account.uid, account.gid)


def names(cmdline: list[str] | None) -> set[str]:
    """The program names on a command line."""
    return {Path(part).name for part in cmdline or []}


def score_line(score: float, total: float) -> str:
    """The feedback page's heading, as nbgrader's template writes it."""
    return f"{ASSIGNMENT} (Score: {round(float(score), 2)} / {round(float(total), 2)})"


@pytest.fixture(scope="module")
def hub():
    folders = Folders()
    folders.open_way_to(Path(sys.executable))
    base = Path(tempfile.mkdtemp(prefix="ddp-hub-"))
    base.chmod(0o755)
    names = {"teacher": "ddph-teach", "ann": "ddph-ann", "ben": "ddph-ben"}
    accounts = {role: ensure_account(name) for role, name in names.items()}
    for role in ("ann", "ben"):
        _lab_settings(accounts[role])
    the_hub = Hub(base, free_port(), accounts)
    spec = lambda role: f"{accounts[role].name}:{accounts[role].password}"  # noqa: E731
    command = [sys.executable, "-m", "hub", "--instructor", spec("teacher"), "--student", spec("ann")]
    command += ["--student", spec("ben"), "--port", str(the_hub.port)]
    command += ["--exchange", str(base / "exchange"), "--state", str(base / "state")]
    try:
        with timed("start the hub (users, course, exchange, JupyterHub)"), open(the_hub.log, "w") as log:
            the_hub.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 180
            while "JupyterHub is now running" not in the_hub.log.read_text():
                assert the_hub.process.poll() is None and time.monotonic() < deadline, the_hub.log.read_text()
                time.sleep(0.5)
            urllib.request.urlopen(f"{the_hub.url}/hub/api", timeout=10)
        yield the_hub
    finally:
        if the_hub.process is not None and the_hub.process.poll() is None:
            the_hub.process.send_signal(signal.SIGINT)
            the_hub.process.wait(timeout=60)
        for name in names.values():
            remove_account(name)
        shutil.rmtree(base, ignore_errors=True)
        folders.restore()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "timings.json").write_text(json.dumps(TIMINGS, indent=1))


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        yield chromium
        chromium.close()


def shoot(page, name: str, element=None) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (element or page).screenshot(path=str(ARTIFACTS / f"{name}.png"))


def log_in(browser, hub: Hub, role: str):
    account = hub.accounts[role]
    page = browser.new_context(viewport={"width": 1300, "height": 2400}).new_page()
    page.goto(f"{hub.url}/hub/login")
    page.fill("input[name=username]", account.name)
    page.fill("input[name=password]", account.password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url("**/lab**", timeout=180_000)  # the hub starts the student's own server
    page.goto(f"{hub.url}/user/{account.name}/lab?reset")
    page.wait_for_selector(".jp-Launcher", timeout=120_000)
    return page


def assignments_tab(page):
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    page.locator("#released_assignments_list_loading[hidden]").wait_for(state="attached", timeout=60_000)
    return page


def work_and_submit(browser, hub: Hub, role: str, program: str) -> dict:
    """A student's session: log in, fetch, write the program, run the notebook, (validate,) submit.
    Returns what the check cell reported, by check."""
    page = log_in(browser, hub, role)
    assignments_tab(page)
    page.locator("#released_assignments_list .list_item", has_text=ASSIGNMENT).get_by_role(
        "button", name="Fetch"
    ).click()
    fetched = page.locator("#fetched_assignments_list .list_item", has_text=ASSIGNMENT).first
    fetched.wait_for(timeout=60_000)
    shoot(page, f"{role}-1-assignments-tab")
    fetched.locator("a.assignment-notebooks-link").click()
    page.locator("#fetched_assignments_list .nested_list_item a", has_text=ASSIGNMENT).click()

    page.wait_for_selector(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000
    )
    cells = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell")
    cells.nth(cell_index(SOLUTION_CELL)).locator(".cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(program)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").click()
    page.get_by_text("Run All Cells", exact=True).click()
    check_cell = cells.nth(cell_index(CHECK_CELL))
    check_cell.locator(".jp-OutputArea-output tr[data-check]").first.wait_for(timeout=300_000)
    page.keyboard.press("Control+S")
    page.wait_for_timeout(1000)
    check_cell.evaluate("cell => cell.scrollIntoView({block: 'start'})")
    shoot(page, f"{role}-2-check-report", check_cell)
    rows = check_cell.locator("tr[data-check]")
    seen = {
        rows.nth(i).get_attribute("data-check"): rows.nth(i).get_attribute("data-status") for i in range(rows.count())
    }
    if role == "ann":
        with timed("ann validates"):
            assert "Success! Your notebook passes all the tests." in validate(page)

    assignments_tab(page)
    page.locator("#fetched_assignments_list .list_item", has_text=ASSIGNMENT).get_by_role(
        "button", name="Submit"
    ).first.click()
    page.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT).first.wait_for(timeout=120_000)
    shoot(page, f"{role}-3-submitted")
    page.context.close()
    return seen


def fetch_feedback(browser, hub: Hub, role: str) -> str:
    """The student's feedback page, fetched in the Assignments tab, as text."""
    page = log_in(browser, hub, role)
    assignments_tab(page)
    submitted = page.locator("#submitted_assignments_list .list_item", has_text=ASSIGNMENT).first
    submitted.get_by_role("button", name="Fetch Feedback").click()
    link = page.locator("#submitted_assignments_list a", has_text="view feedback").first
    link.wait_for(timeout=60_000)
    shoot(page, f"{role}-4-feedback-fetched")
    link.click()  # the file browser goes to the feedback's folder: the student opens the page there
    page.locator(".jp-DirListing-item", has_text=f"{ASSIGNMENT}.html").dblclick()
    body = page.frame_locator(".jp-HTMLViewer iframe").locator("body")
    body.locator("h4").first.wait_for(timeout=60_000)
    text = body.inner_text()
    shoot(page, f"{role}-5-feedback")
    page.context.close()
    return text


def test_a_class_on_the_hub_from_release_to_feedback(hub, browser):
    with timed("instructor releases"):
        hub.as_instructor("nbgrader", "release_assignment", ASSIGNMENT)
    with timed("ann: log in, fetch, write, run, read the report, validate, submit"):
        ann_saw = work_and_submit(browser, hub, "ann", solution_text())
    with timed("ben: log in, fetch, write, run, read the report, submit"):
        ben_saw = work_and_submit(browser, hub, "ben", without_sampler(solution_text()))
    assert set(ann_saw) == set(EXERCISES[ASSIGNMENT].checks) and "failed" not in ann_saw.values()
    assert {check for check, status in ben_saw.items() if status == "failed"} == set(NO_SAMPLER_FAILS)

    with timed("instructor collects"):
        hub.as_instructor("nbgrader", "collect", ASSIGNMENT)
    with timed("instructor autogrades (python -m autograder autograde)"):
        graded = hub.as_instructor("autograder", "autograde", ASSIGNMENT)
    assert "Graded 2 students" in graded.stdout, graded.stdout
    with timed("instructor generates and releases feedback"):
        hub.as_instructor("nbgrader", "generate_feedback", ASSIGNMENT)
        hub.as_instructor("nbgrader", "release_feedback", ASSIGNMENT)

    ann, ben = (hub.accounts[role].name for role in ("ann", "ben"))
    lost = sum(points_of(check) for check in NO_SAMPLER_FAILS)
    with Gradebook(f"sqlite:///{hub.course / 'gradebook.db'}", COURSE_ID) as gradebook:
        assert gradebook.find_submission(ASSIGNMENT, ann).score == TOTAL[ASSIGNMENT]
        assert gradebook.find_submission(ASSIGNMENT, ben).score == TOTAL[ASSIGNMENT] - lost

    with timed("students fetch and read their feedback"):
        ann_feedback = fetch_feedback(browser, hub, "ann")
        ben_feedback = fetch_feedback(browser, hub, "ben")
    assert score_line(TOTAL[ASSIGNMENT], TOTAL[ASSIGNMENT]) in ann_feedback
    assert score_line(TOTAL[ASSIGNMENT] - lost, TOTAL[ASSIGNMENT]) in ben_feedback
    assert "without a DistributedSampler" in ben_feedback and "without a DistributedSampler" not in ann_feedback
    assert ben not in ann_feedback and ann not in ben_feedback

    hub.process.send_signal(signal.SIGINT)  # the instructor's Ctrl-C
    with timed("Ctrl-C: the hub stops"):
        assert hub.process.wait(timeout=60) == 0
    users = {account.name for account in hub.accounts.values()}
    left = [
        p.info
        for p in psutil.process_iter(["pid", "username", "cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE  # dead, waiting to be reaped
        and (p.info["username"] in users or {"jupyterhub", "configurable-http-proxy"} & names(p.info["cmdline"]))
    ]
    assert not left
