"""The CLI's rich consoles, made on first use.

Importing rich's console costs every command that prints nothing for a person (``invoke``,
``--help``) a share of its start, so the consoles are made when something is first printed.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

PIPE_CLOSED = 141


def _console_class() -> type[Console]:
    from rich.console import Console

    class _Console(Console):
        """rich's console, except that output nobody reads any more (``| head -1``) exits 141
        as a shell would say, not rich's 1, which is ``NO_MATCH`` here."""

        def on_broken_pipe(self) -> None:
            self.quiet = True
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise typer.Exit(PIPE_CLOSED)

    return _Console


class LazyConsole:
    """A rich console made on first use (importing rich's console costs every command that
    prints nothing for a person, ``invoke`` and ``--help`` among them, a share of its start)."""

    def __init__(self, *, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            self._console = _console_class()(stderr=self._stderr)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


def escape(text: str) -> str:
    """rich's markup escape, imported when first needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)
