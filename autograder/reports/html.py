"""The HTML report: what a student sees under a notebook cell, in nbgrader
feedback, and in the page `python -m autograder check ... --html FILE` writes.

`render(report)` gives a self-contained fragment: inline styles only (no
<style> block a sanitiser could drop or that could leak into the page), the
pictures as PNG data URIs, and every piece of text escaped. Colours are
translucent or on solid badges and text colour is inherited, so the same
fragment reads in JupyterLab's light and dark themes; each status is also
written out (PASS, FAIL, SKIP), never shown by colour alone.

The fragment depends only on what the JSON report keeps, so a Report rebuilt
with json_report.from_dict renders the same HTML.
"""

from __future__ import annotations

import html
import os
from pathlib import PurePath

from .._files import write_text
from ..judge.verdict import FAILED, PASSED, SKIPPED, RankSummary, Report, Verdict
from ..schema.run import RankStatus
from ..wording import RANK_STATUS_WORDS, exit_words, plural, points, unsandboxed_note
from . import plots

OUTPUT_CHARS = 10_000  # per rank; at most the JSON's, so a round trip shows the same
OUTPUT_LINES = 200
SUMMARY_CHARS = 160

FONT = "font-family: system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
MONO = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, 'Liberation Mono', monospace"
BORDER = "rgba(128, 128, 128, 0.35)"
BADGES = {PASSED: ("PASS", "#1a7f37"), FAILED: ("FAIL", "#cf222e"), SKIPPED: ("SKIP", "#8a6100")}
BOXES = {
    "problem": ("rgba(207, 34, 46, 0.10)", "#cf222e"),
    "hint": ("rgba(9, 105, 218, 0.10)", "#0969da"),
    "good": ("rgba(26, 127, 55, 0.10)", "#1a7f37"),
    "note": ("rgba(128, 128, 128, 0.12)", "#808080"),
}


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _badge(label: str, colour: str, big: bool = False) -> str:
    size = "font-size: 0.95em; padding: 3px 10px" if big else "font-size: 0.78em; padding: 1px 7px"
    return (
        f'<span style="display: inline-block; {size}; border-radius: 4px; background: {colour}; color: #ffffff; '
        f'font-weight: 700; letter-spacing: 0.04em; {FONT}; white-space: nowrap">{_e(label)}</span>'
    )


def _box(kind: str, body: str) -> str:
    background, edge = BOXES[kind]
    return (
        f'<div style="background: {background}; border-left: 4px solid {edge}; border-radius: 3px; '
        f'padding: 6px 10px; margin: 6px 0">{body}</div>'
    )


def _pre(text: str) -> str:
    return (
        f'<pre style="{MONO}; font-size: 12px; line-height: 1.35; background: rgba(128, 128, 128, 0.12); color: '
        "inherit; "
        f"border: 1px solid {BORDER}; border-radius: 3px; padding: 6px 8px; margin: 4px 0 8px; max-height: 24em; "
        f'overflow: auto; white-space: pre-wrap; word-break: break-word">{_e(text)}</pre>'
    )


def _heading(text: str) -> str:
    return f'<div style="font-size: 1.08em; font-weight: 650; margin: 18px 0 6px">{_e(text)}</div>'


# --- parts -------------------------------------------------------------------------


def _header(report: Report) -> str:
    failed = [v for v in report.checks if v.status == FAILED]
    if report.error:
        badge = _badge("PROBLEM", BADGES[FAILED][1], big=True)
    elif failed:
        badge = _badge(f"{len(failed)} CHECK{'S' if len(failed) != 1 else ''} FAILED", BADGES[FAILED][1], big=True)
    else:
        badge = _badge("ALL CHECKS PASSED", BADGES[PASSED][1], big=True)
    name = PurePath(report.submission).name if report.submission else ""
    facts = [f"exercise <b>{_e(report.exercise)}</b>"]
    if name:
        facts.append(f'file <code style="{MONO}">{_e(name)}</code>')
    facts += [
        plural(report.world_size, "rank"),
        f"backend {_e(report.backend)}",
        f"ran {round(report.duration_s, 3):.1f} s",
    ]
    return (
        f'<div style="border-bottom: 1px solid {BORDER}; padding-bottom: 8px; margin-bottom: 8px">'
        f'<div style="font-size: 1.25em; font-weight: 700; margin-bottom: 2px">DDP autograder report</div>'
        f'<div style="opacity: 0.8; margin-bottom: 6px">{" &middot; ".join(facts)}</div>'
        f'<div>{badge} <span style="font-size: 1.1em; font-weight: 650; margin-left: 8px">Score: '
        f"{points(report.score)} / {points(report.max_score)}</span></div></div>"
    )


