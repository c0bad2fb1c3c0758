"""A deterministic, model-free embedder: character n-gram feature hashing.

It needs no weights and no network, so every backend and test runs anywhere.  Each word becomes
the signed hash of its character trigrams (with word-boundary marks) plus the word itself;
``Granularity.TOKEN`` yields one normalised vector per word (for late interaction),
``Granularity.TEXT`` their normalised sum.  Hashing uses CRC-32, not Python's salted ``hash``,
so vectors are identical across processes and machines.

Spec: ``hashing:default`` (256 dimensions) or ``hashing:DIM`` (for example ``hashing:128``).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from indexplug.errors import InvalidOption
from indexplug.hookspecs import hookimpl
from indexplug.protocols import EmbedderSpec, Granularity, Readiness

if TYPE_CHECKING:
    from indexplug.protocols import Vector

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_TOKENS = 512
"""Token-level output is capped per text, like a transformer's context, to bound memory."""


class HashingEmbedder:
    granularities = frozenset({Granularity.TEXT, Granularity.TOKEN})

    def __init__(self, dim: int = 256, *, n: int = 3) -> None:
        if not 8 <= dim <= 4096:
            raise ValueError(f"hashing dim must be between 8 and 4096, got {dim}")
        self.dim = dim
        self.n = n
        self.name = "hashing:default" if dim == 256 else f"hashing:{dim}"
        self._word = lru_cache(maxsize=200_000)(self._word_vector)

    def readiness(self) -> Readiness:
        return Readiness.yes()

    def _word_vector(self, word: str) -> Vector:
        import numpy as np  # here: this module loads with every command (entry point)

        vec = np.zeros(self.dim, dtype=np.float32)
        marked = f"<{word}>"
        feats = [marked] + [marked[i : i + self.n] for i in range(max(1, len(marked) - self.n + 1))]
        for j, f in enumerate(feats):
            h = zlib.crc32(f.encode("utf-8"))
            weight = 2.0 if j == 0 else 1.0
            vec[h % self.dim] += weight if (h >> 31) & 1 else -weight
        norm = float(np.linalg.norm(vec))
        if norm > 0:
            vec /= norm
        vec.setflags(write=False)
        return vec

    def _tokens(self, text: str) -> list[str]:
        return [w.lower() for w in _WORD.findall(text)][:MAX_TOKENS]

    def _token_matrix(self, text: str) -> Vector:
        import numpy as np  # here: this module loads with every command (entry point)

        words = self._tokens(text)
        if not words:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._word(w) for w in words])

    def _text_vector(self, text: str) -> Vector:
        import numpy as np  # here: this module loads with every command (entry point)

        m = self._token_matrix(text)
        vec = m.sum(axis=0) if len(m) else np.zeros(self.dim, dtype=np.float32)
        norm = float(np.linalg.norm(vec))
        return (vec / norm).astype(np.float32) if norm > 0 else vec.astype(np.float32)

    def embed_documents(self, texts: Sequence[str], granularity: Granularity) -> list[Vector]:
        if granularity is Granularity.TOKEN:
            return [self._token_matrix(t) for t in texts]
        return [self._text_vector(t) for t in texts]

    def embed_query(self, text: str, granularity: Granularity) -> Vector:
        return self.embed_documents([text], granularity)[0]


def _factory(model: str, options: Mapping[str, Any]) -> HashingEmbedder:
    unknown = sorted(str(k) for k in options if k != "dim")
    if unknown:  # its one option; anything else would be ignored without a word
        raise InvalidOption(
            unknown[0], f"the hashing embedder's only option is dim, got {', '.join(unknown)}"
        )
    if model in ("", "default"):
        dim = int(options.get("dim", 256))
    elif model.isdigit():
        dim = int(model)
    else:
        raise ValueError(f"hashing model is 'default' or a dimension such as '128', got {model!r}")
    return HashingEmbedder(dim)


@hookimpl
def indexplug_embedders() -> list[EmbedderSpec]:
    return [
        EmbedderSpec(
            provider="hashing",
            factory=_factory,
            description="Model-free character n-gram hashing (text and token vectors, offline).",
        )
    ]
