"""The OpenAPI reference: Markdown rendered from the REST gateway's own OpenAPI schema.

Used by ``docs/gen/openapi_reference.py`` (the site's ``reference/openapi.md``) and by
``tests/docs/test_generated_pages.py``; both import it with ``docs/gen/`` on the path (the folder is
not a package). The repository root must be importable (``gateway.app`` builds the schema).

Rendered here rather than by essentials-openapi (neoteroi-mkdocs' ``[OAD()]``): that renderer
passes a strict build, but shows no type for Pydantic v2's optional fields (OpenAPI 3.1
``anyOf: [X, {type: null}]``: 186 of the 410 schema properties here) and expands every error
response of every operation as a JSON example plus schema (a 2 MB page).

Anchors are set with ``attr_list`` and hold a dot, so no ``toc`` slug of another heading can
equal them: ``op.<method>.<path words>`` per operation, ``schema.<Name>`` per component schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from _markdown_text import escape

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_REF_PREFIX = "#/components/schemas/"
# Constraint keywords shown beside a property or parameter, in this order.
_LIMITS = (
    ("minLength", "min length"),
    ("maxLength", "max length"),
    ("minimum", "≥"),
    ("exclusiveMinimum", ">"),
    ("maximum", "≤"),
    ("exclusiveMaximum", "<"),
    ("minItems", "min items"),
    ("maxItems", "max items"),
    ("pattern", "pattern"),
)


def gateway_openapi() -> dict[str, Any]:
    """The gateway's OpenAPI schema as served at ``/openapi.json``, built without a server.

    ``create_app`` opens its gRPC channel only in the app's lifespan, which is never entered
    here, so nothing connects; the defaults (no API keys, CORS off) are the schema of a default
    ``universal-runtime`` gateway.
    """
    from gateway.app import create_app

    return create_app("127.0.0.1:1").openapi()


def operations(schema: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every ``(METHOD, path, operation)`` of the schema, in the schema's order."""
    return [
        (method.upper(), path, operation)
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if method in METHODS
    ]


def operation_anchor(method: str, path: str) -> str:
    """``op.post.v1.chat.completions`` for ``POST /v1/chat/completions`` (braces dropped)."""
    words = [w for w in re.split(r"[^\w]+", path) if w]
    return ".".join(["op", method.lower(), *words])


def schema_anchor(name: str) -> str:
    """``schema.<Name>``: the anchor of a component schema."""
    return f"schema.{name}"


def render_markdown(schema: Mapping[str, Any], *, json_name: str = "openapi.json") -> str:
    """Render the schema as one page: operations grouped by tag, then every component schema.

    Each operation has its method and path, summary, description, parameters (name, in, type,
    required, default and limits, description), request body (per media type: the schema, linked
    when it is a component, its properties tabled when it is inline) and responses (status,
    description, media types and schemas). Each component schema has its description and a table
    of its properties. Types show ``anyOf``/``oneOf`` as ``A or B``, arrays as ``array of X``,
    maps as ``map of X``, enums and constants as their values.

    Args:
        schema: An OpenAPI 3.x document (``app.openapi()``).
        json_name: Where the page links the schema file, relative to the page.

    Returns:
        The page, ending with a newline.

    Raises:
        ValueError: Two operations would get the same anchor (a path the slug cannot tell apart).

    """
    info = schema.get("info", {})
    ops = operations(schema)
    anchors = [operation_anchor(method, path) for method, path, _ in ops]
    if len(set(anchors)) != len(anchors):
        duplicates = sorted({a for a in anchors if anchors.count(a) > 1})
        raise ValueError(f"operations share anchors: {', '.join(duplicates)}")
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for method, path, operation in ops:
        by_tag.setdefault((operation.get("tags") or ["other"])[0], []).append((method, path, operation))
    known = set(schema.get("components", {}).get("schemas", {}))
    lines = [
        "# OpenAPI reference",
        "",
        f"**{_text(info.get('title', 'API'))}** {_text(str(info.get('version', '')))}"
        + (f": {_text(info['summary'])}" if info.get("summary") else ""),
        "",
        "Generated at every build of this site from the gateway's own schema (the one it serves at "
        f"`/openapi.json`, OpenAPI {schema.get('openapi', '3')}), as a gateway with default settings "
        f"builds it. Download it: [`{json_name}`]({json_name}). With API keys configured, every "
        "`/v1/*` route also needs `Authorization: Bearer <key>`, answering 401 without it.",
    ]
    if info.get("description"):
        lines += ["", _text(info["description"])]
    lines += ["", "## Operations", ""]
    for tag, tagged in by_tag.items():
        lines.append(
            f"- **{_text(tag)}**: "
            + ", ".join(
                f"[`{method} {path}`](#{operation_anchor(method, path)})" for method, path, _ in tagged
            )
        )
    for tag, tagged in by_tag.items():
        lines += ["", f"## {_text(tag)}"]
        for method, path, operation in tagged:
            lines += ["", *_render_operation(method, path, operation, known)]
    if known:
        lines += ["", "## Schemas"]
        for name, component in schema["components"]["schemas"].items():
            lines += ["", *_render_schema(name, component, known)]
    return "\n".join(lines).rstrip("\n") + "\n"


# --- operations ---------------------------------------------------------------------------------


