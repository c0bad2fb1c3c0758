"""Index names are names, never paths.

A name becomes a file name (sqlite), a folder (chroma, colbert) or part of a server-side index
name (elastic), so it is restricted to a small alphabet that is safe in all of them: lower-case
ASCII letters, digits, ``-`` and ``_``, starting with a letter or digit, at most 64 characters.
"""

from __future__ import annotations

import re

from indexplug.errors import InvalidIndexName

MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def validate_index_name(name: object) -> str:
    """Return ``name`` if it is a valid index name, else raise :class:`InvalidIndexName`."""
    if not isinstance(name, str):
        raise InvalidIndexName(f"an index name must be a string, not {type(name).__name__}")
    shown = repr(name if len(name) <= 80 else name[:77] + "...")
    if not name:
        raise InvalidIndexName("an index name cannot be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidIndexName(f"index name {shown} is longer than {MAX_NAME_LENGTH} characters")
    if not _NAME.fullmatch(name):
        raise InvalidIndexName(
            f"index name {shown} is not a name: use lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit (never a path)"
        )
    return name
