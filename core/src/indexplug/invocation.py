"""Ops by name, JSON in and out: ``indexplug.invoke(op, args, config=...)``.

``invoke("search", {"index": "docs", "query": "otters"})`` validates the arguments with the op's
model, runs the op against the configured index and answers one JSON object (see
:class:`indexplug.ops.Answer`).  It never raises for a bad request: malformed arguments answer
``BAD_REQUEST`` naming the field, a sensitive op the configuration does not allow answers
``NOT_ALLOWED``, and anything unexpected answers ``INDEX_FAILED`` with the error's type.
Arguments are JSON and strictly typed: text that is not JSON, ``NaN``, nesting deeper than
:data:`MAX_ARGS_DEPTH`, ``"top_k": "3"`` or ``true`` are all ``BAD_REQUEST``, never converted.

:class:`Invoker` is the long-lived form (the MCP server holds one): it keeps each index's backend
open between calls.  ``invoke()`` makes one for a single call and closes it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from indexplug.cli.resolve import Target
from indexplug.config import Config, Defaults, find_config_file, load_config
from indexplug.errors import (
    ConfigError,
    InvalidIndexName,
    InvalidRequest,
    UnknownBackend,
    UnknownEmbedder,
)
from indexplug.fusion import FUSION_BACKEND, fuse_targets, fused_target
from indexplug.ingest import IngestReport
from indexplug.names import validate_index_name
from indexplug.neighbours import chunkings, expand, record_chunking
from indexplug.ops import (
    BATCH_ANSWERED,
    OPS,
    UNTRUSTED_NOTICE,
    AddArgs,
    AddData,
    Answer,
    BackendsData,
    BatchData,
    BatchEvidence,
    BatchItem,
    BatchSearchArgs,
    ConfigEvidence,
    FolderEvidence,
    HitOut,
    IndexEvidence,
    IndexFolderArgs,
    IndexReadiness,
    OpInfo,
    OpsData,
    PackArgs,
    Problem,
    ProblemRow,
    RemoveArgs,
    RemoveData,
    SearchArgs,
    SearchData,
    SearchEvidence,
    StatusArgs,
    StatusData,
    WriteEvidence,
    _SearchCommon,
    batch_code,
)
from indexplug.outcomes import (
    EXIT_CODES,
    BadRequest,
    Indexed,
    IndexFailed,
    IndexStatus,
    IndexTimeout,
    IndexUnavailable,
    NoMatch,
    NotAllowed,
    OverBudget,
    Removed,
    Searched,
)
from indexplug.packing import pack
from indexplug.passages import Passage
from indexplug.plugins import get_registry

BATCH_WORKERS = 8
DEFAULT_FOLDER_DEADLINE_S = 120.0
MAX_ARGS_DEPTH = 32
"""Deepest nesting of arrays and objects the arguments may have (the deepest any op needs is 4:
``passages`` / a passage / its ``source`` / ``provenance``); deeper is ``BAD_REQUEST``, so no
input can exhaust the stack of the parser, the validator or anything after them."""


def exit_code(answer: Mapping[str, Any]) -> int:
    """The exit status of an answer (what ``indexplug invoke`` exits with).

    An outcome code maps through :data:`~indexplug.outcomes.EXIT_CODES`; ``LISTED`` is 0; a
    ``BATCH`` exits by its overall code (``evidence.overall``, see
    :data:`~indexplug.ops.BATCH_ORDER`); anything else is ``INDEX_FAILED``'s.
    """
    code = answer.get("code")
    if code == "LISTED":
        return 0 if answer.get("ok") else EXIT_CODES["INDEX_FAILED"]
    if code == "BATCH":
        code = (answer.get("evidence") or {}).get("overall")
    return EXIT_CODES.get(str(code), EXIT_CODES["INDEX_FAILED"])


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_args(text: str | bytes) -> Any:
    """JSON text as Python values, strictly: ``NaN`` and ``Infinity`` are refused, and so is
    anything json cannot read (too deep for its recursion, an integer too long to convert).
    Raises :class:`InvalidRequest` for ``args``."""
    if not text.strip():
        return {}
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise InvalidRequest(
            f"args nest deeper than {MAX_ARGS_DEPTH} levels", field="args"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit integer
        reason = " ".join(str(exc).split())[:300]
        raise InvalidRequest(f"args are not valid JSON: {reason}", field="args") from None


def nesting_depth(value: Any, limit: int = MAX_ARGS_DEPTH) -> int:
    """How deep ``value``'s arrays and objects nest, counted without recursion and only up to
    ``limit + 1`` (so a cyclic structure stops too)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _answer_type(op: str) -> type[Answer[Any, Any]]:
    spec = OPS.get(op)
    return spec.result if spec is not None else Answer  # type: ignore[return-value]


