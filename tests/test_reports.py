"""The student-facing reports: HTML (notebook cell, nbgrader feedback, --html
page), its pictures, and the terminal text report.

Three real submissions are graded once each for the whole module: the
reference solution, the solution without a DistributedSampler, and one with
three mistakes (every rank reads the whole data set, no set_epoch, no DDP),
graded through the CLI with --json and --html.
"""

from __future__ import annotations

import base64
import io
import json
import math
import re
from html import escape

import pytest
from conftest import SOLUTIONS, failed_ids, run_cli
from rich.console import Console

from autograder import grade
from autograder.judge.analysis import SYNC_TOLERANCE
from autograder.judge.verdict import FAILED, NOT_REACHED_HINT, PASSED, SKIPPED, RankSummary, Report, Verdict
from autograder.reports import html, json_report, plots, text

SOLUTION = SOLUTIONS / "linear_regression_ddp.py"
MALICIOUS = "<script>alert('owned')</script> & <img src=x onerror=alert(1)>"
PNG_URI = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')
STATUS_WORDS = {PASSED: "PASS", FAILED: "FAIL", SKIPPED: "SKIP"}


def _edit(source: str, *replacements: tuple[str, str]) -> str:
    for old, new in replacements:
        assert old in source, f"the solution changed: {old!r} not found"
        source = source.replace(old, new)
    return source


SHORTER = ("EPOCHS = 20", "EPOCHS = 6")
NO_SAMPLER = (
    (
        "        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)\n"
        "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)",
        "        loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True)\n"
        f"        if rank == 0:\n            print({MALICIOUS!r})",
    ),
    ("            sampler.set_epoch(epoch)  # a new shuffle every epoch\n", ""),
)
# Every rank reads the whole data set (in its own order, so the copies drift apart
# without DDP), the same order every epoch, and no DDP.
MISTAKES = (
    (
        "DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)",
        "DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=rank)",
    ),
    ("            sampler.set_epoch(epoch)  # a new shuffle every epoch\n", ""),
    ('        model = DDP(model, device_ids=[rank] if device.type == "cuda" else None)\n', ""),
    ("model.module.", "model."),
)


@pytest.fixture(scope="module")
def correct() -> Report:
    return grade(SOLUTION, "linear_regression")


@pytest.fixture(scope="module")
def no_sampler(tmp_path_factory) -> Report:
    path = tmp_path_factory.mktemp("no_sampler") / "no_sampler.py"
    path.write_text(_edit(SOLUTION.read_text(), SHORTER, *NO_SAMPLER))
    return grade(path, "linear_regression")


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory) -> dict:
    """Graded as a user does: python -m autograder check ... --json --html."""
    folder = tmp_path_factory.mktemp("mistakes")
    path = folder / "mistakes.py"
    path.write_text(_edit(SOLUTION.read_text(), SHORTER, *MISTAKES))
    finished = run_cli(
        "check",
        str(path),
        "--exercise",
        "linear_regression",
        "--json",
        str(folder / "report.json"),
        "--html",
        str(folder / "report.html"),
        "--quiet",
    )
    assert finished.returncode == 1, finished.stderr
    report = json_report.from_dict(json.loads((folder / "report.json").read_text()))
    return {"report": report, "page": (folder / "report.html").read_text(encoding="utf-8"), "folder": folder}


@pytest.fixture(params=["correct", "no_sampler", "mistakes"])
def any_report(request) -> Report:
    value = request.getfixturevalue(request.param)
    return value["report"] if isinstance(value, dict) else value


_rendered: dict[int, str] = {}


def _html(report: Report) -> str:
    """html.render, once per graded report (the module's reports live until its end)."""
    if id(report) not in _rendered:
        _rendered[id(report)] = html.render(report)
    return _rendered[id(report)]


def _images(fragment: str) -> list[bytes]:
    return [base64.b64decode(data) for data in PNG_URI.findall(fragment)]


