"""Config-file deployments: ``indexplug.toml``.

A deployment names each index with its backend and settings, so switching an index from
sqlite-fts5 to elastic is a one-line edit.  The file is found by ``--config``, then
``INDEXPLUG_CONFIG``, then ``./indexplug.toml``, then the user config folder.  It is parsed with
the standard library's ``tomllib`` and validated with pydantic *before anything runs*; every
problem is reported with the file, the table and the key.

Secrets never live in the file: a setting whose name ends in ``_env`` names an environment
variable the backend reads (``api_key_env = "ES_API_KEY"``), and ``config show`` masks anything
that looks like a secret.

Example::

    [defaults]
    backend = "sqlite-fts5"
    deadline_s = 10

    [indexes.docs]
    backend = "sqlite-fts5"
    max_bytes = 500_000_000

    [indexes.papers]
    backend = "elastic"
    embedder = "sentence-transformers:all-MiniLM-L6-v2"
    allow_remove = true
    settings = { hosts = ["http://127.0.0.1:9200"], api_key_env = "ES_API_KEY" }

    [indexes.both]
    kind = "fusion"
    members = ["docs", "papers"]
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from indexplug.errors import ConfigError
from indexplug.names import validate_index_name

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from indexplug.fusion import FusionMethod
    from indexplug.protocols import Embedder
    from indexplug.targets import Target

SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "credential")

DEFAULT_RRF_K = 60
"""Reciprocal rank fusion's k when a fusion index names none.  The same value as
:data:`indexplug.fusion.DEFAULT_RRF_K` (a test holds them equal): it is written here too so that
the configuration, which sits above fusion, states its default without importing fusion's
modules at start."""


class Defaults(BaseModel):
    """Applied to every index that does not say otherwise."""

    model_config = ConfigDict(extra="forbid")

    backend: str | None = Field(default=None, description="Backend for indexes that name none.")
    deadline_s: float | None = Field(default=None, gt=0, description="Seconds an op may take.")
    max_bytes: int | None = Field(default=None, gt=0, description="Storage budget per index.")
    allow_remove: bool = Field(
        default=False,
        description="Allow the ops that delete or replace passages (remove, drop, import, copy, "
        "and index_folder's rebuild) through invoke and MCP; implies allow_upsert.",
    )
    allow_upsert: bool = Field(
        default=False,
        description="Allow add with a caller key (an upsert: it replaces the passages the key "
        "had) through invoke and MCP.",
    )
    embedder: str | None = Field(default=None, description="Embedder spec PROVIDER:MODEL.")
    folders: list[str] = Field(
        default_factory=list,
        description="Folders the index_folder op (invoke, MCP) may read, with their subfolders; "
        "relative to this file.  None configured: the working folder.",
    )
    history: Literal["off", "hashed", "full"] = Field(
        default="off",
        description="Search history of indexes that name none: off, hashed (the query's salted "
        "hash, not its text) or full (see docs/history.md).",
    )


class IndexConfig(BaseModel):
    """One ``[indexes.NAME]`` table."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["index", "fusion"] = Field(default="index")
    backend: str | None = Field(
        default=None, description="Backend name (see `indexplug backends`)."
    )
    engine: str | None = Field(default=None, description="Engine, for backends with several.")
    embedder: str | None = Field(default=None, description="Embedder spec PROVIDER:MODEL.")
    max_bytes: int | None = Field(default=None, gt=0, description="Storage budget (first write).")
    deadline_s: float | None = Field(default=None, gt=0)
    allow_remove: bool | None = Field(default=None, description="Overrides defaults.allow_remove.")
    allow_upsert: bool | None = Field(default=None, description="Overrides defaults.allow_upsert.")
    settings: dict[str, Any] = Field(default_factory=dict, description="Backend settings.")
    members: list[str] = Field(
        default_factory=list,
        validate_default=True,
        description="Member indexes (fusion only).",
    )
    fusion: Literal["rrf", "sum"] = Field(
        default="rrf", description="rrf, or sum (only when every leg has the same scale)."
    )
    rrf_k: int = Field(default=DEFAULT_RRF_K, gt=0)
    history: Literal["off", "hashed", "full"] | None = Field(
        default=None, description="Search history of this index; overrides defaults.history."
    )

    # Field validators (not one model validator) so an error names the key it is about.
    @field_validator("backend", "settings")
    @classmethod
    def _no_backend_on_fusion(cls, value: Any, info: ValidationInfo) -> Any:
        if info.data.get("kind") == "fusion" and value:
            raise ValueError("a fusion index has members, not a backend or settings")
        return value

    @field_validator("members")
    @classmethod
    def _members_fit(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("kind") == "fusion":
            if len(value) < 2:
                raise ValueError("a fusion index needs at least two members")
        elif value:
            raise ValueError("members are only for kind = 'fusion'")
        return value


class ServerSettings(BaseModel):
    """The ``[server]`` table: ``indexplug serve --http``."""

    model_config = ConfigDict(extra="forbid")

    token_env: str | None = Field(
        default=None,
        min_length=1,
        description="Environment variable holding the bearer token `serve --http` requires "
        "(default: INDEXPLUG_TOKEN, else a token made once and kept in INDEXPLUG_HOME).",
    )
    token: Any = Field(
        default=None, exclude=True, description="Refused: the token is never written in the file."
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a connection has to send its request's headers before it is "
        "closed (from opening it, or from the first byte of a later request).",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a request has to send its body once its headers are in.",
    )
    idle_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="Seconds a connection may stay idle between requests before it is closed.",
    )
    max_connections: int | None = Field(
        default=None,
        ge=1,
        description="Most connections open at once; a new one over the cap closes the oldest "
        "connection whose request is incomplete (default: the soft open-file limit less a "
        "quarter of it, and at least 64 less).",
    )

    @field_validator("token")
    @classmethod
    def _no_literal_token(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "secrets are never written in the file; name an environment variable instead "
                '(token_env = "VARIABLE")'
            )
        return value


