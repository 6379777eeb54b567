"""Bounds on the JSON Schemas that structured output turns into grammars, checked before any native code.

A schema becomes a grammar that native code parses and runs (llama.cpp's GBNF parser, llguidance).
Repetition counts are expanded into grammar text (``maxItems: N`` becomes N nested optional
groups), and llama.cpp's recursive-descent GBNF parser recurses once per nesting level, so a
tiny request could overflow the native stack and take the whole process down (SIGSEGV); where
it does is in docs/architecture/design-notes.md#grammar-nesting-and-the-native-stack.

So the limits below keep every repetition count at or under :data:`MAX_REPETITION` (1,000), the
grammar's group nesting at or under ``MAX_GRAMMAR_NESTING`` (see :mod:`json_grammar`, far under the
crash), and the schema's size small, far above what real schemas use (OpenAI's structured outputs
allow 5,000 properties in all and 10 levels of nesting; real tool schemas are a few KB). Bounding
each count alone is not enough: counts that nest multiply. A short ``"pattern"`` of nested counted
repetitions can hold a model's lane for minutes (see
docs/architecture/design-notes.md#nested-repetitions-multiply), and a union of many ambiguous
patterns multiplies llama.cpp's parse stacks in the same way. So the product of nested repetitions
is bounded along every nesting chain (:data:`MAX_REPETITION_PRODUCT`), each ``pattern``'s expanded
size and ambiguity is measured before its grammar exists (:mod:`engines.generation.pattern_bounds`),
and so are the alternatives a union keeps alive at once (:data:`MAX_LIVE_ALTERNATIVES`). All of it
is bounded work under one :class:`~engines.generation.pattern_bounds.CompileBudget` that a cancelled
request stops.

What exceeds a bound is an :class:`~engines.errors.InvalidArgumentError` with reason
``JSON_SCHEMA_TOO_COMPLEX`` whose message names the bound and its limit.
"""

from __future__ import annotations

import json
import re