def _synthetic(**changes) -> Report:
    values = dict(
        exercise="linear_regression",
        world_size=2,
        backend="gloo",
        duration_s=3.21,
        error=None,
        error_hint="",
        ranks=[
            RankSummary(rank=0, exit_code=0, status="finished", error=None, output="epoch 1\n", output_bytes=8),
            RankSummary(rank=1, exit_code=0, status="finished", error=None, output="", output_bytes=0),
        ],
        checks=[
            Verdict(
                id="process_group",
                title="Process group created",
                status=PASSED,
                points=2,
                max_points=2,
                message="All ranks joined.",
            ),
            Verdict(
                id="ddp_wrapped",
                title="Model wrapped in DistributedDataParallel",
                status=FAILED,
                points=0,
                max_points=2,
                message="Rank 1 did not wrap.",
                hint="Wrap it: DDP(model).",
                rank=1,
            ),
        ],
        submission="/somewhere/student.py",
        details={},
    )
    values.update(changes)
    return Report(**values)


# --- the graded submissions are what the tests assume --------------------------------


def test_the_submissions_fail_where_intended(correct, no_sampler, mistakes):
    assert correct.passed and not failed_ids(correct)
    # Without a sampler, the checks of its use have nothing to judge and fail too.
    assert failed_ids(no_sampler) == {"distributed_sampler", "same_dataset", "set_epoch"}
    assert {"distributed_sampler", "set_epoch", "ddp_wrapped", "weights_in_sync"} <= failed_ids(mistakes["report"])


# --- HTML content -----------------------------------------------------------------


def test_every_check_appears_with_its_title_status_and_points(any_report):
    fragment = _html(any_report)
    for verdict in any_report.checks:
        row = re.search(rf'<tr data-check="{verdict.id}" data-status="{verdict.status}">(.*?)</tr>', fragment, re.S)
        assert row, verdict.id
        assert escape(verdict.title) in row.group(1)
        assert f">{STATUS_WORDS[verdict.status]}</span>" in row.group(1)
        score = f"{verdict.points:g} / {verdict.max_points:g}" if verdict.max_points else "not counted"
        assert score in row.group(1)
    assert f"Score: {any_report.score:g} / {any_report.max_score:g}" in fragment
    assert escape(any_report.exercise) in fragment and f"{any_report.world_size} ranks" in fragment


def test_a_failure_shows_its_message_and_hint(no_sampler):
    fragment = _html(no_sampler)
    verdict = no_sampler.check("distributed_sampler")
    assert escape(verdict.message) in fragment
    assert verdict.hint and f"<b>Hint:</b> {escape(verdict.hint)}" in fragment
    assert "3 CHECKS FAILED" in fragment


def test_a_passing_run_says_so(correct):
    fragment = _html(correct)
    assert "ALL CHECKS PASSED" in fragment and "Hint:" not in fragment and "The run had a problem" not in fragment


def test_the_three_pictures_are_inline_pngs(correct, mistakes):
    for report in (correct, mistakes["report"]):
        images = _images(_html(report))
        assert len(images) == 3
        assert all(png.startswith(b"\x89PNG\r\n\x1a\n") for png in images)
        assert sum(len(png) for png in images) < 150_000  # the page stays light


def test_no_sampler_run_shows_every_rank_reading_everything(no_sampler):
    fragment = _html(no_sampler)
    assert len(_images(fragment)) == 3
    assert max(plots.partition_stats(no_sampler.details["partition"]).overlap) == 1.0
    partition = re.search(r'<div data-picture="partition">(.*?)</div></div>', fragment, re.S).group(1)
    assert "<img" in partition and "Every rank read the whole data set" in partition


def test_a_run_without_any_sampler_record_gets_a_note_instead_of_a_map():
    picture = plots.partition_picture(
        [{"rank": 0, "epochs": [], "dataset_length": None}, {"rank": 1, "epochs": [], "dataset_length": None}]
    )
    assert picture.png is None and "no record of which samples each rank read" in picture.note


def test_student_output_is_escaped(no_sampler):
    assert MALICIOUS in no_sampler.ranks[0].output  # it really went through the capture
    fragment = _html(no_sampler)
    assert "<script" not in fragment and "<img src=x" not in fragment
    assert escape(MALICIOUS) in fragment


