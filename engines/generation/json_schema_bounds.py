"""Bounds on the JSON Schemas that structured output turns into grammars, checked before any native code.

A schema becomes a grammar that native code parses and runs (llama.cpp's GBNF parser, llguidance).
Repetition counts are expanded into grammar text (``maxItems: N`` becomes N nested optional
groups), and llama.cpp's recursive-descent GBNF parser recurses once per nesting level, so a
tiny request could overflow the native stack and take the whole process down (SIGSEGV). Measured
here (llama-cpp-python 0.3.36, 8 MiB main-thread stack, ``/tmp`` probes run in subprocesses):

* a GBNF of N nested ``("a" ...)?`` groups parses up to N = 18,000 and segfaults at N = 19,000;
* through llama-cpp-python's converter, ``maxItems``, ``maxLength`` and a pattern's ``{0,N}``
  parse up to N = 1,000, are refused by llama.cpp's own "sane defaults" repetition check
  (a null sampler, not a crash) from about N = 1,500, and segfault at N = 30,000.

So the limits below keep every repetition count at or under :data:`MAX_REPETITION` (1,000), the
grammar's group nesting at or under ``MAX_GRAMMAR_NESTING`` (see :mod:`json_grammar`, 18x under
the crash), and the schema's size small, far above what real schemas use (OpenAI's structured
outputs allow 5,000 properties in all and 10 levels of nesting; real tool schemas are a few KB).
What exceeds a bound is an :class:`~engines.errors.InvalidArgumentError` with reason
``JSON_SCHEMA_TOO_COMPLEX`` whose message names the bound and its limit.
"""

from __future__ import annotations

import re

from engines.errors import InvalidArgumentError

MAX_REPETITION = 1000
"""Largest ``maxItems``/``minItems``/``maxLength``/``minLength``/``maxProperties``/``minProperties``
/``maxContains``/``minContains`` and largest ``{m,n}`` quantifier count in a ``pattern``."""

MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of JSON values in a schema (each subschema level is one or two JSON levels), as
the request converters' own JSON depth limit; object levels are separate grammar rules, not nested
groups, so the grammar's nesting stays small."""

MAX_SCHEMA_NODES = 5000
"""Most JSON values (objects, arrays, strings, numbers...) in a whole schema."""

MAX_PROPERTIES = 256
"""Most ``properties`` (and ``patternProperties``) of one object schema: the converter's rules
for optional properties grow quadratically (600 optional properties took 0.73 s to convert here,
about 950 exhaust Python's recursion limit)."""

MAX_ENUM_VALUES = 1000
"""Most values of one ``enum``."""

MAX_REFS = 256
"""Most ``$ref`` occurrences in a schema (each becomes a grammar rule; none is fetched)."""

MAX_PATTERN_CHARS = 1000
"""Longest ``pattern`` regular expression, in characters."""

REASON = "JSON_SCHEMA_TOO_COMPLEX"