def refusal(op: str, outcome: BadRequest | NotAllowed) -> dict[str, Any]:
    """The answer for a refused request (its shape fits every op's result schema)."""
    problem = Problem(reason=outcome.reason, field=getattr(outcome, "field", None))
    return Answer[Any, Any](
        op=op, code=outcome.code, ok=False, message=outcome.message, problem=problem
    ).model_dump(mode="json")


def bad_request(op: str, reason: str, field: str | None = None, index: str = "") -> dict[str, Any]:
    return refusal(op, BadRequest(index=index, field=field, reason=reason))


def _field(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "args"


def _validation_reason(exc: ValidationError) -> tuple[str, str]:
    """The first problem of a failed validation as (reason, field), one line."""
    first = exc.errors()[0]
    msg = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    return f"{msg}{more}", _field(first["loc"])


def _problem_of(outcome: Any) -> Problem | None:
    if isinstance(outcome, IndexFailed):
        return Problem(reason=outcome.reason, error_type=outcome.error_type)
    if isinstance(outcome, IndexTimeout):
        return Problem(reason=outcome.reason, deadline_s=outcome.deadline_s)
    if isinstance(outcome, IndexUnavailable):
        return Problem(reason=outcome.reason)
    return None


def _failure(op: str, outcome: Any, evidence: BaseModel | None = None) -> Answer[Any, Any]:
    return _answer_type(op)(
        op=op,
        code=outcome.code,
        ok=False,
        message=outcome.message,
        evidence=evidence,
        problem=_problem_of(outcome),
    )


class Invoker:
    """Runs ops against one configuration, keeping backends open between calls."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = (
            config if config is not None else Config(defaults=Defaults(backend="sqlite-fts5"))
        )
        self._targets: dict[str, Target] = {}
        self._lock = threading.RLock()
        self._runners: dict[str, Callable[[Any], Answer[Any, Any]]] = {
            "add": self._add,
            "search": self._search,
            "batch_search": self._batch_search,
            "pack": self._pack,
            "remove": self._remove,
            "status": self._status,
            "backends": self._backends,
            "index_folder": self._index_folder,
            "ops": self._ops,
        }

    @classmethod
    def from_source(cls, config: Config | Path | str | None = None) -> Invoker:
        """An invoker for a :class:`Config`, a file, or the discovered file (or none)."""
        if isinstance(config, Config):
            return cls(config)
        path = find_config_file(Path(config) if config is not None else None)
        return cls(load_config(path) if path is not None else None)

    # -- lifecycle -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            targets, self._targets = list(self._targets.values()), {}
        for t in targets:
            t.guard.close()

    def __enter__(self) -> Invoker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- targets -------------------------------------------------------------------------
    def target(self, name: str) -> Target:
        """The (cached) target of a configured or default-backend index."""
        validate_index_name(name)
        with self._lock:
            if name in self._targets:
                return self._targets[name]
            ic = self.config.index(name)
            if ic.kind == "fusion":
                t = fuse_targets(
                    [self.target(m) for m in ic.members],
                    name=name,
                    method=ic.fusion,
                    rrf_k=ic.rrf_k,
                )
            else:
                t = self.config.target(name)
            self._targets[name] = t
            return t

    def _search_target(self, a: _SearchCommon) -> Target:
        if (a.index is None) == (a.indexes is None):
            raise InvalidRequest("give exactly one of 'index' or 'indexes'", field="index")
        if a.index is not None:
            return self.target(a.index)
        names = list(a.indexes or [])
        for i, n in enumerate(names):
            try:
                validate_index_name(n)
            except InvalidIndexName as exc:
                raise InvalidRequest(str(exc), field=f"indexes.{i}") from None
        key = f"\x00fused:{a.fusion}:{a.rrf_k}:{','.join(names)}"
        with self._lock:
            if key not in self._targets:
                self._targets[key] = fused_target(
                    self.config, names, method=a.fusion, rrf_k=a.rrf_k, member=self.target
                )
            return self._targets[key]

    def deadline_for(self, name: str, asked: float | None) -> float | None:
        if asked is not None:
            return asked
        ic = self.config.indexes.get(name)
        if ic is not None and ic.deadline_s is not None:
            return ic.deadline_s
        return self.config.defaults.deadline_s

    def allows_remove(self, name: str) -> bool:
        ic = self.config.indexes.get(name)
        if not self.config.allows_remove(name):
            return False
        if ic is not None and ic.kind == "fusion":
            return all(self.config.allows_remove(m) for m in ic.members)
        return True

    def allows(self, op: str) -> bool:
        """Whether ``op`` may run for at least one index (what the MCP server lists)."""
        spec = OPS[op]
        if not spec.sensitive:
            return True
        return self.config.defaults.allow_remove or any(
            self.allows_remove(n) for n in self.config.indexes
        )

    # -- the entry point -----------------------------------------------------------------
    def invoke(
        self, op: str, args: Mapping[str, Any] | str | bytes | None = None
    ) -> dict[str, Any]:
        """Run ``op`` with ``args`` (a mapping or JSON text); answer a JSON-ready dict."""
        if not isinstance(op, str) or op not in OPS:
            known = ", ".join(OPS)
            return bad_request(str(op), f"no op named {op!r} (ops: {known})", field="op")
        if isinstance(args, str | bytes):
            try:
                args = parse_args(args)
            except InvalidRequest as exc:
                return bad_request(op, str(exc), field=exc.field)
        if args is None:
            args = {}
        if not isinstance(args, Mapping):
            return bad_request(op, f"args must be a JSON object, not {type(args).__name__}", "args")
        spec = OPS[op]
        try:
            if nesting_depth(args) > MAX_ARGS_DEPTH:
                return bad_request(op, f"args nest deeper than {MAX_ARGS_DEPTH} levels", "args")
            parsed = spec.args.model_validate(dict(args))
        except ValidationError as exc:
            reason, field = _validation_reason(exc)
            return bad_request(op, reason, field=field)
        except Exception as exc:  # a mapping that cannot even be read as arguments
            return bad_request(op, f"args cannot be read: {type(exc).__name__}", "args")
        index = str(getattr(parsed, "index", "") or "")
        try:
            if spec.sensitive and not self.allows_remove(index):
                return refusal(
                    op,
                    NotAllowed(
                        index=index,
                        op=op,
                        reason=f"the configuration does not allow '{op}' on index '{index}' "
                        "(set allow_remove = true for it)",
                    ),
                )
            answer = self._runners[op](parsed)
        except InvalidRequest as exc:
            return bad_request(op, str(exc), field=exc.field, index=index)
        except ConfigError as exc:
            return bad_request(op, str(exc), field="index", index=index)
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            return bad_request(op, str(exc), field="path", index=index)
        except (UnknownBackend, UnknownEmbedder) as exc:
            answer = _failure(op, IndexUnavailable(index=index, reason=str(exc)))
        except Exception as exc:  # never a traceback: an unexpected error is a failure
            answer = _failure(
                op,
                IndexFailed(
                    index=index,
                    reason=f"{op} failed: {type(exc).__name__}: {exc}",
                    error_type=type(exc).__name__,
                ),
            )
        return answer.model_dump(mode="json")

    # -- ops -----------------------------------------------------------------------------
    def _add(self, a: AddArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        passages: list[Passage] = []
        for i, p in enumerate(a.passages):
            passages.append(_to_passage(p, i))
        out = t.guard.add(
            t.index,
            passages,
            max_bytes=a.max_bytes or t.max_bytes,
            deadline_s=self.deadline_for(a.index, a.deadline_s),
        )
        ev = WriteEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Indexed):
            ev = ev.model_copy(
                update={
                    "bytes_used": out.bytes_used,
                    "max_bytes": out.max_bytes,
                    "estimate": out.estimate,
                }
            )
            data = AddData(
                added=out.added, known=out.known, added_ids=out.added_ids, known_ids=out.known_ids
            )
            return OPS["add"].result(
                op="add", code=out.code, ok=True, message=out.message, data=data, evidence=ev
            )  # type: ignore[return-value]
        if isinstance(out, OverBudget):
            ev = ev.model_copy(
                update={
                    "max_bytes": out.max_bytes,
                    "needed_bytes": out.needed_bytes,
                    "check": out.check,
                    "estimate": out.estimate,
                }
            )
            return OPS["add"].result(
                op="add",
                code=out.code,
                ok=False,
                message=out.message,
                evidence=ev,
                problem=Problem(reason=out.message),
            )  # type: ignore[return-value]
        if isinstance(out, IndexTimeout):
            ev = ev.model_copy(update={"deadline_s": out.deadline_s})
        return _failure("add", out, ev)

    def _run_search(self, t: Target, a: _SearchCommon, query: str, op: str) -> Answer[Any, Any]:
        deadline_s = self.deadline_for(t.index, a.deadline_s)
        out = t.guard.search(
            t.index, query, top_k=a.top_k, deadline_s=deadline_s, filters=a.filters
        )
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        ev = SearchEvidence(index=t.index, backend=t.backend_name, legs=legs)
        if isinstance(out, Searched | NoMatch):
            ev = ev.model_copy(
                update={
                    "searched": out.searched,
                    "deadline_s": out.deadline_s,
                    "elapsed_ms": out.elapsed_ms,
                    "degraded": out.degraded,
                    "scale": out.scale if isinstance(out, Searched) else None,
                }
            )
        elif isinstance(out, IndexTimeout):
            ev = ev.model_copy(update={"deadline_s": out.deadline_s})
        if not out.ok:
            return _failure(op, out, ev)
        hits: list[HitOut] = []
        if isinstance(out, Searched):
            known = chunkings(t.guard.name, t.index) if a.context else []
            for h in out.hits:
                ctx = None
                if a.context:
                    ctx = expand(
                        t.guard,
                        t.index,
                        h.passage,
                        a.context,
                        deadline_s=deadline_s,
                        chunking=known,
                    )
                hits.append(
                    HitOut(
                        rank=h.rank,
                        score=h.score,
                        scale=h.score_scale,
                        passage=h.passage,
                        context=ctx,
                    )
                )
        return Answer[Any, Any](
            op=op,
            code=out.code,
            ok=True,
            message=out.message,
            data=SearchData(hits=hits),
            evidence=ev,
            untrusted=bool(hits),
            notice=UNTRUSTED_NOTICE if hits else None,
        )

    def _search(self, a: SearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        got = self._run_search(t, a, a.query, "search")
        return OPS["search"].result.model_validate(got.model_dump())  # type: ignore[return-value]

    def _batch_search(self, a: BatchSearchArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        for i, q in enumerate(a.queries):
            if not q.strip():
                raise InvalidRequest("the query is empty", field=f"queries.{i}")

        def one(q: str) -> BatchItem:
            try:
                got = self._run_search(t, a, q, "search")
                return BatchItem.model_validate({**got.model_dump(), "query": q})
            except InvalidRequest as exc:
                bad = BadRequest(index=t.index, field=exc.field, reason=str(exc))
                return BatchItem(
                    op="search",
                    query=q,
                    code=bad.code,
                    ok=False,
                    message=bad.message,
                    problem=Problem(reason=bad.reason, field=bad.field),
                )

        with ThreadPoolExecutor(max_workers=min(BATCH_WORKERS, len(a.queries))) as pool:
            items = list(pool.map(one, a.queries))
        counts: dict[str, int] = {}
        for it in items:
            counts[it.code] = counts.get(it.code, 0) + 1
        overall = batch_code(counts)
        ok = overall in BATCH_ANSWERED
        failed = len(items) - sum(1 for it in items if it.ok)
        legs = list(t.options.get("members", [])) if t.backend_name == FUSION_BACKEND else []
        return OPS["batch_search"].result(
            op="batch_search",
            code="BATCH",
            ok=ok,
            message=f"{len(items)} quer(y/ies) on '{t.index}': "
            + ", ".join(f"{c} {k}" for k, c in sorted(counts.items()))
            + (f"; {failed} did not get an answer from the index." if failed else "."),
            data=BatchData(results=items),
            evidence=BatchEvidence(
                index=t.index,
                backend=t.backend_name,
                queries=len(items),
                counts=counts,
                overall=overall,
                legs=legs,
            ),
            untrusted=any(it.untrusted for it in items),
            notice=UNTRUSTED_NOTICE if any(it.untrusted for it in items) else None,
        )  # type: ignore[return-value]

    def _pack(self, a: PackArgs) -> Answer[Any, Any]:
        t = self._search_target(a)
        got = self._run_search(t, a, a.query, "pack")
        data = None
        message = got.message
        if got.ok:
            hits = got.data.hits if got.data is not None else []
            data = pack(hits, a.max_tokens)
            if hits:
                message += (
                    f" Packed {data.included} of {len(hits)} into about {data.tokens} tokens "
                    f"(budget {a.max_tokens})" + (", the last one cut." if data.truncated else ".")
                )
        return OPS["pack"].result(
            **{
                **dict(got),
                "message": message,
                "data": data,
                "untrusted": bool(data and data.citations),
            }
        )  # type: ignore[return-value]

    def _remove(self, a: RemoveArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        out = t.guard.remove(t.index, a.ids, deadline_s=self.deadline_for(a.index, a.deadline_s))
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, Removed):
            return OPS["remove"].result(
                op="remove",
                code=out.code,
                ok=True,
                message=out.message,
                data=RemoveData(
                    removed=out.removed, removed_ids=out.removed_ids, missing_ids=out.missing_ids
                ),
                evidence=ev,
            )  # type: ignore[return-value]
        return _failure("remove", out, ev)

    def _status(self, a: StatusArgs) -> Answer[Any, Any]:
        t = self.target(a.index)
        out = t.guard.status(t.index, deadline_s=self.deadline_for(a.index, a.deadline_s))
        ev = IndexEvidence(index=t.index, backend=t.backend_name)
        if isinstance(out, IndexStatus):
            data = StatusData.model_validate(out.model_dump(include=set(StatusData.model_fields)))
            return OPS["status"].result(
                op="status", code=out.code, ok=True, message=out.message, data=data, evidence=ev
            )  # type: ignore[return-value]
        return _failure("status", out, ev)

    def readiness(self) -> list[IndexReadiness]:
        """Each configured index with its backend's readiness."""
        rows: list[IndexReadiness] = []
        for name, ic in sorted(self.config.indexes.items()):
            allow = self.allows_remove(name)
            if ic.kind == "fusion":
                rows.append(
                    IndexReadiness(
                        name=name,
                        kind="fusion",
                        backend=FUSION_BACKEND,
                        ready=True,
                        members=list(ic.members),
                        allow_remove=allow,
                    )
                )
                continue
            backend, _ = self.config.backend_options(name)
            try:
                r = self.target(name).guard.readiness()
                ready, reason = r.ready, r.reason
            except Exception as exc:
                ready, reason = False, f"{type(exc).__name__}: {exc}"
            rows.append(
                IndexReadiness(
                    name=name,
                    kind="index",
                    backend=backend,
                    ready=ready,
                    reason=reason,
                    allow_remove=allow,
                )
            )
        by_name = {row.name: row for row in rows}
        for row in rows:
            if row.kind == "fusion":
                down = [m for m in row.members if not by_name[m].ready]
                row.ready = len(down) < len(row.members)
                if down:
                    row.reason = "not ready: " + ", ".join(
                        f"{m} ({by_name[m].reason})" for m in down
                    )
        return rows

    def _evidence(self) -> ConfigEvidence:
        return ConfigEvidence(config=str(self.config.path) if self.config.path else None)

    def _backends(self, a: Any) -> Answer[Any, Any]:
        reg = get_registry()
        data = BackendsData(
            backends=reg.describe_backends(),
            embedders=reg.describe_embedders(),
            problems=[ProblemRow(plugin=p.plugin, problem=p.problem) for p in reg.problems],
            indexes=self.readiness(),
        )
        ready = sum(1 for b in data.backends if b.ready)
        return OPS["backends"].result(
            op="backends",
            code="LISTED",
            ok=True,
            message=f"{len(data.backends)} backend(s) installed, {ready} ready; "
            f"{len(data.indexes)} index(es) configured.",
            data=data,
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def _ops(self, a: Any) -> Answer[Any, Any]:
        rows = [
            OpInfo(
                name=spec.name,
                description=spec.description,
                sensitive=spec.sensitive,
                allowed=self.allows(spec.name),
                codes=list(spec.codes),
                args_schema=spec.args_schema(),
                result_schema=spec.result_schema(),
            )
            for spec in OPS.values()
        ]
        return OPS["ops"].result(
            op="ops",
            code="LISTED",
            ok=True,
            message=f"{len(rows)} ops.",
            data=OpsData(ops=rows),
            evidence=self._evidence(),
        )  # type: ignore[return-value]

    def folder_roots(self) -> list[Path]:
        roots = [Path(f).expanduser() for f in self.config.defaults.folders]
        if not roots:
            roots = [Path.cwd()]
        base = self.config.path.parent if self.config.path else Path.cwd()
        return [(r if r.is_absolute() else base / r).resolve() for r in roots]

    def _index_folder(self, a: IndexFolderArgs) -> Answer[Any, Any]:
        from indexplug.ingest import index_folder

        if a.overlap >= a.max_chars:
            raise InvalidRequest("overlap must be smaller than max_chars", field="overlap")
        try:
            resolved = Path(a.path).expanduser().resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a name too long
            raise InvalidRequest(f"{a.path!r} cannot be resolved: {exc}", field="path") from None
        roots = self.folder_roots()
        if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            shown = ", ".join(str(r) for r in roots)
            raise InvalidRequest(
                f"{a.path} is outside the folders this configuration lets index_folder read "
                f"({shown}; set defaults.folders)",
                field="path",
            )
        try:
            found = resolved.exists()
        except OSError:  # a name too long for the file system, say
            found = False
        if not found:
            raise InvalidRequest(f"{a.path} does not exist", field="path")
        t = self.target(a.index)
        max_bytes = a.max_bytes or t.max_bytes
        report = index_folder(
            t.guard,
            resolved,
            t.index,
            max_bytes=max_bytes,
            max_chars=a.max_chars,
            overlap=a.overlap,
            deadline_s=a.deadline_s
            or max(self.deadline_for(a.index, None) or 0.0, DEFAULT_FOLDER_DEADLINE_S),
        )
        record_chunking(t.guard.name, t.index, a.max_chars, a.overlap)
        ev = FolderEvidence(
            index=t.index, backend=t.backend_name, path=str(resolved), max_bytes=max_bytes
        )
        code = folder_code(report)
        if report.ok:
            message = (
                f"Indexed {report.files_indexed} file(s) into '{t.index}' "
                f"({report.passages_added} passage(s) added, {report.passages_known} known, "
                f"{report.passages_removed} removed); {report.files_unchanged} unchanged."
            )
            problem = None
        else:
            first = report.failures[0]
            message = (
                f"Indexing '{t.index}' was incomplete: {len(report.failures)} write(s) failed "
                f"({first})"
            )
            problem = Problem(reason=first)
        return OPS["index_folder"].result(
            op="index_folder",
            code=code,
            ok=report.ok,
            message=message,
            data=report,
            evidence=ev,
            problem=problem,
        )  # type: ignore[return-value]


def folder_code(report: IngestReport) -> str:
    """The code of an ``index_folder`` run: ``INDEXED``, else what its first failed write
    said (``OVER_BUDGET``, ``INDEX_UNAVAILABLE``, ``INDEX_TIMEOUT``; otherwise
    ``INDEX_FAILED``).  The CLI's ``index`` exits by it too."""
    if report.ok:
        return "INDEXED"
    first = report.failures[0]
    for code, marker in (
        ("OVER_BUDGET", "over its budget"),
        ("INDEX_UNAVAILABLE", "is unavailable"),
        ("INDEX_TIMEOUT", "timed out"),
    ):
        if marker in first:
            return code
    return "INDEX_FAILED"


def _to_passage(p: Any, i: int) -> Passage:
    if (p.uri is None) == (p.source is None):
        raise InvalidRequest("give exactly one of 'uri' or 'source'", field=f"passages.{i}.uri")
    try:
        out = Passage.create(
            p.text,
            p.uri or p.source.uri,
            start=p.start,
            end=p.end,
            source=p.source,
            document_sha256=p.document_sha256,
            metadata=p.metadata,
            key=p.key,
        )
    except (ValidationError, ValueError) as exc:
        text = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise InvalidRequest(text, field=f"passages.{i}") from None
    if p.id is not None and p.id != out.id:
        raise InvalidRequest(
            "id is not the passage's content address (text, uri and span)",
            field=f"passages.{i}.id",
        )
    if p.digest is not None and p.digest != out.digest:
        raise InvalidRequest(
            "digest does not match the passage's fields (source, span, metadata)",
            field=f"passages.{i}.digest",
        )
    return out


def invoke(
    op: str,
    args: Mapping[str, Any] | str | bytes | None = None,
    *,
    config: Config | Path | str | None = None,
) -> dict[str, Any]:
    """Run one op from a JSON object and answer a JSON object (see :mod:`indexplug.ops`).

    ``config`` is a :class:`~indexplug.config.Config`, a path to ``indexplug.toml``, or ``None``
    to discover one (``INDEXPLUG_CONFIG``, ``./indexplug.toml``, the user config folder); with no
    file, every index is on sqlite-fts5 and sensitive ops are not allowed.
    """
    try:
        invoker = Invoker.from_source(config)
    except (ConfigError, OSError, ValueError) as exc:  # a bad file, or a path that is none
        return bad_request(str(op), str(exc), field="config")
    with invoker:
        return invoker.invoke(op, args)