def _problem(report: Report) -> str:
    parts = []
    if report.error:
        body = '<div style="font-weight: 700; margin-bottom: 2px">The run had a problem</div>'
        body += f"<div>{_e(report.error)}</div>"
        if report.error_hint:
            body += f'<div style="margin-top: 4px"><b>What to do:</b> {_e(report.error_hint)}</div>'
        parts.append(_box("problem", body))
    if report.probe_errors:
        notes = "".join(f"<div>{_e(note)}</div>" for note in report.probe_errors)
        parts.append(
            _box("hint", f'<div style="font-weight: 700; margin-bottom: 2px">The grader had a problem</div>{notes}')
        )
    if report.unsandboxed:
        parts.append(_box("hint", f"<div><b>No sandbox:</b> {_e(unsandboxed_note(report))}</div>"))
    return "".join(parts)


def _check_row(verdict: Verdict) -> str:
    label, colour = BADGES.get(verdict.status, (verdict.status.upper(), "#808080"))
    mentioned = verdict.rank is None or f"rank {verdict.rank}" in verdict.message.lower()
    where = "" if mentioned else f" (seen on rank {verdict.rank})"
    cell = f'<div style="font-weight: 600">{_e(verdict.title)}</div>'
    if verdict.status == FAILED:
        cell += f'<div style="margin-top: 2px">{_e(verdict.message)}{_e(where)}</div>'
        if verdict.hint:
            cell += _box("hint", f"<b>Hint:</b> {_e(verdict.hint)}")
    elif verdict.message:
        cell += f'<div style="opacity: 0.75; font-size: 0.92em">{_e(verdict.message)}</div>'
    score = f"{points(verdict.points)} / {points(verdict.max_points)}" if verdict.counted else "not counted"
    return _row(verdict.id, verdict.status, _badge(label, colour), cell, score)


def _row(check_id: str, status: str, badge: str, cell: str, score: str) -> str:
    cell_style = f"padding: 6px 8px; border-top: 1px solid {BORDER}; vertical-align: top; text-align: left"
    return (
        f'<tr data-check="{_e(check_id)}" data-status="{_e(status)}">'
        f'<td style="{cell_style}; width: 4.5em">{badge}</td>'
        f'<td style="{cell_style}">{cell}</td>'
        f'<td style="{cell_style}; text-align: right; white-space: nowrap; {MONO}">{_e(score)}</td></tr>'
    )


def _not_reached_row(report: Report) -> str:
    """The checks the run stopped before, in one row: the cause is the error above, not eleven things."""
    missed = report.not_reached
    if not missed:
        return ""
    cell = f'<div style="font-weight: 600">{_e(plural(len(missed), "check"))} not reached</div>'
    cell += f'<div style="margin-top: 2px">{_e(report.not_reached_summary())}</div>'
    cell += _box("hint", f"<b>Hint:</b> {_e(missed[0].hint)}")
    lost = points(sum(v.max_points for v in missed))
    return _row("not_reached", FAILED, _badge(*BADGES[FAILED]), cell, f"0 / {lost}")


def _checks(report: Report) -> str:
    if not report.checks:
        return ""
    head = "padding: 4px 8px; text-align: left; font-weight: 600; opacity: 0.8"
    return (
        _heading("Checks")
        + '<table style="border-collapse: collapse; table-layout: auto; width: 100%; background: transparent; '
        "color: inherit; "
        f'margin: 0; font-size: 1em">'
        f'<thead><tr><th style="{head}">Result</th><th style="{head}">Check</th>'
        f'<th style="{head}; text-align: right">Points</th></tr></thead><tbody>'
        + "".join(_check_row(v) for v in report.checks if v.reached)
        + _not_reached_row(report)
        + "</tbody></table>"
    )


def _picture(picture: plots.Picture) -> str:
    parts = [f'<div style="font-weight: 600; margin: 12px 0 4px">{_e(picture.title)}</div>']
    if picture.png:
        parts.append(
            f'<img src="{picture.data_uri}" alt="{_e(picture.title)}" '
            f'style="display: block; max-width: 100%; height: auto; border: 1px solid {BORDER}; border-radius: 3px; '
            f'background: #ffffff">'
        )
    for finding in picture.findings:
        parts.append(f'<div style="margin: 3px 0">{_e(finding)}</div>')
    if picture.note:
        parts.append(_box("note", _e(picture.note)))
    return f'<div data-picture="{_e(picture.key)}">' + "".join(parts) + "</div>"


