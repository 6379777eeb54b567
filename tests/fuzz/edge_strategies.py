"""Hypothesis strategies for the edges the descriptor-built requests never reach.

:mod:`tests.fuzz.strategies` fills every field with small values (strings of at most 40
characters or one 8 KiB string, at most 3 items, ints within ±1000, 64 random bytes), always
valid UTF-8, always a well-formed message. The inputs that crashed or stalled the server were of
other kinds, each made here:

- :func:`json_schemas`: JSON Schemas with large repetition bounds (``maxItems``, ``minLength``...
  up to 10^6, ``{m,n}`` patterns), deep nesting, many properties, big enums and ``$ref``;
- :func:`nested_patterns` and :func:`repetition_products`: repetitions that nest, sit side by side
  or alternate, each count within its bound and their product far past it (such as
  ``^((a{0,1000}){0,1000}){0,30}$``, which holds a model's lane for minutes), and pattern syntax the grammar
  converter looped or crashed on;
- :func:`images`: encoded images of degenerate dimensions (Nx1, 1xN, extreme aspect ratios,
  tiny) in PNG, WebP, JPEG, TIFF, GIF and BMP, and many-page TIFFs;
- :func:`bad_json_bodies`: a valid JSON body with one string made invalid UTF-8 or a lone UTF-16
  surrogate (``"\\ud800"``);
- :func:`undecodable`: bytes that no protobuf parser accepts as the request message;
- :func:`unknown_keys_bodies`: a valid body plus many keys the API does not know.

Sizes are drawn from edge values (where limits and native stacks break) and from ranges, so a
small derandomized budget still sends the extremes.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import os
import re
import struct

from google.protobuf import descriptor, message_factory
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw

# Cases per edge test: each may load a model, compile a grammar or decode an image, so fewer than
# UR_FUZZ_EXAMPLES in CI (`make test`); `make fuzz` raises it with the rest.
EDGE_EXAMPLES = int(os.environ.get("UR_FUZZ_EDGE_EXAMPLES", "6"))
# The long hunt (`make fuzz` sets UR_FUZZ_HUNT=1) also draws the sizes that take seconds to build or
# to refuse (200,000-page TIFFs, a million unknown keys); CI stops an order of magnitude lower.
HUNT = os.environ.get("UR_FUZZ_HUNT") == "1"
# Derandomized as FUZZ_SETTINGS; no shrinking: a crashed server is restarted (seconds) before each
# case, and the drawn inputs are named by their parameters (sizes, kinds), readable as drawn.
EDGE_SETTINGS = settings(
    max_examples=EDGE_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=["explicit", "generate"],
)
# Tests parametrized over every route or every method (18 and 27 of them) vary less within one
# target (where the bad bytes go): half the budget each.
PER_TARGET_SETTINGS = settings(EDGE_SETTINGS, max_examples=max(2, EDGE_EXAMPLES // 2))

#: Repetition bounds where things break: grammar rule expansion, native parser stacks, 32-bit sizes.
BIG_COUNTS = [0, 1, 2, 16, 1000, 30_000, 100_000, 1_000_000]


def _counts() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(BIG_COUNTS), st.integers(min_value=0, max_value=1_000_000))


def _bounds(low_key: str, high_key: str) -> st.SearchStrategy[dict]:
    """Optional ``low_key``/``high_key`` pair (e.g. minItems/maxItems), often big, sometimes inverted."""
    return st.fixed_dictionaries({}, optional={low_key: _counts(), high_key: _counts()})


def _patterns() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(["[a-z]", "\\d", ".", "(ab|c)", "[^\\x00]", "\\w"])
    return st.tuples(atoms, _counts(), _counts()).map(
        lambda drawn: f"^{drawn[0]}{{{min(drawn[1], drawn[2])},{max(drawn[1], drawn[2])}}}$"
    )


#: Counts of repetitions that nest: each within the 1,000 bound, where ambiguity starts to cost
#: (9, 16, 31-33 live parse positions), and at the bound.
NESTED_COUNTS = [0, 1, 2, 9, 16, 31, 33, 100, 1000]
#: Pattern bodies the converter looped forever on (an unescaped ``]`` or ``}``), crashed on (a
#: quantifier with nothing to repeat), or that are unbalanced, and classic catastrophic shapes.
PATTERN_HAZARDS = [
    "]",
    "}",
    "a]",
    "a}",
    "*a",
    "{2}",
    "(a",
    "a)",
    "[a",
    "a{2",
    "(|a){0,1000}",
    "(a*)*",
    "(a+)+b",
]


def _nested_counts() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(NESTED_COUNTS), st.integers(0, 1000))


def nested_patterns() -> st.SearchStrategy[str]:
    """Anchored patterns whose repetitions nest, sit side by side or alternate (products of counts).

    Leaves are single characters, classes and small groups that overlap (``a``, ``[a-z]``, ``.``,
    ``a?``, ``(a|aa)``) so that adjacent and nested repetitions can match the same text; plus
    :data:`PATTERN_HAZARDS`. The nested-repetition pattern that holds a lane is drawn by shape
    (three nested ``{0,n}``).
    """
    atoms = st.sampled_from(["a", "[a-z]", ".", "a?", "(a|aa)", "[0-9]", "(ab|a)", "b"])
    quantifiers = st.one_of(
        st.tuples(_nested_counts(), _nested_counts()).map(lambda d: f"{{{min(d)},{max(d)}}}"),
        st.sampled_from(["*", "+", "?"]),
    )
    bodies = st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.tuples(inner, quantifiers).map(lambda d: f"({d[0]}){d[1]}"),
            st.tuples(inner, inner).map("".join),
            st.tuples(inner, inner).map(lambda d: f"({d[0]}|{d[1]})"),
        ),
        max_leaves=5,
    )
    # The shape that holds a lane, directly: two or three repetitions nested around one overlapping atom.
    nested = st.tuples(atoms, st.lists(quantifiers, min_size=2, max_size=3)).map(
        lambda d: functools.reduce(lambda body, quantifier: f"({body}){quantifier}", d[1], d[0])
    )
    bodies = st.one_of(bodies, nested)
    # One draw in six is a hazard: a union of a dozen patterns still mostly tests repetitions.
    return st.tuples(st.integers(0, 5), bodies, st.sampled_from(PATTERN_HAZARDS)).map(
        lambda d: f"^{d[2] if d[0] == 5 else d[1]}$"
    )


def repetition_products() -> st.SearchStrategy[dict]:
    """Schemas whose repetitions multiply: nested patterns under arrays with ``minItems``/``maxItems``
    (each within 1,000), arrays of arrays, unions of many patterns, all inside objects too."""
    strings = nested_patterns().map(lambda pattern: {"type": "string", "pattern": pattern})
    leaves = st.one_of(
        strings,
        _nested_counts().map(lambda n: {"type": "string", "maxLength": n}),
        st.just({"type": "integer"}),
    )
    trees = st.recursive(
        leaves,
        lambda children: st.one_of(
            st.tuples(children, _nested_counts(), st.sampled_from(["minItems", "maxItems"])).map(
                lambda d: {"type": "array", "items": d[0], d[2]: d[1]}
            ),
            st.lists(children, min_size=2, max_size=12).map(lambda items: {"anyOf": items}),
            children.map(lambda child: {"type": "object", "properties": {"v": child}, "required": ["v"]}),
        ),
        max_leaves=4,
    )
    # Two draws in three are a bare pattern: where the model writes the repeated text first, so
    # a matcher whose cost grows with each character shows it within a few dozen tokens.
    return st.tuples(st.integers(0, 2), strings, trees).map(lambda d: d[1] if d[0] < 2 else d[2])


_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)


def _leaf_schemas() -> st.SearchStrategy[dict]:
    string = st.tuples(
        _bounds("minLength", "maxLength"),
        st.one_of(st.none(), _patterns(), nested_patterns()),
        st.sampled_from([None, "date-time"]),
    ).map(
        lambda d: {
            "type": "string",
            **d[0],
            **({"pattern": d[1]} if d[1] else {}),
            **({"format": d[2]} if d[2] else {}),
        }
    )
    integer = st.fixed_dictionaries(
        {"type": st.just("integer")},
        optional={"minimum": st.integers(-(2**63), 2**63), "maximum": st.integers(-(2**63), 2**63)},
    )
    number = st.fixed_dictionaries(
        {"type": st.just("number")}, optional={"minimum": st.floats(allow_nan=False)}
    )
    # Enums of up to thousands of members (a grammar alternative each).
    enum = st.one_of(st.sampled_from([1, 3, 100, 5000]), st.integers(1, 5000)).map(
        lambda n: {"enum": [f"v{i}" for i in range(n)]}
    )
    return st.one_of(
        string,
        integer,
        number,
        st.just({"type": "boolean"}),
        st.just({"type": "null"}),
        enum,
        st.sampled_from([{"const": "x"}, {"type": ["string", "null"]}, {}]),
    )


def _containers(children: st.SearchStrategy[dict]) -> st.SearchStrategy[dict]:
    array = st.tuples(children, _bounds("minItems", "maxItems")).map(
        lambda d: {"type": "array", "items": d[0], **d[1]}
    )
    obj = st.tuples(st.dictionaries(_NAMES, children, min_size=1, max_size=4), st.booleans()).map(
        lambda d: {
            "type": "object",
            "properties": d[0],
            "required": sorted(d[0]) if d[1] else [],
            "additionalProperties": False,
        }
    )
    any_of = st.lists(children, min_size=2, max_size=3).map(lambda items: {"anyOf": items})
    return st.one_of(array, obj, any_of)


def _deep(depth: int, leaf: dict) -> dict:
    """``leaf`` inside ``depth`` levels of alternating single-item arrays and one-property objects."""
    schema = leaf
    for level in range(depth):
        schema = (
            {"type": "array", "items": schema, "maxItems": 2}
            if level % 2
            else {
                "type": "object",
                "properties": {"a": schema},
                "required": ["a"],
                "additionalProperties": False,
            }
        )
    return schema


def _wide(count: int) -> dict:
    properties = {f"p{i}": {"type": "integer"} for i in range(count)}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


_REF = {
    "$defs": {"item": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/item"}}},
    "required": ["items"],
}
_RECURSIVE_REF = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "integer"},
                "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
            },
            "required": ["v", "next"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}


def json_schemas() -> st.SearchStrategy[dict]:
    """JSON Schemas (draft 2020-12 dicts) whose grammar may be large, deep or wide.

    Shapes: random trees of leaves (strings with big min/maxLength, ``{m,n}`` and nested patterns,
    integers, numbers, big enums) under arrays with big min/maxItems, objects and ``anyOf``;
    nesting from 1 to 900 levels (Python's json stops near 1,000); objects of up to 20,000 properties; ``$ref`` to ``$defs``,
    recursive too. Half are wrapped in an object with one required property ``v``, the shape a
    tool's parameters must have.
    """
    trees = st.recursive(_leaf_schemas(), _containers, max_leaves=6)
    deep = st.tuples(
        st.one_of(st.sampled_from([1, 8, 64, 500, 900]), st.integers(1, 900)), _leaf_schemas()
    ).map(lambda d: _deep(*d))
    wide = st.one_of(st.sampled_from([1, 50, 2000, 20_000]), st.integers(1, 20_000)).map(_wide)
    refs = st.sampled_from([_REF, _RECURSIVE_REF])
    schema = st.one_of(trees, trees, deep, wide, refs)
    return st.tuples(schema, st.booleans()).map(
        lambda d: (
            {"type": "object", "properties": {"v": d[0]}, "required": ["v"], "additionalProperties": False}
            if d[1]
            else d[0]
        )
    )


def describe_schema(schema: dict) -> str:
    """The schema as JSON, cut to 300 characters (a failing case's name in a message)."""
    text = json.dumps(schema)
    return text if len(text) <= 300 else f"{text[:300]}... ({len(text)} characters)"


# ---------------------------------------------------------------------------------------------
# Images

#: Width x height pairs where decoders and engines break: lines, columns, extreme ratios, tiny.
DEGENERATE_SIZES = [
    (1, 1), (2, 2), (3, 3), (1, 20_000), (20_000, 1), (4000, 3), (3, 4000), (16_000, 2), (2, 16_000),
    (5, 1), (1, 5), (64, 1), (7, 9000), (9000, 7),
]  # fmt: skip
#: Pillow formats the image RPCs accept, with their largest side (WebP's format limit).
FORMATS = {"PNG": 65_535, "WEBP": 16_383, "JPEG": 65_500, "TIFF": 65_535, "GIF": 65_535, "BMP": 65_535}
#: Page counts of multi-page TIFFs (Pillow counts frames by seeking through them: quadratic).
PAGE_COUNTS = [2, 100, 2000, 5000] + ([60_000, 200_000] if HUNT else [])


def text_page() -> bytes:
    """A PNG page with one printed line (OCR finds text on it, so document RPCs get past "no text")."""
    image = Image.new("L", (320, 80), color=255)
    ImageDraw.Draw(image).text((10, 30), "Invoice 42 total 19.99 EUR", fill=0)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def many_page_tiff(pages: int) -> bytes:
    """A little-endian baseline TIFF of ``pages`` 1x1 grayscale pages (TIFF 6.0, section 2).

    Written directly: Pillow's ``save_all`` is quadratic in the page count (see
    docs/architecture/design-notes.md#counting-tiff-pages). Every page's strip is the same one pixel
    byte; each page costs one 114-byte IFD.
    """
    tags = 9
    ifd_size = 2 + tags * 12 + 4
    pixel_offset = 8  # the one pixel byte, right after the header; IFDs start at 10 (word aligned)
    out = bytearray(b"II*\x00" + struct.pack("<I", 10) + b"\xff\x00")
    for page in range(pages):
        start = 10 + page * ifd_size
        entries = [
            (256, 3, 1, 1),  # ImageWidth
            (257, 3, 1, 1),  # ImageLength
            (258, 3, 1, 8),  # BitsPerSample
            (259, 3, 1, 1),  # Compression: none
            (262, 3, 1, 1),  # PhotometricInterpretation: black is zero
            (273, 4, 1, pixel_offset),  # StripOffsets
            (277, 3, 1, 1),  # SamplesPerPixel
            (278, 3, 1, 1),  # RowsPerStrip
            (279, 4, 1, 1),  # StripByteCounts
        ]
        out += struct.pack("<H", tags)
        for tag, kind, count, value in entries:
            out += struct.pack("<HHII", tag, kind, count, value)
        out += struct.pack("<I", start + ifd_size if page + 1 < pages else 0)
    return bytes(out)


def _encode(size: tuple[int, int], fmt: str, mode: str, pages: int) -> bytes:
    if pages > 1:
        return many_page_tiff(pages)
    width, height = (min(side, FORMATS[fmt]) for side in size)
    if fmt == "JPEG" and mode not in ("L", "RGB"):
        mode = "L"
    image = Image.new(mode, (width, height), color=255 if mode != "1" else 1)
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


class DrawnImage:
    """An encoded image with the parameters that made it (its ``repr`` in failure messages)."""

    def __init__(self, size: tuple[int, int], fmt: str, mode: str, pages: int) -> None:
        self.size, self.fmt, self.mode, self.pages = size, fmt, mode, pages
        self.data = _encode(size, fmt, mode, pages)
        self.mime_type = "image/tiff" if pages > 1 else Image.MIME[fmt]

    def __repr__(self) -> str:
        pages = f", {self.pages} pages" if self.pages > 1 else ""
        return f"<{self.fmt} {self.mode} {self.size[0]}x{self.size[1]}{pages}, {len(self.data)} bytes>"


def images(max_pages: int = PAGE_COUNTS[-1]) -> st.SearchStrategy[DrawnImage]:
    """Images of degenerate sizes in every accepted format, or TIFFs of up to ``max_pages`` pages."""
    sides = st.one_of(st.sampled_from([1, 2, 3, 7, 16_000, 20_000]), st.integers(1, 20_000))
    sizes = st.one_of(
        st.sampled_from(DEGENERATE_SIZES),
        st.tuples(sides, st.integers(1, 8)),
        st.tuples(st.integers(1, 8), sides),
    )
    single = st.builds(
        DrawnImage,
        sizes,
        st.sampled_from(sorted(FORMATS)),
        st.sampled_from(["L", "RGB", "RGBA", "1", "P"]),
        st.just(1),
    )
    pages = st.one_of(st.sampled_from([p for p in PAGE_COUNTS if p <= max_pages]), st.integers(2, max_pages))
    many = st.builds(DrawnImage, st.just((1, 1)), st.just("TIFF"), st.just("L"), pages)
    return st.one_of(single, single, many)


# ---------------------------------------------------------------------------------------------
# JSON bodies

#: Invalid UTF-8 (a lone continuation byte, a cut sequence, an overlong form, an encoded
#: surrogate, a code point past U+10FFFF), raw in the body.
BAD_UTF8 = [b"\xff", b"\x80", b"\xc3\x28", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]
#: Lone UTF-16 surrogates as JSON escapes: valid JSON text, a Python str no UTF-8 encoder takes.
BAD_ESCAPES = [b"\\ud800", b"\\udfff", b"\\udc00x", b"a\\ud83d", b"\\ud800\\ud800"]
_MARK = "\x00MARK\x00"


def string_paths(value, path: tuple = ()) -> list[tuple]:
    """Paths (keys and indexes) of every string value in a JSON-like ``value``."""
    if isinstance(value, str):
        return [path]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in string_paths(item, (*path, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in string_paths(item, (*path, index))]
    return []


def _replaced(body: dict, path: tuple, new) -> dict:
    body = copy.deepcopy(body)
    parent = body
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return body


def bad_json_bodies(template: dict) -> st.SearchStrategy[tuple[tuple, bytes]]:
    """``template`` as JSON with one string value (path drawn) holding bad text: (path, body bytes).

    The bad text replaces the value or is put inside it, raw (invalid UTF-8) or escaped (lone
    surrogate), so the rest of the body stays valid and reaches the code past JSON decoding.
    """
    paths = string_paths(template)
    bad = st.sampled_from(BAD_UTF8 + BAD_ESCAPES)

    def encode(drawn: tuple) -> tuple[tuple, bytes]:
        path, fragment, inside = drawn
        original = template
        for key in path:
            original = original[key]
        marked = f"{original}{_MARK}" if inside else _MARK
        text = json.dumps(_replaced(template, path, marked)).encode()
        return path, text.replace(json.dumps(_MARK)[1:-1].encode(), fragment)

    return st.tuples(st.sampled_from(paths), bad, st.booleans()).map(encode)


#: Unknown-key counts: a few, thousands, up to a million (a 16 MB body).
UNKNOWN_KEY_COUNTS = [1, 100, 10_001, 100_000] + ([1_000_000] if HUNT else [])


def unknown_keys_bodies(
    template: dict, max_keys: int = UNKNOWN_KEY_COUNTS[-1]
) -> st.SearchStrategy[tuple[int, bytes]]:
    """``template`` plus ``n`` keys no API knows (long names, small values): (n, body bytes)."""
    counts = st.one_of(
        st.sampled_from([n for n in UNKNOWN_KEY_COUNTS if n <= max_keys]), st.integers(1, max_keys)
    )

    def build(count: int) -> tuple[int, bytes]:
        extra = ",".join(f'"unknown_field_number_{i}":{i}' for i in range(count))
        text = json.dumps(template)
        return count, f"{text[:-1]},{extra}}}".encode()

    return counts.map(build)


# ---------------------------------------------------------------------------------------------
# Protobuf bytes

_WIRE_GARBAGE = [
    b"\xff",  # a tag whose varint never ends
    b"\x08",  # a varint field with no value
    b"\x0a\x05ab",  # field 1, length 5, 2 bytes follow
    b"\x00",  # field number 0
    b"\x0f",  # wire type 7 (none)
    b"\x0b",  # a group start never ended
    b"\x0c",  # a group end with no start
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an 11-byte varint tag
    b"\x0a\xff\xff\xff\xff\x0f",  # field 1, a length past 4 GiB
]


def _string_field_garbage(desc: descriptor.Descriptor) -> list[bytes]:
    """For each string field: its tag, then invalid UTF-8 (proto3 strings must be UTF-8)."""
    return [
        bytes([(field.number << 3) | 2]) + b"\x02\xff\xfe"
        for field in desc.fields
        if field.type == descriptor.FieldDescriptor.TYPE_STRING and field.number < 16
    ]


# ---------------------------------------------------------------------------------------------
# Audio

#: Container and codec of each kind of audio file the speech RPCs accept.
AUDIO_KINDS = {"wav": "pcm_s16le", "flac": "flac", "mp3": "libmp3lame", "ogg": "libopus", "ipod": "aac"}
#: WAV header fields (byte offset, struct format) and values where decoders break.
WAV_FIELDS = {
    "riff_size": (4, "<I"),
    "channels": (22, "<H"),
    "rate": (24, "<I"),
    "bits": (34, "<H"),
    "data_size": (40, "<I"),
}
WAV_VALUES = [0, 1, 3, 255, 65_535, 0x7FFF_FFFF, 0xFFFF_FFFF]


@functools.cache
def _audio_file(kind: str) -> bytes:
    """Half a second of a 440 Hz tone encoded as ``kind`` (a key of :data:`AUDIO_KINDS`)."""
    from tests.spoken import RATE, encode, tone

    return encode(tone(0.5), RATE, kind, AUDIO_KINDS[kind], codec_rate=48_000 if kind == "ogg" else None)


class DrawnAudio:
    """An audio file damaged one way (its ``repr`` in failure messages)."""

    def __init__(self, kind: str, damage: str, where: float, value: int) -> None:
        self.kind, self.damage, self.where, self.value = kind, damage, where, value
        data = bytearray(_audio_file(kind))
        at = int(where * (len(data) - 1))
        if damage == "truncate":
            data = data[:at]
        elif damage == "flip":
            data[at] ^= 0xFF
        elif damage == "zero-tail":
            data[at:] = bytes(len(data) - at)
        elif damage in WAV_FIELDS and kind == "wav":
            offset, fmt = WAV_FIELDS[damage]
            struct.pack_into(fmt, data, offset, value & (0xFFFF if fmt == "<H" else 0xFFFF_FFFF))
        self.data = bytes(data)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.damage} at {self.where:.3f} value {self.value}, {len(self.data)} bytes>"


def audio_files() -> st.SearchStrategy[DrawnAudio]:
    """Audio files of every accepted kind, truncated, flipped, zeroed or with extreme WAV header fields."""
    return st.builds(
        DrawnAudio,
        st.sampled_from(sorted(AUDIO_KINDS)),
        st.sampled_from(["none", "truncate", "flip", "zero-tail", *WAV_FIELDS]),
        st.floats(0, 1),
        st.sampled_from(WAV_VALUES),
    )


def undecodable(desc: descriptor.Descriptor) -> st.SearchStrategy[bytes]:
    """Bytes that ``desc``'s message class refuses to parse (checked with ``FromString``)."""
    cls = message_factory.GetMessageClass(desc)

    def refused(data: bytes) -> bool:
        try:
            cls.FromString(data)
        except DecodeError:
            return True
        return False

    known = [data for data in _WIRE_GARBAGE + _string_field_garbage(desc) if refused(data)]
    prefixed = st.tuples(st.binary(max_size=16), st.sampled_from(known)).map(b"".join).filter(refused)
    return st.one_of(st.sampled_from(known), prefixed, st.binary(min_size=1, max_size=64).filter(refused))


def redact(text: str, limit: int = 200) -> str:
    """``text`` cut to ``limit`` characters with control characters made visible (for messages)."""
    text = re.sub(r"[\x00-\x1f]", lambda m: f"\\x{ord(m.group()):02x}", text)
    return text if len(text) <= limit else f"{text[:limit]}..."
