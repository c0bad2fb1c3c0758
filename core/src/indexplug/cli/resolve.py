"""From command-line flags (or a config file) to a guarded backend and an index name.

Both paths end in the same :class:`Target`, so every command behaves the same whether an index
is described by ``--backend/--option/--embedder`` or by a table in ``indexplug.toml``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from indexplug.names import validate_index_name
from indexplug.targets import Target

DEFAULT_BACKEND = "sqlite-fts5"


def parse_options(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values that parse as JSON (numbers, booleans, lists) are typed, any
    other value (JSON nested too deep or an integer too long to read included) stays text, for
    the backend to take or refuse naming the key."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option takes KEY=VALUE, got {pair!r}")
        try:
            options[key.strip()] = json.loads(value)
        except (ValueError, RecursionError):
            options[key.strip()] = value
    return options


def resolve_target(
    index: str,
    *,
    backend: str | None = None,
    options: Iterable[str] | None = None,
    embedder: str | None = None,
    config: Path | None = None,
) -> Target:
    """Flags win over nothing; a config file (explicit or discovered) describes named indexes."""
    from indexplug.config import find_config_file, load_config

    path = find_config_file(config)
    if path is not None:
        cfg = load_config(path)
        if index in cfg.indexes or cfg.defaults.backend:
            if backend or options or embedder:
                extra = parse_options(options)
                if embedder:
                    extra["embedder"] = embedder
                return cfg.target(index, backend=backend, extra_options=extra)
            return cfg.target(index)
    from indexplug.plugins import get_registry

    validate_index_name(index)
    name = backend or DEFAULT_BACKEND
    opts = parse_options(options)
    if embedder:
        opts["embedder"] = embedder
    guard = get_registry().backend(name, opts)
    return Target(index=index, backend_name=name, guard=guard, options=opts)
