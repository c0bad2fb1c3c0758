"""Context expansion: the neighbouring passages of the same source around a hit.

Two ways, tried in order:

1. the backend's own ``neighbours`` op, when it has one (``op_neighbours(index, *, deadline,
   passage_id, before, after)`` answering ``{"before": [Passage...], "after": [Passage...]}``
   in document order), called through the guard like any extra op;
2. the source document itself, for ``file://`` sources whose bytes still hash to the
   ``document_sha256`` recorded at indexing time: the document is cut again the way ``index``
   cut it (the chunking recorded by the ``index_folder`` op, else the defaults), and the
   neighbours are the passages next to the hit's span (the same content addresses as the
   passages the index holds).

Neither applies (a source that is not a local file, a file changed since indexing, a backend
without the op), and the hit's ``context`` says why in its ``note``: context is never invented.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from indexplug.guard import Guard
from indexplug.home import home_dir
from indexplug.ingest import decode_text
from indexplug.ops import Context
from indexplug.passages import Passage, passage_from_span, sha256_bytes, split_spans

DEFAULT_CHUNKING = (1200, 150)


def _chunking_path(backend: str, index: str) -> Path:
    return home_dir() / "manifests" / backend / f"{index}.chunking.json"


def record_chunking(backend: str, index: str, max_chars: int, overlap: int) -> None:
    """Remember how ``index_folder`` cut an index's documents (for the fallback above)."""
    path = _chunking_path(backend, index)
    seen = chunkings(backend, index)
    if (max_chars, overlap) in seen:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([[max_chars, overlap], *[list(c) for c in seen]]), "utf-8")
    os.replace(tmp, path)


def chunkings(backend: str, index: str) -> list[tuple[int, int]]:
    path = _chunking_path(backend, index)
    try:
        data = json.loads(path.read_text("utf-8"))
        return [(int(a), int(b)) for a, b in data]
    except (OSError, ValueError, TypeError):
        return []


def expand(
    guard: Guard,
    index: str,
    passage: Passage,
    n: int,
    *,
    deadline_s: float | None = None,
    chunking: list[tuple[int, int]] | None = None,
) -> Context:
    """Up to ``n`` neighbouring passages before and after ``passage`` (see the module doc)."""
    notes: list[str] = []
    if callable(getattr(guard.backend, "op_neighbours", None)):
        try:
            out = guard.call_extra(
                "neighbours", index, deadline_s, passage_id=passage.id, before=n, after=n
            )
        except Exception as exc:  # a refused extra op: report it, fall back below
            out = exc
        got = _from_op(out, passage)
        if isinstance(got, Context):
            return got
        notes.append(got)
    got = from_source(passage, n, chunking or [])
    if isinstance(got, Context):
        return got
    notes.append(got)
    return Context(note="; ".join(notes))


def _from_op(out: Any, passage: Passage) -> Context | str:
    if hasattr(out, "code"):
        return f"the backend's neighbours op answered {out.code}: {out.message}"
    if isinstance(out, Exception):
        return f"the backend's neighbours op failed: {out}"
    if not isinstance(out, dict):
        return f"the backend's neighbours op returned {type(out).__name__}, not a mapping"
    sides: dict[str, list[Passage]] = {}
    for side in ("before", "after"):
        items = out.get(side, [])
        good = [
            p
            for p in items
            if isinstance(p, Passage)
            and p.source.uri == passage.source.uri
            and p.id == p.expected_id()
        ]
        if len(good) != len(items):
            return "the backend's neighbours op returned passages of another source or altered"
        sides[side] = good
    return Context(before=sides["before"], after=sides["after"])


def from_source(passage: Passage, n: int, chunking: list[tuple[int, int]]) -> Context | str:
    """Neighbours cut from the passage's source file, if it is unchanged since indexing."""
    parsed = urlparse(passage.source.uri)
    if parsed.scheme != "file":
        return f"the source ({parsed.scheme or 'no scheme'}) is not a local file to read"
    expected = passage.document_sha256 or passage.source.sha256
    if expected is None:
        return "no document hash was recorded, so the source cannot be verified"
    path = Path(url2pathname(unquote(parsed.path)))
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"the source file cannot be read ({type(exc).__name__})"
    if sha256_bytes(data) != expected:
        return "the source file changed since it was indexed"
    text = decode_text(data)
    if text is None:
        return "the source file is not text"
    tried: list[tuple[int, int]] = []
    for max_chars, overlap in [*chunking, DEFAULT_CHUNKING]:
        if (max_chars, overlap) in tried:
            continue
        tried.append((max_chars, overlap))
        try:
            spans = list(split_spans(text, max_chars, overlap))
        except ValueError:
            continue
        if (passage.start, passage.end) not in spans:
            continue
        at = spans.index((passage.start, passage.end))

        def make(s: int, e: int) -> Passage:
            return passage_from_span(
                text,
                s,
                e,
                passage.source,
                document_sha256=passage.document_sha256,
                metadata=passage.metadata,
            )

        if make(passage.start, passage.end).id != passage.id:
            continue
        return Context(
            before=[make(s, e) for s, e in spans[max(0, at - n) : at]],
            after=[make(s, e) for s, e in spans[at + 1 : at + 1 + n]],
        )
    return "the source could not be cut again the way it was indexed"
