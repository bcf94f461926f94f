"""Input schemas every client accepts, with the meaning of the original.

Some hosts refuse ``$ref``/``$defs`` (Gemini, Cursor, VS Code) or a root that is not a plain
object. :func:`portable` inlines local references (a recursive one becomes an open schema),
gives the root ``type: object`` (a root ``anyOf``/``oneOf`` of objects lends its properties),
and in strict mode drops the keywords such hosts reject. Arguments are still validated against
the gateway's original schema, so nothing is lost by what a client is shown.

Inlining can grow exponentially (a definition that uses another twice, 24 levels deep), so it has
a budget: past :data:`MAX_INLINED_NODES`, the tool shows a compact schema instead, whose references
are open schemas (any value) that say so.
"""

from __future__ import annotations

from typing import Any

DEFINITIONS = ("$defs", "definitions")
STRICT_DROPPED = ("$schema", "$id", "$comment", "$anchor", "$dynamicAnchor") + DEFINITIONS
MAX_DEPTH = 64
MAX_INLINED_NODES = 20_000  # values in one inlined schema (about 1 MB of JSON)
TOO_LARGE = "(defined by the tool: too large to show inline; any value is shown, the tool still checks it)"


class _OverBudget(Exception):
    """Inlining this schema would make it larger than the budget."""


def portable(schema: Any, strict: bool = False) -> dict[str, Any]:
    """The schema with local ``$ref`` inlined and an object root; ``strict`` also drops
    ``$schema``/``$defs`` and friends, and root ``anyOf``/``oneOf``."""
    if not isinstance(schema, dict) or not schema:
        return {"type": "object", "properties": {}}
    try:
        inlined = _inline(schema, schema, (), 0, [MAX_INLINED_NODES])  # (a schema with no $ref: itself)
    except _OverBudget:
        inlined = _compact(schema)
    if not isinstance(inlined, dict):
        inlined = {}
    if strict:
        inlined = {k: v for k, v in inlined.items() if k not in STRICT_DROPPED}
    return _object_root(inlined, strict)


