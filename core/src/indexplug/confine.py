"""Reading a file named by someone else, confined to allowed folders and bounded.

Ingest and context expansion read files whose paths come from a caller or from a stored
passage, so neither may trust the path.  :func:`read_confined` reads a file only when

* its real path (every symlink resolved) lies inside one of the allowed folders, so a link that
  leads out of them (``leak.md -> /etc/passwd``) is refused, not followed;
* it is a regular file: FIFOs, devices and sockets are refused before anything is read, so a
  FIFO cannot block the reader and ``/dev/zero`` cannot fill its memory;
* it is opened without following a last symlink and without blocking (``O_NOFOLLOW``,
  ``O_NONBLOCK``), and the opened descriptor is checked again (``fstat``; on Linux its path in
  ``/proc/self/fd``), so a file swapped for a link or a FIFO after the check is refused too;
* it fits the byte cap *while being read* (at most ``max_bytes + 1`` bytes are read, whatever
  ``stat`` said, since a file can grow), and the deadline is checked between reads.

Every refusal is a :class:`Refused` with a :class:`Why`; none is fatal to the caller.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

READ_CHUNK = 1 << 20
_PROC_FD = Path("/proc/self/fd")


class Why(StrEnum):
    """Why a file was not read (the names ingest counts skipped files under)."""

    OUTSIDE = "outside"
    """Its real path is outside every allowed folder (a link that leads out)."""
    SPECIAL = "special"
    """Not a regular file: a FIFO, a device or a socket."""
    LOOP = "loop"
    """A symlink loop (or a link swapped in while it was being opened)."""
    BROKEN = "broken"
    """A link to nothing, or a file that disappeared."""
    TOO_LARGE = "too_large"
    """More bytes than the cap."""
    TIMEOUT = "timeout"
    """The deadline passed while it was being read."""
    UNREADABLE = "unreadable"
    """Any other error opening or reading it (permissions, I/O)."""


class Refused(Exception):
    """A file :func:`read_confined` would not read, and why (the message names no target)."""

    def __init__(self, why: Why, detail: str = "") -> None:
        super().__init__(f"{why.value}{': ' + detail if detail else ''}")
        self.why = why


def real_path(path: str | os.PathLike[str]) -> str:
    """``path`` with every symlink resolved; :class:`Refused` for a loop or a broken link.

    ``Path.resolve`` raises ``RuntimeError`` on a loop (Python 3.11), which is what aborted a
    whole folder; ``realpath(strict=True)`` reports it as ``ELOOP`` instead.
    """
    try:
        return os.path.realpath(path, strict=True)
    except OSError as exc:
        raise _refusal(exc) from None


def inside(real: str, roots: Sequence[str]) -> bool:
    """Whether the real path ``real`` is one of ``roots`` (real paths) or lies under one."""
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def open_folder(folder: str, roots: Sequence[str]) -> int:
    """A descriptor of the folder ``folder`` (a real path under one of ``roots``), opened one
    component at a time from that root, each relative to the one before and without following
    a link (``O_DIRECTORY | O_NOFOLLOW``).

    Whatever happens to the path after it was checked (a folder on the way swapped for a link
    that leads out), the folder opened is reached through real folders under the root only; a
    component that is now a link, or no folder, is :class:`Refused`.  Files created relative
    to the descriptor (``dir_fd``) therefore land inside the root.
    """
    under = [r for r in roots if inside(folder, [r])]
    if not under:
        raise Refused(Why.OUTSIDE)
    root = max(under, key=len)
    flags = (
        os.O_RDONLY
        | getattr(os, "O_DIRECTORY", 0)
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    rest = os.path.relpath(folder, root)
    parts = [] if rest == os.curdir else rest.split(os.sep)
    if os.pardir in parts:
        raise Refused(Why.OUTSIDE)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise _refusal(exc) from None
    try:
        for part in parts:
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except OSError as exc:
        os.close(fd)
        raise _refusal(exc) from None
    return fd


def _refusal(exc: OSError) -> Refused:
    if exc.errno == errno.ELOOP:
        return Refused(Why.LOOP)
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Refused(Why.BROKEN)
    if exc.errno == errno.ENXIO:  # opening a socket, or a FIFO's other end
        return Refused(Why.SPECIAL)
    return Refused(Why.UNREADABLE, type(exc).__name__)


def read_confined(
    path: str | os.PathLike[str],
    roots: Sequence[str],
    *,
    max_bytes: int,
    deadline_at: float | None = None,
) -> tuple[str, bytes]:
    """The real path and bytes of ``path``, read under the rules of the module docstring.

    ``roots`` are real paths (see :func:`real_path`); ``deadline_at`` is a ``time.monotonic()``
    value.  Raises :class:`Refused`, never follows the path anywhere it may not go.
    """
    real = real_path(path)
    if not inside(real, roots):
        raise Refused(Why.OUTSIDE)
    try:
        before = os.stat(real)
    except OSError as exc:
        raise _refusal(exc) from None
    if not stat.S_ISREG(before.st_mode):
        raise Refused(Why.SPECIAL)  # never opened: opening some devices has effects
    if before.st_size > max_bytes:
        raise Refused(Why.TOO_LARGE)
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NOCTTY", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(real, flags)
    except OSError as exc:
        raise _refusal(exc) from None
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise Refused(Why.SPECIAL)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise Refused(Why.LOOP, "the file was replaced while it was opened")
        if _PROC_FD.is_dir():
            try:
                where = os.readlink(_PROC_FD / str(fd))
            except OSError:
                where = real
            if not inside(where, roots):  # a folder on the way was swapped for a link
                raise Refused(Why.OUTSIDE)
        return real, _read_bounded(fd, max_bytes, deadline_at)
    finally:
        os.close(fd)


def _read_bounded(fd: int, max_bytes: int, deadline_at: float | None) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        if deadline_at is not None and time.monotonic() >= deadline_at:
            raise Refused(Why.TIMEOUT)
        try:
            chunk = os.read(fd, min(READ_CHUNK, max_bytes + 1 - total))
        except BlockingIOError:
            raise Refused(Why.SPECIAL) from None
        except OSError as exc:
            raise _refusal(exc) from None
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise Refused(Why.TOO_LARGE)
