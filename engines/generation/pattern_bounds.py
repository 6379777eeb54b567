r"""What a JSON Schema ``pattern`` costs as a grammar, known before any grammar is built.

The converter (llama-cpp-python's ``_visit_pattern``) writes a regular expression into GBNF
almost one to one, except that ``X{m,n}`` becomes ``n`` copies of ``X`` (``(X (X (X)?)?)?``), so
nested counts multiply: ``((a{0,1000}){0,1000}){0,30}`` is a 308-byte request whose grammar
describes 30 million positions. llama.cpp's matcher then keeps one parse stack per grammar
position the output so far can have reached, and each decoding step tests every vocabulary token
against every stack and deduplicates the stacks pairwise, so a step's cost grows fast with the
live positions (see docs/architecture/design-notes.md#what-a-grammar-step-costs).

So two things are bounded, both before the converter runs:

* :data:`MAX_PATTERN_POSITIONS`: the pattern's size once every ``{m,n}`` is expanded (the
  product of nested counts times what they repeat, summed over the pattern); this bounds the
  grammar's size and this module's own analysis;
* :data:`MAX_LIVE_POSITIONS`: the most positions a match can be at at once (after any prefix),
  found by running the pattern's automaton over every distinct input class (a subset
  construction over the expanded pattern, under a work budget, :class:`CompileBudget`). This is
  the number of stacks llama.cpp keeps, so it bounds each decoding step; an unambiguous pattern
  (``[a-z]{0,1000}``, ``([a-z]{1,10} ){0,9}``) stays at 1-3 whatever its counts.

The syntax read here is the converter's (literals, escapes, ``.``, ``[...]``, groups, ``|``,
``* + ? {m} {m,} {m,n} {,n}``), plus ``(?:`` and ``\d \w \s`` so that a pattern the converter
refuses is still measured, never skipped. Inputs on which the converter loops forever or crashes
(an unescaped ``]`` or ``}``, a quantifier with nothing to repeat, an unclosed group) are refused
here as ``INVALID_JSON_SCHEMA``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from engines.errors import InvalidArgumentError
from engines.reasons import Reason

MAX_PATTERN_POSITIONS = 4096
"""Most character positions of a ``pattern`` with every ``{m,n}`` expanded (``a{0,1000}`` is
1,000; ``(a{0,100}){0,100}`` 10,000). Four single quantifiers at the 1,000 limit fit; the
converter writes about 7 grammar characters per position, so one pattern stays under 30 K."""

MAX_LIVE_POSITIONS = 32
"""Most places a pattern's match can be at at once (llama.cpp's parse stacks). A step's cost grows
about cubically with them, because every stack's expansion is deduplicated against every other
(see docs/architecture/design-notes.md#what-a-grammar-step-costs)."""

ANALYSIS_FUEL = 1_000_000
"""Work units one schema's analysis may use in all (a unit is one state expanded or one position
of an explored set, under a microsecond each), so about half a second of one core. A pattern whose
automaton does not fit is refused rather than guessed at: the largest unambiguous ones (four
``{0,1000}`` of distinct classes) take 74,000."""

CHECK_EVERY = 512
"""Work units between two looks at the cancel flag."""

MAX_CODE_POINT = 0x10FFFF
_INVALID = Reason.INVALID_JSON_SCHEMA
REASON = Reason.JSON_SCHEMA_TOO_COMPLEX

# Node kinds of the parsed pattern.
_CHARS, _SEQ, _ALT, _REP = range(4)
_DIGIT = ((0x30, 0x39),)
_WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_SPACE = ((0x09, 0x0D), (0x20, 0x20))
_CLASS_ESCAPES = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CHAR_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v"}
_HEX_WIDTH = {"x": 2, "u": 4, "U": 8}
_DOT = ((0, 0x09), (0x0B, 0x0C), (0x0E, MAX_CODE_POINT))  # any character but \n and \r


class CompileCancelled(Exception):
    """The request that asked for this grammar went away; its compile stopped part way."""


class CompileBudget:
    """The work one grammar compile may do, and the flag that stops it when its request is cancelled.

    Args:
        fuel: work units (see :data:`ANALYSIS_FUEL`) the compile may spend in all.
        cancel: set by another thread when the request is cancelled; checked every
            :data:`CHECK_EVERY` units.

    """

    def __init__(self, fuel: int = ANALYSIS_FUEL, cancel: threading.Event | None = None) -> None:
        self.fuel = fuel
        self.left = fuel
        self.cancel = cancel
        self._until_check = CHECK_EVERY

    def spend(self, units: int, what: str) -> None:
        """Take ``units`` of work for ``what`` (named in the error).

        Raises:
            InvalidArgumentError: the budget is spent (reason ``JSON_SCHEMA_TOO_COMPLEX``).
            CompileCancelled: the cancel flag is set.

        """
        self.left -= units
        self._until_check -= units
        if self._until_check <= 0:
            self._until_check = CHECK_EVERY
            self.check_cancelled()
        if self.left < 0:
            raise InvalidArgumentError(
                f"{what}: too complex to bound within {self.fuel} units of analysis (many "
                "patterns, or repetitions of overlapping text)",
                reason=REASON,
                bound="analysis budget",
                value=self.fuel + 1,
                limit=self.fuel,
            )

    def check_cancelled(self) -> None:
        """Raise :class:`CompileCancelled` when the cancel flag is set."""
        if self.cancel is not None and self.cancel.is_set():
            raise CompileCancelled


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A parsed pattern, node 0 its root.

    Node ``i`` is ``kinds[i]`` with ``args[i]``: intervals of code points, children, or a
    repetition's ``(child, min, max or None)``.
    """

    kinds: tuple[int, ...]
    args: tuple[object, ...]


def _syntax_error(pattern: str, where: str, detail: str) -> InvalidArgumentError:
    shown = pattern if len(pattern) <= 80 else f"{pattern[:80]}..."
    return InvalidArgumentError(f"pattern {shown!r} at {where}: {detail}", reason=_INVALID)


def _escape(text: str, i: int) -> tuple[tuple[tuple[int, int], ...], int]:
    """The characters of the escape starting at ``text[i]`` (a backslash) and the index after it."""
    if i + 1 >= len(text):
        return ((ord("\\"), ord("\\")),), i + 1
    kind = text[i + 1]
    if kind in _CLASS_ESCAPES:
        return _CLASS_ESCAPES[kind], i + 2
    if kind in ("D", "W", "S"):
        return _complement(_CLASS_ESCAPES[kind.lower()]), i + 2
    width = _HEX_WIDTH.get(kind)
    digits = text[i + 2 : i + 2 + width] if width else ""
    if width and len(digits) == width and all(c in "0123456789abcdefABCDEF" for c in digits):
        code = min(int(digits, 16), MAX_CODE_POINT)
        return ((code, code),), i + 2 + width
    code = ord(_CHAR_ESCAPES.get(kind, kind))
    return ((code, code),), i + 2


def _merged(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """Sorted, disjoint, non-adjacent intervals covering ``ranges``."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def _complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    out, low = [], 0
    for start, end in sorted(ranges):
        if start > low:
            out.append((low, start - 1))
        low = max(low, end + 1)
    if low <= MAX_CODE_POINT:
        out.append((low, MAX_CODE_POINT))
    return tuple(out)


def _char_class(pattern: str, i: int, where: str) -> tuple[tuple[tuple[int, int], ...], int]:
    """The characters of the class opening at ``pattern[i] == '['`` and the index after it.

    Like the converter, the class ends at the first unescaped ``]``.
    """
    j = i + 1
    negated = pattern[j : j + 1] == "^"
    j += negated
    singles: list[tuple[int, int]] = []
    while j < len(pattern) and pattern[j] != "]":
        if pattern[j] == "\\":
            chars, j = _escape(pattern, j)
        else:
            chars, j = ((ord(pattern[j]), ord(pattern[j])),), j + 1
        # a-z: a single character, '-', a single character that is not the class's end
        if (
            len(chars) == 1
            and chars[0][0] == chars[0][1]
            and pattern[j : j + 1] == "-"
            and j + 1 < len(pattern)
            and pattern[j + 1] != "]"
        ):
            if pattern[j + 1] == "\\":
                end, j = _escape(pattern, j + 1)
            else:
                end, j = ((ord(pattern[j + 1]),) * 2,), j + 2
            chars = ((chars[0][0], end[-1][1]),) if end[-1][1] >= chars[0][0] else ()
        singles.extend(chars)
    if j >= len(pattern):
        raise _syntax_error(pattern, where, f"the character class at index {i} is not closed")
    ranges = tuple(sorted(singles))
    return (_complement(ranges) if negated else ranges), j + 1


def _quantifier(pattern: str, i: int, where: str) -> tuple[int, int | None, int]:
    """``(min, max or None, index after)`` of the quantifier at ``pattern[i]``."""
    c = pattern[i]
    if c != "{":
        return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c] + (i + 1,)
    end = pattern.find("}", i)
    if end < 0:
        raise _syntax_error(pattern, where, f"the quantifier at index {i} is not closed")
    parts = [part.strip() for part in pattern[i + 1 : end].split(",")]
    try:
        if len(parts) == 1:
            low = high = int(parts[0])
        elif len(parts) == 2:
            low = int(parts[0]) if parts[0] else 0
            high = int(parts[1]) if parts[1] else None
        else:
            raise ValueError
    except ValueError:
        raise _syntax_error(pattern, where, f"invalid quantifier {pattern[i : end + 1]}") from None
    return low, high, end + 1