def _inline(node: Any, root: dict[str, Any], seen: tuple[str, ...], depth: int, budget: list[int]) -> Any:
    """Replace every local ``$ref`` under ``node``; ``seen`` holds the references being expanded,
    ``budget`` the values still allowed (past it: :class:`_OverBudget`). What holds no reference comes
    back as it is (the same object: nothing is copied but the way down to a reference)."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _OverBudget
    if depth > MAX_DEPTH:
        return {}
    if not isinstance(node, (dict, list)):
        return node
    ref = node.get("$ref") if isinstance(node, dict) else None
    if isinstance(node, list) or not (isinstance(ref, str) and ref.startswith("#")):
        return _inline_values(node, root, seen, depth + 1, budget)
    if ref in seen:
        return {"description": "(recursive: any value of the enclosing type)"}
    target = _resolve(root, ref)
    siblings = {k: v for k, v in node.items() if k != "$ref"}
    if target is None:
        return _inline_values(siblings, root, seen, depth + 1, budget)
    return _inline({**target, **siblings}, root, seen + (ref,), depth + 1, budget)


def _inline_values(node: dict[str, Any] | list[Any], root: dict[str, Any], seen: tuple[str, ...], depth: int,
                   budget: list[int]) -> Any:
    """``node`` with :func:`_inline` done to each of its values (at ``depth``), or ``node`` itself when that
    changes none of them. A value that is no object or array is counted, never called on."""
    if depth > MAX_DEPTH:  # every value lies past the depth: an empty object
        budget[0] -= len(node)
        if budget[0] < 0:
            raise _OverBudget
        return [{} for _ in node] if isinstance(node, list) else {key: {} for key in node}
    copy: Any = None
    leaves = 0
    for key, value in enumerate(node) if isinstance(node, list) else node.items():
        if not isinstance(value, (dict, list)):
            leaves += 1
            continue
        new = _inline(value, root, seen, depth, budget)
        if new is not value:
            if copy is None:
                copy = list(node) if isinstance(node, list) else dict(node)
            copy[key] = new
    budget[0] -= leaves
    if budget[0] < 0:
        raise _OverBudget
    return node if copy is None else copy


def _compact(node: Any, depth: int = 0) -> Any:
    """The schema as it is, each local ``$ref`` an open schema saying so: no larger than the original."""
    if depth > MAX_DEPTH:
        return {}
    if isinstance(node, list):
        return [_compact(item, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        return {"description": TOO_LARGE, **{k: _compact(v, depth + 1) for k, v in node.items() if k != "$ref"}}
    return {k: _compact(v, depth + 1) for k, v in node.items() if k not in DEFINITIONS}


def _resolve(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    """The schema a JSON pointer like ``#/$defs/address`` names, if it is there."""
    node: Any = root
    for part in ref[1:].lstrip("/").split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _object_root(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    """MCP arguments are an object: say so at the root, lending a root ``anyOf``/``oneOf``'s properties."""
    if schema.get("type") == "object":
        return schema
    if "type" in schema:  # e.g. a bare string schema: no object can satisfy it, so describe an empty one
        return {"type": "object", "properties": {}}
    properties: dict[str, Any] = dict(schema.get("properties") or {})
    for key in ("anyOf", "oneOf"):
        for branch in schema.get(key) or []:
            if isinstance(branch, dict):
                for name, prop in (branch.get("properties") or {}).items():
                    properties.setdefault(name, prop)
    result = {k: v for k, v in schema.items() if not (strict and k in ("anyOf", "oneOf"))}
    result.update(type="object", properties=properties)
    return result


class Check:
    """A JSON Schema compiled once, in its own draft (2020-12 when it names none).

    ``broken`` says why a schema that is not valid JSON Schema cannot judge anything. ``format`` is an
    annotation, as 2020-12 has it by default: whether a value is an e-mail address or a date is for
    the gateway to judge, which may not check it. jsonschema is imported on the first compilation,
    not when the server starts.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        from jsonschema import Draft202012Validator, SchemaError, validators
        from referencing import Registry
        from referencing.exceptions import Unresolvable

        cls = validators.validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            self.broken: str | None = exc.message
            return
        self.broken = None
        self._validator = cls(schema, registry=Registry())  # its own document only: nothing is ever fetched
        self._unfollowed: type[Exception] = Unresolvable  # what a $ref to another document raises

    def problems(self, value: Any) -> list[str]:
        """What is wrong with ``value``, shallowest first, each naming where; empty when it fits. A
        ``$ref`` to another document is not followed (judging that part is left to the gateway): what
        was found wrong before the check reached it is said."""
        if self.broken is not None:
            return [f"the schema itself is invalid: {self.broken}"]
        errors = []
        try:
            errors.extend(self._validator.iter_errors(value))
        except self._unfollowed:
            pass
        errors.sort(key=lambda e: (len(e.path), list(map(str, e.path))))
        return [f"{_where(e.absolute_path)}: {_said(e)}" for e in errors]


def _said(error: Any) -> str:
    """One error of jsonschema's in words a person (and a model) can act on. A value that fits none
    of an ``anyOf``/``oneOf``'s alternatives: when each alternative only misses properties, which to
    give ("give `prompt` or `messages`"); else what the alternatives say of it."""
    alternatives = error.validator_value if error.validator in ("anyOf", "oneOf") else None
    if not alternatives or not error.context:
        return str(error.message)
    missing: dict[Any, list[str]] = {}
    for sub in error.context:
        names = missing.setdefault(sub.relative_schema_path[0], [])
        if sub.validator != "required" or sub.relative_path or not isinstance(sub.instance, dict):
            return _closest(error, len(alternatives))
        names.extend(f"`{name}`" for name in sub.validator_value if name not in sub.instance and f"`{name}`" not in names)
    if len(missing) < len(alternatives) or not all(missing.values()):  # (an alternative failed on nothing it says)
        return _closest(error, len(alternatives))
    return "give " + " or ".join(" and ".join(names) for names in missing.values())


def _closest(error: Any, count: int) -> str:
    """What each alternative says of the value (up to three of them), else the closest one's word."""
    from jsonschema.exceptions import best_match

    by_alternative: dict[Any, list[Any]] = {}
    for sub in error.context:
        by_alternative.setdefault(sub.relative_schema_path[0], []).append(sub)
    said = [best_match(subs) for subs in by_alternative.values()]
    if len(said) > 3:
        said = [best_match(error.context)]
    words = " or ".join(f"{_where(e.relative_path)}: {e.message}" if e.relative_path else e.message for e in said)
    return f"fits none of the {count} forms it may take ({words})"


def _where(path: Any) -> str:
    return "at " + "/".join(map(str, path)) if path else "at the top level"
