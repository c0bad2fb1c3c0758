"""Context expansion: the neighbouring passages of the same source around a hit.

Two ways, tried in order:

1. the backend's own ``neighbours`` op, when it has one (``op_neighbours(index, *, deadline,
   passage_id, before, after)`` answering ``{"before": [Passage...], "after": [Passage...]}``
   in document order), called through the guard like any extra op;
2. the file the index was built from, as recorded in the index's ingest manifest
   (:mod:`indexplug.manifest`): only when the hit is a passage ``index_folder`` made (its uri is
   a file the manifest lists and its id is one of that file's passage ids), the file still lies
   at that real path under a folder the manifest recorded, is a regular file within the byte cap
   (read under the deadline, :mod:`indexplug.confine`) and still hashes to what was indexed.  It
   is cut again the way it was cut, so the neighbours are the passages the index holds.

A passage's uri is stored text, not an instruction: a path a caller put in a passage
(``file:///dev/zero``, a FIFO, ``/etc/passwd``) is never opened, since no manifest lists it.
When neither way applies, the ``note`` says so in one sentence that is the same whatever the
reason, so it tells nothing about paths on the machine: context is never invented.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from indexplug.confine import Refused, read_confined
from indexplug.deadlines import DEFAULT_DEADLINE_S
from indexplug.guard import Guard
from indexplug.home import home_dir
from indexplug.ingest import MAX_FILE_BYTES, decode_text
from indexplug.manifest import Entry, Manifest, cached_manifest
from indexplug.ops import Context
from indexplug.outcomes import Neighbours
from indexplug.passages import Passage, passage_from_span, sha256_bytes, split_spans

NO_CONTEXT = (
    "no neighbouring passages: the source is not a local file this index was built from, or it "
    "changed since it was indexed"
)
"""The one note for every reason the source file cannot serve neighbours."""
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
    cut = from_index_files(guard, index, passage, n, chunking or [], deadline_s=deadline_s)
    if cut is not None:
        return cut
    notes.append(NO_CONTEXT)
    return Context(note="; ".join(notes))


def _from_op(out: Any, passage: Passage) -> Context | str:
    """The context a ``neighbours`` op answered (its passages already checked and copied by
    the guard), or why it cannot be used."""
    if isinstance(out, Exception):
        return f"the backend's neighbours op failed: {out}"
    if not isinstance(out, Neighbours):
        return f"the backend's neighbours op answered {out.code}: {out.message}"
    if any(p.source.uri != passage.source.uri for p in [*out.before, *out.after]):
        return "the backend's neighbours op returned passages of another source"
    return Context(before=list(out.before), after=list(out.after))


def _manifests(guard: Guard, index: str) -> list[Manifest]:
    """The ingest manifests that may name a hit's file: the index's own and, for a fusion,
    each member's (a member's hits are its own passages)."""
    keys = [(guard.name, index)]
    for leg in getattr(guard.backend, "legs", None) or []:
        target = getattr(leg, "target", None)
        if target is not None:
            keys.append((target.guard.name, target.index))
    return [m for m in (cached_manifest(b, i) for b, i in keys) if m is not None]


def _entry_for(passage: Passage, manifests: list[Manifest]) -> tuple[Manifest, Entry] | None:
    for m in manifests:
        entry = m.files.get(passage.source.uri)
        if entry is not None and entry.sha256 and passage.id in entry.ids:
            return m, entry
    return None


def from_index_files(
    guard: Guard,
    index: str,
    passage: Passage,
    n: int,
    chunking: list[tuple[int, int]],
    *,
    deadline_s: float | None = None,
) -> Context | None:
    """Neighbours cut from the file ``index_folder`` built the hit from (see the module doc);
    ``None`` whatever the reason they cannot be had."""
    found = _entry_for(passage, _manifests(guard, index))
    if found is None:
        return None
    m, entry = found
    expected = passage.document_sha256 or passage.source.sha256
    if expected != entry.sha256:
        return None
    parsed = urlparse(passage.source.uri)
    if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
        return None
    from urllib.request import url2pathname  # with http.client, ssl and email: only here

    path = url2pathname(unquote(parsed.path))
    seconds = DEFAULT_DEADLINE_S if deadline_s is None else deadline_s
    try:
        real, data = read_confined(
            path, m.roots, max_bytes=MAX_FILE_BYTES, deadline_at=time.monotonic() + seconds
        )
    except Refused:
        return None
    if real != os.path.normpath(path) or sha256_bytes(data) != expected:
        return None  # a link now stands where the file was, or the file changed
    text = decode_text(data)
    if text is None:
        return None
    tried: list[tuple[int, int]] = []
    cuts = [entry.chunking] if entry.chunking else [*chunking, DEFAULT_CHUNKING]
    for max_chars, overlap in cuts:
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
        before = [make(s, e) for s, e in spans[max(0, at - n) : at]]
        after = [make(s, e) for s, e in spans[at + 1 : at + 1 + n]]
        if not {p.id for p in before + after} <= set(entry.ids):
            continue  # not the passages the index holds
        return Context(before=before, after=after)
    return None
