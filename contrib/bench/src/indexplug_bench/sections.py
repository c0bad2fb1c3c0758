"""Sections of ``docs/benchmarks.md`` that other commands own.

``report`` rewrites the page from the harness's results; a section delimited by
``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` was written by another command (CLI start-up,
embedding paths, colbert kernels, MCP concurrency, copying) and is carried over unchanged, in
the order it had, so that re-rendering the page never loses a measurement.
"""

from __future__ import annotations

import re
from pathlib import Path

_SECTION = re.compile(r"<!-- ([a-z0-9-]+):begin -->.*?<!-- \1:end -->", re.DOTALL)


def kept_sections(page: Path) -> list[str]:
    """Every delimited section on ``page``, each whole (markers included), in page order."""
    if not page.is_file():
        return []
    return [m.group(0) for m in _SECTION.finditer(page.read_text("utf-8"))]


def replace_section(page: Path, name: str, body: str) -> None:
    """Put ``body`` in section ``name`` of ``page``: in place if it is there, else at the end."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    text = page.read_text("utf-8") if page.is_file() else ""
    if begin in text and end in text:
        head, _, rest = text.partition(begin)
        text = head + block + rest.partition(end)[2]
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + block + "\n"
    page.write_text(text, "utf-8")