def parse_pattern(pattern: str, where: str = "#") -> _Pattern:
    """Parse a ``pattern`` (anchors ``^``/``$`` at its ends dropped) the way the converter reads it.

    Iterative (a pattern of 1,000 ``(`` cannot exhaust the stack) and linear in its length.

    Raises:
        InvalidArgumentError: reason ``INVALID_JSON_SCHEMA`` for what the converter would loop
            on or crash on: an unescaped ``]`` or ``}``, a quantifier with nothing to repeat, an
            unbalanced group or class.

    """
    body = pattern[1:] if pattern.startswith("^") else pattern
    body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body
    kinds: list[int] = []
    args: list[object] = []

    def node(kind: int, arg: object) -> int:
        if kind == _CHARS:
            arg = _merged(arg)  # type: ignore[arg-type]
        kinds.append(kind)
        args.append(arg)
        return len(kinds) - 1

    root = node(_ALT, None)
    # One frame per open group: (its alternatives so far, the current sequence, its node, index).
    frames: list[tuple[list[int], list[int], int, int]] = [([], [], root, 0)]
    i = 0
    while i < len(body):
        alternatives, sequence, _, _ = frames[-1]
        c = body[i]
        if c == "(":
            start = i
            i += 1
            if body.startswith("?:", i):
                i += 2
            frames.append(([], [], node(_ALT, None), start))
        elif c == ")":
            if len(frames) == 1:
                raise _syntax_error(pattern, where, f"unbalanced ')' at index {i}")
            alternatives.append(node(_SEQ, tuple(sequence)))
            _, _, group, _ = frames.pop()
            args[group] = tuple(alternatives)
            frames[-1][1].append(group)
            i += 1
        elif c == "|":
            alternatives.append(node(_SEQ, tuple(sequence)))
            sequence.clear()
            i += 1
        elif c in "*+?{":
            if not sequence:
                raise _syntax_error(pattern, where, f"the quantifier at index {i} has nothing to repeat")
            low, high, i = _quantifier(body, i, where)
            sequence[-1] = node(_REP, (sequence[-1], low, high))
        elif c in "]}":
            # The converter's literal scanner stops on these without consuming them: it loops forever.
            raise _syntax_error(pattern, where, f"unescaped {c!r} at index {i} (write \\{c})")
        elif c == "[":
            chars, i = _char_class(body, i, where)
            sequence.append(node(_CHARS, chars))
        elif c == "\\":
            chars, i = _escape(body, i)
            sequence.append(node(_CHARS, chars))
        else:
            sequence.append(node(_CHARS, _DOT if c == "." else ((ord(c), ord(c)),)))
            i += 1
    if len(frames) > 1:
        raise _syntax_error(pattern, where, f"the group opened at index {frames[-1][3]} is not closed")
    alternatives, sequence, _, _ = frames[0]
    alternatives.append(node(_SEQ, tuple(sequence)))
    args[root] = tuple(alternatives)
    return _Pattern(tuple(kinds), tuple(args))


