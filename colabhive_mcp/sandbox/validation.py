"""JSON Schema (Draft 2020-12) checks whose error detail says which field is wrong."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match


def _where(root: str, error: ValidationError) -> str:
    return root + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)


def problem(schema: dict[str, Any], instance: Any, root: str) -> dict[str, Any] | None:
    """None if ``instance`` is valid, else ``{"message": ..., "errors": [...]}`` naming each field
    as a path from ``root`` (e.g. ``input.address.city``)."""
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(instance), key=lambda error: [str(p) for p in error.absolute_path])
    if not errors:
        return None
    best = best_match(errors)
    return {
        "message": f"{_where(root, best)}: {best.message}",
        "errors": [
            {"path": _where(root, error), "message": error.message, "keyword": error.validator} for error in errors
        ],
    }
