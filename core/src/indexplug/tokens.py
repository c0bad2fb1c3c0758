"""Named bearer tokens of ``serve --http``: each with a name, a scope and optional limits.

The tokens live in ``INDEXPLUG_HOME/tokens.json`` (mode 0600, never in ``indexplug.toml``), and
only the SHA-256 of each token is kept there.  A token is 32 random bytes
(``secrets.token_urlsafe``), so a plain hash is enough: a salted slow hash (bcrypt, scrypt) is
for passwords people choose, which can be guessed; 256 random bits cannot, and a hash per request
must stay cheap.  A token presented is hashed and compared with every stored hash in constant
time (:func:`hmac.compare_digest`, no early exit), so neither the match nor its position leaks.

A file that is a link, is not a regular file, belongs to another user or that other users can
read or write is refused (:class:`TokenFileError`), never trusted.  :class:`TokenBook` rereads
the file when it changes (its inode, size or modification time), so ``indexplug token revoke``
takes effect on a running server at its next request.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from indexplug.errors import ConfigError, InvalidRequest
from indexplug.home import home_dir

TOKENS_FILE = "tokens.json"
"""The file under INDEXPLUG_HOME that keeps the named tokens' hashes (mode 0600)."""
TOKEN_PREFIX = "ixp_"
MAX_TOKENS = 1000
MAX_FILE_BYTES = 1 << 20
MAX_LIMIT = 1_000_000
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
RESERVED = frozenset({"python", "cli", "stdio", "http"})
"""Caller names indexplug records for its own surfaces: a token cannot take one."""
Scope = Literal["read", "write"]
SCOPES: tuple[str, ...] = ("read", "write")


class TokenFileError(ConfigError):
    """The tokens file cannot be trusted (a link, too open, another user's, not JSON)."""


class InvalidTokenName(InvalidRequest):
    """A token name that is not 1-64 letters, digits, '.', '-' or '_', or one reserved."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="name")


@dataclass(frozen=True)
class NamedToken:
    """One token as stored: never the token itself, only its SHA-256."""

    name: str
    scope: Scope
    sha256: str = field(repr=False)
    created: float
    rpm: int | None = None
    """Requests per minute (None: no limit)."""
    concurrent: int | None = None
    """Requests in flight at once (None: no limit)."""

    def public(self) -> dict[str, Any]:
        """What ``token list`` shows: everything but the hash."""
        return {
            "name": self.name,
            "scope": self.scope,
            "rpm": self.rpm,
            "concurrent": self.concurrent,
            "created": self.created,
        }


def check_name(name: object) -> str:
    """``name`` if it is a valid token name; :class:`InvalidTokenName` otherwise (the message
    shows the name escaped, so control characters cannot reach a terminal)."""
    if not isinstance(name, str):
        raise InvalidTokenName("a token name must be text")
    if not NAME.match(name) or name != name.strip():
        shown = ascii(name[:80]) + ("..." if len(name) > 80 else "")
        raise InvalidTokenName(
            f"token name {shown} is not 1-64 ASCII letters, digits, '.', '-' or '_' "
            "(starting with a letter or digit)"
        )
    if name.lower() in RESERVED:
        raise InvalidTokenName(
            f"token name '{name}' is reserved (the history and audit log record "
            f"{', '.join(sorted(RESERVED))} for indexplug's own surfaces)"
        )
    return name


def _check_limit(what: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise InvalidRequest(f"{what} must be a whole number from 1 to {MAX_LIMIT}", field=what)
    return value


def hash_token(token: str) -> str:
    """The SHA-256 (hex) a token is stored as."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def tokens_path(home: Path | None = None) -> Path:
    return (home or home_dir()) / TOKENS_FILE


