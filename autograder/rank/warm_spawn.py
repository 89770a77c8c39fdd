"""The student's mp.spawn, started from a warm interpreter.

Each process a student's own launcher spawns is a fresh interpreter that
imports torch and DDP again: seconds each, most of the cost of grading the
launcher. Here the spawned processes come from a fork server instead, as
Python's own "forkserver" start method makes them, but the server is a fork
of the launcher taken before any of the student's code ran. torch and the
probes are imported there once, and no computation has started threads.

What spawn promises still holds for each process: it imports the student's
file again as __mp_main__ (so code that works only under fork still fails),
it unpickles its function and arguments, and it starts with the launcher's
working folder, sys.path, argv and environment as they were at the call.
"""

from __future__ import annotations

import os
import socket
from multiprocessing import connection, forkserver, process, spawn

ENVIRON_KEY = "ddp_grader_environ"  # the launcher's environment, sent with spawn's preparation data


def _with_environment(get_preparation_data):
    def prepared(name):
        return {**get_preparation_data(name), ENVIRON_KEY: dict(os.environ)}

    return prepared


def _applying_environment(prepare):
    def prepare_child(data):
        if ENVIRON_KEY in data:  # as a fresh interpreter would have inherited it
            os.environ.clear()
            os.environ.update(data[ENVIRON_KEY])
        prepare(data)

    return prepare_child


def start_server(before_serving) -> None:
    """Fork the server now, and make it this process's fork server.

    `before_serving` runs in the server, before it forks anything: what a
    fresh spawned interpreter would have run at its start (the spawn guard).
    """
    spawn.get_preparation_data = _with_environment(spawn.get_preparation_data)
    spawn.prepare = _applying_environment(spawn.prepare)
    # The temporary folder multiprocessing made for the process this one was forked
    # from is not in this one's sandbox: make a new one, as a fresh interpreter would.
    process.current_process()._config.pop("tempdir", None)
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    os.chmod(address, 0o600)
    listener.listen()
    # The server runs until every holder of alive_w is gone: this process and what it starts.
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(alive_w)
            before_serving()
            forkserver.main(listener.fileno(), alive_r, [])
        except SystemExit:
            code = 0
        finally:
            os._exit(code)
    listener.close()
    os.close(alive_r)
    server = forkserver._forkserver
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
