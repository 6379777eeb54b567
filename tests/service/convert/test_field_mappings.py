"""Explicit field mappings: engine dataclasses to messages, request bodies to protos.

A field renamed or added on one side of a copy by name must fail when the mapping is declared
(at import), not go silently missing from every answer.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest
from pydantic import BaseModel
from universal_runtime.v1 import encoders_pb2, ocr_pb2

from engines.ocr.types import Box
from gateway.translate.common import BodyFields
from service.convert.messages import MessageCopy
from tests.python_source import parse_file

_ROOT = Path(__file__).resolve().parents[3]
_MAPPINGS = {"MessageCopy", "BodyFields"}


def _declarations() -> list[tuple[str, ast.Call, bool]]:
    """Every ``MessageCopy(...)``/``BodyFields(...)`` call in the product code: (module, call, at module level)."""
    found = []
    for package in ("service", "gateway", "engines"):
        for path in sorted((_ROOT / package).rglob("*.py")):
            tree = parse_file(path)
            module = ".".join(path.relative_to(_ROOT).with_suffix("").parts)
            nested = {
                id(node)
                for scope in ast.walk(tree)
                if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
                for node in ast.walk(scope)
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _MAPPINGS:
                    found.append((module, node, id(node) not in nested))
    return found


def test_every_mapping_is_declared_at_module_level_and_checked_on_import():
    declarations = _declarations()
    modules = {module for module, _, _ in declarations}
    # The converters of OCR, documents and encoders, and the gateway's body translators.
    assert {"service.convert.ocr", "service.convert.encoders", "gateway.translate.generation"} <= modules
    inside = [f"{module}:{call.lineno}" for module, call, top in declarations if not top]
    # Built inside a function, a mapping would be checked only when a request reaches it.
    assert inside == []
    for module in sorted(modules):
        importlib.import_module(module)  # raises ValueError on an unaccounted field


@dataclasses.dataclass
class _RenamedBox:
    x: int
    y: int
    w: int  # was ``width``
    height: int


def test_a_field_renamed_on_the_source_fails_the_declaration():
    with pytest.raises(ValueError) as error:
        MessageCopy(ocr_pb2.BoundingBox, _RenamedBox)
    assert "'w' of the source is neither a message field nor dropped" in str(error.value)
    assert "'width' of the message is neither copied, given nor dropped" in str(error.value)


def test_a_message_field_nobody_fills_fails_unless_given_or_dropped():
    with pytest.raises(ValueError, match="'lines' of the message is neither copied, given nor dropped"):
        MessageCopy(ocr_pb2.OcrResponse, _Page)
    page = MessageCopy(ocr_pb2.OcrResponse, _Page, dropped=("lines",))
    assert page(_Page("hello", width=7)) == ocr_pb2.OcrResponse(text="hello", width=7)
    with pytest.raises(ValueError, match="'boxes' is not a field of the message"):
        MessageCopy(ocr_pb2.OcrLine, Box, given=("boxes",))
    with pytest.raises(ValueError, match="dropped 'colour' is a field of neither"):
        MessageCopy(ocr_pb2.BoundingBox, Box, dropped=("colour",))


@dataclasses.dataclass
class _Page:
    text: str
    page_number: int = 0
    page_count: int = 0
    width: int = 0
    height: int = 0
    confidence: float = 0.0
    engine: str = ""


@dataclasses.dataclass
class _Word:
    text: str
    confidence: float
    box: Box


def test_a_copy_takes_exactly_its_given_fields():
    word = MessageCopy(ocr_pb2.OcrWord, _Word, given=("box",))
    message = word(_Word("a", 0.5, Box(3, 0, 1, 1)), box=ocr_pb2.BoundingBox(x=3))
    assert (message.text, message.confidence, message.box.x) == ("a", 0.5, 3)
    with pytest.raises(TypeError, match=r"needs given fields \['box'\], got \[\]"):
        word(_Word("a", 0.5, Box(3, 0, 1, 1)))


class _Body(BaseModel):
    model: str
    min_score: float | None = None
    labels: list[str] | None = None
    input: list[str] = []


def test_body_fields_copy_the_set_ones_and_account_for_every_field():
    fields = BodyFields(
        _Body, encoders_pb2.ExtractEntitiesRequest, ("min_score", "labels"), by_hand=("model", "input")
    )
    assert fields.values(_Body(model="m", labels=["PER"])) == {"labels": ["PER"]}


def test_a_body_field_renamed_or_added_fails_the_declaration():
    with pytest.raises(ValueError) as error:
        BodyFields(
            _Body,
            encoders_pb2.ExtractEntitiesRequest,
            ("min_score", "label_names"),
            by_hand=("model", "input"),
        )
    assert "'label_names' is not a field of the body" in str(error.value)
    assert "'labels' is neither copied, converted by hand nor dropped" in str(error.value)


def test_a_copied_field_the_proto_lacks_or_a_field_named_twice_fails():
    with pytest.raises(ValueError, match="copied 'input' is not a field of the message"):
        BodyFields(
            _Body, encoders_pb2.ExtractEntitiesRequest, ("min_score", "labels", "input"), by_hand=("model",)
        )
    with pytest.raises(ValueError, match="'model' is named twice"):
        BodyFields(
            _Body,
            encoders_pb2.ExtractEntitiesRequest,
            ("model", "min_score", "labels"),
            by_hand=("model", "input"),
        )
