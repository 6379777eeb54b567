"""Fuzz every RPC of InferenceService and ModelService with requests built from the descriptors.

A case passes when the call ends with any status but INTERNAL or UNKNOWN (a bad request must be
a clear client error, never a crash) within its deadline plus one second; after each RPC's run
the server still embeds a text. Hypothesis runs in a worker thread because its test functions
are synchronous, while the session server lives on pytest's event loop: each example hands its
call to that loop and waits.

Budget: ``UR_FUZZ_EXAMPLES`` examples per RPC (small by default for CI; ``make fuzz`` raises it),
derandomized so CI sees the same inputs on every run.
"""

from __future__ import annotations

import io
from collections import Counter

import grpc
import pytest
from hypothesis import strategies as st
from PIL import Image
from universal_runtime.v1 import inference_service_pb2, model_service_pb2, ocr_pb2, response_store_pb2

from tests.conftest import CHAT_MODEL, EMBED_MODEL
from tests.fuzz.calls import assert_healthy, fuzz_rpc, invoke
from tests.fuzz.strategies import messages

PREFIX = "fuzz-"

SERVICES = [
    inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"],
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    response_store_pb2.DESCRIPTOR.services_by_name["ResponseStoreService"],
]
METHODS = [method for service in SERVICES for method in service.methods]

# Names that reach past the "not found" check: models the session server has loaded (or loads
# fast), and the classifiers and detectors this module fits. Every name that fitting, deleting,
# loading or unloading gets starts with PREFIX, so the fuzz run never changes what other tests use.
_OWN = st.one_of(st.sampled_from([f"{PREFIX}a", f"{PREFIX}b"]), st.text(max_size=12).map(PREFIX.__add__))
_MODELS = st.one_of(
    st.sampled_from([CHAT_MODEL, EMBED_MODEL, "rapidocr", "tesseract", f"{PREFIX}a"]), st.text(max_size=12)
)
OVERRIDES = {
    "model": _MODELS,
    "embedding_model": _MODELS,
    "detector": _OWN,
    "universal_runtime.v1.FitClassifierRequest.name": _OWN,
    "universal_runtime.v1.DeleteClassifierRequest.name": _OWN,
    "universal_runtime.v1.LoadModelRequest.name": _OWN,
    "universal_runtime.v1.UnloadModelRequest.name": _OWN,
    "universal_runtime.v1.WatchModelRequest.name": _OWN,
    # Any bigger token budget only makes the model talk longer; the bounds checks still see the
    # edges (negative, zero, and the server's limit is tested in test_bad_input.py).
    "max_tokens": st.integers(min_value=-2, max_value=8),
    # Mostly durations the server accepts, so the rest of the request is checked too.
    "keep_alive": st.sampled_from(["", "5m", "-1", "1s", "soon", "-5s", "1e9h"]),
    # Stored responses: ids of the right form (so puts and reads reach the store) or any text, and
    # JSON of the right kinds or any bytes.
    "id": st.one_of(st.sampled_from(["resp_fuzz1", "resp_fuzz2"]), st.text(max_size=12).map("resp_".__add__)),
    "response_json": st.one_of(st.sampled_from([b"{}", b'{"a": 1}', b"[]"]), st.binary(max_size=32)),
    "input_items_json": st.one_of(st.sampled_from([b"[]", b"[{}]", b"{}"]), st.binary(max_size=32)),
}


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (8, 8), color=255).save(buffer, format="PNG")
    return buffer.getvalue()


# OCR chunks: a real (blank) image, cut short, a PDF header with nothing after it, or random bytes.
OVERRIDES["chunk"] = st.one_of(
    st.sampled_from([_png(), _png()[:40], b"%PDF-1.4\n%%EOF", b"\x89PNG\r\n\x1a\n"]), st.binary(max_size=64)
)


def requests_for(method) -> st.SearchStrategy[list]:
    """Requests for one call: one message, or 1-2 for client-streaming RPCs."""
    one = messages(method.input_type, OVERRIDES)
    return st.lists(one, min_size=1, max_size=2 if method.client_streaming else 1)


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
async def test_rpc_survives_generated_requests(channel, inference, method):
    await fuzz_rpc(channel, method, requests_for(method))
    await assert_healthy(inference)


async def test_a_refused_ocr_upload_is_always_invalid_argument(channel, inference):
    """A 2-message Ocr call refused on its first message's options reads INVALID_ARGUMENT every time,
    never INTERNAL ("Internal error from Core", the client's write race): the server reads the
    upload before refusing it (see docs/architecture/design-notes.md#refusing-a-stream-after-its-upload)."""
    method = inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"].methods_by_name["Ocr"]
    first = ocr_pb2.OcrRequest(options=ocr_pb2.OcrOptions(mime_type="epjb i"), chunk=b"%PDF-1.4\n%%EOF")
    second = ocr_pb2.OcrRequest(options=ocr_pb2.OcrOptions(mime_type="id"), chunk=_png())
    answers = Counter([(await invoke(channel, method, [first, second])) for _ in range(100)])
    assert set(answers) == {answers.most_common(1)[0][0]}, answers
    code, details = answers.most_common(1)[0][0]
    assert code is grpc.StatusCode.INVALID_ARGUMENT and "mime_type" in details, answers
    await assert_healthy(inference)
