"""The Unix accounts of a class on one machine: the hub logs them in with PAM, runs
each one's server as that user, and the exchange knows a student by the files they own."""

from __future__ import annotations

import os
import pwd
import secrets
import subprocess
from pathlib import Path
from typing import NamedTuple

from autograder.launch.contain import EXCHANGE_VARIABLE

HUB = Path(__file__).resolve().parent


class Account(NamedTuple):
    name: str
    password: str
    uid: int
    gid: int
    home: Path


def ensure_account(name: str, password: str | None = None) -> Account:
    """The user `name`, made if missing (with a home). Its password: the one given; for a user
    made here without one, a new random one; for a user who was there, their own (password "")."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True, capture_output=True)
        password = password or secrets.token_urlsafe(9)
    if password:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True, capture_output=True)
    return account(name)._replace(password=password or "")


def remove_account(name: str) -> None:
    """The user, their home and whatever they still run, gone."""
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
    subprocess.run(["userdel", "--remove", "--force", name], capture_output=True)


def as_account(account: Account):
    """A preexec_fn: the child becomes the account, groups and all."""

    def become() -> None:
        os.initgroups(account.name, account.gid)
        os.setresgid(account.gid, account.gid, account.gid)
        os.setresuid(account.uid, account.uid, account.uid)

    return become


def environment(account: Account, settings: dict) -> dict[str, str]:
    """What the account's server and commands run with on the course's hub: its role's nbgrader and
    JupyterLab settings (hub/<role>/, then hub/common/), the exchange, the course, the venv's commands."""
    role = "instructor" if account.name == settings["instructor"] else "student"
    return {
        "HOME": str(account.home),
        "USER": account.name,
        "JUPYTER_CONFIG_PATH": os.pathsep.join(str(HUB / folder) for folder in (role, "common")),
        EXCHANGE_VARIABLE: settings["exchange"],
        "DDP_COURSE_DIR": settings["course_dir"],
        "PATH": os.pathsep.join([settings["venv_bin"], "/usr/local/bin", "/usr/bin", "/bin"]),
    }


def account(name: str) -> Account:
    """An existing user, password unknown."""
    entry = pwd.getpwnam(name)
    return Account(name, "", entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def run_as(account: Account, settings: dict, command: list[str], cwd: Path, timeout: float = 600):
    """A command as the account runs it on the hub (its environment, its groups); raises if it fails."""
    done = subprocess.run(
        command,
        cwd=cwd,
        env=environment(account, settings),
        preexec_fn=as_account(account),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} as {account.name}: {done.stdout}{done.stderr}")
    return done