from engines.errors import InvalidArgumentError
from engines.generation.pattern_bounds import CompileBudget, check_pattern_complexity, pattern_positions
from engines.reasons import Reason

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
for optional properties grow quadratically, and recurse once per property (see
docs/architecture/design-notes.md#what-a-grammar-step-costs)."""

MAX_ENUM_VALUES = 1000
"""Most values of one ``enum``."""

MAX_REFS = 256
"""Most ``$ref`` occurrences in a schema (each becomes a grammar rule; none is fetched)."""

MAX_PATTERN_CHARS = 1000
"""Longest ``pattern`` regular expression, in characters."""

MAX_REPETITION_PRODUCT = MAX_REPETITION * MAX_REPETITION
"""Largest product of the repetition counts (``maxItems``, ``maxLength``..., a pattern's expanded
size) along one chain of nested subschemas: two nested counts at the single-count limit. A value
at that product is a million items or characters, about 250 K tokens, more than any context here
holds, so a larger product only describes output no request can finish; and llama.cpp's matcher
still steps quickly at it (see docs/architecture/design-notes.md#what-a-grammar-step-costs)."""

MAX_LIVE_ALTERNATIVES = 256
"""Most parse positions a schema's alternatives can keep alive at once: ``anyOf``/``oneOf``
members, ``type`` lists, an enum's widest branching, an object's optional keys, each pattern its
ambiguity. llama.cpp tests every token against each, so a step's cost grows with them; at 256 a
step stays near a tenth of a second (see docs/architecture/design-notes.md#what-a-grammar-step-costs)."""

REASON = Reason.JSON_SCHEMA_TOO_COMPLEX

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


def _check_pattern(pattern: object, where: str, budget: CompileBudget | None) -> int:
    """The pattern's expanded size (1 for no pattern) once its length, counts and cost pass.

    Without a budget its ambiguity is not analysed (see :func:`check_schema_bounds`).
    """
    if not isinstance(pattern, str):
        return 1
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
    if budget is None:
        return pattern_positions(pattern, where)[1]
    return check_pattern_complexity(pattern, where, budget).positions


def _local_target(schema: dict, ref: str, where: str) -> object:
    """The subschema a local ``#/...`` JSON pointer names (RFC 6901), or an error."""
    if not ref.startswith("#"):
        raise InvalidArgumentError(
            f"$ref {ref!r} at {where}: only local references (#/...) are supported; none is fetched",
            reason=Reason.INVALID_JSON_SCHEMA,
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
                f"$ref {ref!r} at {where} does not resolve", reason=Reason.INVALID_JSON_SCHEMA
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
                    f"$ref cycle {cycle} describes no finite value", reason=Reason.INVALID_JSON_SCHEMA
                )
            elif not state.get(nxt):
                state[nxt] = 1
                path.append((nxt, iter(edges.get(nxt, ()))))


def _alternatives(node: dict, schema: dict) -> tuple[list[object], list[object]]:
    """``node``'s subschemas matched one of several ways (a union's members) and the others."""
    union = node.get("oneOf") or node.get("anyOf")  # the converter's own choice
    unions = list(union) if isinstance(union, list) else []
    others: list[object] = []
    ref = node.get("$ref")
    if isinstance(ref, str):
        others.append(_local_target(schema, ref, "$ref"))
    for key in ("properties", "patternProperties"):
        if isinstance(node.get(key), dict):
            others.extend(node[key].values())
    for key in ("items", "additionalProperties", "contains", "not"):
        if isinstance(node.get(key), dict):
            others.append(node[key])
    for key in ("prefixItems", "allOf", "items"):
        if isinstance(node.get(key), list):
            others.extend(node[key])
    return unions, others


PREFIX_TREE_END = ""
"""The key of :func:`prefix_tree` that marks "a text ends here" (no character is the empty string)."""


def prefix_tree(texts: list[str]) -> dict:
    """The character trie of ``texts``.

    Nested dicts keyed by character, with :data:`PREFIX_TREE_END` where a text ends. Iterative,
    linear in the texts' total length.
    """
    root: dict = {}
    for text in texts:
        node = root
        for ch in text:
            node = node.setdefault(ch, {})
        node[PREFIX_TREE_END] = {}
    return root


def enum_live(values: list) -> int:
    """Parse positions an ``enum`` keeps alive at once: the widest branching of its values' trie.

    The grammar matches an enum through its prefix tree
    (:func:`~engines.generation.json_grammar.literal_trie`), so it costs the most next characters
    one prefix allows, not the number of values.
    """
    widest, stack = 1, [prefix_tree([json.dumps(value) for value in values])]
    while stack:
        node = stack.pop()
        widest = max(widest, len(node))
        stack.extend(child for key, child in node.items() if key)
    return widest


def _check_live_alternatives(schema: dict, budget: CompileBudget) -> None:
    """Refuse a schema whose unions keep more than :data:`MAX_LIVE_ALTERNATIVES` positions alive.

    A union counts the sum of its members (they are all alive until the output tells them apart),
    any other subschema its largest part (one property or item is matched at a time); a string
    its pattern's ambiguity, a ``type`` list its length, an ``enum`` its widest branching, an
    object its optional properties.
    Post-order without recursion; a ``$ref`` cycle counts 1 (it is a grammar rule, not a copy).
    """
    live: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[object, bool]] = [(schema, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, dict) or (not done and (id(node) in live or id(node) in on_path)):
            continue
        budget.spend(1, "the schema's alternatives")
        unions, others = _alternatives(node, schema)
        if not done:
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in unions + others)
            continue
        on_path.discard(id(node))
        own = 1
        if isinstance(node.get("pattern"), str):
            own = check_pattern_complexity(node["pattern"], "#", budget).live
        if isinstance(node.get("type"), list):
            own = max(own, len(node["type"]))
        if isinstance(node.get("enum"), list):
            own = max(own, enum_live(node["enum"]))
        if isinstance(node.get("properties"), dict):  # where a key comes, each optional one may
            required = node.get("required") if isinstance(node.get("required"), list) else []
            own = max(own, sum(1 for name in node["properties"] if name not in required))
        total = sum(live.get(id(child), 1) for child in unions)
        largest = max((live.get(id(child), 1) for child in others), default=1)
        live[id(node)] = max(own, total, largest)
    if live.get(id(schema), 1) > MAX_LIVE_ALTERNATIVES:
        value = live[id(schema)]
        raise _too_complex(
            f"the schema's alternatives (anyOf/oneOf members, type lists and their patterns) can "
            f"be matched at {value} places at once; the limit is {MAX_LIVE_ALTERNATIVES}",
            "live alternatives",
            value,
            MAX_LIVE_ALTERNATIVES,
        )


