"""The JSON report: a stable, versioned contract for other tools."""

from __future__ import annotations

import json
import os
from dataclasses import fields

from .._files import write_text
from ..judge.verdict import RankSummary, Report, Verdict
from ..schema.events import CheckStatus
from ..schema.run import RankStatus

# 2: checks carry `reached`; a check that cannot apply on the machine counts 0 of 0; `stopped_at`.
SCHEMA_VERSION = 2
OUTPUT_CHARS = 20_000  # per rank, in the JSON


def to_dict(report: Report) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "exercise": report.exercise,
        "submission": report.submission,
        "world_size": report.world_size,
        "backend": report.backend,
        "passed": report.passed,
        "score": report.score,
        "max_score": report.max_score,
        "duration_s": round(report.duration_s, 3),
        "error": report.error,
        "error_hint": report.error_hint or None,
        "stopped_at": report.stopped_at or None,
        "ranks": [
            {
                "rank": r.rank,
                "exit_code": r.exit_code,
                "status": r.status,
                "error": r.error,
                "output": r.output[-OUTPUT_CHARS:],
                "output_bytes": r.output_bytes,
                "output_truncated": r.output_bytes > len(r.output.encode()) or len(r.output) > OUTPUT_CHARS,
                "stack": r.stack or None,
            }
            for r in report.ranks
        ],
        "checks": [
            {
                "id": v.id,
                "title": v.title,
                "status": v.status,
                "passed": v.passed,
                "points": v.points,
                "max_points": v.max_points,
                "message": v.message,
                "hint": v.hint or None,
                "rank": v.rank,
                "reached": v.reached,
            }
            for v in report.checks
        ],
        "files_left": report.files_left,
        "probe_errors": report.probe_errors,
        "unsandboxed": report.unsandboxed or None,
        "details": report.details,
    }


def _rebuild(cls, data: dict, **converted):
    """A dataclass from its JSON fields, with the ones that need converting given."""
    return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data} | converted)


def from_dict(data: dict) -> Report:
    """Rebuild a Report, e.g. in a notebook kernel from the grader's JSON."""
    ranks = [
        _rebuild(RankSummary, r, status=RankStatus(r["status"]), stack=r.get("stack") or "") for r in data["ranks"]
    ]
    checks = [_rebuild(Verdict, c, status=CheckStatus(c["status"]), hint=c["hint"] or "") for c in data["checks"]]
    return _rebuild(
        Report,
        data,
        ranks=ranks,
        checks=checks,
        error_hint=data.get("error_hint") or "",
        stopped_at=data.get("stopped_at") or "",
        unsandboxed=data.get("unsandboxed") or "",
    )


def write(report: Report, path: str | os.PathLike) -> None:
    """Atomically: a reader never sees half a report."""
    write_text(path, json.dumps(to_dict(report), indent=2))
