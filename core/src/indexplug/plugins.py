"""Discovery: a pluggy plugin manager over the entry point group ``indexplug``.

Discovery never crashes.  A plugin that fails to import, a hook that raises, or two plugins
claiming one backend name are recorded as :class:`PluginProblem` and shown by
``indexplug backends``; every other plugin keeps working.

Environment:

* ``INDEXPLUG_PLUGINS``: a comma-separated list of entry point names; only those load (for
  reproducible deployments and tests).  Unset means all.
* ``INDEXPLUG_TRACE``: when set, every hook call and its result is written to stderr.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import pluggy
from pydantic import BaseModel

from indexplug import hookspecs
from indexplug.errors import InvalidOption, UnknownBackend, UnknownEmbedder
from indexplug.guard import Guard
from indexplug.home import backend_home
from indexplug.outcomes import ScoreScale
from indexplug.protocols import (
    BackendContext,
    BackendSpec,
    Capabilities,
    Embedder,
    EmbedderSpec,
    Readiness,
)

GROUP = "indexplug"

S = TypeVar("S", BackendSpec, EmbedderSpec)


@dataclass(frozen=True)
class PluginProblem:
    plugin: str
    problem: str


class BackendInfo(BaseModel):
    """One row of ``indexplug backends``."""

    name: str
    plugin: str
    description: str
    ready: bool
    reason: str | None = None
    capabilities: Capabilities | None = None
    score_scale: ScoreScale | None = None


class EmbedderInfo(BaseModel):
    provider: str
    plugin: str
    description: str


class Registry:
    """The plugin manager plus what the plugins registered.

    ``Registry()`` loads entry points; ``Registry(load_entrypoints=False)`` starts empty for
    tests and applications that register plugins themselves with :meth:`register`.
    """

    def __init__(self, *, load_entrypoints: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.problems: list[PluginProblem] = []
        self._trace = bool(os.environ.get("INDEXPLUG_TRACE"))
        self._backends: dict[str, tuple[str, BackendSpec]] | None = None
        self._embedders: dict[str, tuple[str, EmbedderSpec]] | None = None
        self._embedder_cache: dict[str, Embedder] = {}
        self._lock = threading.RLock()
        if load_entrypoints:
            self._load_entrypoints()

    # -- loading -------------------------------------------------------------------------
    def _load_entrypoints(self) -> None:
        only = os.environ.get("INDEXPLUG_PLUGINS")
        allowed = {n.strip() for n in only.split(",") if n.strip()} if only else None
        for ep in entry_points(group=GROUP):
            if allowed is not None and ep.name not in allowed:
                continue
            if self.pm.has_plugin(ep.name):
                self.problems.append(
                    PluginProblem(
                        ep.name, f"two entry points are named '{ep.name}'; kept the first"
                    )
                )
                continue
            try:
                plugin = ep.load()
                self.pm.register(plugin, name=ep.name)
            except Exception as exc:
                self.problems.append(
                    PluginProblem(
                        ep.name, f"failed to load ({ep.value}): {type(exc).__name__}: {exc}"
                    )
                )

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin object or module programmatically."""
        with self._lock:
            self.pm.register(plugin, name=name)
            self._backends = None
            self._embedders = None

    def _collect(self, hook: str) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for impl in getattr(self.pm.hook, hook).get_hookimpls():
            name = impl.plugin_name
            try:
                result = impl.function()
            except Exception as exc:
                self.problems.append(PluginProblem(name, f"hook {hook} raised {exc!r}"))
                continue
            if self._trace:
                print(f"[indexplug trace] {hook} from '{name}' -> {result!r}", file=sys.stderr)
            for item in result or []:
                out.append((name, item))
        return out

    def _backend_table(self) -> dict[str, tuple[str, BackendSpec]]:
        with self._lock:
            if self._backends is None:
                self._backends = self._table(
                    "indexplug_backends", BackendSpec, lambda s: s.name, "backend name"
                )
            return self._backends

    def _embedder_table(self) -> dict[str, tuple[str, EmbedderSpec]]:
        with self._lock:
            if self._embedders is None:
                self._embedders = self._table(
                    "indexplug_embedders", EmbedderSpec, lambda s: s.provider, "embedder provider"
                )
            return self._embedders

    def _table(
        self, hook: str, kind: type[S], key: Callable[[S], str], what: str
    ) -> dict[str, tuple[str, S]]:
        """What the plugins answered to ``hook``, by ``key``: an answer of the wrong type, or
        a key a plugin loaded earlier already took, is a problem reported, never a crash."""
        table: dict[str, tuple[str, S]] = {}
        for plugin, spec in self._collect(hook):
            if not isinstance(spec, kind):
                self.problems.append(
                    PluginProblem(plugin, f"returned {type(spec).__name__}, not {kind.__name__}")
                )
                continue
            name = key(spec)
            if name in table:
                self.problems.append(
                    PluginProblem(
                        plugin,
                        f"{what} '{name}' is already provided by plugin '{table[name][0]}'; "
                        "this one is ignored",
                    )
                )
            else:
                table[name] = (plugin, spec)
        return table

    # -- lookups -------------------------------------------------------------------------
    def backend_names(self) -> list[str]:
        return sorted(self._backend_table())

    def embedder_providers(self) -> list[str]:
        return sorted(self._embedder_table())

    def embedder(self, spec: str, options: Mapping[str, Any] | None = None) -> Embedder:
        """The embedder for ``PROVIDER:MODEL`` (one instance per spec, reused)."""
        if not isinstance(spec, str) or ":" not in spec:
            raise UnknownEmbedder(f"an embedder spec is 'PROVIDER:MODEL', got {spec!r}")
        provider, model = spec.split(":", 1)
        table = self._embedder_table()
        if provider not in table:
            known = ", ".join(sorted(table)) or "none"
            raise UnknownEmbedder(f"no embedder provider '{provider}' (installed: {known})")
        with self._lock:
            if spec not in self._embedder_cache or options:
                emb = _made(
                    f"embedder '{provider}'",
                    options,
                    lambda: table[provider][1].factory(model, dict(options or {})),
                )
                if options:
                    return emb
                self._embedder_cache[spec] = emb
            return self._embedder_cache[spec]

    def backend(
        self,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        home: Path | None = None,
        embedder: Embedder | None = None,
    ) -> Guard:
        """A guarded backend instance.  ``options`` are the backend's settings.

        ``embedder``: an embedder object the caller made (an adapter wrapping its framework's
        model), used instead of one built from a spec: the backend's embedder factory answers
        every spec with this object, so whatever embedder its settings name is replaced by it
        (and a backend that records its embedder's name records this one's).  The settings are
        passed on unchanged, so a backend that does not embed is opened as usual and never
        calls it.  The guard keeps it as :attr:`Guard.embedder`.
        """
        table = self._backend_table()
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise UnknownBackend(f"no backend named '{name}' is installed (installed: {known})")
        plugin, spec = table[name]
        settings = dict(options or {})
        factory: Callable[[str], Embedder] = self.embedder
        if embedder is not None:
            # not isinstance(embedder, Embedder): that reads ``dim``, which may embed a probe
            if not all(
                callable(getattr(embedder, m, None)) for m in ("embed_documents", "embed_query")
            ):
                raise TypeError(
                    f"embedder must be an indexplug Embedder, not {type(embedder).__name__}"
                )
            given = embedder

            def factory(spec: str) -> Embedder:
                return given

        ctx = BackendContext(
            home=home or backend_home(name), options=settings, embedder_factory=factory
        )
        guard = Guard(_made(f"backend '{name}'", options, lambda: spec.factory(ctx)), plugin=plugin)
        guard.embedder = embedder
        return guard

    def describe_backends(self) -> list[BackendInfo]:
        """Each backend with readiness, reason, capabilities and scale (for ``backends``)."""
        rows: list[BackendInfo] = []
        for name, (plugin, spec) in sorted(self._backend_table().items()):
            try:
                guard = self.backend(name)
            except Exception as exc:
                rows.append(
                    BackendInfo(
                        name=name,
                        plugin=plugin,
                        description=spec.description,
                        ready=False,
                        reason=f"could not be created: {type(exc).__name__}: {exc}",
                    )
                )
                continue
            r: Readiness = guard.readiness()
            rows.append(
                BackendInfo(
                    name=name,
                    plugin=plugin,
                    description=spec.description or getattr(guard.backend, "description", ""),
                    ready=r.ready,
                    reason=r.reason,
                    capabilities=guard.capabilities,
                    score_scale=guard.score_scale,
                )
            )
            guard.close()
        return rows

    def describe_embedders(self) -> list[EmbedderInfo]:
        return [
            EmbedderInfo(provider=p, plugin=plugin, description=spec.description)
            for p, (plugin, spec) in sorted(self._embedder_table().items())
        ]