def _repetition_factor(node: dict, where: str, budget: CompileBudget | None) -> int:
    """The largest repetition count of one subschema (1 for none), each count checked alone."""
    factor = 1
    for keyword in REPETITION_KEYWORDS:
        value = node.get(keyword)
        _check_count(keyword, value, MAX_REPETITION, where)
        if isinstance(value, int) and not isinstance(value, bool):
            factor = max(factor, value)
    return max(factor, _check_pattern(node.get("pattern"), where, budget))


def check_schema_bounds(schema: object, budget: CompileBudget | None = None) -> None:
    """Refuse a JSON Schema whose grammar would be too large for native code to build or run safely.

    Iterative (no recursion) and stops at the first exceeded bound; run it before converting the
    schema to any grammar. Without a budget it is linear in the schema's size (a few ms for the
    largest schema a request converter takes on the event loop): sizes, counts, their products and
    each pattern's expanded size. With one it also analyses each new pattern's ambiguity and the
    alternatives kept alive at once: bounded work for a grammar compile's worker thread.

    Args:
        schema: a parsed JSON Schema (a dict, or a bool schema).
        budget: the compile's work budget and cancel flag; None for the linear checks only.

    Raises:
        InvalidArgumentError: a bound is exceeded (reason ``JSON_SCHEMA_TOO_COMPLEX``; metadata
            ``bound``, ``value``, ``limit``), or a ``$ref`` is not local, does not resolve or is
            part of a cycle that consumes nothing, or a pattern uses syntax the converter cannot
            read (reason ``INVALID_JSON_SCHEMA``).
        CompileCancelled: ``budget``'s cancel flag was set.

    """
    nodes = 0
    refs: set[str] = set()
    ref_count = 0
    # (value, depth, JSON pointer, what it is: a schema, a map of names to schemas, or data,
    # the product of the repetition counts of the subschemas around it)
    stack: list[tuple[object, int, str, int, int]] = [(schema, 1, "#", _SCHEMA, 1)]
    while stack:
        node, depth, where, kind, product = stack.pop()
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
            stack.extend((item, depth + 1, f"{where}/{i}", kind, product) for i, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if kind == _SCHEMA:
            product *= _repetition_factor(node, where, budget)
            if product > MAX_REPETITION_PRODUCT:
                raise _too_complex(
                    f"nested repetitions multiply to {product} at {where} (the product of the "
                    f"maxItems/minItems/maxLength/minLength/pattern counts around it); the limit "
                    f"is {MAX_REPETITION_PRODUCT}",
                    "repetition product",
                    product,
                    MAX_REPETITION_PRODUCT,
                )
            for key in ("properties", "patternProperties"):
                if isinstance(node.get(key), dict):
                    _check_count(f"the number of {key}", len(node[key]), MAX_PROPERTIES, where)
            if isinstance(node.get("patternProperties"), dict):
                for pattern in node["patternProperties"]:
                    _check_pattern(pattern, f"{where}/patternProperties", budget)
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
            stack.append((value, depth + 1, f"{where}/{key}", child, product))
    if refs and isinstance(schema, dict):
        _check_ref_cycles(schema, refs)
    if budget is not None and isinstance(schema, dict):
        _check_live_alternatives(schema, budget)
