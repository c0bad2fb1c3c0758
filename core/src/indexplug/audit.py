"""The audit log: an append-only, tamper-evident record of every change made to an index.

Each change (add, index_folder, remove, drop, import, copy, clear_history) appends one JSON
line to ``INDEXPLUG_HOME/audit/log.jsonl``: when, who (the caller), which index and backend,
the op, its outcome, the counts, and the ids or keys affected (only their count above
:data:`DEFAULT_MAX_IDS`).  Every record carries ``prev``, the hash of the record before it,
and ``hash``, the SHA-256 of its own canonical JSON (sorted keys, no spaces, UTF-8, without
``hash``): editing, deleting or reordering a record breaks the chain at that record.
``head.json`` beside the log holds the last record's sequence number and hash, so a log cut
short (whole records removed from its end) is told from a log that is merely short.

A record is acknowledged (``append`` returns) only once its line is on disk (``fsync``): a
process killed at any point loses no acknowledged record.  Appends from several processes are
serialised by an advisory lock file.  The log and head are opened without following links; a
link, a torn last line, or a chain that does not verify is refused, never trusted or repaired.

This is a storage module: it imports nothing above :mod:`indexplug.home`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexplug.errors import IndexplugError
from indexplug.home import home_dir

try:  # POSIX: an advisory lock shared by every process appending to the log
    import fcntl
except ImportError:  # pragma: no cover - Windows: the in-process lock only
    fcntl = None  # type: ignore[assignment]

GENESIS = "0" * 64
"""The ``prev`` of the first record."""
DEFAULT_MAX_IDS = 1000
"""Ids (or keys) listed in one record; above it the record keeps their count only."""
MAX_LINE = 4 * 1024 * 1024
"""The longest record line read back; a longer one is damage, not a record."""

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_LOCK = threading.Lock()


class AuditError(IndexplugError):
    """The audit log cannot be trusted or written (a link, a torn or broken chain, I/O)."""


def canonical(record: dict[str, Any]) -> bytes:
    """The bytes a record's hash covers: its JSON without ``hash``, keys sorted, compact."""
    body = {k: v for k, v in record.items() if k != "hash"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def record_hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(record)).hexdigest()


def audit_dir() -> Path:
    return home_dir() / "audit"


@dataclass(frozen=True)
class Verdict:
    """What :meth:`AuditLog.verify` found: ``ok``, how many records verified, and the first
    bad record (its 1-based line number, which is its ``seq`` in an intact log) with why."""

    ok: bool
    records: int
    first_bad: int | None = None
    reason: str = ""
    last_hash: str = GENESIS


