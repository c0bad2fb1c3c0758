"""Test data for the chroma tests: passages with every provenance field set."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from indexplug import Passage, Source
from indexplug_chroma.testing import ChromaServer

FAST = "hashing:default"
"""Model-free embedder: most tests are about the backend, not about semantics."""

WHEN = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
TOPICS = ["otters", "glaciers", "violins", "volcanoes", "honeybees"]


def full_passage(text: str, pos: int, /, **metadata: str | int | float | bool) -> Passage:
    uri = f"test://chroma/{pos}"
    source = Source(
        uri=uri,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        retrieved_at=WHEN,
        provenance="chroma tests",
        licence="CC0-1.0",
        published_at=WHEN,
    )
    return Passage.create(
        text,
        uri,
        start=3 * pos,
        source=source,
        document_sha256=hashlib.sha256(uri.encode()).hexdigest(),
        metadata=metadata,
    )


def corpus(n: int = 20, tag: str = "doc") -> list[Passage]:
    """``n`` passages about five topics, with typed metadata to filter on."""
    return [
        full_passage(
            f"{tag} {i}: a note about {TOPICS[i % 5]} and item{i}",
            i,
            topic=TOPICS[i % 5],
            n=i,
            even=i % 2 == 0,
            weight=float(i) / 2,
        )
        for i in range(n)
    ]


def server_options(server: ChromaServer, **extra: Any) -> dict[str, Any]:
    """Backend options for the test server (fast embedder unless overridden)."""
    return {"mode": "server", "host": server.host, "port": server.port, "embedder": FAST, **extra}


def odd_passages() -> list[Passage]:
    """Passages built to trip storage (the kind the conformance kit's hostile check uses)."""
    huge = ("hugemarker " + "lorem ipsum dolor sit amet " * 40_000)[:1_000_000]
    texts: list[tuple[str, dict[str, str | int | float | bool]]] = [
        (huge, {}),
        ("combining cafe\u0301 nai\u0308ve re\u0301sume\u0301", {}),
        ("zero\u200bwidth\u200cnon\u200djoiner\u2060word \ufeffbom", {}),
        ("astral 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 🦜🔥 𠜎𠜱 👩\u200d👩\u200d👧", {"emoji🦜": "🔥"}),
        ("right-to-left \u200fمرحبا بالعالم\u200f and שלום עולם", {"dir": "rtl"}),
        ("tabs\tnewlines\ncarriage\r\nvertical\x0bunit\x1fseparator", {}),
        ("record\x1eseparators, the backend's own, \x1e in the text\x1e", {}),
        (
            "metadata of every kind",
            {
                "ключ": "значение",
                'quote"key': "it's",
                "int": -(2**53),
                "float": 1.5e300,
                "tiny": 5e-324,
                "false": False,
                "empty": "",
            },
        ),
        ("many metadata keys", {f"k{i}": i for i in range(50)}),
    ]
    out = [full_passage(t, 300 + i, **m) for i, (t, m) in enumerate(texts)]
    long_uri = "test://odd/" + "ü/" * 1_000 + "file name?x=1&y=é#frag"
    out.append(Passage.create("a passage from a very long uri", long_uri))
    return out
