"""Hypothesis strategies for any protobuf message, built from its descriptor.

Nothing here knows an RPC: :func:`messages` walks the fields of a ``Descriptor`` (scalars,
enums, repeated fields, nested messages up to a depth, oneofs) so a new field or RPC is fuzzed
without touching this file. ``overrides`` (keyed by a field's full name or plain name) narrow the
few fields where fully random values would only test one early check (model names) or would be
costly or leave state behind (token budgets, names of fitted classifiers and detectors).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from google.protobuf import descriptor, message, message_factory
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FD = descriptor.FieldDescriptor

# Examples per fuzzed operation: small and fixed in CI (`make test`), larger for `make fuzz`.
EXAMPLES = int(os.environ.get("UR_FUZZ_EXAMPLES", "12"))
# Derandomized, with no example database: CI sends the same inputs on every run, so a failure
# there is reproducible and not a lucky draw. No per-example deadline: the tests time calls
# themselves against the server's deadline, and a model load may make the first call slow.
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
# Nested messages deeper than this are left empty: the contract nests at most three levels.
MAX_DEPTH = 3
# Repeated fields get at most this many items, so one request stays a few KiB.
MAX_ITEMS = 3

_INT_RANGES = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}

# Edge strings: empty, blank, control and non-BMP characters, and one "huge-ish" string (8 KiB)
# that is still far under the message limit but past most per-field limits.
_EDGE_TEXT = ["", " ", "\x00", "\n\t", "é€😀", "a" * 8192, "{}", "-1", "nan"]
_EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e-45, 3.4e38, -3.4e38]


def _ints(field_type: int) -> st.SearchStrategy[int]:
    low, high = _INT_RANGES[field_type]
    edges = sorted({low, high, 0, 1, max(low, -1), 2, 7, 255, 4096}, key=abs)
    return st.one_of(st.sampled_from(edges), st.integers(min_value=max(low, -1000), max_value=1000))


def _floats(width: int) -> st.SearchStrategy[float]:
    return st.one_of(st.sampled_from(_EDGE_FLOATS), st.floats(width=width))


def _texts() -> st.SearchStrategy[str]:
    # Plain words first: a request whose every string is odd stops at the first check, so most
    # strings are ordinary for the deeper code to be reached too.
    words = st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=20)
    return st.one_of(words, st.sampled_from(_EDGE_TEXT), st.text(max_size=40))


def _enums(enum: descriptor.EnumDescriptor) -> st.SearchStrategy[int]:
    # Proto3 enums are open: numbers the contract does not name still arrive at the server.
    known = [value.number for value in enum.values]
    return st.one_of(st.sampled_from(known), st.sampled_from([-1, max(known) + 1, 2**31 - 1]))


def scalar(field: descriptor.FieldDescriptor) -> st.SearchStrategy:
    """Values for one non-message field (one element of it when it is repeated)."""
    if field.type in _INT_RANGES:
        return _ints(field.type)
    if field.type == FD.TYPE_DOUBLE:
        return _floats(64)
    if field.type == FD.TYPE_FLOAT:
        return _floats(32)
    if field.type == FD.TYPE_BOOL:
        return st.booleans()
    if field.type == FD.TYPE_ENUM:
        return _enums(field.enum_type)
    if field.type == FD.TYPE_STRING:
        return _texts()
    if field.type == FD.TYPE_BYTES:
        return st.binary(max_size=64)
    raise TypeError(f"no strategy for {field.full_name} (type {field.type})")


def _override(field: descriptor.FieldDescriptor, overrides: Mapping[str, st.SearchStrategy]):
    return overrides.get(field.full_name, overrides.get(field.name))


def _values(
    field: descriptor.FieldDescriptor, depth: int, overrides: Mapping[str, st.SearchStrategy]
) -> st.SearchStrategy:
    """Values for ``field``: a list when it is repeated, a message or a scalar otherwise."""
    one = _override(field, overrides)
    if one is None:
        one = (
            messages(field.message_type, overrides, depth + 1)
            if field.type == FD.TYPE_MESSAGE
            else scalar(field)
        )
    return st.lists(one, max_size=MAX_ITEMS) if field.is_repeated else one


def _assign(msg: message.Message, field: descriptor.FieldDescriptor, value) -> None:
    if field.type == FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        # A map (google.protobuf.Struct's fields): drawn as entry messages, set key by key.
        entries = getattr(msg, field.name)
        for entry in value:
            if field.message_type.fields_by_name["value"].type == FD.TYPE_MESSAGE:
                entries[entry.key].CopyFrom(entry.value)
            else:
                entries[entry.key] = entry.value
    elif field.is_repeated:
        getattr(msg, field.name).extend(value)
    elif field.type == FD.TYPE_MESSAGE:
        getattr(msg, field.name).CopyFrom(value)
    else:
        setattr(msg, field.name, value)


_ABSENT = object()


def _mostly_present(values: st.SearchStrategy) -> st.SearchStrategy:
    # Present three times in four: with each field a coin flip, nearly every request misses some
    # required field and never gets past the first check.
    return st.tuples(st.integers(min_value=0, max_value=3), values).map(
        lambda drawn: drawn[1] if drawn[0] else _ABSENT
    )


def messages(
    desc: descriptor.Descriptor,
    overrides: Mapping[str, st.SearchStrategy] | None = None,
    depth: int = 0,
) -> st.SearchStrategy[message.Message]:
    """Messages of type ``desc``: every field may be unset or set, at most one member per oneof.

    Args:
        desc: The message's descriptor (``SomeRequest.DESCRIPTOR``).
        overrides: Strategies for single values of some fields, by full or plain field name.
        depth: Nesting level; past :data:`MAX_DEPTH` nested messages are left empty.

    """
    overrides = overrides or {}
    cls = message_factory.GetMessageClass(desc)
    if depth > MAX_DEPTH:
        return st.just(cls())
    # Real oneofs (not proto3 `optional`, a oneof of one field) get one member or none, drawn as a
    # whole; every other field is independently present or absent.
    real_oneofs = [oneof for oneof in desc.oneofs if len(oneof.fields) > 1]
    in_oneof = {field.name for oneof in real_oneofs for field in oneof.fields}
    plain = {
        field.name: _mostly_present(_values(field, depth, overrides))
        for field in desc.fields
        if field.name not in in_oneof
    }
    choices = [
        st.one_of(
            st.none(),
            *(st.tuples(st.just(field.name), _values(field, depth, overrides)) for field in oneof.fields),
        )
        for oneof in real_oneofs
    ]

    def build(drawn: tuple[dict, list]) -> message.Message:
        values, chosen = drawn
        msg = cls()
        for name, value in values.items():
            if value is _ABSENT:
                continue
            _assign(msg, desc.fields_by_name[name], value)
        for pick in chosen:
            if pick is not None:
                _assign(msg, desc.fields_by_name[pick[0]], pick[1])
        return msg

    return st.tuples(st.fixed_dictionaries(plain), st.tuples(*choices).map(list)).map(build)


def field_paths(desc: descriptor.Descriptor, depth: int = 0) -> list[tuple[descriptor.FieldDescriptor, ...]]:
    """Every field of ``desc``, and of its singular nested messages up to :data:`MAX_DEPTH`, as paths."""
    paths: list[tuple[descriptor.FieldDescriptor, ...]] = []
    for field in desc.fields:
        paths.append((field,))
        if field.type == FD.TYPE_MESSAGE and not field.is_repeated and depth < MAX_DEPTH:
            paths += [(field, *rest) for rest in field_paths(field.message_type, depth + 1)]
    return paths


def _mutate(seed: message.Message, path: tuple[descriptor.FieldDescriptor, ...], value) -> message.Message:
    msg = type(seed)()
    msg.CopyFrom(seed)
    parent = msg
    for field in path[:-1]:
        parent = getattr(parent, field.name)
    parent.ClearField(path[-1].name)
    if value is not _ABSENT:
        _assign(parent, path[-1], value)
    return msg


def mutations(
    seed: message.Message, overrides: Mapping[str, st.SearchStrategy] | None = None
) -> st.SearchStrategy[message.Message]:
    """Copies of the valid request ``seed`` with one field (at any depth) cleared or given a new value.

    Generated whole requests mostly stop at the first check; a valid request changed in one place
    reaches the engines with that one odd value (the way a careless client's request looks).
    """
    overrides = overrides or {}
    paths = field_paths(seed.DESCRIPTOR)

    def changed(path: tuple[descriptor.FieldDescriptor, ...]) -> st.SearchStrategy[message.Message]:
        value = st.one_of(st.just(_ABSENT), _values(path[-1], len(path), overrides))
        return value.map(lambda drawn: _mutate(seed, path, drawn))

    if not paths:  # a request with no fields (a List call): nothing to change
        return st.just(seed)
    return st.sampled_from(paths).flatmap(changed)
