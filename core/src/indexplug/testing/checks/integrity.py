"""Checks of integrity: tampered text, records and rows are caught, never served."""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import partial
from typing import Any

from indexplug.outcomes import (
    NoMatch,
    Searched,
)
from indexplug.testing.checks.helpers import (
    _by_id,
    _describe,
    _filled,
    _op,
    _same_passage,
    _search,
    _short,
    kit_passage,
)
from indexplug.testing.checks.registry import _check
from indexplug.testing.checks.subject import Subject, fail
from indexplug.transfer import export


@_check(
    "integrity.tamper",
    "A stored passage altered behind the backend's back is not served (INDEX_FAILED)",
    needs=("tamper",),
)
def _tamper(s: Subject) -> None:
    canary = kit_passage("The lighthouse keeper's canary sings tamperword at dawn.", 70)
    index, ps = _filled(s, "tamper", [canary])
    added = _by_id(ps)
    hook = s.tamper_hook()
    assert hook is not None
    # served once intact first: a backend (or the core) that keeps what it served must still
    # notice when the stored passage changes under it
    before = _search(
        s, index, "tamperword canary", "search before the passage is altered", top_k=50
    )
    if not any(h.passage.id == canary.id for h in before.hits):
        fail("search before the passage is altered did not find it")
    altered = "The lighthouse keeper's canary sings tamperword at dusk, altered."
    try:
        hook(index, canary.id, altered)
    except Exception as exc:
        fail(f"the tamper hook raised {_describe(exc)}")
    what = "search for a passage altered after it was added"
    out = _search(
        s, index, "tamperword canary", what, ("INDEX_FAILED", "SEARCHED", "NO_MATCH"), top_k=50
    )
    if isinstance(out, Searched):
        for hit in out.hits:
            if hit.passage.text == altered or hit.passage.id not in added:
                fail(
                    f"{what} served the altered text ({_short(hit.passage.text)!r}) instead "
                    "of answering INDEX_FAILED"
                )
            _same_passage(hit.passage, added, what)
        if any(hit.passage.id == canary.id for hit in out.hits):
            fail(
                f"{what} served the passage as it was before it was altered (a copy kept from "
                "an earlier search?): the altered store went unnoticed instead of INDEX_FAILED"
            )
        fail(
            f"{what} answered SEARCHED without the altered passage (silently dropped) instead "
            "of INDEX_FAILED"
        )
    if isinstance(out, NoMatch):
        fail(
            f"{what} answered NO_MATCH (the altered passage silently dropped) instead of "
            "INDEX_FAILED"
        )


_RECORD_CHANGES: tuple[tuple[str, dict[str, object]], ...] = (
    ("metadata", {"metadata": {"trusted": True}}),
    ("licence", {"licence": "LicenseRef-forged-all-rights-reserved"}),
    ("provenance", {"provenance": "forged: signed by the editor-in-chief"}),
    ("span", {"start": 1, "end": 2}),
    ("text", {"text": "The archivist's ledger records recordword, forged."}),
)
"""What ``integrity.record`` alters, one stored passage each: every field a caller may
trust, the digest and id kept as they were."""


@_check(
    "integrity.record",
    "A stored passage whose metadata, licence, provenance, span or text was altered behind "
    "the backend's back is not served (INDEX_FAILED)",
    needs=("tamper_record",),
)
def _tamper_record(s: Subject) -> None:
    hook = s.tamper_record_hook()
    assert hook is not None
    for n, (name, change) in enumerate(_RECORD_CHANGES):
        word = f"recordword{chr(ord('a') + n)}"
        canary = kit_passage(f"The archivist's ledger records {word} in ink.", 90 + n)
        index, ps = _filled(s, f"record{n}", [canary])
        added = _by_id(ps)
        before = _search(s, index, word, f"search for {word} before its {name} is altered")
        if not any(h.passage.id == canary.id for h in before.hits):
            fail(f"search for {word} before its {name} is altered did not find it")
        try:
            hook(index, canary.id, change)
        except Exception as exc:
            fail(f"the tamper_record hook raised {_describe(exc)} altering {name}")
        what = f"search for a passage whose {name} was altered after it was added"
        out = _search(s, index, word, what, ("INDEX_FAILED", "SEARCHED", "NO_MATCH"), top_k=50)
        if isinstance(out, Searched):
            for hit in out.hits:
                _same_passage(hit.passage, added, what)
            fail(f"{what} answered SEARCHED instead of INDEX_FAILED")
        if isinstance(out, NoMatch):
            fail(f"{what} answered NO_MATCH (the passage silently dropped), not INDEX_FAILED")


