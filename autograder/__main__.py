"""Command line: python -m autograder check SUBMISSION --exercise NAME ...

Exit status: 0 every check passed; 1 graded and something failed; 2 could
not grade at all.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from rich.console import Console
from rich.markup import escape

from .errors import CannotGrade
from .exercises import EXERCISES
from .launch import LAUNCHERS
from .launch.backend import BACKENDS
from .nbgrader_ext.exports import FORMATS as EXPORT_FORMATS
from .schema.run import DEFAULT_OPTIONS, DEFAULT_WORLD_SIZE, Limits, RunOptions

EXIT_PASSED, EXIT_FAILED, EXIT_CANNOT_GRADE = 0, 1, 2


def _check(args) -> int:
    import time

    from .grading import grade_at
    from .reports import json_report, text
    from .schema.run import HIDDEN_WORLD_SIZE

    started = time.monotonic()
    world_sizes = [args.world_size, DEFAULT_WORLD_SIZE, HIDDEN_WORLD_SIZE] if args.gradescope else [args.world_size]
    # This process computes nothing with torch before its one grading starts, so those ranks may fork from it.
    options = _run_options(args, fork_from_here=len(set(world_sizes)) == 1)
    reports = grade_at(args.submission, args.exercise, world_sizes, options)
    report = reports[args.world_size]
    if args.gradescope:
        from pathlib import Path

        from .reports import gradescope

        notes = [f"Graded `{Path(args.submission).name}`."]
        results = gradescope.results(EXERCISES[args.exercise], reports, notes, time.monotonic() - started)
        gradescope.write(results, args.gradescope)
    if args.json:
        json_report.write(report, args.json)
    if args.html:
        from .reports import html

        html.write(report, args.html)
    if not args.quiet:
        text.render(report, Console(highlight=False), show_output=args.show_output)
    return EXIT_PASSED if report.passed else EXIT_FAILED


def _run_options(args, fork_from_here: bool = False) -> RunOptions:
    """check's flags as RunOptions. An instructor's check never runs unsandboxed unless told to."""
    return RunOptions(
        world_size=args.world_size,
        backend=args.backend,
        timeout_s=args.timeout,
        launcher=args.launcher,
        sandbox="off" if args.unsafe_no_sandbox else "required",
        limits=Limits(memory_bytes=int(args.memory_limit * 2**30)),
        fork_from_here=fork_from_here,
    )


def _course_checkout(console: Console, failure: str):
    """The course checkout this grader runs from; None, with the reason printed, outside one."""
    from .launch.contain import course_root

    course = course_root()
    if course is None:
        where = "run it from the course's own checkout (with nbgrader_config.py)."
        console.print(f"[bold red]{escape(failure)}:[/] {where}")
    return course


def _student_bundle(args) -> int:
    from pathlib import Path

    from .bundle import build

    console = Console(stderr=True, highlight=False)
    course = _course_checkout(console, "No bundle")
    if course is None:
        return EXIT_CANNOT_GRADE
    try:
        members = build(course, Path(args.output))
    except FileNotFoundError as error:
        console.print(f"[bold red]No bundle:[/] {escape(str(error))}")
        return EXIT_CANNOT_GRADE
    print(f"Wrote {args.output}: {len(members)} files, the released assignments and the grader.")
    return EXIT_PASSED


def _gradescope_bundle(args) -> int:
    from pathlib import Path

    from .gradescope.bundle import build

    console = Console(stderr=True, highlight=False)
    course = _course_checkout(console, "No autograder zip")
    if course is None:
        return EXIT_CANNOT_GRADE
    try:
        members = build(course, EXERCISES[args.exercise], Path(args.output))
    except OSError as error:
        why = escape(f"cannot write {args.output}: {error.strerror or error}.")
        console.print(f"[bold red]No autograder zip:[/] {why}")
        return EXIT_CANNOT_GRADE
    print(
        f"Wrote {args.output}: {len(members)} files (setup.sh, run_autograder and the grader) for {args.exercise}. "
        "Upload it as the assignment's autograder on Gradescope."
    )
    return EXIT_PASSED


def _export(args) -> int:
    from pathlib import Path

    from .nbgrader_ext.exports import CourseError, export

    console = Console(stderr=True, highlight=False)
    try:
        students, unsubmitted = export(Path(args.course), args.assignment, args.format, Path(args.output))
    except CourseError as error:
        console.print(f"[bold red]Nothing exported:[/] {escape(str(error))}")
        return EXIT_CANNOT_GRADE
    for assignment in unsubmitted:
        console.print(f"[yellow]Nobody has a graded submission of {escape(assignment)}:[/] its cells are all empty.")
    print(f"Wrote {args.output}: {students} student rows, {args.format} format.")
    return EXIT_PASSED


def _class_report(args) -> int:
    from pathlib import Path

    from .nbgrader_ext import class_report
    from .nbgrader_ext.exports import CourseError

    try:
        report = class_report.build(Path(args.course), args.assignment)
        if args.html:
            class_report.write(report, Path(args.html))
    except CourseError as error:
        Console(stderr=True, highlight=False).print(f"[bold red]No class report:[/] {escape(str(error))}")
        return EXIT_CANNOT_GRADE
    class_report.render(report, Console(highlight=False))
    if args.html:
        print(f"Wrote {args.html}.")
    return EXIT_PASSED


def _autograde(args) -> int:
    from pathlib import Path

    from .nbgrader_ext.class_grading import DEFAULT_GPUS_PER_JOB, autograde_course
    from .nbgrader_ext.class_progress import ConsoleProgress

    console = Console(highlight=False)
    course = Path(args.course)
    assignments = _assignments_to_grade(args, course)
    if not (args.slurm or args.merge):  # on Slurm, the nodes run the kernels, and nbgrader's log there says why
        from .nbgrader_ext.kernel import kernel_sandbox_refusal, why_no_kernel_sandbox

        reason = why_no_kernel_sandbox()
        if reason is not None:
            console.print(f"[bold red]Cannot autograde here:[/] {escape(kernel_sandbox_refusal(reason))}")
            return EXIT_FAILED
    progress = ConsoleProgress(console, assignments)
    try:
        if args.slurm or args.merge:
            run, how = _autograde_on_slurm(args, console, progress)
            if isinstance(run, int):  # nothing to wait for, or stopped waiting: the exit status
                return run
            runs = [run]
        else:
            gpus_per_job = DEFAULT_GPUS_PER_JOB if args.gpus_per_job is None else args.gpus_per_job
            runs = autograde_course(
                course,
                assignments,
                jobs=args.jobs,
                students=args.student or None,
                force=args.force,
                backend=args.backend,
                gpus_per_job=gpus_per_job,
                timeout_s=args.timeout,
                progress=progress,
            )
            how = f"{args.jobs} at a time"
    finally:
        progress.end()
    return _report_class(console, course, runs, how)


def _assignments_to_grade(args, course) -> list[str]:
    """The assignments named, or with --all those someone submitted; raises CannotGrade."""
    from .nbgrader_ext.class_grading import submitted_assignments

    if bool(args.all) == bool(args.assignment):
        raise CannotGrade("Name the assignments to grade (one or more), or give --all; not both.")
    assignments = submitted_assignments(course) if args.all else args.assignment
    if not assignments:
        raise CannotGrade(
            f"Nothing to grade: no assignment of {course / 'gradebook.db'} has submissions.",
            "Their notebooks belong in submitted/<student>/<assignment>/.",
        )
    if (args.slurm or args.merge) and len(assignments) > 1:
        raise CannotGrade("On Slurm, one assignment a job: run the command once for each.")
    args.assignment = assignments[0]  # the one assignment of the Slurm path
    return assignments


def _report_class(console, course, runs, how: str) -> int:
    """The scores table, each failed grading's log, and a summary line; the exit status."""
    from .nbgrader_ext.class_grading import submissions
    from .nbgrader_ext.gradebook import scores_table

    assignments = [run.assignment for run in runs]
    graded = [o for run in runs for o in run.graded]
    failures = [o for run in runs for o in run.failures]
    notes = _class_notes(runs)
    everyone = {s for a in assignments for s in submissions(course, a)}
    console.print(scores_table(course, {s: notes[s] for s in sorted(everyone) if s in notes}, assignments))
    for outcome in failures:
        which = f" {outcome.assignment}" if len(assignments) > 1 else ""
        why = escape(f"({outcome.why})")
        console.print(
            f"[bold red]{escape(outcome.student)}[/]'s{escape(which)} grading failed {why}; the end of its log:"
        )
        console.print(outcome.log, style="dim", markup=False)
    unchanged = sum(len(run.unchanged) for run in runs)
    subject = "submission" if len(assignments) > 1 else "student"
    console.print(
        f"Graded {len(graded)} {subject}{'s' * (len(graded) != 1)} in {runs[0].seconds:.0f} s, "
        f"{how}; {unchanged} unchanged; {len(failures)} failed."
    )
    return EXIT_FAILED if failures else EXIT_PASSED