def expanded_positions(parsed: _Pattern) -> int:
    """Character positions of the pattern once every repetition is expanded as the converter does.

    ``X{m,n}`` counts ``n`` copies of ``X``; ``X{m,}`` (and ``*``, ``+``) ``m + 1``, since the
    converter writes ``m`` copies then one recursive rule. Exact (Python integers), linear in
    the number of nodes.
    """
    size: list[int | None] = [None] * len(parsed.kinds)
    stack = [0]
    while stack:  # post-order without recursion: a node is sized once its children are
        index = stack[-1]
        kind, arg = parsed.kinds[index], parsed.args[index]
        children = () if kind == _CHARS else (arg[0],) if kind == _REP else arg  # type: ignore[index]
        waiting = [child for child in children if size[child] is None]  # type: ignore[union-attr]
        if waiting:
            stack.extend(waiting)
            continue
        stack.pop()
        if kind == _CHARS:
            size[index] = 1
        elif kind == _REP:
            child, low, high = arg  # type: ignore[misc]
            size[index] = size[child] * (high if high is not None else low + 1)  # type: ignore[operator]
        else:
            size[index] = sum(size[child] for child in arg)  # type: ignore[misc, union-attr]
    return size[0]  # type: ignore[return-value]


class _Automaton:
    """The expanded pattern's position automaton, explored one set of live positions at a time.

    A position is ``(node, counter, continuation)``: an atom to match and the chain of what
    follows it (a sequence's next child, a repetition's count of copies started); two positions
    are equal exactly when llama.cpp's stacks for them are, so a set of positions is its set of
    stacks. ``None`` is the end of the pattern (an empty stack).
    """

    def __init__(self, parsed: _Pattern, budget: CompileBudget, what: str) -> None:
        self.kinds, self.args = parsed.kinds, parsed.args
        self.budget = budget
        self.what = what
        self._closures: dict[object, frozenset] = {}

    def closure(self, continuation: object) -> frozenset:
        """Every atom (with its continuation), or the end, that ``continuation`` reaches matching nothing."""
        cached = self._closures.get(continuation)
        if cached is not None:
            return cached
        out: set = set()
        seen: set = set()
        work = [continuation]
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            self.budget.spend(1, self.what)
            if item is None:
                out.add(None)
                continue
            index, count, rest = item
            kind, arg = self.kinds[index], self.args[index]
            if kind == _CHARS:
                out.add(item)
                if len(out) > MAX_LIVE_POSITIONS:
                    break  # the caller refuses: no need to list the rest
            elif kind == _SEQ:
                if count == len(arg):
                    work.append(rest)
                else:
                    work.append((arg[count], 0, (index, count + 1, rest)))
            elif kind == _ALT:
                work.extend((child, 0, rest) for child in arg)
            else:
                child, low, high = arg
                if high is None or count < high:
                    # Past its minimum an unbounded repetition is one recursive rule: one state.
                    following = count + 1 if high is not None or count < low else count
                    work.append((child, 0, (index, following, rest)))
                if count >= low:
                    work.append(rest)
        result = frozenset(out)
        self._closures[continuation] = result
        return result

    def successors(self, live: frozenset) -> list[frozenset]:
        """The live sets after one more character, one per class of characters live atoms tell apart."""
        atoms = [state for state in live if state is not None]
        events: list[tuple[int, int, int]] = []
        for number, (index, _, _) in enumerate(atoms):
            for low, high in self.args[index]:  # type: ignore[union-attr]
                events.append((low, 1, number))
                events.append((high + 1, -1, number))
        events.sort()
        groups: set[int] = set()
        active = 0
        for position, (point, change, number) in enumerate(events):
            active = active | (1 << number) if change > 0 else active & ~(1 << number)
            if active and (position + 1 == len(events) or events[position + 1][0] != point):
                groups.add(active)
        out = []
        for group in groups:
            following: set = set()
            for number, state in enumerate(atoms):
                if group >> number & 1:
                    following |= self.closure(state[2])
            # Unions, hashing and the seen-set lookup cost about one unit per position.
            self.budget.spend(1 + len(following), self.what)
            out.append(frozenset(following))
        return out


