"""indexplug's embedded default backend: SQLite FTS5 with BM25."""

from indexplug_sqlite_fts5.backend import SqliteFts5Backend

__all__ = ["SqliteFts5Backend"]