_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '([^']*)'")

T = TypeVar("T")


def _made(owner: str, options: Mapping[str, Any] | None, make: Callable[[], T]) -> T:
    """``make()``, with a factory's refusal of its settings turned into :class:`InvalidOption`.

    A factory should raise :class:`InvalidOption` itself.  Many raise ``TypeError`` (an
    unknown keyword passed on with ``**options``) or ``ValueError`` (a bad value) instead;
    when settings were given, those are taken as the factory refusing them, so the caller is
    told which setting is wrong (``BAD_REQUEST`` / a usage exit) rather than seeing a
    traceback.  Without settings such an error is the plugin's own and is left as it is.
    """
    try:
        return make()
    except InvalidOption:
        raise
    except (TypeError, ValueError) as exc:
        if not options:
            raise
        raise _option_error(owner, options, exc) from None


def _option_error(owner: str, options: Mapping[str, Any], exc: Exception) -> InvalidOption:
    """The :class:`InvalidOption` a factory's ``TypeError``/``ValueError`` stands for: the
    option it names (an unexpected keyword, else the first given key the message mentions,
    else the only key given)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    keys = [str(k) for k in options]
    found = _UNEXPECTED_KEYWORD.search(text)
    if found is not None and found.group(1) in keys:
        option: str | None = found.group(1)
        message = f"{owner} has no setting {option!r}"
    else:
        named = [k for k in keys if k and re.search(rf"(?<![\w]){re.escape(k)}(?![\w])", text)]
        # the one it mentions, else the only one given: either way the one refused
        option = named[0] if named else keys[0] if len(keys) == 1 else None
        message = f"{owner} refused its settings: {text}"
    return InvalidOption(option, message)


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loading entry points on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
        return _default


def reset_registry() -> None:
    """Forget the process-wide registry (tests that change ``INDEXPLUG_PLUGINS``)."""
    global _default
    with _default_lock:
        _default = None


def open_backend(
    name: str, options: Mapping[str, Any] | None = None, *, embedder: Embedder | None = None
) -> Guard:
    """A guarded instance of an installed backend: ``open_backend("sqlite-fts5")``.

    ``embedder``: an :class:`~indexplug.protocols.Embedder` object for a backend that embeds
    (for example :class:`indexplug.embedders.wrapped.FunctionEmbedder` around a framework's
    model) instead of the one its ``embedder`` option names; see :meth:`Registry.backend`."""
    return get_registry().backend(name, options, embedder=embedder)


def get_embedder(spec: str) -> Embedder:
    return get_registry().embedder(spec)