def _open(path: Path, flags: int, mode: int = 0o600) -> int:
    """Open ``path`` without following a link, and only if it is a regular file."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if path.is_symlink():
            raise AuditError(f"{path} is a link, not the audit file: refused") from None
        raise AuditError(f"{path} cannot be opened: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AuditError(f"{path} is not a regular file: refused")
    return fd


class AuditLog:
    """The audit log in ``folder`` (default: ``INDEXPLUG_HOME/audit``)."""

    def __init__(self, folder: Path | None = None, *, max_ids: int = DEFAULT_MAX_IDS) -> None:
        self.folder = Path(folder) if folder is not None else audit_dir()
        self.max_ids = max_ids
        self.log = self.folder / "log.jsonl"
        self.head = self.folder / "head.json"

    # -- writing ---------------------------------------------------------------------------
    def _folder(self) -> None:
        if self.folder.is_symlink():
            raise AuditError(f"{self.folder} is a link, not the audit folder: refused")
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise AuditError(f"{self.folder} cannot be made: {exc.strerror or exc}") from None
        if not self.folder.is_dir():
            raise AuditError(f"{self.folder} is not a folder")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._folder()
        with _LOCK:
            fd = _open(self.folder / "lock", os.O_RDWR | os.O_CREAT)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the lock

    def check(self) -> None:
        """Raise :class:`AuditError` unless a record could be appended now (called before a
        change runs, so that no change is made that the log could not record)."""
        with self._locked():
            fd = _open(self.log, os.O_RDONLY | os.O_CREAT)
            try:
                self._tail(fd)
            finally:
                os.close(fd)

    def append(
        self,
        *,
        op: str,
        caller: str,
        index: str,
        backend: str,
        outcome: str,
        ok: bool,
        counts: dict[str, int] | None = None,
        ids: Sequence[str] = (),
        keys: Sequence[str] = (),
        detail: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append one record and answer it, once it is on disk."""
        with self._locked():
            fd = _open(self.log, os.O_RDWR | os.O_APPEND | os.O_CREAT)
            try:
                seq, prev = self._tail(fd)
                record: dict[str, Any] = {
                    "seq": seq + 1,
                    "time": round(time.time(), 6),
                    "caller": caller,
                    "op": op,
                    "index": index,
                    "backend": backend,
                    "outcome": outcome,
                    "ok": ok,
                    "counts": dict(counts or {}),
                    "ids": list(ids) if len(ids) <= self.max_ids else [],
                    "ids_total": len(ids),
                    "keys": list(keys) if len(keys) <= self.max_ids else [],
                    "keys_total": len(keys),
                    "detail": dict(detail or {}),
                    "prev": prev,
                }
                record["hash"] = record_hash(record)
                line = json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n"
                data = line.encode()
                written = os.write(fd, data)  # O_APPEND: one write, at the end
                if written != len(data):
                    raise AuditError("the audit record was only partly written (disk full?)")
                os.fsync(fd)
            finally:
                os.close(fd)
            self._write_head(record["seq"], record["hash"])
            return record

    def _write_head(self, seq: int, digest: str) -> None:
        tmp = self.folder / f".head.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = _open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, json.dumps({"seq": seq, "hash": digest}).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.head)
        with contextlib.suppress(OSError):  # the rename itself on disk
            dfd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def _read_head(self) -> tuple[int, str] | None:
        if not self.head.exists() and not self.head.is_symlink():
            return None
        fd = _open(self.head, os.O_RDONLY)
        try:
            raw = os.read(fd, 4096)
        finally:
            os.close(fd)
        try:
            head = json.loads(raw)
            seq, digest = head["seq"], head["hash"]
        except (ValueError, KeyError, TypeError):
            raise AuditError(f"{self.head} is damaged: refused") from None
        if not isinstance(seq, int) or not isinstance(digest, str):
            raise AuditError(f"{self.head} is damaged: refused")
        return seq, digest

    def _tail(self, fd: int) -> tuple[int, str]:
        """The last record's seq and hash, checked against itself and the head."""
        size = os.fstat(fd).st_size
        head = self._read_head()
        if size == 0:
            if head is not None and head[0] > 0:
                raise AuditError(
                    f"the audit log is empty but its head says {head[0]} record(s): truncated"
                )
            return 0, GENESIS
        chunk = b""
        pos = size
        while pos > 0 and chunk.count(b"\n") < 2 and len(chunk) <= MAX_LINE:
            step = min(65536, pos)
            pos -= step
            chunk = os.pread(fd, step, pos) + chunk
        if not chunk.endswith(b"\n"):
            raise AuditError("the audit log's last line is torn: refused (run audit verify)")
        last = chunk[:-1].rsplit(b"\n", 1)[-1]
        try:
            record = json.loads(last)
            seq, digest = int(record["seq"]), str(record["hash"])
        except (ValueError, KeyError, TypeError):
            raise AuditError("the audit log's last record is damaged: refused") from None
        if record_hash(record) != digest:
            raise AuditError(f"the audit log's last record (seq {seq}) was edited: refused")
        if head is not None and (seq < head[0] or (seq == head[0] and digest != head[1])):
            raise AuditError(
                f"the audit log ends at seq {seq} but its head says {head[0]}: truncated or "
                "replaced (run audit verify)"
            )
        return seq, digest

    # -- reading ---------------------------------------------------------------------------
    def records(self) -> Iterator[tuple[int, dict[str, Any] | None, str]]:
        """Each line as (line number, record or None, why it is bad or '')."""
        if not self.log.exists() and not self.log.is_symlink():
            return
        fd = _open(self.log, os.O_RDONLY)
        with os.fdopen(fd, "rb") as fh:
            for n, raw in enumerate(iter(lambda: fh.readline(MAX_LINE + 1), b""), start=1):
                if not raw.endswith(b"\n"):
                    yield n, None, "torn or overlong line"
                    return
                try:
                    rec = json.loads(raw)
                except ValueError:
                    yield n, None, "not JSON"
                    continue
                if not isinstance(rec, dict):
                    yield n, None, "not a JSON object"
                    continue
                yield n, rec, ""

    def verify(self) -> Verdict:
        """Walk the chain; the first record whose seq, prev or hash is wrong is bad, and a log
        shorter than its head (or a head that does not match) is truncated."""
        prev = GENESIS
        count = 0
        try:
            head = self._read_head()
            for n, rec, why in self.records():
                if rec is None:
                    return Verdict(False, count, n, why, prev)
                if rec.get("seq") != n:
                    return Verdict(False, count, n, f"seq is {rec.get('seq')!r}, expected {n}")
                if rec.get("prev") != prev:
                    return Verdict(
                        False, count, n, "prev does not match the record before it", prev
                    )
                if rec.get("hash") != record_hash(rec):
                    return Verdict(False, count, n, "hash does not match its content", prev)
                prev = str(rec["hash"])
                count = n
                if head is not None and head[0] == n and head[1] != prev:
                    return Verdict(False, count, n, "the head's hash does not match", prev)
        except AuditError as exc:
            return Verdict(False, count, count + 1, str(exc), prev)
        if head is not None and head[0] > count:
            return Verdict(
                False,
                count,
                count + 1,
                f"truncated: the head says {head[0]} record(s), the log holds {count}",
                prev,
            )
        return Verdict(True, count, None, "", prev)


def page(
    log: AuditLog,
    *,
    index: str | None = None,
    caller: str | None = None,
    op: str | None = None,
    outcome: str | None = None,
    since: float | None = None,
    until: float | None = None,
    after: int = 0,
    limit: int = 100,
) -> tuple[list[dict[str, Any]], int | None, Verdict]:
    """One page of records with ``seq > after`` passing the filters, the cursor of the next
    page, and the log's verdict.  Only records before the first bad one are answered: what
    follows a break in the chain is not trusted."""
    verdict = log.verify()
    trusted = verdict.first_bad - 1 if verdict.first_bad is not None else verdict.records
    out: list[dict[str, Any]] = []
    more: int | None = None
    for n, rec, _ in log.records():
        if n > trusted or rec is None:
            break
        if n <= after:
            continue
        if index is not None and rec.get("index") != index:
            continue
        if caller is not None and rec.get("caller") != caller:
            continue
        if op is not None and rec.get("op") != op:
            continue
        if outcome is not None and rec.get("outcome") != outcome:
            continue
        t = rec.get("time")
        if not isinstance(t, int | float):
            continue
        if since is not None and t < since:
            continue
        if until is not None and t >= until:
            continue
        if len(out) == limit:
            more = int(out[-1]["seq"])
            break
        out.append(rec)
    return out, more, verdict