class AuditSettings(BaseModel):
    """The ``[audit]`` table: the tamper-evident log of every change (docs/security.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="auto: on for `serve --http` and for indexes that allow remove; on: for "
        "every change; off: never.",
    )
    max_ids: int = Field(
        default=1000,
        ge=0,
        le=100_000,
        description="Ids (or keys) one record lists; above it the record keeps their count.",
    )


class HistorySettings(BaseModel):
    """The ``[history]`` table: where and for how long search history is kept."""

    model_config = ConfigDict(extra="forbid")

    max_rows: int = Field(default=100_000, ge=1, description="Records kept; the oldest go first.")
    max_age_days: float = Field(
        default=30, gt=0, description="Records older than this many days are deleted."
    )
    queue: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Records waiting for the writer; past it a record is dropped (and counted) "
        "rather than a search waiting for the disk.",
    )


class Config(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    defaults: Defaults = Field(default_factory=Defaults)
    indexes: dict[str, IndexConfig] = Field(default_factory=dict)
    server: ServerSettings = Field(default_factory=ServerSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    history: HistorySettings = Field(default_factory=HistorySettings)
    path: Path | None = Field(default=None, exclude=True)

    def index(self, name: str) -> IndexConfig:
        validate_index_name(name)
        if name in self.indexes:
            return self.indexes[name]
        if self.defaults.backend:
            return IndexConfig(backend=self.defaults.backend)
        known = ", ".join(sorted(self.indexes)) or "none"
        raise ConfigError(f"{self.path}: no index '{name}' is configured (configured: {known})")

    def backend_options(self, name: str) -> tuple[str, dict[str, Any]]:
        ic = self.index(name)
        backend = ic.backend or self.defaults.backend or "sqlite-fts5"
        options = dict(ic.settings)
        if ic.engine:
            options["engine"] = ic.engine
        embedder = ic.embedder or self.defaults.embedder
        if embedder:
            options["embedder"] = embedder
        return backend, options

    def history_mode(self, name: str) -> Literal["off", "hashed", "full"]:
        """The search history mode of index ``name`` (its own, else the default)."""
        ic = self.indexes.get(name)
        if ic is not None and ic.history is not None:
            return ic.history
        return self.defaults.history

    def allows_remove(self, name: str) -> bool:
        ic = self.indexes.get(name)
        if ic is not None and ic.allow_remove is not None:
            return ic.allow_remove
        return self.defaults.allow_remove

    def allows_upsert(self, name: str) -> bool:
        """Whether a keyed add (which replaces the key's passages) may run on ``name``: where
        remove may, or where ``allow_upsert`` says so (per index, else ``[defaults]``)."""
        if self.allows_remove(name):
            return True
        ic = self.indexes.get(name)
        if ic is not None and ic.allow_upsert is not None:
            return ic.allow_upsert
        return self.defaults.allow_upsert

    def target(
        self,
        name: str,
        *,
        backend: str | None = None,
        extra_options: dict[str, Any] | None = None,
        embedder: Embedder | None = None,
    ) -> Target:
        from indexplug.plugins import get_registry
        from indexplug.targets import Target

        ic = self.index(name)
        if ic.kind == "fusion":
            return fusion_target(self, name)
        be, options = self.backend_options(name)
        options.update(extra_options or {})
        be = backend or be
        guard = get_registry().backend(be, options, embedder=embedder)
        return Target(
            index=name,
            backend_name=be,
            guard=guard,
            options=options,
            max_bytes=ic.max_bytes or self.defaults.max_bytes,
        )

    def masked(self) -> dict[str, Any]:
        """The effective configuration (defaults applied to each index) with anything
        secret-looking masked."""
        data = self.model_dump(mode="json", exclude_none=True)
        d = self.defaults
        for name, ic in data.get("indexes", {}).items():
            model = self.indexes[name]
            if model.kind == "index":
                ic.setdefault("backend", d.backend or "sqlite-fts5")
                for key in ("embedder", "max_bytes", "deadline_s"):
                    if ic.get(key) is None and getattr(d, key) is not None:
                        ic[key] = getattr(d, key)
                ic.pop("members", None)
                ic.pop("fusion", None)
                ic.pop("rrf_k", None)
            else:
                ic.pop("settings", None)
                if ic.get("deadline_s") is None and d.deadline_s is not None:
                    ic["deadline_s"] = d.deadline_s
            ic["allow_remove"] = self.allows_remove(name)
            ic["allow_upsert"] = self.allows_upsert(name)
            if "settings" in ic:
                ic["settings"] = _mask(ic["settings"])
        if self.path is not None:
            data["path"] = str(self.path)
        return data


def _mask(value: Any, key: str = "") -> Any:
    """Mask secret-looking values (recursively); the *name* of a variable is not a secret."""
    if isinstance(value, dict):
        return {k: _mask(v, str(k)) for k, v in value.items()}
    low = key.lower()
    if low.endswith("_env"):
        return value
    if any(w in low for w in SECRET_WORDS):
        return "****"
    if isinstance(value, list):
        return [_mask(v, key) for v in value]
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\1****@", value)
    return value


_URL_PASSWORD = re.compile(r"(://[^/@:\s]+:)[^/@\s]+@")


_LITERAL_SECRET_WORDS = ("password", "passwd", "secret", "api_key", "apikey", "credential")


def _secret_keys(settings: dict[str, Any], prefix: str = "") -> list[str]:
    """Settings keys that look like a secret written into the file (not ``*_env``)."""
    found: list[str] = []
    for key, value in settings.items():
        low = str(key).lower()
        if isinstance(value, dict):
            found += _secret_keys(value, f"{prefix}{key}.")
        elif not low.endswith("_env") and (
            any(w in low for w in _LITERAL_SECRET_WORDS) or low == "token" or low.endswith("_token")
        ):
            found.append(f"{prefix}{key}")
    return found


def find_config_file(explicit: Path | None = None) -> Path | None:
    """``--config``, then ``INDEXPLUG_CONFIG``, then ``./indexplug.toml``, then the user folder."""
    if explicit is not None:
        if not Path(explicit).is_file():
            raise ConfigError(f"config file {explicit} does not exist")
        return Path(explicit)
    env = os.environ.get("INDEXPLUG_CONFIG")
    if env:
        if not Path(env).is_file():
            raise ConfigError(f"INDEXPLUG_CONFIG names {env}, which does not exist")
        return Path(env)
    for candidate in (
        Path.cwd() / "indexplug.toml",
        Path(platformdirs.user_config_dir("indexplug")) / "indexplug.toml",
    ):
        if candidate.is_file():
            return candidate
    return None


def open_index(
    name: str,
    config: str | os.PathLike[str] | None = None,
    *,
    embedder: Embedder | None = None,
) -> Target:
    """The guarded backend of index ``name`` as an ``indexplug.toml`` describes it (``config``,
    else the file the CLI finds: see :func:`find_config_file`), with its settings and
    ``max_bytes``: what a library built on indexplug (an adapter) opens by index name.
    ``embedder``: an embedder object to use instead of the one the file names (see
    :func:`indexplug.plugins.open_backend`)."""
    path = find_config_file(Path(config) if config is not None else None)
    if path is None:
        raise ConfigError(f"no indexplug.toml found for index {name!r} (give its path)")
    return load_config(path).target(name, embedder=embedder)


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] == "indexes":
        table = f"[indexes.{parts[1]}]"
        rest = parts[2:]
    elif parts and parts[0] in ("defaults", "server", "audit", "history"):
        table, rest = f"[{parts[0]}]", parts[1:]
    else:
        table, rest = "top level", parts
    return f"{table} key '{'.'.join(rest)}'" if rest else table


def load_config(path: Path, *, check_backends: bool = True) -> Config:
    """Parse and validate a config file; raise :class:`ConfigError` naming file, table and key."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc}") from None
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}: {_where(first['loc'])}: {msg}") from None
    cfg.path = path
    for name, ic in cfg.indexes.items():
        try:
            validate_index_name(name)
        except ValueError as exc:
            raise ConfigError(f"{path}: [indexes.{name}]: {exc}") from None
        for key in _secret_keys(ic.settings):
            raise ConfigError(
                f"{path}: [indexes.{name}] key 'settings.{key}': secrets are never written in "
                f'the file; name an environment variable instead ({key}_env = "VARIABLE")'
            )
        for m in ic.members:
            if m not in cfg.indexes:
                raise ConfigError(
                    f"{path}: [indexes.{name}] key 'members': '{m}' is not a configured index"
                )
            if cfg.indexes[m].kind == "fusion":
                raise ConfigError(f"{path}: [indexes.{name}] key 'members': '{m}' is a fusion")
    if check_backends:
        from indexplug.plugins import get_registry

        installed = set(get_registry().backend_names())
        for name, ic in cfg.indexes.items():
            if ic.kind != "index":
                continue
            be = ic.backend or cfg.defaults.backend or "sqlite-fts5"
            if be not in installed:
                raise ConfigError(
                    f"{path}: [indexes.{name}] key 'backend': '{be}' is not installed "
                    f"(installed: {', '.join(sorted(installed)) or 'none'})"
                )
            try:
                backend, options = cfg.backend_options(name)
                get_registry().backend(backend, options).close()
            except (ValueError, KeyError, TypeError, LookupError) as exc:
                raise ConfigError(f"{path}: [indexes.{name}] key 'settings': {exc}") from None
        for name, ic in cfg.indexes.items():
            if ic.kind == "fusion" and ic.fusion == "sum":
                fusion_target(cfg, name).guard.close()  # refuses legs on different scales
    return cfg


