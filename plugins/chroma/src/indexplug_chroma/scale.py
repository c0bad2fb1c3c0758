"""What the chroma backend declares: its description and its score scale."""

from __future__ import annotations

from indexplug.outcomes import ScoreScale

from indexplug_chroma.plugin import DESCRIPTION

__all__ = ["DESCRIPTION", "SCALE"]

SCALE = ScoreScale(
    name="cosine",
    higher_is_better=True,
    comparable_across_searches=True,
    meaning=(
        "Cosine similarity of the query's and the passage's embeddings (1 - Chroma's cosine "
        "distance), from -1 to 1; comparable across searches of indexes with one embedder."
    ),
)