def read_private(path: Path, what: str) -> tuple[bytes, os.stat_result] | None:
    """The bytes of ``path`` and its stat, or None if it does not exist; refused
    (:class:`TokenFileError`) if it is a link, not a regular file, another user's, or open to
    other users."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if path.is_symlink():  # a dangling link is a link all the same
            raise TokenFileError(f"the {what} {path} is a symbolic link; refused") from None
        return None
    except OSError as exc:
        if path.is_symlink():
            raise TokenFileError(f"the {what} {path} is a symbolic link; refused") from None
        raise TokenFileError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"the {what} {path} is not a regular file")
        if os.name == "posix":
            if st.st_mode & 0o077:
                raise TokenFileError(
                    f"the {what} {path} can be read or written by other users (mode "
                    f"{stat.S_IMODE(st.st_mode):o}); run chmod 600 on it"
                )
            if st.st_uid != os.getuid():
                raise TokenFileError(f"the {what} {path} belongs to another user")
        if st.st_size > MAX_FILE_BYTES:
            raise TokenFileError(f"the {what} {path} is larger than {MAX_FILE_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_FILE_BYTES:
                raise TokenFileError(f"the {what} {path} is larger than {MAX_FILE_BYTES} bytes")
        return b"".join(chunks), st
    finally:
        os.close(fd)


def _parse(data: bytes, path: Path) -> list[NamedToken]:
    try:
        doc = json.loads(data.decode("utf-8"))
        rows = doc["tokens"]
        if doc.get("version") != 1 or not isinstance(rows, list):
            raise ValueError("not version 1")
        out: list[NamedToken] = []
        for row in rows:
            scope = row["scope"]
            digest = row["sha256"]
            if scope not in SCOPES or not re.fullmatch(r"[0-9a-f]{64}", str(digest)):
                raise ValueError("a bad scope or hash")
            created = row["created"]
            if isinstance(created, bool) or not isinstance(created, int | float):
                raise ValueError("a bad creation time")
            out.append(
                NamedToken(
                    name=check_name(row["name"]),
                    scope=scope,
                    sha256=digest,
                    created=float(created),
                    rpm=_check_limit("rpm", row.get("rpm")),
                    concurrent=_check_limit("concurrent", row.get("concurrent")),
                )
            )
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"the tokens file {path} cannot be read: {exc}") from None
    if len({t.name for t in out}) != len(out):
        raise TokenFileError(f"the tokens file {path} names a token twice")
    return out


def load(home: Path | None = None) -> list[NamedToken]:
    """The named tokens (none when there is no file)."""
    path = tokens_path(home)
    got = read_private(path, "tokens file")
    return [] if got is None else _parse(got[0], path)


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Hold the tokens file's lock (a sidecar file) so two ``token add`` never lose one."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = home / ".tokens.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: no lock between processes
            pass
        yield
    finally:
        os.close(fd)


def _write(home: Path, tokens: list[NamedToken]) -> None:
    """Replace the tokens file atomically (a private temporary file renamed into place)."""
    path = tokens_path(home)
    if path.is_symlink():
        raise TokenFileError(f"the tokens file {path} is a symbolic link; refused")
    doc = {
        "version": 1,
        "tokens": [{**t.public(), "sha256": t.sha256} for t in tokens],
    }
    fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=home)  # mode 0600
    try:
        if os.name == "posix":
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def add(
    name: str,
    scope: str,
    *,
    rpm: int | None = None,
    concurrent: int | None = None,
    home: Path | None = None,
) -> tuple[NamedToken, str]:
    """Make a token ``name``: the stored record and the token (shown once, never kept)."""
    check_name(name)
    if scope not in SCOPES:
        raise InvalidRequest(f"scope must be read or write, not {scope!a}", field="scope")
    rpm = _check_limit("rpm", rpm)
    concurrent = _check_limit("concurrent", concurrent)
    home = home or home_dir()
    with _locked(home):
        tokens = load(home)
        if any(t.name == name for t in tokens):
            raise InvalidRequest(
                f"a token named '{name}' exists; revoke it first to replace it", field="name"
            )
        if len(tokens) >= MAX_TOKENS:
            raise InvalidRequest(f"there are {MAX_TOKENS} tokens already", field="name")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        record = NamedToken(
            name=name,
            scope=scope,  # type: ignore[arg-type]
            sha256=hash_token(token),
            created=round(time.time(), 3),
            rpm=rpm,
            concurrent=concurrent,
        )
        _write(home, [*tokens, record])
    return record, token


def revoke(name: str, *, home: Path | None = None) -> bool:
    """Delete token ``name``; False if there was none of that name."""
    check_name(name)
    home = home or home_dir()
    with _locked(home):
        tokens = load(home)
        kept = [t for t in tokens if t.name != name]
        if len(kept) == len(tokens):
            return False
        _write(home, kept)
    return True


def match(tokens: list[NamedToken], presented: str) -> NamedToken | None:
    """The token ``presented`` is, compared in constant time with every stored hash."""
    digest = hash_token(presented).encode("ascii")
    found: NamedToken | None = None
    for t in tokens:
        if hmac.compare_digest(digest, t.sha256.encode("ascii")):
            found = t  # no early exit: the time does not say which one matched
    return found


class TokenBook:
    """The named tokens of a running server, reread when the file changes (a cheap ``stat``
    per lookup), so that a revoked token is refused at once and a new one accepted."""

    def __init__(self, home: Path | None = None) -> None:
        self.path = tokens_path(home)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int, int] | None = None
        self._tokens: list[NamedToken] = []
        self.problem: str | None = None
        """Why the file was last refused (then no named token is accepted)."""

    def current(self) -> list[NamedToken]:
        try:
            st = os.lstat(self.path)
            seen: tuple[int, int, int, int] | None = (
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_mode,
            )
        except FileNotFoundError:
            seen = None
        except OSError as exc:
            self.problem = str(exc)
            return []
        with self._lock:
            if seen == self._seen and seen is not None:
                return self._tokens
            try:
                self._tokens = load(self.path.parent) if seen is not None else []
                self.problem = None
            except TokenFileError as exc:  # refused, never trusted: no named token works
                self._tokens, self.problem = [], str(exc)
            self._seen = seen
            return self._tokens

    def lookup(self, presented: str) -> NamedToken | None:
        return match(self.current(), presented)


@dataclass
class _Usage:
    tokens: float
    stamp: float
    in_flight: int = 0


class Limiter:
    """Requests per minute (a token bucket of ``rpm``, refilled evenly over a minute) and
    requests in flight, per token name.  :meth:`acquire` never waits: it admits a request or
    says after how many seconds to retry."""

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._usage: dict[str, _Usage] = {}

    def acquire(self, token: NamedToken) -> tuple[str, int] | None:
        """None when admitted (then :meth:`release` once it ends); else the limit that refused
        it (``rpm`` or ``concurrent``) and the whole seconds to wait before retrying."""
        now = self._clock()
        with self._lock:
            u = self._usage.get(token.name)
            if u is None:
                u = self._usage[token.name] = _Usage(float(token.rpm or 0), now)
            if token.concurrent is not None and u.in_flight >= token.concurrent:
                return "concurrent", 1
            if token.rpm is not None:
                rate = token.rpm / 60.0
                u.tokens = min(float(token.rpm), u.tokens + (now - u.stamp) * rate)
                u.stamp = now
                if u.tokens < 1.0:
                    wait = (1.0 - u.tokens) / rate
                    return "rpm", max(1, int(wait) + (0 if wait == int(wait) else 1))
                u.tokens -= 1.0
            u.in_flight += 1
            return None

    def release(self, token: NamedToken) -> None:
        with self._lock:
            u = self._usage.get(token.name)
            if u is not None and u.in_flight > 0:
                u.in_flight -= 1