def test_every_text_field_is_escaped():
    evil = MALICIOUS
    report = _synthetic(
        exercise=evil,
        backend=evil,
        error=evil,
        error_hint=evil,
        submission=f"/x/{evil}.py",
        files_left=[evil],
        ranks=[
            RankSummary(
                rank=0, exit_code=None, status="hung", error=evil, output=evil * 3, output_bytes=300, stack=evil
            ),
            RankSummary(rank=1, exit_code=-9, status=evil, error=evil, output="", output_bytes=0),
        ],
        checks=[
            Verdict(id=evil, title=evil, status=FAILED, points=0, max_points=1, message=evil, hint=evil, rank=0),
            Verdict(id="x", title=evil, status=evil, points=0, max_points=1, message=evil),
        ],
    )
    fragment = html.render(report)
    assert "<script" not in fragment and "<img src=x" not in fragment
    assert fragment.count(escape(evil)) >= 10
    assert "<script" not in html.page(report)


def test_rank_details_are_collapsed_and_complete():
    stack = 'Thread 0x1 (most recent call first):\n  File "/run/code/student.py", line 12 in main'
    report = _synthetic(
        error="The run did not finish within the time limit. rank 1: still running at the deadline.",
        error_hint="Every rank must run the same training steps.",
        ranks=[
            RankSummary(
                rank=0,
                exit_code=1,
                status="failed",
                error="RuntimeError: boom (student.py, line 3)",
                output="x" * 20 + "\nlast line\n",
                output_bytes=5000,
            ),
            RankSummary(
                rank=1,
                exit_code=None,
                status="hung",
                error="still running at the deadline",
                output="",
                output_bytes=0,
                stack=stack,
            ),
        ],
        files_left=["linear_regression.pt"],
    )
    fragment = html.render(report)
    problem = fragment.index("The run had a problem")
    assert problem < fragment.index("Checks")  # the launch-level problem comes first
    assert "<b>What to do:</b> Every rank must run the same training steps." in fragment
    assert fragment.count("<details") == 3 and "<details open" not in fragment and " open>" not in fragment
    assert "RuntimeError: boom" in fragment and "last line" in fragment and "the last part of 5,000 bytes" in fragment
    assert escape(stack) in fragment and "Where it was waiting" in fragment
    assert "still running at the deadline (hung)" in fragment and "exit status 1" in fragment
    assert "linear_regression.pt" in fragment
    assert "PROBLEM" in fragment


def test_missing_details_give_notes_not_pictures():
    for details in (
        {},
        {"partition": [], "losses": [], "weight_spread": []},
        {
            "partition": [{"rank": 0, "epochs": [], "dataset_length": None}],
            "losses": [{"rank": 0, "losses": []}],
            "weight_spread": [],
        },
    ):
        fragment = html.render(_synthetic(details=details))
        assert "<img" not in fragment
        assert fragment.count('<div data-picture="') == 3


def test_broken_details_do_not_break_the_report():
    fragment = html.render(
        _synthetic(
            details={"partition": "garbage", "losses": [{"rank": 0, "losses": [[1, "x"]]}], "weight_spread": [[1]]}
        )
    )
    assert fragment.count("could not be drawn") == 3 and "Process group created" in fragment


def test_a_notebook_shows_the_report_as_html(correct):
    from IPython.core.interactiveshell import InteractiveShell

    from autograder import notebook

    shell = InteractiveShell.instance()
    notebook._show_reports_as_html()
    formatted, _ = shell.display_formatter.format(correct)
    assert formatted["text/html"] == _html(correct)  # what Jupyter shows for a cell ending in check(...)


def test_json_round_trip_renders_the_same_html(correct, no_sampler):
    for report in (correct, no_sampler):
        again = json_report.from_dict(json.loads(json.dumps(json_report.to_dict(report))))
        assert html.render(again) == _html(report)


def test_cli_writes_a_standalone_page(mistakes):
    page = mistakes["page"]
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert '<meta charset="utf-8">' in page and "<title>DDP autograder: linear_regression" in page
    assert _html(mistakes["report"]) in page  # the page shows what the notebook shows
    assert [p.name for p in mistakes["folder"].iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_write_is_atomic_and_readable(tmp_path, correct):
    target = tmp_path / "sub" / "report.html"
    html.write(correct, target)
    html.write(correct, target)  # replaces
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]
    assert target.stat().st_mode & 0o044 == 0o044
    assert target.read_text(encoding="utf-8") == html.page(correct)


# --- pictures say what they should ------------------------------------------------------