def live_positions(parsed: _Pattern, budget: CompileBudget, what: str) -> int:
    """The most positions the pattern's match can be at at once, over every possible input.

    Explores every distinct set of live positions (a subset construction); stops as soon as one
    exceeds :data:`MAX_LIVE_POSITIONS` (and returns its size), or the budget runs out.

    Raises:
        InvalidArgumentError: ``budget`` is spent (reason ``JSON_SCHEMA_TOO_COMPLEX``).
        CompileCancelled: the budget's cancel flag was set.

    """
    automaton = _Automaton(parsed, budget, what)
    start = automaton.closure((0, 0, None))
    most = len(start)
    seen = {start}
    frontier = [start]
    while frontier and most <= MAX_LIVE_POSITIONS:
        for following in automaton.successors(frontier.pop()):
            if following not in seen:
                most = max(most, len(following))
                seen.add(following)
                frontier.append(following)
    return most


def _too_complex(message: str, bound: str, value: int, limit: int) -> InvalidArgumentError:
    return InvalidArgumentError(message, reason=REASON, bound=bound, value=value, limit=limit)


def pattern_positions(pattern: str, where: str) -> tuple[_Pattern, int]:
    """Parse ``pattern`` and refuse it when its expansion exceeds :data:`MAX_PATTERN_POSITIONS`.

    Linear in the pattern's length (under a millisecond for 1,000 characters), so cheap enough
    for the request converters on the event loop; the ambiguity analysis is not.

    Returns:
        The parsed pattern and its expanded size (:func:`expanded_positions`).

    Raises:
        InvalidArgumentError: as :func:`check_pattern_complexity`, but never ``pattern ambiguity``
            or ``analysis budget``.

    """
    parsed = parse_pattern(pattern, where)
    positions = expanded_positions(parsed)
    if positions > MAX_PATTERN_POSITIONS:
        raise _too_complex(
            f"pattern at {where} expands to {positions} character positions (its nested "
            f"repetitions multiply); the limit is {MAX_PATTERN_POSITIONS}",
            "pattern positions",
            positions,
            MAX_PATTERN_POSITIONS,
        )
    return parsed, positions


