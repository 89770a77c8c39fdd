"""torchrun's workers, started warm: forked from a template of the agent
rather than exec'd as `python -m autograder.rank.torchrun_worker`. (For a
CUDA program, which must start fresh, the template forks the worker, puts
it in its slot and then execs the command.)

A fresh worker imports torch, and torch._dynamo when it builds DDP: seconds
each, most of a torchrun grading, paid again by every worker of every
attempt. The template is a fork of the agent taken after those imports and
before torchrun runs (one thread, no computation, no rendezvous), so a worker
it forks starts in milliseconds and is what the command would have been:
the agent's environment with torchrun's variables, a session of its own, the
worker module's main, default signal handlers, and no descriptor
but its standard three.

In the sandbox the template is forked before the agent enters it, so it
can put each worker in a slot of its own (its user, its mount, its memory
cgroup): what a worker writes is then told from what its neighbours write,
as for the ranks of mp.spawn. The agent, another user, signals its workers
through the template (torchrun's killpg would be refused).

How a worker ended is still the agent's to know, not the workers': the
template reaps them and reports each exit status over a socket pair that only
the agent holds. The workers cannot trace or read the template: it is out of
their reach (outside their sandbox, or out of reach where it shares their
user), and each worker makes itself traceable again, as a fresh process is.
A worker that kills the template leaves every exit unknown, which counts as
a failure, never a success.
"""

from __future__ import annotations

import faulthandler
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading

from .._process import die_with_parent, out_of_reach, traceable
from ..schema.run import SandboxView
from .runner import fresh_numpy_seed
from .sandbox_entry import enter

WORKER_MODULE = "autograder.rank.torchrun_worker"
MAX_MESSAGE = 4 * 2**20  # a request carries the worker's environment
REAP_S = 0.05  # how often the template looks for ended workers


def _send(connection: socket.socket, message: dict, fds: list[int] = ()) -> None:
    body = json.dumps(message).encode()
    data = struct.pack("!I", len(body)) + body
    if fds:
        socket.send_fds(connection, [data], list(fds))
    else:
        connection.sendall(data)


def _receive_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _receive(connection: socket.socket) -> tuple[dict | None, list[int]]:
    """One message and the descriptors sent with it; None at the end of the stream."""
    head, fds, _, _ = socket.recv_fds(connection, 4, 2)
    rest = _receive_exactly(connection, 4 - len(head)) if head else None
    if not head or rest is None:
        return None, fds
    size = struct.unpack("!I", head + rest)[0]
    body = _receive_exactly(connection, size) if size <= MAX_MESSAGE else None
    return (json.loads(body) if body is not None else None), fds


class WorkerTemplate:
    """The agent's side: forks the template now, then starts workers from it.
    sandbox: where a worker started with a slot goes (None: it stays where the template is)."""

    def __init__(self, sandbox: SandboxView | None, workdir: str):
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            ours.close()
            _serve(theirs, sandbox, workdir)  # never returns
        theirs.close()
        self._connection, self._lock = ours, threading.Lock()
        self._exits: dict[int, int] = {}
        self._gone = False

    def start(
        self, argv: tuple[str, ...], env: dict[str, str], stdout, stderr, slot: int | None, fresh: bool = False
    ) -> WarmWorker:
        """A worker for torchrun's command line, as Popen(argv, env=env, start_new_session=True) starts
        it, in sandbox slot `slot` (None: the template's own place). fresh: exec'd once in its slot,
        rather than forked warm (a CUDA program)."""
        fds = [f.fileno() for f in (stdout, stderr) if f is not None]
        request = {
            "argv": list(argv),
            "env": env,
            "stdout": stdout is not None,
            "stderr": stderr is not None,
            "slot": slot,
            "exec": fresh,
        }
        with self._lock:
            _send(self._connection, request, fds)
            while (message := self._read()) is not None:
                if "started" in message:
                    return WarmWorker(self, message["started"], argv)
        raise OSError("the worker template is gone")

    def _read(self) -> dict | None:
        """The next message, noting an exit on the way; None once the template is gone."""
        message, fds = _receive(self._connection)
        for fd in fds:
            os.close(fd)
        if message is None:
            self._gone = True
        elif "exited" in message:
            self._exits[message["exited"]] = message["code"]
        return message

    def signal(self, pid: int, number: int) -> None:
        """Signal a worker and all it started (its process group), as torchrun's killpg would."""
        with self._lock:
            try:
                _send(self._connection, {"signal": pid, "number": int(number)})
            except OSError:  # the template is gone, and with it the workers
                self._gone = True

    def exit_code(self, pid: int) -> tuple[bool, int | None]:
        """(known, code) for a worker, from what the template has reported so far, without waiting.
        Known with no code: the template is gone, so how the worker ended cannot be told."""
        with self._lock:
            while not self._gone and pid not in self._exits and select.select([self._connection], [], [], 0)[0]:
                self._read()
            return (True, self._exits[pid]) if pid in self._exits else (self._gone, None)


