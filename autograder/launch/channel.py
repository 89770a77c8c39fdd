"""The channel the ranks' records travel on: a Unix socket the launcher listens
on, never a file that student code could append to.

Each process with probes connects once and says who it is in its first line
({"role": ..., "rank": ...}); every line after that is one event. The
launcher keeps the first stream of each (role, rank). A second stream that
claims the same place, or one from a user that is not that rank's
(the sandbox gives every rank a uid of its own; a rank connects before it
gives up root), is kept out and reported:
something in the run tried to speak for a rank.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

SOCKET_NAME = "records.sock"
MAX_STREAM_BYTES = 256 * 2**20  # far beyond any honest run's records
DRAIN_TIMEOUT_S = 5.0
_PEERCRED = struct.Struct("3i")  # pid, uid, gid


class RecordChannel:
    def __init__(self, folder: Path, uid_of: Callable[[str, int], int] | None = None):
        self.path = str(folder / SOCKET_NAME)
        self._uid_of = uid_of
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        os.chmod(self.path, 0o666)  # every rank's user may connect; none may remove it (the folder is ours)
        self._server.listen(64)
        self._server.setblocking(False)
        self._streams: dict[tuple[str, int], list[bytes]] = {}
        self.intrusions: list[str] = []
        self._open: dict[socket.socket, dict] = {}
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ)
        self._give_up_at = float("inf")
        self._stop_read, self._stop_write = os.pipe()
        self._selector.register(self._stop_read, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="record-channel", daemon=True)
        self._thread.start()

    @property
    def parent_fds(self) -> tuple[int, ...]:
        """Ours alone: a forked rank closes them (it could take others' connections)."""
        return self._server.fileno(), self._stop_read, self._stop_write, self._selector.fileno()

    def _serve(self) -> None:
        while (self._open or self._server.fileno() != -1) and time.monotonic() < self._give_up_at:
            for key, _ in self._selector.select(timeout=0.5):
                if key.fileobj is self._server:
                    self._accept()
                elif key.fileobj == self._stop_read:
                    self._stop_accepting()
                else:
                    self._read(key.fileobj)

    def _accept(self) -> None:
        try:
            connection, _ = self._server.accept()
        except (BlockingIOError, OSError):
            return
        pid, uid, _ = _PEERCRED.unpack(connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        self._open[connection] = {"pid": pid, "uid": uid, "buffer": b"", "place": None, "bytes": 0}
        self._selector.register(connection, selectors.EVENT_READ)

    def _stop_accepting(self) -> None:
        self._selector.unregister(self._stop_read)
        self._selector.unregister(self._server)
        self._server.close()

    def _read(self, connection: socket.socket) -> None:
        peer = self._open[connection]
        try:
            chunk = connection.recv(1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            self._finish(connection)
            return
        peer["bytes"] += len(chunk)
        if peer["bytes"] > MAX_STREAM_BYTES:
            self.intrusions.append(f"process {peer['pid']} sent more than {MAX_STREAM_BYTES >> 20} MiB of records")
            peer["place"] = "dropped"
            self._finish(connection)
            return
        *lines, peer["buffer"] = (peer["buffer"] + chunk).split(b"\n")
        for line in lines:
            self._line(peer, line)

    def _line(self, peer: dict, line: bytes) -> None:
        if peer["place"] is None:
            peer["place"] = self._claim(peer, line)
        elif peer["place"] != "dropped":
            self._streams[peer["place"]].append(line)

    def _claim(self, peer: dict, line: bytes):
        try:
            hello = json.loads(line)
            place = (str(hello["role"]), int(hello["rank"]))
        except (ValueError, KeyError, TypeError):
            self.intrusions.append(f"process {peer['pid']} connected to the records channel without saying who it is")
            return "dropped"
        who = f"{place[0]} {place[1]}"
        # uid 0: a rank connects before it gives up root, when only the grader's code has run in it.
        if self._uid_of is not None and peer["uid"] not in (0, self._uid_of(*place)):
            self.intrusions.append(f"process {peer['pid']} claimed to be {who} but runs as another rank's user")
            return "dropped"
        if place in self._streams:
            self.intrusions.append(f"a second record stream claimed to be {who} (process {peer['pid']})")
            return "dropped"
        self._streams[place] = []
        return place

    def _finish(self, connection: socket.socket) -> None:
        self._selector.unregister(connection)
        del self._open[connection]
        connection.close()

    def close(self) -> None:
        """Stop taking connections and read what is left. Call once every
        process that could write is gone: their ends are closed, so this ends."""
        self._give_up_at = time.monotonic() + DRAIN_TIMEOUT_S
        os.write(self._stop_write, b"x")
        self._thread.join()
        for connection in list(self._open):  # a stray process still holds a stream: what it sent is kept
            self._selector.unregister(connection)
            connection.close()
        self._open.clear()
        os.close(self._stop_read)
        os.close(self._stop_write)
        self._selector.close()

    def events(self, role: str, rank: int) -> list:
        """The stream's events, in order; a line cut short at the end is left out."""
        events = []
        for line in self._streams.get((role, rank), []):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        return events

    def ranks(self, role: str) -> list[int]:
        return sorted(rank for r, rank in self._streams if r == role)