def fusion_target(
    cfg: Config, name: str, *, member: Callable[[str], Target] | None = None
) -> Target:
    """The target of a configured ``kind = "fusion"`` index (``member`` builds each leg;
    default: ``cfg.target``)."""
    from indexplug.fusion import FUSION_BACKEND, FusionBackend, Leg
    from indexplug.guard import Guard
    from indexplug.targets import Target

    ic = cfg.index(name)
    if ic.kind != "fusion":
        raise ConfigError(f"{cfg.path}: [indexes.{name}] is not a fusion index")
    build = member or cfg.target
    legs = [build(m) for m in ic.members]
    try:
        backend = FusionBackend(
            [Leg(m, t) for m, t in zip(ic.members, legs, strict=True)],
            method=ic.fusion,
            rrf_k=ic.rrf_k,
            owns_legs=member is None,
        )
    except ConfigError as exc:
        for t in legs:
            if member is None:
                t.guard.close()
        raise ConfigError(f"{cfg.path}: [indexes.{name}] key 'fusion': {exc}") from None
    return Target(
        index=name,
        backend_name=FUSION_BACKEND,
        guard=Guard(backend, plugin=FUSION_BACKEND),
        options={"members": list(ic.members), "fusion": ic.fusion, "rrf_k": ic.rrf_k},
    )


def fused_target(
    cfg: Config,
    names: Sequence[str],
    *,
    method: FusionMethod = "rrf",
    rrf_k: int = DEFAULT_RRF_K,
    member: Callable[[str], Target] | None = None,
) -> Target:
    """An ad hoc fusion of configured (or default-backend) indexes, by name.

    A name that is itself a fusion index contributes its members; duplicates count once.  One
    distinct name gives that index's own target (nothing to fuse).
    """
    from indexplug.fusion import fuse_targets

    flat: list[str] = []
    for n in names:
        validate_index_name(n)
        ic = cfg.index(n)
        for m in ic.members if ic.kind == "fusion" else [n]:
            if m not in flat:
                flat.append(m)
    build = member or cfg.target
    if len(flat) == 1:
        return build(flat[0])
    return fuse_targets(
        [build(m) for m in flat], method=method, rrf_k=rrf_k, owns_legs=member is None
    )
