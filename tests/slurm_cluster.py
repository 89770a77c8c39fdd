"""A one-node Slurm cluster for the tests: munge, slurmctld and slurmd, started in a
temporary folder and stopped by their pid files.

No cgroups and no systemd (a container has neither): processes are tracked
through /proc, and accounting is off, so jobs are watched with squeue only.
Needs root, Debian's slurm-wlm and munge.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
# Away from Slurm's defaults (6817/6818): a real cluster on the machine stays untouched.
CONTROLLER_PORT, NODE_PORT = 16817, 16818


def available() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "starting slurmd and munged needs root"
    missing = [tool for tool in ("slurmctld", "slurmd", "sbatch", "squeue", "munged") if not shutil.which(tool)]
    return f"not installed: {', '.join(missing)} (apt-get install slurm-wlm munge)" if missing else None


def _config(folder: Path, host: str) -> str:
    return "\n".join(
        [
            "ClusterName=ddp-course-tests",
            f"SlurmctldHost={host}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "ReturnToService=2",
            "MpiDefault=none",
            f"SlurmctldPort={CONTROLLER_PORT}",
            f"SlurmdPort={NODE_PORT}",
            f"StateSaveLocation={folder}/state",
            f"SlurmdSpoolDir={folder}/spool",
            f"SlurmctldPidFile={folder}/slurmctld.pid",
            f"SlurmdPidFile={folder}/slurmd.pid",
            f"SlurmctldLogFile={folder}/slurmctld.log",
            f"SlurmdLogFile={folder}/slurmd.log",
            f"NodeName={host} CPUs={os.cpu_count()} RealMemory=20000 State=UNKNOWN",
            f"PartitionName=tests Nodes={host} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _start_munge() -> bool:
    """Start munged unless it runs already; whether it was started here."""
    if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
        return False
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(1024))
        shutil.chown(MUNGE_KEY, "munge", "munge")
        MUNGE_KEY.chmod(0o400)
    MUNGE_RUN.mkdir(parents=True, exist_ok=True)
    shutil.chown(MUNGE_RUN, "munge", "munge")
    subprocess.run(["runuser", "-u", "munge", "--", "munged", "--force"], check=True)
    return True


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def _stop(pid_file: Path, wait_s: float = 10.0) -> None:
    """SIGTERM to the daemon, and a wait for it to go (SIGKILL at the end of the wait)."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + wait_s
    while _alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.2)


@contextlib.contextmanager
def cluster(folder: Path, ready_s: float = 60.0) -> Iterator[dict[str, str]]:
    """Start the cluster; yields the environment that sbatch and squeue need."""
    host = socket.gethostname().split(".")[0]
    for part in ("state", "spool"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder, host))
    env = dict(os.environ, SLURM_CONF=str(conf))
    started_munge = _start_munge()
    try:
        subprocess.run(["slurmctld", "-f", str(conf)], check=True, env=env)
        subprocess.run(["slurmd", "-f", str(conf)], check=True, env=env)
        deadline = time.monotonic() + ready_s
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, env=env).stdout:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test cluster's node never became idle; see {folder}/slurmd.log")
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        _stop(folder / "slurmd.pid")
        _stop(folder / "slurmctld.pid")
        if started_munge:
            _stop(MUNGE_RUN / "munged.pid")
