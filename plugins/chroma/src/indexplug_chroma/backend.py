"""The chroma backend: dense cosine search over Chroma, with embeddings from indexplug.

What each op guarantees, and how:

* **One embedder per index.** The first write records the embedder's name and dimension in the
  collection's metadata; every op compares them with the backend's embedder and refuses a
  mismatch (``INDEX_FAILED``, naming both), so vectors of two models are never mixed.
* **Exact passages.** Records carry the full provenance and the passage's digest
  (:mod:`indexplug_chroma.records`); a hit is the passage exactly as added, or, if it was
  altered behind our back, a passage whose id or digest no longer matches, which the guard
  refuses to serve.
* **Records lost behind the vectors.** Chroma keeps a record (document, metadata) apart from
  its vector (the HNSW index); a vector whose record was deleted behind it comes back from a
  query with no document.  Such an answer, or an index that counts no records while its
  vector index still answers, is ``INDEX_FAILED`` ("rebuild it"), never a shorter list, "no
  match" or "empty".
* **Known ids.** A passage whose id is stored already (in a collection with typed fields: alive,
  with the same digest) is reported known and not written again.  Writes to one index are
  serialised within the process (a lock per collection, shared by every backend instance on the
  same folder or server collection), so threads adding the same passage at once count it once.
* **Complete answers.** Chroma's HNSW graph can hold a vector that no other node links to: it is
  stored (``get`` and ``count`` see it) but no graph search reaches it, with or without a
  filter.  Inserting near-identical vectors makes this likely: the conformance kit's 500-passage
  concurrency check lost one or two passages in about one run in six, in whatever order they were
  written.  A search that Chroma answers with fewer hits than ``top_k`` although more passages
  (matching the filter) are stored is therefore answered again by an exact scan of the stored
  embeddings.  A search for fewer passages than stored is approximate, as HNSW is.
* **Filters, keys and reads.** Every operator of :mod:`indexplug.filters` is served exactly
  through typed metadata fields (:mod:`indexplug_chroma.fields`); ``get`` reads by id and by
  caller key, ``scan`` pages in id order by listing and sorting the matching ids; a key's new
  passages replace its old ones in one Chroma upsert, the old rewritten as dead (dropped by
  every read) and deleted next (:meth:`ChromaBackend._write`).
* **Budgets.** Projected before anything is written, measured (embedded) or estimated (server)
  after; a refused write deletes what it wrote, and a refused first write removes the index, so
  a refusal leaves the collection as it was.  ``max_bytes`` lives in the collection's metadata.
* **Deadlines.** Checked before each step (embedding, writing, querying) and after the query, so
  a search that ran past its limit answers ``INDEX_TIMEOUT`` rather than late results.
* **Your own vectors.** ``add_vectors`` stores the caller's embeddings and ``search_vector``
  searches by one (:mod:`indexplug_chroma.vectors`), through the same steps as ``add`` and
  ``search``; vectors stated to be of another embedder than the collection recorded answer
  ``BAD_REQUEST``.
* **Outages.** A server that does not answer gives ``INDEX_UNAVAILABLE``; the HTTP client is
  dropped and rebuilt on the next op, so the backend recovers when the server is back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from indexplug_chroma import records
from indexplug_chroma.stores import EmbeddedStore
from indexplug_chroma.vectors import ChromaVectors


class ChromaBackend(ChromaVectors):
    """See the module docstring; settings are :class:`~indexplug_chroma.settings.ChromaSettings`."""

    # -- extras ------------------------------------------------------------------------------
    def tamper(self, index: str, passage_id: str, text: str) -> None:
        """Conformance-kit hook: change a stored passage's text behind the backend's back
        (its embedding and provenance stay, as an outside edit would leave them)."""
        with self._store.use(index) as client:
            coll = self._store.get(client, index)
            if coll is None:
                raise LookupError(f"index '{index}' does not exist")
            got = coll.get(ids=[passage_id], include=["embeddings", "documents", "metadatas"])
            if not got["ids"]:
                raise LookupError(f"passage {passage_id} is not in '{index}'")
            if records.provenance_in_document(got["metadatas"][0]):
                _, prov = records.split_document(got["documents"][0])
                text = f"{text}{records.SEPARATOR}{prov}"
            coll.update(ids=[passage_id], documents=[text], embeddings=got["embeddings"])

    def tamper_record(self, index: str, passage_id: str, changes: Mapping[str, Any]) -> None:
        """Conformance-kit hook: alter fields of a stored record behind the backend's back
        (``text``, ``metadata``, ``licence``, ``provenance``, ``start``, ``end``, ``digest``),
        in the record's own layout, its id, digest (unless named) and embedding kept
        (:func:`indexplug_chroma.records.altered`)."""
        with self._store.use(index) as client:
            coll = self._store.get(client, index)
            if coll is None:
                raise LookupError(f"index '{index}' does not exist")
            got = coll.get(ids=[passage_id], include=["embeddings", "documents", "metadatas"])
            if not got["ids"]:
                raise LookupError(f"passage {passage_id} is not in '{index}'")
            document, metadata = records.altered(
                passage_id, got["documents"][0], got["metadatas"][0], changes
            )
            # deleted and added again, so that metadata keys it no longer has are gone too
            coll.delete(ids=[passage_id])
            coll.add(
                ids=[passage_id],
                embeddings=got["embeddings"],
                documents=[document],
                metadatas=[metadata] if metadata else None,
            )
        self._store.forget_count(index)

    def delete_rows(self, index: str, ids: Sequence[str]) -> None:
        """Conformance-kit hook: delete passages' records from Chroma's record store (the
        folder's ``chroma.sqlite3``) but not their vectors from its HNSW index, as an outside
        edit of the file would; searches must then answer ``INDEX_FAILED``.

        Embedded mode only: a server's files are not this backend's to reach (server mode
        does not claim ``separate_records``, so the kit does not ask for this hook there)."""
        if not isinstance(self._store, EmbeddedStore):
            raise RuntimeError("delete_rows reaches an embedded index's files only, not a server's")
        path = self._store.folder(index) / "chroma.sqlite3"
        if not path.is_file():
            raise LookupError(f"index '{index}' does not exist")
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(path, timeout=30)) as db, db:
            for i in range(0, len(ids), 500):
                chunk = list(ids[i : i + 500])
                marks = ",".join("?" * len(chunk))
                rows = [
                    r[0]
                    for r in db.execute(
                        f"SELECT id FROM embeddings WHERE embedding_id IN ({marks})", chunk
                    )
                ]
                db.executemany("DELETE FROM embedding_metadata WHERE id = ?", [(r,) for r in rows])
                db.executemany("DELETE FROM embeddings WHERE id = ?", [(r,) for r in rows])
        self._store.forget_count(index)
