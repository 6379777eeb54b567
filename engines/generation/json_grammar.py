r"""Strict, bounded GBNF grammars for JSON output (llama.cpp) and the one check of a request's constraint.

The grammar text comes from llama-cpp-python's JSON-Schema converter (a port of llama.cpp's
``json_schema_to_grammar.py``), corrected here in one place, :class:`StrictSchemaConverter`,
because its output is not always JSON (RFC 8259 section 7: control characters U+0000-U+001F,
``"`` and ``\\`` appear in strings only escaped):

* its ``char`` rule is ``[^"\\]``, which lets raw control characters (a newline) into strings;
* ``const``/``enum`` literals keep JSON's backslashes unescaped, so GBNF reads ``\\n`` in
  ``"a\\nb"`` as a raw newline (and a ``\\"`` ends the literal);
* ``pattern`` strings are copied into the grammar character for character, so a pattern's
  ``"``, ``\\`` or control characters (``.``, ``[^a]``, ``\\t``) come out unescaped.

Numbers already follow JSON (no leading zeros, no NaN/Infinity), as does llama-cpp-python's
``JSON_GBNF``; ``json_object`` uses this converter's object rule so that one string rule serves all.

Before any grammar is built the schema is bounded (:func:`check_schema_bounds`), and the grammar
text is bounded again (:func:`check_grammar_bounds`) by what drives llama.cpp's native parser: its
recursion follows the nesting of groups, and its work the text's length and rule count. With
these bounds the native parse cannot overflow, so it runs in-process without a child process (see
docs/architecture/design-notes.md#grammar-nesting-and-the-native-stack).

Compiling is bounded work (the bounds above, then a converter whose input they bound) done before
a request reaches its model's lane, in :data:`COMPILE_WORKERS` threads of its own, under a
:class:`~engines.generation.pattern_bounds.CompileBudget` whose cancel flag the request's
cancellation sets (:func:`compile_output_constraint`); the engine finds the grammar cached.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from engines.errors import InvalidArgumentError
from engines.generation.json_schema_bounds import PREFIX_TREE_END, REASON, check_schema_bounds, prefix_tree
from engines.generation.pattern_bounds import CompileBudget, LruCache
from engines.generation.structured import OutputConstraint, output_constraint
from engines.reasons import Reason
from engines.types import GenerationRequest

T = TypeVar("T")

MAX_GRAMMAR_NESTING = 1200
"""Deepest nesting of ``( ... )`` groups in a GBNF grammar: 1,000 repetitions plus schema depth,
far under the depth that overflows llama.cpp's parser's stack
(see docs/architecture/design-notes.md#grammar-nesting-and-the-native-stack)."""

MAX_GRAMMAR_CHARS = 512 * 1024
"""Longest GBNF grammar text, in characters (a 1,000-item array of objects is about 50 K)."""

MAX_GRAMMAR_RULES = 10_000
"""Most rules in a GBNF grammar."""

GRAMMAR_CACHE_SIZE = 256
"""Distinct schemas whose grammars are kept (least recently used goes first)."""

COMPILE_WORKERS = 4
"""Threads that compile grammars: their own, so that a burst of large schemas queues behind
itself, not behind (or in front of) the other work of asyncio's shared executor."""

_GRAMMARS = LruCache(GRAMMAR_CACHE_SIZE)
# What llama-cpp-python's converter raises on schemas it cannot read (its asserts, its parsing).
_CONVERTER_ERRORS = (
    AssertionError,
    AttributeError,
    IndexError,
    KeyError,
    TypeError,
    ValueError,
    RecursionError,
)
_COMPILE_POOL = ThreadPoolExecutor(max_workers=COMPILE_WORKERS, thread_name_prefix="grammar-compile")

# JSON's string character: anything but '"', '\' and control characters, or an escape.
STRICT_CHAR = r'[^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])'
# A regex '.' (any character but line breaks) as it appears inside a JSON string.
STRICT_DOT = r'[^"\\\x00-\x1F] | "\\" ["\\/bft]'
# Characters a JSON string holds only escaped, and their short escapes (RFC 8259 section 7).
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE_RANGES = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
_GBNF_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_GBNF_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[^"\[]+', re.DOTALL)
_GROUP_SCAN = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|#[^\n]*|[()]', re.DOTALL)


def _decode_gbnf_chars(text: str) -> list[str]:
    r"""The characters of a GBNF literal's or class's body (``\\x``, ``\\u``, ``\\U`` and short escapes)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        kind = text[i + 1 : i + 2]
        width = {"x": 2, "u": 4, "U": 8}.get(kind)
        if width:
            digits = text[i + 2 : i + 2 + width]
            if not re.fullmatch(r"[0-9a-fA-F]+", digits) or len(digits) != width:
                raise ValueError(f"bad escape {text[i : i + 2 + width]!r}")
            out.append(chr(int(digits, 16)))
            i += 2 + width
        elif kind in _GBNF_ESCAPES:
            out.append(_GBNF_ESCAPES[kind])
            i += 2
        else:
            raise ValueError(f"the pattern escape \\{kind} is not supported")
    return out


def _gbnf_char(c: str) -> str:
    """One character as GBNF writes it inside a literal or a class."""
    if c in '"\\[]-' or ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02X}"
    return c


def _gbnf_literal(text: str) -> str:
    return '"' + "".join(_gbnf_char(c) for c in text) + '"'


def _class_ranges(body: list[str]) -> list[tuple[int, int]]:
    ranges, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            ranges.append((ord(body[i]), ord(body[i + 2])))
            i += 3
        else:
            ranges.append((ord(body[i]), ord(body[i])))
            i += 1
    return ranges


def _strict_class(token: str) -> str:
    r"""A pattern's character class as the JSON-string text of its characters.

    Safe characters stay one class; ``"``, ``\\`` and the short-escaped control characters the
    class admits become their escapes; other control characters (``\\u00XX`` only) are left out.
    """
    negated = token.startswith("[^")
    ranges = _class_ranges(_decode_gbnf_chars(token[2 if negated else 1 : -1]))

    def admits(code: int) -> bool:
        inside = any(low <= code <= high for low, high in ranges)
        return inside != negated

    escapes = [_gbnf_literal(esc) for ch, esc in _SHORT_ESCAPES.items() if admits(ord(ch))]
    if negated:
        body = "".join(f"{_gbnf_char(chr(lo))}-{_gbnf_char(chr(hi))}" for lo, hi in ranges + _UNSAFE_RANGES)
        safe = f"[^{body}]"
    else:
        kept = []
        for low, high in ranges:
            for bad_low, bad_high in _UNSAFE_RANGES:  # cut each unsafe span out of the range
                if low <= bad_high and bad_low <= high:
                    if low < bad_low:
                        kept.append((low, bad_low - 1))
                    low = max(low, bad_high + 1)
            if low <= high:
                kept.append((low, high))
        safe = "[" + "".join(f"{_gbnf_char(chr(lo))}-{_gbnf_char(chr(hi))}" for lo, hi in kept) + "]"
        if not kept:
            safe = ""
    options = ([safe] if safe else []) + escapes
    if not options:
        raise ValueError(f"the character class {token} admits no character a JSON string can hold")
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _strict_pattern_text(rule: str) -> str:
    """Rewrite a pattern rule's literals and classes to the JSON-string form of what they match."""
    out = []
    for match in _GBNF_TOKEN.finditer(rule):
        token = match.group(0)
        if token.startswith('"'):
            value = "".join(_decode_gbnf_chars(token[1:-1]))
            out.append(_gbnf_literal(json.dumps(value, ensure_ascii=False)[1:-1]))
        elif token.startswith("["):
            out.append(_strict_class(token))
        else:
            out.append(token)
    return "".join(out)


def literal_trie(texts: list[str], add_rule: Callable[[str, str], str], name: str) -> str:
    """GBNF for "one of ``texts``" as a prefix tree: one rule per branching point.

    The upstream ``"v0" | "v1" | ... | "v999"`` keeps one llama.cpp parse stack per value alive
    until the values differ, and every decoding step tests every token against each (see
    docs/architecture/design-notes.md#what-a-grammar-step-costs); the tree keeps one per next
    character. Iterative, linear in the texts' length.

    Args:
        texts: the literal texts (JSON as the output must spell it), at least one.
        add_rule: the converter's ``_add_rule(name, body) -> rule name``.
        name: the prefix of the branching rules' names.

    Returns:
        The GBNF expression (a literal, a rule reference, or both in sequence).

    """
    end = PREFIX_TREE_END
    root = prefix_tree(texts)
    order, stack = [], [root]
    while stack:  # parents before children; expressions are built in the reverse order
        node = stack.pop()
        order.append(node)
        stack.extend(child for key, child in node.items() if key)
    # Per node: (the literal text every value below shares next, the rule reference after it).
    exprs: dict[int, tuple[str, str]] = {}
    for node in reversed(order):
        keys = [key for key in node if key]
        if len(keys) == 1 and end not in node:
            prefix, rest = exprs[id(node[keys[0]])]
            exprs[id(node)] = (keys[0] + prefix, rest)
            continue
        if not keys:
            exprs[id(node)] = ("", "")
            continue
        options = []
        for key in keys:
            prefix, rest = exprs[id(node[key])]
            options.append(" ".join(part for part in (_gbnf_literal(key + prefix), rest) if part))
        body = " | ".join(options)
        rule = add_rule(f"{name}-enum-{len(exprs)}", f"({body})?" if end in node else body)
        exprs[id(node)] = ("", rule)
    prefix, rest = exprs[id(root)]
    return " ".join(part for part in (_gbnf_literal(prefix) if prefix else "", rest) if part) or '""'


def _plain_enum(schema: object) -> bool:
    """Whether the upstream converter reaches its ``enum`` branch for ``schema`` (its order)."""
    return (
        isinstance(schema, dict)
        and isinstance(schema.get("enum"), list)
        and bool(schema["enum"])
        and not {"$ref", "oneOf", "anyOf", "const"} & schema.keys()
        and not isinstance(schema.get("type"), list)
    )


def _converter_class() -> type:
    from llama_cpp.llama_grammar import PRIMITIVE_RULES, RESERVED_NAMES, BuiltinRule, SchemaConverter

    strict_rules = {"char": BuiltinRule(STRICT_CHAR, [])}
    quote_open, quote_close = '"\\"" ', ' "\\"" space'

    class StrictSchemaConverter(SchemaConverter):
        """llama-cpp-python's converter whose strings are always JSON strings (see the module docstring)."""

        def _add_primitive(self, name, rule):
            return super()._add_primitive(name, strict_rules.get(name, rule))

        def _add_rule(self, name, rule):
            return super()._add_rule(name, STRICT_DOT if name == "dot" else rule)

        def visit(self, schema, name):
            if _plain_enum(schema):
                rule_name = name + "-" if name in RESERVED_NAMES else name or "root"
                texts = [json.dumps(value) for value in schema["enum"]]  # as upstream spells them
                return self._add_rule(rule_name, literal_trie(texts, self._add_rule, rule_name))
            return super().visit(schema, name)

        def _format_literal(self, literal):
            # The upstream escapes only CR, LF and '"': JSON's own backslashes must survive too.
            return _gbnf_literal(literal)

        def _visit_pattern(self, pattern, name):
            before = dict(self._rules)
            key = super()._visit_pattern(pattern, name)
            for rule_name, rule in list(self._rules.items()):
                if rule_name in ("dot", "space") or before.get(rule_name) == rule:
                    continue
                if rule_name == key and rule.startswith(quote_open) and rule.endswith(quote_close):
                    inner = rule[len(quote_open) : -len(quote_close)]
                    self._rules[rule_name] = quote_open + _strict_pattern_text(inner) + quote_close
                else:
                    self._rules[rule_name] = _strict_pattern_text(rule)
            return key

    assert "char" in PRIMITIVE_RULES  # the rule this class replaces still exists upstream
    return StrictSchemaConverter


def check_grammar_bounds(grammar: str) -> None:
    """Refuse GBNF text that llama.cpp's native parser could not handle safely.

    Raises:
        InvalidArgumentError: longer than :data:`MAX_GRAMMAR_CHARS`, more than
            :data:`MAX_GRAMMAR_RULES` rules, or groups nested deeper than
            :data:`MAX_GRAMMAR_NESTING` (reason ``JSON_SCHEMA_TOO_COMPLEX``).

    """
    checks = [("grammar size (characters)", len(grammar), MAX_GRAMMAR_CHARS)]
    if len(grammar) <= MAX_GRAMMAR_CHARS:
        depth = deepest = 0
        for token in _GROUP_SCAN.findall(grammar):
            if token == "(":
                depth += 1
                deepest = max(deepest, depth)
            elif token == ")":
                depth -= 1
        checks += [
            ("grammar rules", grammar.count("::="), MAX_GRAMMAR_RULES),
            ("grammar nesting", deepest, MAX_GRAMMAR_NESTING),
        ]
    for bound, value, limit in checks:
        if value > limit:
            raise InvalidArgumentError(
                f"the JSON schema's {bound} {value} exceeds the limit of {limit}",
                reason=REASON,
                bound=bound,
                value=value,
                limit=limit,
            )


def gbnf_grammar(constraint: OutputConstraint, budget: CompileBudget | None = None) -> str:
    """The strict, bounded GBNF text (root rule ``root``) for ``constraint``; cached per schema.

    Args:
        constraint: the output constraint.
        budget: the compile's work budget and cancel flag (a fresh one when None).

    Raises:
        InvalidArgumentError: the schema or its grammar exceeds a bound (reason
            ``JSON_SCHEMA_TOO_COMPLEX``) or cannot be turned into a grammar (``INVALID_JSON_SCHEMA``).
        CompileCancelled: ``budget``'s cancel flag was set.

    """
    schema = constraint.schema if constraint.schema is not None else {"type": "object"}
    # Keys keep their order: properties are generated in the schema's order (a tool call's
    # "name" before its "arguments").
    schema_text = json.dumps(schema)
    grammar = _GRAMMARS.get(schema_text)
    if grammar is not None:
        return grammar  # type: ignore[return-value]
    budget = budget if budget is not None else CompileBudget()
    schema = json.loads(schema_text)  # the converter's own copy: it adds keys to what it visits
    check_schema_bounds(schema, budget)
    converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    try:
        converter.visit(converter.resolve_refs(schema, "input"), "")
        grammar = converter.format_grammar()
    except _CONVERTER_ERRORS as exc:
        raise InvalidArgumentError(
            f"the JSON schema cannot be turned into a grammar: {exc}", reason=Reason.INVALID_JSON_SCHEMA
        ) from None
    budget.check_cancelled()
    check_grammar_bounds(grammar)
    _GRAMMARS.put(schema_text, grammar)
    return grammar


def validate_output_constraint(
    request: GenerationRequest, budget: CompileBudget | None = None
) -> OutputConstraint | None:
    """Check a request's output constraint once, before a model slot is taken and before native code.

    Bounds the schema and builds its grammar (cached, so the engine reuses it); every engine
    enforces the same bounds, so a schema is accepted or refused alike whichever model serves it.

    Args:
        request: the generation request.
        budget: the compile's work budget and cancel flag (a fresh one when None).

    Returns:
        The constraint (None for free text).

    Raises:
        InvalidArgumentError: as :func:`gbnf_grammar`.
        CompileCancelled: ``budget``'s cancel flag was set.

    """
    constraint = output_constraint(request)
    if constraint is not None:
        gbnf_grammar(constraint, budget)
    return constraint


async def compile_in_worker(function: Callable[..., T], *args: object) -> T:
    """Run ``function(*args, budget)`` in a grammar compile thread; cancelling the caller stops it.

    The loop is never blocked, and the work never runs on a model's lane. When the awaiting task
    is cancelled (its client went away), a compile not yet started never starts and one running
    stops at its budget's next look at the cancel flag (every few milliseconds).

    Args:
        function: :func:`validate_output_constraint` or :func:`gbnf_grammar`.
        args: its arguments before the budget.

    Returns:
        What ``function`` returns.

    Raises:
        What ``function`` raises; asyncio.CancelledError when the caller is cancelled.

    """
    cancel = threading.Event()
    budget = CompileBudget(cancel=cancel)
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_COMPILE_POOL, functools.partial(function, *args, budget))
    try:
        return await future
    except asyncio.CancelledError:
        cancel.set()
        raise
