"""Writing files so that a reader never sees half of one; giving a tree of them to a user."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

SHARED_MODE = 0o644  # reports are read by other users (a TA, a web server); mkstemp would leave 0600


@contextmanager
def replacing(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8"):
    """Open a temporary file beside `path`; when the block ends without an
    error, it replaces `path` in one step. On an error `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
        os.chmod(temp, SHARED_MODE)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as f:
        f.write(text)


def chown_tree(folder: str | os.PathLike, uid: int, gid: int) -> None:
    """The folder and everything in it, owned by uid:gid (links themselves, never what they name)."""
    os.chown(folder, uid, gid, follow_symlinks=False)
    for inner, folders, files in os.walk(folder):
        for name in folders + files:
            os.chown(os.path.join(inner, name), uid, gid, follow_symlinks=False)