def _render_operation(method: str, path: str, operation: Mapping[str, Any], known: set[str]) -> list[str]:
    lines = [f"### `{method} {path}` {{ #{operation_anchor(method, path)} }}", ""]
    if operation.get("summary"):
        lines += [
            f"**{_text(operation['summary'])}**" + (" (deprecated)" if operation.get("deprecated") else ""),
            "",
        ]
    if operation.get("description"):
        lines += [_text(operation["description"]), ""]
    parameters = operation.get("parameters") or []
    if parameters:
        lines += [
            "Parameters:",
            "",
            "| name | in | type | required | default / limits | description |",
            "|---|---|---|---|---|---|",
        ]
        for parameter in parameters:
            sub = parameter.get("schema", {})
            lines.append(
                f"| `{parameter['name']}` | {parameter.get('in', '')} | {_type(sub, known)} "
                f"| {'yes' if parameter.get('required') else 'no'} | {_limits(sub)} "
                f"| {_cell(parameter.get('description') or sub.get('description', ''))} |"
            )
        lines.append("")
    body = operation.get("requestBody")
    if body:
        required = "required" if body.get("required") else "optional"
        lines.append(
            f"Request body ({required}):"
            + (f" {_text(body['description'])}" if body.get("description") else "")
        )
        lines.append("")
        for media, content in body.get("content", {}).items():
            sub = content.get("schema", {})
            lines.append(f"- `{media}`: {_type(sub, known)}")
            if "$ref" not in sub and sub.get("properties"):
                lines += ["", *_indent(_properties_table(sub, known))]
        lines.append("")
    responses = operation.get("responses") or {}
    if responses:
        lines += ["Responses:", "", "| status | description | content |", "|---|---|---|"]
        for status, response in responses.items():
            content = "<br>".join(
                f"`{media}`: {_type(c.get('schema', {}), known)}"
                for media, c in (response.get("content") or {}).items()
            )
            lines.append(f"| {status} | {_cell(response.get('description', ''))} | {content} |")
    return lines


# --- schemas ------------------------------------------------------------------------------------


def _render_schema(name: str, component: Mapping[str, Any], known: set[str]) -> list[str]:
    lines = [f"### {name} {{ #{schema_anchor(name)} }}", ""]
    if component.get("description"):
        lines += [_text(component["description"]), ""]
    if component.get("properties"):
        lines += _properties_table(component, known)
        extra = component.get("additionalProperties")
        if extra is False:
            lines += ["", "No other properties are accepted."]
        elif isinstance(extra, Mapping) and extra:
            lines += ["", f"Other properties: {_type(extra, known)}."]
    else:
        lines.append(f"Type: {_type(component, known)}.")
    return lines


def _properties_table(schema: Mapping[str, Any], known: set[str]) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| property | type | required | default / limits | description |", "|---|---|---|---|---|"]
    for prop, sub in schema.get("properties", {}).items():
        lines.append(
            f"| `{prop}` | {_type(sub, known)} | {'yes' if prop in required else 'no'} "
            f"| {_limits(sub)} | {_cell(sub.get('description', ''))} |"
        )
    return lines


def _type(schema: Any, known: set[str]) -> str:
    """One schema's type as table-safe Markdown (no pipes): links to component schemas."""
    if not isinstance(schema, Mapping) or not schema:
        return "any"
    if "$ref" in schema:
        ref = schema["$ref"]
        name = ref.removeprefix(_REF_PREFIX)
        return (
            f"[`{name}`](#{schema_anchor(name)})"
            if ref.startswith(_REF_PREFIX) and name in known
            else f"`{ref}`"
        )
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return "one of " + ", ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(s, known) for s in schema[key])
    if "allOf" in schema:
        return " and ".join(_type(s, known) for s in schema["allOf"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(_type({**schema, "type": k}, known) for k in kind)
    if kind == "array":
        items = _type(schema.get("items", {}), known)
        return f"array of ({items})" if " or " in items or " and " in items else f"array of {items}"
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra and not schema.get("properties"):
            return f"map of {_type(extra, known)}"
        return "`object`"
    if kind:
        return f"`{kind}`" + (f" ({schema['format']})" if schema.get("format") else "")
    return "any"


def _limits(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return ""
    parts = []
    if "default" in schema:
        parts.append(f"default `{json.dumps(schema['default'])}`")
    for key, label in _LIMITS:
        if key in schema:
            value = schema[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            parts.append(f"{label} `{value}`" if key == "pattern" else f"{label} {value}")
    return _cell_escape(", ".join(parts))


# --- text ---------------------------------------------------------------------------------------

# Sphinx roles in the gateway's docstrings (:class:`X`, :func:`x`): the code span is what reads.
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|ref):(?=`)")


_SECTION = re.compile(r"^(?:Args|Arguments|Attributes|Raises|Returns|Yields|Notes?|Examples?):$")


def _text(text: str) -> str:
    """Docstring prose as Markdown: roles dropped; tags, links and headings escaped outside code.

    A Google-style section (``Raises:`` then indented entries) becomes a bold label and a list,
    one item per entry, continuation lines joined; Markdown would run it into one paragraph.
    """
    return escape("\n".join(_sections(_ROLE.sub("", text).split("\n"))), in_table=False)


def _sections(lines: list[str]) -> list[str]:
    out: list[str] = []
    section = False
    for line in lines:
        stripped = line.strip()
        if _SECTION.match(stripped):
            out += ["", f"**{stripped}**", ""]
            section = True
        elif section and line.startswith("    ") and not line.startswith("        "):
            out.append(f"- {stripped}")
        elif section and line.startswith("        ") and out and out[-1].startswith("- "):
            out[-1] += f" {stripped}"
        else:
            section = section and not stripped  # a blank line stays in the section; prose ends it
            out.append(line)
    return out


def _cell(text: str) -> str:
    """Prose in one table cell: lines joined, paragraphs separated by ``<br>``, pipes escaped."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", _ROLE.sub("", text)) if p.strip()]
    return "<br><br>".join(escape(p, in_table=True) for p in paragraphs)


def _cell_escape(text: str) -> str:
    return escape(text, in_table=True)


def _indent(lines: list[str]) -> list[str]:
    return [f"    {line}" if line else "" for line in lines]