def _class_notes(runs) -> dict[str, str]:
    """Per student, the scores table's note: FAILED if any of their gradings failed, else the time
    their gradings took, else unchanged."""
    seconds, failed, unchanged = {}, set(), set()
    for run in runs:
        unchanged.update(run.unchanged)
        for outcome in run.graded:
            seconds[outcome.student] = seconds.get(outcome.student, 0.0) + outcome.seconds
            if outcome.failed:
                failed.add(outcome.student)
    notes = {student: "unchanged" for student in unchanged}
    notes |= {student: f"graded, {total:.0f} s" for student, total in seconds.items()}
    return notes | {student: "FAILED" for student in failed}


def _autograde_on_slurm(args, console: Console, progress):
    """(the class run, how it ran), or (an exit status, "") when it did not wait for the job's end."""
    from pathlib import Path

    from .nbgrader_ext import slurm
    from .nbgrader_ext.class_grading import DEFAULT_GPUS_PER_JOB

    course = Path(args.course)
    if args.merge:
        job = slurm.latest_unmerged(course, args.assignment)
    else:
        gpus = args.gpus_per_job
        if gpus is None:  # the login node shows no GPUs of the compute nodes: ask for them by the backend
            gpus = DEFAULT_GPUS_PER_JOB if args.backend == "nccl" else 0
        gpus = 0 if args.backend == "gloo" else gpus
        options = slurm.SlurmOptions(args.partition, gpus, args.cpus_per_job, args.time)
        job = slurm.submit(course, args.assignment, args.student or None, args.force, options)
        if job is None:
            unchanged = f"Every submission of {args.assignment} is unchanged since it was graded; nothing to do."
            console.print(unchanged, markup=False)
            return EXIT_PASSED, ""
        console.print(
            f"Submitted Slurm job {job.job_id}: {len(job.students)} array tasks; its script: {job.folder}/grade.sbatch",
            soft_wrap=True,  # a path or a command to copy stays on one line
        )
    if args.no_wait:
        console.print(
            f"When it has ended, merge its grades: python -m autograder autograde {args.assignment} --merge",
            soft_wrap=True,
        )
        return EXIT_PASSED, ""
    try:
        return slurm.collect(course, job, progress), f"as Slurm job {job.job_id}"
    except KeyboardInterrupt:
        progress.end()
        console.print(
            f"Stopped waiting. Slurm job {job.job_id} goes on; merge its grades later with "
            f"`python -m autograder autograde {args.assignment} --merge`, or stop it with `scancel {job.job_id}`.",
            soft_wrap=True,
        )
        return EXIT_CANNOT_GRADE, ""


