"""A small JSON-schema subset: what response_format json_schema and tool parameters actually use.

Supported: type (one or a list), properties, required, additionalProperties, items, enum, const,
minimum/maximum (and exclusive), minLength/maxLength, pattern, minItems/maxItems, anyOf, allOf.
Annotations (title, description, default, examples, format, $schema, strict) are ignored. Any other
keyword is refused when the suite loads, so a schema never silently checks less than it says.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

JSON_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")
CHECKED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "anyOf",
        "allOf",
    }
)
ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "format", "$schema", "strict", "name"}
)


def unsupported_keywords(schema: Any, path: str = "$") -> list[str]:
    """Every keyword this validator would not check, as `path: keyword` (empty when supported)."""
    if isinstance(schema, bool):
        return []
    if not isinstance(schema, Mapping):
        return [f"{path}: a schema must be an object, got {type(schema).__name__}"]
    problems = [f"{path}: {key}" for key in schema if key not in CHECKED | ANNOTATIONS]
    types = schema.get("type")
    for name in types if isinstance(types, list) else [types] if types is not None else []:
        if name not in JSON_TYPES:
            problems.append(f"{path}: unknown type {name!r}")
    if "pattern" in schema:
        try:
            re.compile(schema["pattern"])
        except (re.error, TypeError) as exc:
            problems.append(f"{path}: invalid pattern {schema['pattern']!r}: {exc}")
    for key, sub in (schema.get("properties") or {}).items():
        problems += unsupported_keywords(sub, f"{path}.properties.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            problems += unsupported_keywords(schema[key], f"{path}.{key}")
    for key in ("anyOf", "allOf"):
        for i, sub in enumerate(schema.get(key) or []):
            problems += unsupported_keywords(sub, f"{path}.{key}[{i}]")
    return problems


def json_type(value: Any) -> str:
    """The JSON type name of a parsed value (bool is not a number; 2.0 is an integer)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if math.isfinite(value) and value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type_ok(value: Any, expected: str) -> bool:
    actual = json_type(value)
    return actual == expected or (expected == "number" and actual == "integer")


def validate(value: Any, schema: Any, path: str = "$") -> list[str]:
    """Every way `value` breaks `schema`, as readable `path: problem` lines (empty when valid)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [f"{path}: no value is allowed here"]
    errors: list[str] = []
    types = schema.get("type")
    if types is not None:
        allowed = types if isinstance(types, list) else [types]
        if not any(_type_ok(value, t) for t in allowed):
            return [f"{path}: expected {' or '.join(allowed)}, got {json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} is not {schema['const']!r}")
    errors += _numeric(value, schema, path)
    if isinstance(value, str):
        errors += _string(value, schema, path)
    if isinstance(value, list):
        errors += _array(value, schema, path)
    if isinstance(value, dict):
        errors += _object(value, schema, path)
    for sub in schema.get("allOf") or []:
        errors += validate(value, sub, path)
    if "anyOf" in schema and not any(not validate(value, s, path) for s in schema["anyOf"]):
        errors.append(f"{path}: matches none of the anyOf alternatives")
    return errors


_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
_BOUND_OK: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}


def _numeric(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    if json_type(value) not in ("integer", "number"):
        return []
    errors = []
    for key, op in _BOUNDS.items():
        if key in schema and not _BOUND_OK[op](value, schema[key]):
            errors.append(f"{path}: {value!r} is not {op} {schema[key]!r}")
    return errors


def _string(value: str, schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']} characters")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        errors.append(f"{path}: {value!r} does not match /{schema['pattern']}/")
    return errors


def _array(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        errors.append(f"{path}: fewer than {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    if "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def _object(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}: missing required key {k!r}" for k in schema.get("required", ()) if k not in value
    ]
    properties: Mapping[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            errors += validate(item, properties[key], f"{path}.{key}")
        elif extra is False:
            errors.append(f"{path}: unexpected key {key!r}")
        elif isinstance(extra, Mapping):
            errors += validate(item, extra, f"{path}.{key}")
    return errors