def test_partition_map_shows_overlap_and_repeated_order(correct, no_sampler, mistakes):
    good, bad = correct.details["partition"], mistakes["report"].details["partition"]
    assert max(plots.partition_stats(good).overlap) == 0.0
    assert not any(plots.partition_stats(good).same_order)
    assert max(plots.partition_stats(no_sampler.details["partition"]).overlap) == 1.0
    assert max(plots.partition_stats(bad).overlap) == 1.0
    assert all(plots.partition_stats(bad).same_order)
    good_picture, bad_picture = plots.partition_picture(good), plots.partition_picture(bad)
    assert good_picture.png != bad_picture.png
    assert any("split the data" in f for f in good_picture.findings)
    assert any("Every rank read the whole data set" in f for f in bad_picture.findings)
    assert any("same order in every epoch" in f for f in bad_picture.findings)
    # The drawn image is the owner map: every sample read by exactly one rank vs by several.
    good_stats, bad_stats = plots.partition_stats(good), plots.partition_stats(bad)
    assert all(o in (0, 1) for row in good_stats.owners for o in row)
    assert all(o == -2 for row in bad_stats.owners for o in row)


def test_partition_stats_on_a_hand_made_split():
    partition = [
        {"rank": 0, "epochs": [[0, 2, 4], [4, 2, 0]], "dataset_length": 6},
        {"rank": 1, "epochs": [[1, 3, 4], [3, 1]], "dataset_length": 6},
        {"rank": 2, "epochs": [], "dataset_length": None},
    ]
    stats = plots.partition_stats(partition)
    assert stats.ranks == [0, 1] and stats.missing == [2] and stats.epochs == 2 and stats.dataset_length == 6
    assert stats.owners[0] == [0, 1, 0, 1, -2, -1]
    assert stats.overlap == [1 / 6, 0.0] and stats.unread == [1 / 6, 1 / 6]
    assert stats.same_order == [False] and stats.order == [[0, 2, 4], [4, 2, 0]]
    picture = plots.partition_picture(partition)
    assert picture.png and "Rank 2 read no data through a DataLoader's sampler" in picture.note


def test_padding_is_not_called_an_overlap():
    padded = [
        {"rank": 0, "epochs": [[0, 2, 4]], "dataset_length": 5},
        {"rank": 1, "epochs": [[1, 3, 0]], "dataset_length": 5},
    ]
    assert max(plots.partition_stats(padded).overlap) == 0.2
    assert "DistributedSampler's padding" in plots.partition_picture(padded).findings[0]
    shared = [
        {"rank": 0, "epochs": [[0, 1, 2]], "dataset_length": 5},
        {"rank": 1, "epochs": [[1, 2, 3]], "dataset_length": 5},
    ]
    assert "40% of the samples were read by more than one rank" in plots.partition_picture(shared).findings[0]


def test_many_ranks_are_drawn():
    world = 16
    partition = [{"rank": r, "epochs": [list(range(r, 160, world))] * 3, "dataset_length": 160} for r in range(world)]
    losses = [{"rank": r, "losses": [[s, 1 / (s + 1 + r)] for s in range(30)]} for r in range(world)]
    pictures = plots.pictures(
        {
            "partition": partition,
            "losses": losses,
            "weight_spread": [[s, 0.0] for s in range(30)],
            "sync_tolerance": SYNC_TOLERANCE,
        },
        world,
    )
    assert all(p.png for p in pictures)
    assert max(plots.partition_stats(partition).overlap) == 0.0 and all(plots.partition_stats(partition).same_order)


def test_loss_curves_show_identical_ranks(correct, no_sampler):
    assert not plots.identical_losses(correct.details["losses"])
    assert plots.identical_losses(no_sampler.details["losses"])
    picture = plots.loss_picture(no_sampler.details["losses"])
    assert picture.png and any("on top of each other" in f for f in picture.findings)
    diverged = plots.loss_picture([{"rank": 0, "losses": [[0, 1.0], [1, math.nan], [2, math.inf]]}])
    assert diverged.png and any("not finite" in f for f in diverged.findings)


def test_weight_spread_flat_when_in_sync_and_rising_without_ddp(correct, mistakes):
    assert max(plots.spread_series(correct.details["weight_spread"])[1]) == 0.0
    assert max(plots.spread_series(mistakes["report"].details["weight_spread"])[1]) > SYNC_TOLERANCE
    in_sync = plots.spread_picture(correct.details["weight_spread"], SYNC_TOLERANCE, 2)
    drifting = plots.spread_picture(mistakes["report"].details["weight_spread"], SYNC_TOLERANCE, 2)
    assert in_sync.png and drifting.png and in_sync.png != drifting.png
    assert "same on every rank" in in_sync.findings[0] and "drifted apart" in drifting.findings[0]
    assert plots.spread_picture([], SYNC_TOLERANCE, 1).note.startswith("With a single rank")