def _add_check(commands) -> None:
    check = commands.add_parser(
        "check",
        help="grade one submission",
        description=(
            "Run SUBMISSION's main(rank, world_size) in WORLD_SIZE ranks and judge what every rank did. "
            "Exit status: 0 all checks passed, 1 graded with failures (including crashes and hangs), 2 could not grade."
        ),
    )
    check.add_argument("submission", help="a .py script or a .ipynb notebook that defines main(rank, world_size)")
    check.add_argument("--exercise", required=True, choices=sorted(EXERCISES), help="which exercise this is")
    _add_run_options(check)
    check.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    check.add_argument("--html", metavar="FILE", help="also write the report as a standalone HTML page")
    check.add_argument("--show-output", action="store_true", help="show every rank's output, not only failing ranks'")
    check.add_argument("--quiet", action="store_true", help="print nothing; use the exit status and --json")
    check.add_argument(
        "--gradescope",
        metavar="FILE",
        help="also write Gradescope's results.json, as the Gradescope autograder would (this grades at 2 and 3 ranks)",
    )
    check.set_defaults(run=_check)


def _add_run_options(check: argparse.ArgumentParser) -> None:
    """RunOptions as flags, with its defaults."""
    default = DEFAULT_OPTIONS
    check.add_argument(
        "--world-size", type=int, default=default.world_size, help=f"number of ranks (default {default.world_size})"
    )
    check.add_argument(
        "--backend",
        default=default.backend,
        choices=BACKENDS,
        help=f"auto: nccl when there is a GPU per rank, else gloo (default {default.backend})",
    )
    check.add_argument(
        "--timeout",
        type=float,
        default=default.timeout_s,
        help=f"seconds before a run is declared hung and every rank is killed (default {default.timeout_s:g})",
    )
    check.add_argument(
        "--launcher",
        choices=sorted(LAUNCHERS),
        default=default.launcher,
        help="how the ranks start: mp (torch.multiprocessing, the default) or process "
        "(each rank its own `python -m autograder.rank`, as an agent on another host starts it)",
    )
    check.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run the ranks without the sandbox, as this user with all its rights: only for code you trust. "
        "Without it, grading refuses to run where it cannot sandbox (it needs root on Linux)",
    )
    memory_gib = default.limits.memory_bytes / 2**30
    check.add_argument(
        "--memory-limit",
        type=float,
        default=memory_gib,
        metavar="GIB",
        help=f"memory each rank may use in the sandbox (default {memory_gib:g} GiB)",
    )