def _check(pattern: str, where: str, budget: CompileBudget) -> PatternCost:
    parsed, positions = pattern_positions(pattern, where)
    budget.spend(len(parsed.kinds), f"pattern at {where}")
    live = live_positions(parsed, budget, f"pattern at {where}")
    if live > MAX_LIVE_POSITIONS:
        raise _too_complex(
            f"pattern at {where} can be matched at more than {MAX_LIVE_POSITIONS} places at once "
            "(nested or adjacent repetitions that can match the same text, such as (a?){0,100} "
            f"or (a{{0,9}}){{0,9}}); the limit is {MAX_LIVE_POSITIONS}",
            "pattern ambiguity",
            live,
            MAX_LIVE_POSITIONS,
        )
    return PatternCost(positions, live)


class LruCache:
    """A thread-safe mapping that keeps its ``size`` most recently used entries.

    Args:
        size: entries kept; the least recently used goes first.

    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: object) -> object | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: object, value: object) -> None:
        """Keep ``value`` for ``key``, dropping the least recently used entry past ``size``."""
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)


@dataclass(frozen=True, slots=True)
class PatternCost:
    """What a pattern that passed the bounds costs.

    Attributes:
        positions: character positions with every repetition expanded (at most
            :data:`MAX_PATTERN_POSITIONS`).
        live: the most places its match can be at at once (at most :data:`MAX_LIVE_POSITIONS`).

    """

    positions: int
    live: int


PATTERN_CACHE_SIZE = 1024
"""Distinct passed patterns remembered: tool schemas and retries repeat them, and an engine checks
a schema again when it builds its matcher. Refusals are not kept (they are cheap to find again)."""
_PASSED = LruCache(PATTERN_CACHE_SIZE)


def check_pattern_complexity(pattern: str, where: str, budget: CompileBudget) -> PatternCost:
    """Refuse a pattern whose grammar is too large, or too ambiguous to match in bounded time a step.

    Args:
        pattern: the ``pattern`` (or ``patternProperties`` key) text, at most the schema bounds'
            1,000 characters.
        where: its JSON pointer, for the message.
        budget: the schema's shared work budget and cancel flag.

    Returns:
        Its expanded size and most live positions.

    Raises:
        InvalidArgumentError: reason ``JSON_SCHEMA_TOO_COMPLEX`` (metadata ``bound`` of
            ``pattern positions``, ``pattern ambiguity`` or ``analysis budget``), or
            ``INVALID_JSON_SCHEMA`` for syntax the converter loops or crashes on.
        CompileCancelled: the budget's cancel flag was set.

    """
    budget.check_cancelled()
    cost = _PASSED.get(pattern)
    if cost is None:
        cost = _check(pattern, where, budget)
        _PASSED.put(pattern, cost)
    return cost  # type: ignore[return-value]