REPETITION_KEYWORDS = (
    "maxItems",
    "minItems",
    "maxLength",
    "minLength",
    "maxProperties",
    "minProperties",
    "maxContains",
    "minContains",
)
# Keywords whose values are data (instances), not subschemas: counted, never read as keywords.
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})
# Keywords whose values map any names (a property may be called "enum") to subschemas.
MAP_KEYWORDS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
_SCHEMA, _MAP, _DATA = 0, 1, 2
# {m}, {m,} and {m,n} quantifiers of a regular expression (an escaped brace is no quantifier).
_QUANTIFIER = re.compile(r"(?<!\\)\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _too_complex(message: str, bound: str, value: object, limit: int) -> InvalidArgumentError:
    return InvalidArgumentError(message, reason=REASON, bound=bound, value=value, limit=limit)


def _check_count(keyword: str, value: object, limit: int, where: str) -> None:
    # bool is an int subclass; a non-integer is the JSON Schema validator's business, not ours.
    if isinstance(value, int) and not isinstance(value, bool) and value > limit:
        raise _too_complex(
            f"{keyword} {value} at {where} exceeds the limit of {limit}", keyword, value, limit
        )


def _check_pattern(pattern: object, where: str) -> None:
    if not isinstance(pattern, str):
        return
    if len(pattern) > MAX_PATTERN_CHARS:
        raise _too_complex(
            f"pattern at {where} is {len(pattern)} characters long; the limit is {MAX_PATTERN_CHARS}",
            "pattern length",
            len(pattern),
            MAX_PATTERN_CHARS,
        )
    for match in _QUANTIFIER.finditer(pattern):
        for count in match.groups():
            if count and int(count) > MAX_REPETITION:
                raise _too_complex(
                    f"pattern quantifier {match.group(0)} at {where} exceeds the limit of {MAX_REPETITION}",
                    "pattern quantifier",
                    int(count),
                    MAX_REPETITION,
                )


def _local_target(schema: dict, ref: str, where: str) -> object:
    """The subschema a local ``#/...`` JSON pointer names (RFC 6901), or an error."""
    if not ref.startswith("#"):
        raise InvalidArgumentError(
            f"$ref {ref!r} at {where}: only local references (#/...) are supported; none is fetched",
            reason="INVALID_JSON_SCHEMA",
        )
    target: object = schema
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise InvalidArgumentError(
                f"$ref {ref!r} at {where} does not resolve", reason="INVALID_JSON_SCHEMA"
            )
    return target


def _check_ref_cycles(schema: dict, refs: set[str]) -> None:
    """Refuse a ``$ref`` that reaches itself without consuming any output (``a -> b -> a``).

    Recursion through ``properties`` or ``items`` (a tree) is fine; a cycle through bare
    references and ``allOf``/``anyOf``/``oneOf`` describes no finite value and makes grammar
    compilers loop or recurse.
    """

    def direct_refs(node: object) -> list[str]:
        out, stack = [], [node]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                if isinstance(item.get("$ref"), str):
                    out.append(item["$ref"])
                for key in ("allOf", "anyOf", "oneOf"):
                    if isinstance(item.get(key), list):
                        stack.extend(item[key])
        return out

    edges = {ref: direct_refs(_local_target(schema, ref, "$ref")) for ref in refs}
    edges["#"] = direct_refs(schema)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        path = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while path:
            ref, following = path[-1]
            nxt = next(following, None)
            if nxt is None:
                state[ref] = 2
                path.pop()
            elif state.get(nxt) == 1:
                names = [r for r, _ in path]
                cycle = " -> ".join([*names[names.index(nxt) :], nxt])
                raise InvalidArgumentError(
                    f"$ref cycle {cycle} describes no finite value", reason="INVALID_JSON_SCHEMA"
                )
            elif not state.get(nxt):
                state[nxt] = 1
                path.append((nxt, iter(edges.get(nxt, ()))))


def check_schema_bounds(schema: object) -> None:
    """Refuse a JSON Schema whose grammar would be too large for native code to build safely.

    Iterative (no recursion), linear in the schema's size, and stops at the first exceeded
    bound; run it before converting the schema to any grammar.

    Args:
        schema: a parsed JSON Schema (a dict, or a bool schema).

    Raises:
        InvalidArgumentError: a bound is exceeded (reason ``JSON_SCHEMA_TOO_COMPLEX``; metadata
            ``bound``, ``value``, ``limit``), or a ``$ref`` is not local, does not resolve or is
            part of a cycle that consumes nothing (reason ``INVALID_JSON_SCHEMA``).

    """
    nodes = 0
    refs: set[str] = set()
    ref_count = 0
    # (value, depth, JSON pointer, what it is: a schema, a map of names to schemas, or data)
    stack: list[tuple[object, int, str, int]] = [(schema, 1, "#", _SCHEMA)]
    while stack:
        node, depth, where, kind = stack.pop()
        nodes += 1
        if nodes > MAX_SCHEMA_NODES:
            raise _too_complex(
                f"the schema has more than {MAX_SCHEMA_NODES} JSON values; the limit is {MAX_SCHEMA_NODES}",
                "schema nodes",
                nodes,
                MAX_SCHEMA_NODES,
            )
        if depth > MAX_SCHEMA_DEPTH:
            raise _too_complex(
                f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels at {where}; "
                f"the limit is {MAX_SCHEMA_DEPTH}",
                "schema depth",
                depth,
                MAX_SCHEMA_DEPTH,
            )
        if isinstance(node, list):
            stack.extend((item, depth + 1, f"{where}/{i}", kind) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if kind == _SCHEMA:
            for keyword in REPETITION_KEYWORDS:
                _check_count(keyword, node.get(keyword), MAX_REPETITION, where)
            _check_pattern(node.get("pattern"), where)
            for key in ("properties", "patternProperties"):
                if isinstance(node.get(key), dict):
                    _check_count(f"the number of {key}", len(node[key]), MAX_PROPERTIES, where)
            if isinstance(node.get("patternProperties"), dict):
                for pattern in node["patternProperties"]:
                    _check_pattern(pattern, f"{where}/patternProperties")
            if isinstance(node.get("enum"), list):
                _check_count("the number of enum values", len(node["enum"]), MAX_ENUM_VALUES, where)
            if isinstance(node.get("$ref"), str):
                ref_count += 1
                _check_count("the number of $ref", ref_count, MAX_REFS, where)
                refs.add(node["$ref"])
        for key, value in node.items():
            if kind == _SCHEMA:
                child = _DATA if key in DATA_KEYWORDS else _MAP if key in MAP_KEYWORDS else _SCHEMA
            else:
                child = _DATA if kind == _DATA else _SCHEMA
            stack.append((value, depth + 1, f"{where}/{key}", child))
    if refs and isinstance(schema, dict):
        _check_ref_cycles(schema, refs)