def _add_autograde(commands) -> None:
    class_run = commands.add_parser(
        "autograde",
        help="nbgrader's autograde of a whole class, several students at a time",
        description=(
            "Run in the course directory. Grades every submission of ASSIGNMENT that changed since it was last "
            "graded, each with nbgrader's own autograde into a private gradebook, N at a time, then merges them "
            "into gradebook.db in one transaction. Exit status: 0 all graded, 1 some gradings failed, "
            "2 could not start."
        ),
    )
    class_run.add_argument(
        "assignment", nargs="*", help="the assignments' names, as in the gradebook: lanes start once for them all"
    )
    class_run.add_argument("--all", action="store_true", help="every assignment that has submissions")
    class_run.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="students at a time (default: cores)")
    class_run.add_argument("--student", action="append", metavar="ID", help="grade only this student (repeatable)")
    class_run.add_argument("--force", action="store_true", help="grade again even the unchanged submissions")
    class_run.add_argument(
        "--backend",
        default="auto",
        choices=BACKENDS,
        help="auto: nccl where each job can have --gpus-per-job GPUs of its own, else gloo (default auto)",
    )
    class_run.add_argument(
        "--gpus-per-job",
        type=int,
        metavar="K",
        help="GPUs each student's job gets (default 3; with --slurm, 3 for --backend nccl, else 0)",
    )
    class_run.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds one student's grading may take (default 1800)"
    )
    class_run.add_argument("--course", default=".", help="the course directory (default: here)")
    on_slurm = class_run.add_argument_group("on a Slurm cluster", "one array task per student, then one merge")
    on_slurm.add_argument("--slurm", action="store_true", help="submit the class as a Slurm job array and wait")
    on_slurm.add_argument("--partition", metavar="P", help="the partition to run in (default: the cluster's)")
    on_slurm.add_argument("--cpus-per-job", type=int, default=2, metavar="C", help="cores per student (default 2)")
    on_slurm.add_argument("--time", default="00:30:00", metavar="T", help="Slurm's time limit per student")
    on_slurm.add_argument("--no-wait", action="store_true", help="submit and return; merge later with --merge")
    on_slurm.add_argument("--merge", action="store_true", help="wait for the last --slurm run, then merge it")
    class_run.set_defaults(run=_autograde)


def _add_gradebook_commands(commands) -> None:
    exports = commands.add_parser(
        "export",
        help="the gradebook as a CSV file: totals, Canvas's import format, or a column per check",
        description="Run in the course directory. A student with no submission gets an empty cell, not 0.",
    )
    exports.add_argument("assignment", help="an assignment's name, or all")
    exports.add_argument(
        "--format",
        default="csv",
        choices=EXPORT_FORMATS,
        help="csv: a total per assignment; canvas: Canvas's gradebook import; per-check: a column per grade cell",
    )
    exports.add_argument("-o", "--output", required=True, metavar="FILE", help="the CSV file to write")
    exports.add_argument("--course", default=".", help="the course directory (default: here)")
    exports.set_defaults(run=_export)

    report = commands.add_parser(
        "class-report",
        help="what the class got wrong: scores, each check's pass rate, common failures, crashed runs",
    )
    report.add_argument("assignment", help="the assignment's name, as in the gradebook")
    report.add_argument("--html", metavar="FILE", help="also write the report as a standalone page")
    report.add_argument("--course", default=".", help="the course directory (default: here)")
    report.set_defaults(run=_class_report)


def _add_bundles(commands) -> None:
    bundle = commands.add_parser(
        "student-bundle",
        help="write the students' package: the released assignments and the grader, no answers",
    )
    bundle.add_argument("-o", "--output", default="ddp-course-student.zip", help="the zip file to write")
    bundle.set_defaults(run=_student_bundle)

    on_gradescope = commands.add_parser(
        "gradescope",
        help="write the zip for Gradescope's Upload Autograder: setup.sh, run_autograder and the grader",
    )
    on_gradescope.add_argument("exercise", choices=sorted(EXERCISES), help="the exercise it grades")
    on_gradescope.add_argument("-o", "--output", default="autograder.zip", help="the zip file to write")
    on_gradescope.set_defaults(run=_gradescope_bundle)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_check, _add_autograde, _add_gradebook_commands, _add_bundles):
        add(commands)
    return parser


def _stop_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)  # unwinds through the launcher, which kills the ranks


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_CANNOT_GRADE if exit_.code else EXIT_PASSED
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        return args.run(args)
    except CannotGrade as error:
        console = Console(stderr=True, highlight=False)
        console.print(f"[bold red]Cannot grade:[/] {escape(error.message)}")
        if error.hint:
            console.print(f"[bold]Tip:[/] {escape(error.hint)}")
        return EXIT_CANNOT_GRADE
    except KeyboardInterrupt:  # the launcher has stopped every rank on the way out
        Console(stderr=True, highlight=False).print(
            "[bold red]Interrupted:[/] grading stopped; no rank is left running."
        )
        return EXIT_CANNOT_GRADE


if __name__ == "__main__":
    sys.exit(main())
