"""The manifest JSON Schema, shipped in the package: the contract other tools validate against.

The model validates by hand (no dependency at load time, messages that name the field); the
test suite cross-checks the two with the `jsonschema` library in both directions.
"""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files
from typing import Any

__all__ = ["SCHEMA_FILE", "schema", "schema_text", "validate_document"]

SCHEMA_FILE = "manifest.schema.json"


def schema_text() -> str:
    return files("toolkit.archive").joinpath(SCHEMA_FILE).read_text()


@cache
def schema() -> dict[str, Any]:
    return json.loads(schema_text())


def validate_document(doc: Any) -> list[str]:
    """Schema violations of a decoded document (empty when valid), as 'path: message'."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(
        schema(), format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}" for e in errors]