def _pictures(report: Report) -> str:
    return _heading("What the ranks did") + "".join(
        _picture(p) for p in plots.pictures(report.details, report.world_size)
    )


def _status_words(rank: RankSummary, short: bool = False) -> str:
    if short:
        words = {RankStatus.STOPPED: "stopped by the grader"}.get(rank.status, rank.status)
    else:
        words = RANK_STATUS_WORDS.get(rank.status, rank.status) + (" (hung)" if rank.status == RankStatus.HUNG else "")
    return words + (f", {exit_words(rank.exit_code)}" if rank.exit_code is not None else "")


def _shown_output(rank: RankSummary) -> tuple[str, bool]:
    text = rank.output[-OUTPUT_CHARS:]
    lines = text.splitlines()
    if len(lines) > OUTPUT_LINES:
        text = "\n".join(lines[-OUTPUT_LINES:])
    return text, rank.output_bytes > len(text.encode("utf-8", "replace"))


def _rank(rank: RankSummary) -> str:
    label, colour = (
        ("FAIL", BADGES[FAILED][1]) if rank.error or rank.status not in ("finished",) else ("OK", BADGES[PASSED][1])
    )
    summary = f"Rank {rank.rank}: {_status_words(rank, short=True)}"
    if rank.error:
        short = rank.error if len(rank.error) <= SUMMARY_CHARS else rank.error[: SUMMARY_CHARS - 1] + "\u2026"
        summary += f" \u2014 {short}"
    body = [f"<div><b>Status:</b> {_e(_status_words(rank))}</div>"]
    if rank.error:
        body.append(f"<div><b>Error:</b> {_e(rank.error)}</div>")
    output, truncated = _shown_output(rank)
    if output.strip():
        cut = f" (the last part of {rank.output_bytes:,} bytes)" if truncated else ""
        body.append(f'<div style="margin-top: 6px"><b>Output</b>{_e(cut)}:</div>' + _pre(output))
    else:
        body.append('<div style="margin-top: 6px; opacity: 0.75">No output.</div>')
    if rank.stack:
        body.append(
            '<div style="margin-top: 6px"><b>Where it was waiting</b> (its stack at the deadline):</div>'
            + _pre(rank.stack)
        )
    return (
        f'<details data-rank="{rank.rank}" style="border: 1px solid {BORDER}; border-radius: 3px; padding: 4px '
        '8px; margin: 4px 0">'
        f'<summary style="cursor: pointer">{_badge(label, colour)} {_e(summary)}</summary>'
        f'<div style="padding: 6px 0 2px">{"".join(body)}</div></details>'
    )


def _ranks(report: Report) -> str:
    if not report.ranks:
        return ""
    parts = [
        _heading("Each rank"),
        '<div style="opacity: 0.75; font-size: 0.92em">Click a rank to see its output.</div>',
    ]
    parts += [_rank(r) for r in report.ranks]
    if report.files_left:
        items = "".join(f'<li><code style="{MONO}">{_e(f)}</code></li>' for f in report.files_left)
        parts.append(
            f'<details style="border: 1px solid {BORDER}; border-radius: 3px; padding: 4px 8px; margin: 4px 0">'
            f'<summary style="cursor: pointer">Files the ranks wrote ({len(report.files_left)})</summary>'
            f'<ul style="margin: 4px 0">{items}</ul></details>'
        )
    return "".join(parts)


# --- entry points ----------------------------------------------------------------------


def render(report: Report) -> str:
    """The report as an HTML fragment (a <div>), for a notebook cell or a page."""
    return (
        f'<div class="ddp-report" style="{FONT}; font-size: 14px; line-height: 1.45; color: inherit; '
        f'max-width: 980px; text-align: left">'
        + _header(report)
        + _problem(report)
        + _checks(report)
        + _pictures(report)
        + _ranks(report)
        + "</div>"
    )


def page(report: Report) -> str:
    """A standalone HTML page around the fragment."""
    title = f"DDP autograder: {report.exercise}, {points(report.score)}/{points(report.max_score)}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f'<title>{_e(title)}</title>\n</head>\n<body style="margin: 24px">\n{render(report)}\n</body>\n</html>\n'
    )


def write(report: Report, path: str | os.PathLike) -> None:
    """Write the standalone page atomically: a reader never sees half a page."""
    write_text(path, page(report))
