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
    from indexplug.cli.resolve import Target
    from indexplug.protocols import Embedder

SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "credential")


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
    rrf_k: int = Field(default=60, gt=0)

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

    @field_validator("token")
    @classmethod
    def _no_literal_token(cls, value: Any) -> Any:
        if value is not None:
            raise ValueError(
                "secrets are never written in the file; name an environment variable instead "
                '(token_env = "VARIABLE")'
            )
        return value


class Config(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    defaults: Defaults = Field(default_factory=Defaults)
    indexes: dict[str, IndexConfig] = Field(default_factory=dict)
    server: ServerSettings = Field(default_factory=ServerSettings)
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
        from indexplug.cli.resolve import Target
        from indexplug.plugins import get_registry

        ic = self.index(name)
        if ic.kind == "fusion":
            from indexplug.fusion import fusion_target

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
    elif parts and parts[0] in ("defaults", "server"):
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
                from indexplug.fusion import fusion_target

                fusion_target(cfg, name).guard.close()  # refuses legs on different scales
    return cfg
