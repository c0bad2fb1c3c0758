"""Helpers shared by the orchestration tests (a module of its own: ``conftest`` is not a name
to import from when several conftest files exist)."""

from __future__ import annotations

from typing import Any

import jsonschema
from indexplug.ops import OPS


def check_schema(answer: dict[str, Any]) -> dict[str, Any]:
    """Assert ``answer`` validates against its op's result schema (as ``ops`` publishes it)."""
    schema = OPS[answer["op"]].result_schema()
    jsonschema.Draft202012Validator(schema).validate(answer)
    return answer
