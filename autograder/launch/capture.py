"""Collect a rank's output (stdout and stderr, Python and C++) through a
named pipe, keeping only the head and the tail of it.

The lines are tallied as they pass (lines.py), so the rank0_logs check sees
every line, the ones not kept too.

A pipe rather than a file, so a submission that prints gigabytes costs
memory for a few kilobytes and no disk. A named pipe, so it works the same
for forked and spawned ranks.
"""

import codecs
import os
import threading

from .lines import LineTally

HEAD_BYTES = 12_000
TAIL_BYTES = 12_000


class CappedOutput:
    def __init__(self, fifo_path: str, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES):
        self.path = fifo_path
        os.mkfifo(fifo_path)
        self._read_fd = os.open(fifo_path, os.O_RDONLY | os.O_NONBLOCK)
        # Holding a write end ourselves means EOF comes only when we say so,
        # not when the rank has not opened its end yet.
        self._hold_fd = os.open(fifo_path, os.O_WRONLY)
        os.set_blocking(self._read_fd, True)
        self._head_bytes, self._tail_bytes = head_bytes, tail_bytes
        self.head, self.tail, self.total_bytes = bytearray(), bytearray(), 0
        self.tally = LineTally()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._thread = threading.Thread(target=self._drain, name=f"output-{os.path.basename(fifo_path)}", daemon=True)

    @property
    def parent_fds(self) -> tuple[int, int]:
        return self._read_fd, self._hold_fd

    def start(self) -> None:
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self._read_fd, 1 << 16):
            self.total_bytes += len(chunk)
            self.tally.feed(self._decoder.decode(chunk))
            room = self._head_bytes - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                del self.tail[: max(0, len(self.tail) - self._tail_bytes)]

    def close(self) -> None:
        os.close(self._hold_fd)
        self._thread.join(timeout=2)  # a stray grandchild may still hold the pipe open
        os.close(self._read_fd)

    def text(self) -> str:
        shown = len(self.head) + len(self.tail)
        head = self.head.decode(errors="replace")
        if shown >= self.total_bytes:
            return head + self.tail.decode(errors="replace")
        skipped = self.total_bytes - shown
        return f"{head}\n[... {skipped:,} bytes of output not shown ...]\n{self.tail.decode(errors='replace')}"