def test_pictures_leave_no_global_matplotlib_state():
    import inspect

    import matplotlib
    from matplotlib._pylab_helpers import Gcf

    source = inspect.getsource(plots)
    assert "matplotlib.pyplot" not in source and "import pyplot" not in source
    figures, settings = Gcf.get_num_fig_managers(), dict(matplotlib.rcParams)
    made = plots.pictures(
        {
            "losses": [{"rank": 0, "losses": [[0, 1.0], [1, 0.5]]}],
            "weight_spread": [[1, 0.0]],
            "sync_tolerance": SYNC_TOLERANCE,
            "partition": [{"rank": 0, "epochs": [[1, 0]], "dataset_length": 2}],
        },
        2,
    )
    assert all(p.png for p in made)
    assert Gcf.get_num_fig_managers() == figures and dict(matplotlib.rcParams) == settings


# --- terminal report -----------------------------------------------------------------


def test_text_report_is_plain_when_not_a_terminal(any_report):
    buffer = io.StringIO()
    text.render(any_report, Console(file=buffer, width=100), show_output=True)
    written = buffer.getvalue()
    assert "\x1b" not in written
    for verdict in any_report.checks:
        assert verdict.title in written
    assert ("FAIL" in written) == bool(failed_ids(any_report))
    assert f"Score: {any_report.score:g} / {any_report.max_score:g}" in written


# --- a run that stopped: one row for what it never reached ------------------------------


def _stopped_report() -> Report:
    def missed(check_id, title):
        return Verdict(
            id=check_id,
            title=title,
            status=FAILED,
            points=0,
            max_points=1,
            message=f"Could not confirm {title}.",
            hint=NOT_REACHED_HINT,
            rank=0,
            reached=False,
        )

    checks = [
        Verdict(
            id="process_group",
            title="Process group created",
            status=PASSED,
            points=2,
            max_points=2,
            message="All 2 ranks joined.",
        ),
        missed("rank0_logs", "Only rank 0 writes logs"),
        missed("cleanup", "Process group destroyed"),
        Verdict(
            id="gpu_device",
            title="Each rank on its own GPU",
            status=SKIPPED,
            points=0,
            max_points=0,
            message="Not counted on this machine.",
        ),
    ]
    stopped_at = "`model.modules.state_dict()` (s.py, line 5, in save, on rank 0)"
    return Report(
        exercise="linear_regression",
        world_size=2,
        backend="gloo",
        duration_s=1.0,
        error="Rank 0 failed: AttributeError",
        error_hint="",
        ranks=[],
        checks=checks,
        stopped_at=stopped_at,
    )


def test_the_checks_a_run_never_reached_share_one_row():
    report = _stopped_report()
    assert (report.score, report.max_score) == (2, 4)  # gpu_device counts 0 of 0 on the CPU
    fragment = html.render(report)
    assert '<tr data-check="not_reached" data-status="failed">' in fragment
    assert 'data-check="cleanup"' not in fragment and 'data-check="rank0_logs"' not in fragment
    assert "2 checks not reached" in fragment and "0 / 2" in fragment
    assert escape("the run stopped at `model.modules.state_dict()` (s.py, line 5, in save, on rank 0)") in fragment
    assert "not counted" in re.search(r'<tr data-check="gpu_device".*?</tr>', fragment, re.S).group(0)
    buffer = io.StringIO()
    text.render(report, Console(file=buffer, width=200))
    written = buffer.getvalue()
    assert written.lower().count("not reached") == 2  # the row's title and its sentence
    assert "Could not confirm" not in written  # one sentence, not a row per check
    assert "Not checked: Only rank 0 writes logs, Process group destroyed." in written
    rebuilt = json_report.from_dict(json.loads(json.dumps(json_report.to_dict(report))))
    assert rebuilt.stopped_at == report.stopped_at and [v.reached for v in rebuilt.checks] == [True, False, False, True]
    assert html.render(rebuilt) == fragment