@_check(
    "integrity.digest",
    "A stored passage edited and stripped of its digest is refused on every read path "
    "(search, get, scan, export): INDEX_FAILED, never served with a digest computed afresh",
    needs=("tamper_record",),
)
def _digest_removed(s: Subject) -> None:
    hook = s.tamper_record_hook()
    assert hook is not None
    canary = kit_passage("The notary's register seals digestword under wax.", 97)
    index, ps = _filled(s, "digest", [canary])
    found = _search(s, index, "digestword", "search before the digest is removed", top_k=50)
    if not any(h.passage.id == canary.id for h in found.hits):
        fail("search before the digest is removed did not find the passage")
    change = {"licence": "MIT", "metadata": {"lang": "fr"}, "digest": None}
    try:
        hook(index, canary.id, change)
    except Exception as exc:
        fail(f"the tamper_record hook raised {_describe(exc)} removing the digest")
    d = s.settings.op_deadline_s
    what = "{} of a passage whose licence and metadata were edited and digest removed"
    codes = ("INDEX_FAILED", "SEARCHED", "NO_MATCH")
    call: Callable[[], Any] = partial(s.guard.search, index, "digestword", top_k=50, deadline_s=d)
    outs = [(what.format("search"), _op("search", what.format("search"), codes, index, call))]
    if s.claims("get"):
        call = partial(s.guard.get, index, [canary.id], deadline_s=d)
        w = what.format("get")
        outs.append((w, _op("get", w, ("INDEX_FAILED", "GOT"), index, call)))
    if s.claims("scan"):
        call = partial(s.guard.scan, index, limit=len(ps) + 10, deadline_s=d)
        w = what.format("scan")
        outs.append((w, _op("scan", w, ("INDEX_FAILED", "SCANNED"), index, call)))
        w = what.format("export")
        try:
            outs.append((w, export(s.guard, index, io.StringIO(), deadline_s=d)))
        except Exception as exc:
            fail(f"{w} raised {_describe(exc)} instead of answering with an outcome")
    for w, out in outs:
        if out.code != "INDEX_FAILED":
            fail(
                f"{w} answered {out.code} instead of INDEX_FAILED (the edit served as "
                "genuine: was a digest computed afresh for it?)"
            )
        if "no digest" not in out.reason:
            fail(
                f"{w} answered INDEX_FAILED for another reason ({out.reason!r}), not the "
                "missing digest: does the tamper_record hook remove a digest (digest: None)?"
            )


@_check(
    "integrity.rows",
    "Stored records deleted behind the search structure make searches INDEX_FAILED, never "
    "NO_MATCH or INDEX_EMPTY",
    claim="separate_records",
    needs=("delete_rows",),
)
def _deleted_rows(s: Subject) -> None:
    hook = s.delete_rows_hook()
    assert hook is not None
    canary = kit_passage("The cartographer's atlas shows rowword islands.", 95)
    index, ps = _filled(s, "rows", [canary])
    _search(s, index, "rowword", "search before the record is deleted")
    try:
        hook(index, [canary.id])
    except Exception as exc:
        fail(f"the delete_rows hook raised {_describe(exc)}")
    what = "search for a passage whose record was deleted behind the index"
    codes = ("INDEX_FAILED", "SEARCHED", "NO_MATCH", "INDEX_EMPTY")
    out = _search(s, index, "rowword", what, codes, top_k=50)
    if out.code != "INDEX_FAILED":
        fail(f"{what} answered {out.code} instead of INDEX_FAILED")
    index, ps = _filled(s, "allrows")
    try:
        hook(index, [p.id for p in ps])
    except Exception as exc:
        fail(f"the delete_rows hook raised {_describe(exc)} deleting every record")
    what = "search after every record was deleted behind the index"
    out = _search(s, index, "fox", what, codes, top_k=50)
    if out.code != "INDEX_FAILED":
        fail(f"{what} answered {out.code} instead of INDEX_FAILED")
