"""The backend's settings, validated once when the backend is made.

Settings arrive as ``--option KEY=VALUE`` pairs or a table in ``indexplug.toml``, so they are
validated here with messages that name the key, instead of failing later on the first request.

Credentials are never settings: a configuration file is copied, committed and printed, so it
only *names* the environment variables that hold them (``api_key_env``, ``username_env``,
``password_env``).  Passing a secret itself (``api_key``, ``password``...) is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from indexplug.errors import InvalidOption
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Mode = Literal["bm25", "knn", "hybrid"]
Analysis = Literal["auto", "server", "client"]

DEFAULT_HOSTS = ("http://localhost:9200",)
_SECRETS = {"api_key", "apikey", "password", "username", "basic_auth", "token", "bearer_auth"}
_PREFIX = re.compile(r"[a-z0-9][a-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ElasticOptions(BaseModel):
    """Every setting of the ``elastic`` backend (see ``docs/backends/elastic.md``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hosts: tuple[str, ...] = DEFAULT_HOSTS
    """Node URLs; the client spreads requests over them and fails over between them."""
    api_key_env: str | None = None
    """Name of the environment variable holding an API key (``id:key`` or its base64)."""
    username_env: str | None = None
    password_env: str | None = None
    verify_certs: bool = True
    """TLS certificate verification; on unless explicitly turned off."""
    ca_certs: str | None = None
    request_timeout: float = Field(default=30.0, gt=0)
    """Upper bound of one HTTP request in seconds (an op's deadline lowers it further)."""
    ready_timeout: float = Field(default=2.0, gt=0)
    """Bound of the readiness check, which the guard runs before ops outside their deadline."""
    prefix: str = "indexplug-"
    embedder: str | None = None
    mode: Mode | None = None
    """``bm25``, ``knn`` or ``hybrid``; default ``hybrid`` with an embedder, else ``bm25``."""
    embed_cache: bool = True
    """Reuse vectors already computed for a passage id by the same embedder (indexplug's shared
    embedding cache): re-indexing a corpus then costs only the writes."""
    shards: int = Field(default=1, ge=1, le=1024)
    replicas: int | None = Field(default=None, ge=0, le=16)
    """Replica count; default: 0-1 auto-expanded (green on one node, one copy on more)."""
    analyzer: str = "english"
    analysis: Analysis = "auto"
    """Where ``analyzer`` runs: ``server``, ``client`` (English only) or ``auto`` (server when
    the server knows the analyzer, else client)."""
    bulk_docs: int = Field(default=250, ge=1, le=10_000)
    bulk_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    progress: bool | None = None
    """Progress bar on stderr for large adds; default: when stderr is a terminal."""
    rank_window: int = Field(default=100, ge=1, le=10_000)
    """Candidates per leg for kNN and hybrid (RRF) searches."""
    rrf_k: int = Field(default=60, ge=1)
    count_ttl_s: float = Field(default=1.0, ge=0)
    """How long a search reuses the passage count it reports (``searched``) instead of counting
    again beside its ranked search; every write of this process forgets it (0: count on every
    search).  A search that finds nothing always counts afresh (see ``indexplug.counts``)."""

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            secret = sorted(k for k in data if str(k).lower() in _SECRETS)
            if secret:
                raise ValueError(
                    f"option(s) {', '.join(secret)} would store a credential in the "
                    "configuration; put it in an environment variable and name that variable "
                    "with api_key_env, or username_env and password_env"
                )
        return data

    @field_validator("hosts", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [h for h in (part.strip() for part in value.split(",")) if h]
        if not value:
            raise ValueError("hosts needs at least one URL")
        for host in value:
            if not isinstance(host, str) or not re.match(r"https?://[^/\s]+", host):
                raise ValueError(f"hosts must be http:// or https:// URLs, got {host!r}")
        return tuple(value)

    @field_validator("api_key_env", "username_env", "password_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        # Elasticsearch index names: lower case, no path or wildcard characters, and never a
        # leading '-', '_' or '+' (index names themselves start with a letter or digit).
        if value and not _PREFIX.fullmatch(value):
            raise ValueError(
                f"prefix {value!r} must be lower-case letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        if len(value) > 150:
            raise ValueError("prefix is longer than 150 characters")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> ElasticOptions:
        if (self.username_env is None) != (self.password_env is None):
            raise ValueError("username_env and password_env go together")
        if self.api_key_env and self.username_env:
            raise ValueError("give api_key_env or username_env/password_env, not both")
        if self.mode in ("knn", "hybrid") and not self.embedder:
            raise ValueError(f"mode={self.mode!r} needs an embedder (option embedder)")
        if self.analysis == "client" and self.analyzer != "english":
            raise ValueError("analysis='client' implements only analyzer='english'")
        return self

    @property
    def search_mode(self) -> Mode:
        if self.mode is not None:
            return self.mode
        return "hybrid" if self.embedder else "bm25"


def parse_options(options: Mapping[str, Any]) -> ElasticOptions:
    """Validate raw settings; an :class:`InvalidOption` (a ``ValueError``) names every bad key,
    and its ``option`` is the first of them (``None`` when the problem is a combination)."""
    try:
        return ElasticOptions.model_validate(dict(options))
    except ValidationError as exc:
        problems = []
        first: str | None = None
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "options"
            if err["loc"] and first is None:
                first = str(err["loc"][0])
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown option"
            problems.append(f"{where}: {msg}")
        raise InvalidOption(first, "invalid elastic option(s): " + "; ".join(problems)) from None
