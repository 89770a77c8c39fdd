"""`python -m hub`: the course on a JupyterHub, on this machine, for a trial class (as root).

    sudo .venv/bin/python -m hub --instructor teacher --student alice --student bob

It makes the Unix users it is told to (NAME, or NAME:PASSWORD; a new user
without a password gets a random one, printed; a user who was there keeps
their own), puts a copy of the course in the instructor's home (~/ddp-course,
theirs, with every assignment generated and the students in the gradebook),
lays out the exchange, starts JupyterHub with hub/jupyterhub_config.py and
prints the address and the accounts. Ctrl-C stops
the hub, every user's server and the proxy, and leaves nothing running.
`configurable-http-proxy` is taken from the PATH, or installed from npm into the
state folder the first time.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from autograder._files import chown_tree
from autograder.exercises import ASSIGNMENTS
from autograder.nbgrader_ext.exchange import prepare_exchange
from hub.users import Account, ensure_account, run_as
from tools.demo import copy_course

HERE = Path(__file__).resolve().parent
COURSE_ID = "ddp-course"
STOP_TIMEOUT_S = 30


def closed_folder(path: Path) -> Path | None:
    """The first folder on the way to `path` (links followed) that other users may not pass through."""
    for folder in reversed(path.resolve().parents):
        if not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def why_users_cannot_run(venv_bin: Path) -> str | None:
    """None when every user can run the venv's Python and the course's package; else why not."""
    for needed in (venv_bin / "python", HERE):
        folder = closed_folder(needed)
        if folder is not None:
            return (
                f"the users' servers need {needed} (it is {needed.resolve()}), and other users cannot pass"
                f" through {folder}. Make the venv from a Python every user can reach (Debian's"
                f" /usr/bin/python3.11, say), or let them through that folder: chmod o+x {folder}"
            )
    return None


def _account(spec: str) -> Account:
    name, _, password = spec.partition(":")
    return ensure_account(name, password or None)


def _proxy(state: Path) -> str:
    installed = state / "node" / "node_modules" / ".bin" / "configurable-http-proxy"
    found = shutil.which("configurable-http-proxy") or installed
    if not Path(found).exists():
        print("Installing configurable-http-proxy from npm (once) ...", flush=True)
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(state / "node"), "configurable-http-proxy"],
            check=True,
            capture_output=True,
        )
    return str(found)


def prepare_course(instructor: Account, students: list[Account], settings: dict) -> Path:
    """The instructor's course directory: made once, then left as the instructor keeps it."""
    course = Path(settings["course_dir"])
    nbgrader = [sys.executable, "-m", "nbgrader"]
    if not course.exists():
        copy_course(course)
        chown_tree(course, instructor.uid, instructor.gid)
        for assignment in ASSIGNMENTS:
            run_as(instructor, settings, [*nbgrader, "generate_assignment", assignment], course)
    for student in students:
        run_as(instructor, settings, [*nbgrader, "db", "student", "add", student.name], course)
    return course


def run_hub(settings: dict, state: Path) -> int:
    """Start the hub; on Ctrl-C (or SIGTERM) stop it and everything it started."""
    settings_file = state / "settings.json"
    settings_file.write_text(json.dumps(settings, indent=1))
    hub = subprocess.Popen(
        [str(Path(settings["venv_bin"]) / "jupyterhub"), "-f", str(HERE / "jupyterhub_config.py")],
        cwd=state,
        env=os.environ | {"DDP_HUB_SETTINGS": str(settings_file)},
        start_new_session=True,  # Ctrl-C reaches this process only: it stops the hub in order
    )
    stopping = []
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stopping.append(True))
    while hub.poll() is None and not stopping:
        time.sleep(0.2)
    if hub.poll() is None:
        print("Stopping the hub and every user's server ...", flush=True)
        hub.terminate()  # the hub stops the servers and the proxy (cleanup_servers, cleanup_proxy)
        try:
            hub.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(hub.pid, signal.SIGKILL)
            hub.wait()
    _end_leftovers(settings)
    _stop_proxy(state)
    return 0 if stopping else hub.returncode


def _class_processes(settings: dict) -> list[int]:
    """The live processes the class left: every one of a student (their accounts are the class's),
    and of the instructor, those their hub server started (they carry the hub's JUPYTERHUB_USER)."""
    students = {pwd.getpwnam(name).pw_uid for name in settings["students"]}
    instructor = pwd.getpwnam(settings["instructor"]).pw_uid
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or (entry / "stat").read_text().rpartition(")")[2].split()[0] == "Z":
                continue
            owner = entry.stat().st_uid
            if owner in students or (
                owner == instructor and b"\0JUPYTERHUB_USER=" in b"\0" + (entry / "environ").read_bytes()
            ):
                found.append(int(entry.name))
        except OSError:
            pass  # gone meanwhile
    return found


def _end_leftovers(settings: dict) -> None:
    """Kill what the class left running, and wait until it is gone."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while (left := _class_processes(settings)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def _stop_proxy(state: Path) -> None:
    pid_file = state / "proxy.pid"
    try:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructor", default="teacher", help="NAME or NAME:PASSWORD (default teacher)")
    parser.add_argument("--student", action="append", default=[], help="NAME or NAME:PASSWORD; repeat for each")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ip", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--exchange", type=Path, default=Path("/srv/ddp-course/exchange"))
    parser.add_argument("--state", type=Path, default=Path("/srv/ddp-course/hub"), help="the hub's own files")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("The hub must start as root: it logs users in with PAM and runs each one's server as them.")
        return 1
    reason = why_users_cannot_run(Path(sys.executable).parent)
    if reason is not None:
        print(f"Cannot start the hub: {reason}")
        return 1
    args.state.mkdir(parents=True, exist_ok=True)
    args.state.chmod(0o700)  # its cookie secret and database are the hub's alone
    instructor = _account(args.instructor)
    students = [_account(spec) for spec in args.student]
    settings = {
        "state": str(args.state),
        "ip": args.ip,
        "port": args.port,
        "instructor": instructor.name,
        "students": [s.name for s in students],
        "exchange": str(args.exchange),
        "course_dir": str(instructor.home / COURSE_ID),
        "proxy": _proxy(args.state),
        "venv_bin": str(Path(sys.executable).parent),
    }
    course = prepare_course(instructor, students, settings)
    prepare_exchange(args.exchange, COURSE_ID, instructor.name)
    print(f"The course's hub: http://{args.ip}:{args.port}/  (Ctrl-C stops it)")
    for account, role in [(instructor, "instructor"), *((s, "student") for s in students)]:
        print(f"  {role:<10} {account.name:<16} password {account.password or '(their own, unchanged)'}")
    print(f"  course directory {course}; exchange {args.exchange}", flush=True)
    return run_hub(settings, args.state)


if __name__ == "__main__":
    sys.exit(main())
