"""An option the sentence-transformers embedder refuses is an ``InvalidOption`` naming it, found
before any model is loaded."""

from __future__ import annotations

from typing import Any

import pytest
from indexplug import InvalidOption
from indexplug_sentence_transformers.plugin import make_embedder


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"devcie": "cpu"}, "devcie"),
        ({"batch_size": "lots"}, "batch_size"),  # was int("lots"): a ValueError naming nothing
        ({"batch_size": 0}, "batch_size"),
        ({"max_seq_length": [512]}, "max_seq_length"),  # was a TypeError
        ({"progress_min": True}, "progress_min"),
    ],
)
def test_a_bad_option_is_invalid_option_naming_it(options: dict[str, Any], option: str) -> None:
    with pytest.raises(InvalidOption) as refused:
        make_embedder("all-MiniLM-L6-v2", options)
    assert refused.value.option == option and option in str(refused.value)