class WarmWorker:
    """What torchrun uses of a subprocess.Popen: pid, poll(), wait() and signals."""

    def __init__(self, template: WorkerTemplate, pid: int, args):
        self.template, self.pid, self.args, self.returncode = template, pid, args, None

    def poll(self) -> int | None:
        if self.returncode is None:
            known, code = self.template.exit_code(self.pid)
            if known:  # an unknown end counts as a kill, never as a success
                self.returncode = code if code is not None else -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        waited = 0.0
        while self.poll() is None:
            if timeout is not None and waited >= timeout:
                raise subprocess.TimeoutExpired(self.args, timeout)
            select.select([], [], [], REAP_S)
            waited += REAP_S
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            self.template.signal(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


# --- the template's side ------------------------------------------------------


def _close_all_but(keep: list[int]) -> None:
    """As Popen's close_fds: the agent's records stream and stack file are the agent's alone."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _serve(connection: socket.socket, sandbox: SandboxView | None, workdir: str) -> None:
    """Fork a worker per request, signal one when asked, and report each
    exit, until the agent is gone."""
    code = 1
    try:
        die_with_parent()
        out_of_reach()
        _close_all_but([connection.fileno()])
        children: set[int] = set()
        while True:
            ready = select.select([connection], [], [], REAP_S)[0]
            _report_exits(connection, children)
            if ready:
                request, fds = _receive(connection)
                if request is None:
                    code = 0
                    break
                if "signal" in request:
                    _signal(children, request["signal"], request["number"])
                    continue
                pid = _fork_worker(connection, request, fds, sandbox, workdir)
                children.add(pid)
                _send(connection, {"started": pid})
    finally:
        os._exit(code)


def _signal(children: set[int], pid: int, number: int) -> None:
    if pid not in children:  # only a worker of this template's, still unreaped
        return
    for send in (os.killpg, os.kill):  # its group; the worker alone if the group is gone
        try:
            send(pid, number)
            return
        except OSError:
            pass


def _report_exits(connection: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _send(connection, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _fork_worker(
    connection: socket.socket, request: dict, fds: list[int], sandbox: SandboxView | None, workdir: str
) -> int:
    """The worker's pid, once it leads a session of its own (so that torchrun's killpg reaches it)."""
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            connection.close()
            os.close(ready_r)
            os.setsid()
            os.close(ready_w)
            die_with_parent()
            _become_worker(request, fds, sandbox if request["slot"] is not None else None, workdir)
        finally:
            os._exit(1)
    for fd in (*fds, ready_w):
        os.close(fd)
    os.read(ready_r, 1)  # end of file once the worker has its session, or has died
    os.close(ready_r)
    return pid


def _become_worker(request: dict, fds: list[int], sandbox: SandboxView | None, workdir: str) -> None:
    """In the forked worker: the rest of what the command would have given it, in its slot of the sandbox."""
    traceable()  # as a fresh process is; and a user namespace's maps are written through /proc/self
    faulthandler.disable()
    for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start-up
    signal.signal(signal.SIGINT, signal.default_int_handler)
    targets = [t for t, wanted in ((1, request["stdout"]), (2, request["stderr"])) if wanted]
    for fd, target in zip(fds, targets, strict=True):
        os.dup2(fd, target)
    _close_all_but([])
    argv = request["argv"]
    if WORKER_MODULE not in argv:  # the template starts the grader's worker, and nothing else
        raise SystemExit(f"the worker template does not run {argv!r}")
    if sandbox is not None:
        try:
            enter(sandbox, request["slot"], workdir)
        except OSError as error:
            print(f"The grader could not put this worker in its sandbox ({error}); tell your instructor.", flush=True)
            raise
    if request["exec"]:  # a CUDA program: a fresh interpreter, in its slot
        os.execve(argv[0], argv, request["env"])
    traceable()  # again: a change of user made it untraceable
    os.environ.clear()
    os.environ.update(request["env"])
    fresh_numpy_seed()
    sys.argv = [sys.argv[0], *argv[argv.index(WORKER_MODULE) + 1 :]]
    from .torchrun_worker import main

    main()
