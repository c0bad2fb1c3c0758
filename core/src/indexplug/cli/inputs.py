"""Reading a command's input (a JSONL file, ``--args @FILE``, standard input) with a bound.

A path or ``-`` from the command line is hostile like any other input: ``/dev/zero``, a FIFO fed
forever or a multi-gigabyte file would otherwise be read until the process is killed for memory.
Input is read in chunks and refused, with a typed :class:`~indexplug.errors.InvalidRequest`
(``BAD_REQUEST``, exit 64), once it passes :data:`MAX_INPUT_BYTES`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from indexplug.errors import InvalidRequest

MAX_INPUT_BYTES = 256 * 1024 * 1024
"""The most a command reads from one input (256 MiB); larger input is split across calls."""
CHUNK = 1024 * 1024


def read_bounded(stream: BinaryIO, name: str, *, limit: int = MAX_INPUT_BYTES) -> bytes:
    """At most ``limit`` bytes of ``stream``; :class:`InvalidRequest` if it holds more."""
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = stream.read(min(CHUNK, limit + 1 - size))
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise InvalidRequest(
                f"{name} holds more than {limit:,} bytes, the most one command reads; "
                "split it into smaller files",
                field="file",
            )


def read_input(source: str | Path, *, limit: int | None = None) -> bytes:
    """The bytes of ``source`` (``-``: standard input), bounded by ``limit``.

    Raises :class:`InvalidRequest` for input over the limit and ``OSError``/``ValueError`` for
    a path that cannot be opened (missing, a folder, a NUL in its name), for the caller to word.
    """
    limit = MAX_INPUT_BYTES if limit is None else limit
    if str(source) == "-":
        return read_bounded(sys.stdin.buffer, "standard input", limit=limit)
    with Path(source).open("rb") as stream:
        return read_bounded(stream, str(source), limit=limit)
