"""Byte figures for budgets: projected before a write, measured or estimated after it.

Embedded indexes are *measured*: the files of the index's folder.  Projection needs a figure
per passage before anything is written; Chroma keeps a passage's text three times over (the
record, the write-ahead log and a trigram full-text index) and its embedding two or three times
(the log, the HNSW data file, the id maps), so the projection multiplies accordingly.  The
factors were fitted with chromadb 1.5 on SciFact (5,183 passages of 1.5 KB with 384-dim
vectors: 15.0 KB per passage measured after closing the client, 15.6 KB projected, where a
text factor of 6.0 projected 14.8 KB).  They err on the high side, because a projection that is
too low lets a write through that the measured check then has to undo.  Small indexes cost
more per passage (HNSW and SQLite allocate in blocks); there the measured check is what holds
the budget.

A server does not report its size, so server indexes are *estimated*: the passages' text and
metadata bytes (a running total kept in the collection's metadata) plus the count times the
embedding's bytes.  Every server figure is flagged as an estimate in the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence

from indexplug.passages import Passage

from indexplug_chroma.records import payload_bytes

EMPTY_FOLDER_BYTES = 188_416
"""A new ``PersistentClient`` folder before any passage (its empty ``chroma.sqlite3``)."""
TEXT_FACTOR = 6.5
VECTOR_FACTOR = 3.0
PER_PASSAGE_BYTES = 700
"""Row, index entries and HNSW links of one passage, whatever its size."""
FLOAT_BYTES = 4


def projected_bytes(passages: Sequence[Passage], dim: int) -> int:
    """What adding ``passages`` is expected to add to an embedded folder."""
    vector = int(dim * FLOAT_BYTES * VECTOR_FACTOR)
    return sum(int(payload_bytes(p) * TEXT_FACTOR) + vector + PER_PASSAGE_BYTES for p in passages)


def estimated_bytes(count: int, payload_total: int, dim: int) -> int:
    """A server index's estimated size: text and metadata, plus one embedding per passage."""
    return max(0, payload_total) + count * dim * FLOAT_BYTES


def payload_total(passages: Sequence[Passage]) -> int:
    return sum(payload_bytes(p) for p in passages)
