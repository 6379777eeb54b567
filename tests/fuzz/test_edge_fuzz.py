"""Fuzz the edges the descriptor-built requests never reach, on a server in its own process.

Each test draws one kind of edge input (:mod:`tests.fuzz.edge_strategies`) and sends it to the
launched ``universal-runtime`` process (:mod:`tests.fuzz.launched_server`), where a crash fails
one case instead of ending the test run. Every case must leave the process alive, hold its event
loop no longer than :data:`tests.fuzz.checks.MAX_STALL_S` (the stall probe) and get a clear
answer: no INTERNAL/UNKNOWN over gRPC, no 5xx over HTTP, no exception text in either.

- degenerate images (N x 1, 1 x N, extreme ratios, tiny; PNG, WebP, JPEG, TIFF, GIF, BMP) and
  many-page TIFFs to ``Ocr``, ``AnalyzeDocument``, ``POST /v1/ocr`` and ``/v1/documents/analyze``;
- damaged audio files (WAV, FLAC, MP3, Ogg/Opus, M4A: truncated, flipped bytes, extreme WAV
  header fields) to ``Transcribe`` and ``POST /v1/audio/transcriptions``;
- invalid UTF-8 and lone surrogates in one string of a valid body, on every JSON route;
- bytes that do not parse as the request message, on every gRPC method;
- oversized HTTP headers and gRPC metadata: refused past the limits, and the server lives;
- bodies with many unknown keys: a 4xx or 2xx, and a bounded server log;
- large bodies to the token-count and tokenize routes (128 tools of 16 KB to
  ``/v1/messages/count_tokens``) and long anomaly ``schema`` and ``rows`` lists to fit and detect
  (a 13 MB schema to detect): the stall probe's bound (see
  docs/architecture/design-notes.md#large-bodies-and-the-event-loop).

Budget: ``UR_FUZZ_EDGE_EXAMPLES`` cases per test (and per route or method where parametrized).
"""

from __future__ import annotations

import base64
import json

import grpc
import httpx
import jsonschema
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import documents_pb2 as d
from universal_runtime.v1 import (
    inference_service_pb2,
    model_service_pb2,
    ocr_pb2,
    response_store_pb2,
    speech_pb2,
)

from tests.conftest import CHAT_MODEL, DOCUMENT_EMBED_MODEL, EMBED_MODEL, RERANK_MODEL, STT_MODEL, TTS_MODEL
from tests.fuzz.checks import assert_grpc_answer, assert_http_answer, launched_case
from tests.fuzz.edge_strategies import (
    EDGE_SETTINGS,
    PER_TARGET_SETTINGS,
    DrawnAudio,
    DrawnImage,
    audio_files,
    bad_json_bodies,
    images,
    redact,
    text_page,
    undecodable,
    unknown_keys_bodies,
)

DEADLINE_S = 60.0
#: Bytes per message of a client-streamed upload.
CHUNK_BYTES = 1024 * 1024
_PNG = base64.b64encode(text_page()).decode()


@pytest.fixture(scope="module", autouse=True)
def forget_fitted():
    """Nothing to forget: this module calls only the launched server."""


def _post(server, path: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{server.http_base}{path}", timeout=DEADLINE_S, **kwargs)


def _grpc_call(
    server, path: str, requests: list, *, client_streaming: bool, server_streaming: bool, serialize
):
    """Call ``path`` with ``requests`` serialized by ``serialize`` (None: they are bytes already)."""
    kwargs = {"request_serializer": serialize, "response_deserializer": None}
    with grpc.insecure_channel(server.grpc_target) as channel:
        try:
            if client_streaming:  # drained as a stream whether the method answers once or streams
                list(channel.stream_stream(path, **kwargs)(iter(requests), timeout=DEADLINE_S))
            elif server_streaming:
                list(channel.unary_stream(path, **kwargs)(requests[0], timeout=DEADLINE_S))
            else:
                channel.unary_unary(path, **kwargs)(requests[0], timeout=DEADLINE_S)
        except grpc.RpcError as err:
            return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def _chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]


# ---------------------------------------------------------------------------------------------
# Degenerate images


def _ocr(server, image: DrawnImage, model: str):
    first, *rest = _chunks(image.data)
    requests = [
        ocr_pb2.OcrRequest(options=ocr_pb2.OcrOptions(model=model, mime_type=image.mime_type), chunk=first)
    ]
    requests += [ocr_pb2.OcrRequest(chunk=chunk) for chunk in rest]
    return _grpc_call(
        server,
        "/universal_runtime.v1.InferenceService/Ocr",
        requests,
        client_streaming=True,
        server_streaming=False,
        serialize=ocr_pb2.OcrRequest.SerializeToString,
    )


def grpc_ocr_rapidocr(server, image: DrawnImage, what) -> None:
    assert_grpc_answer(*_ocr(server, image, "rapidocr"), what)


def grpc_ocr_tesseract(server, image: DrawnImage, what) -> None:
    assert_grpc_answer(*_ocr(server, image, "tesseract"), what)


def grpc_analyze_document(server, image: DrawnImage, what) -> None:
    first, *rest = _chunks(image.data)
    options = d.AnalyzeDocumentOptions(document=d.DocumentReadOptions(mime_type=image.mime_type))
    requests = [d.AnalyzeDocumentRequest(options=options, chunk=first)]
    requests += [d.AnalyzeDocumentRequest(chunk=chunk) for chunk in rest]
    code, details = _grpc_call(
        server,
        "/universal_runtime.v1.InferenceService/AnalyzeDocument",
        requests,
        client_streaming=True,
        server_streaming=False,
        serialize=d.AnalyzeDocumentRequest.SerializeToString,
    )
    assert_grpc_answer(code, details, what)


def http_ocr(server, image: DrawnImage, what) -> None:
    files = {"file": ("image", image.data, image.mime_type)}
    answer = _post(server, "/v1/ocr", files=files, data={"model": "rapidocr"})
    assert_http_answer(answer.status_code, answer.text, what)


def http_analyze_document(server, image: DrawnImage, what) -> None:
    body = {"file": base64.b64encode(image.data).decode(), "mime_type": image.mime_type}
    answer = _post(server, "/v1/documents/analyze", json=body)
    assert_http_answer(answer.status_code, answer.text, what)


IMAGE_SURFACES = [
    grpc_ocr_rapidocr,
    grpc_ocr_tesseract,
    grpc_analyze_document,
    http_ocr,
    http_analyze_document,
]


@pytest.mark.parametrize("surface", IMAGE_SURFACES, ids=lambda surface: surface.__name__)
def test_a_degenerate_image_gets_a_clear_answer(launched, surface):
    @EDGE_SETTINGS
    @given(image=images())
    def case(image: DrawnImage) -> None:
        def what() -> str:
            return f"{surface.__name__} {image!r}"

        with launched_case(launched, what):
            surface(launched, image, what)

    case()


# ---------------------------------------------------------------------------------------------
# Damaged audio


def grpc_transcribe(server, audio: DrawnAudio, what) -> None:
    first, *rest = _chunks(audio.data)
    options = speech_pb2.TranscribeOptions(model=STT_MODEL, word_timestamps=True)
    requests = [speech_pb2.TranscribeRequest(options=options, chunk=first)]
    requests += [speech_pb2.TranscribeRequest(chunk=chunk) for chunk in rest]
    code, details = _grpc_call(
        server,
        "/universal_runtime.v1.InferenceService/Transcribe",
        requests,
        client_streaming=True,
        server_streaming=True,
        serialize=speech_pb2.TranscribeRequest.SerializeToString,
    )
    assert_grpc_answer(code, details, what)


def http_transcribe(server, audio: DrawnAudio, what) -> None:
    files = {"file": (f"audio.{audio.kind}", audio.data, "application/octet-stream")}
    answer = _post(server, "/v1/audio/transcriptions", files=files, data={"model": STT_MODEL})
    assert_http_answer(answer.status_code, answer.text, what)


@pytest.mark.parametrize("surface", [grpc_transcribe, http_transcribe], ids=lambda surface: surface.__name__)
def test_damaged_audio_gets_a_clear_answer(launched, surface):
    @EDGE_SETTINGS
    @given(audio=audio_files())
    def case(audio: DrawnAudio) -> None:
        def what() -> str:
            return f"{surface.__name__} {audio!r}"

        with launched_case(launched, what):
            surface(launched, audio, what)

    case()


# ---------------------------------------------------------------------------------------------
# JSON bodies: one valid body per JSON route

_FILE = {"file": _PNG, "mime_type": "image/png"}
#: A body each JSON route accepts (against the test catalog); every string in it gets bad text.
ROUTE_BODIES: dict[str, dict] = {
    "/v1/chat/completions": {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 2,
        "stop": ["\n"],
    },
    "/v1/completions": {"model": CHAT_MODEL, "prompt": "Hello", "max_tokens": 2},
    "/v1/messages": {
        "model": CHAT_MODEL,
        "max_tokens": 2,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Say hi."}],
        "stop_sequences": ["\n"],
    },
    "/v1/messages/count_tokens": {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Say hi."}]},
    "/v1/responses": {
        "model": CHAT_MODEL,
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say hi."}]}],
        "max_output_tokens": 2,
        "store": False,
    },
    "/v1/embeddings": {"model": EMBED_MODEL, "input": ["a cat", "a dog"]},
    "/v1/classify": {
        "model": DOCUMENT_EMBED_MODEL,
        "input": ["I love it"],
        "candidate_labels": ["positive", "negative"],
    },
    "/v1/classifiers": {
        "name": "fuzz-edge-classifier",
        "embedding_model": EMBED_MODEL,
        "overwrite": True,
        "examples": [{"text": "good", "label": "p"}, {"text": "bad", "label": "n"}] * 2,
    },
    "/v1/ner": {"model": "en-core-web-sm", "input": ["Ada Lovelace lived in London."]},
    "/tokenize": {"model": CHAT_MODEL, "prompt": "Hello there"},
    "/detokenize": {"model": CHAT_MODEL, "tokens": [1, 2, 3]},
    "/v1/rerank": {"model": RERANK_MODEL, "query": "a cat", "documents": ["a dog", "a kitten"]},
    "/rerank": {"model": RERANK_MODEL, "query": "a cat", "documents": ["a dog", "a kitten"]},
    "/v2/rerank": {"model": RERANK_MODEL, "query": "a cat", "documents": ["a dog", "a kitten"]},
    "/v1/anomaly/fit": {
        "detector": "fuzz-edge-detector",
        "schema": [{"name": "size", "type": "numeric"}, {"name": "kind", "type": "categorical"}],
        "rows": [[i % 7, f"k{i % 3}"] for i in range(16)],
    },
    "/v1/anomaly/detect": {
        "schema": [{"name": "size", "type": "numeric"}, {"name": "kind", "type": "categorical"}],
        "rows": [[i % 7, f"k{i % 3}"] for i in range(16)],
    },
    "/v1/ocr": {**_FILE, "model": "rapidocr"},
    "/v1/audio/speech": {"model": TTS_MODEL, "input": "Say hi.", "voice": "en-us", "response_format": "wav"},
    # No image model is in the test catalog: the cases meet the body's checks, then NOT_FOUND.
    "/v1/images/generations": {
        "model": "no-image-model",
        "prompt": "a cat",
        "size": "64x64",
        "negative_prompt": "a dog",
    },
    "/v1/documents/analyze": _FILE,
    "/v1/documents/ask": {**_FILE, "question": "What does it say?", "max_tokens": 2},
    "/v1/documents/extract": {
        **_FILE,
        "json_schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
        "max_tokens": 8,
    },
    "/v1/documents/classify": {**_FILE, "candidate_labels": ["letter", "invoice"]},
    # A well-formed id of no file (NOT_FOUND): the cases are the bad texts drawn into its strings.
    "/v1/batches": {
        "input_file_id": "file-" + "a" * 24,
        "endpoint": "/v1/embeddings",
        "completion_window": "24h",
        "metadata": {"team": "fuzz"},
    },
}


def json_routes(server) -> set[str]:
    """Every POST route of the gateway's OpenAPI document that takes a JSON body."""
    document = httpx.get(f"{server.http_base}/openapi.json", timeout=10).json()
    return {
        path
        for path, item in document["paths"].items()
        if "application/json" in item.get("post", {}).get("requestBody", {}).get("content", {})
    }


def test_every_json_route_has_a_body(launched):
    launched.ensure()
    assert json_routes(launched) == set(ROUTE_BODIES)


def test_every_template_body_is_valid(launched):
    """Each template validates against its route's request schema (else the bad-text cases would
    only meet the first check), without a model call."""
    launched.ensure()
    document = httpx.get(f"{launched.http_base}/openapi.json", timeout=10).json()
    for route, body in ROUTE_BODIES.items():
        schema = document["paths"][route]["post"]["requestBody"]["content"]["application/json"]["schema"]
        # The schema's $refs point into the document's components: validate with the document as root.
        errors = list(
            jsonschema.Draft202012Validator({**schema, "components": document["components"]}).iter_errors(
                body
            )
        )
        assert not errors, f"{route}: {errors[0].message}"


@pytest.mark.parametrize("route", sorted(ROUTE_BODIES))
def test_invalid_unicode_in_a_body_is_a_client_error(launched, route):
    @PER_TARGET_SETTINGS
    @given(drawn=bad_json_bodies(ROUTE_BODIES[route]))
    def case(drawn: tuple[tuple, bytes]) -> None:
        path, body = drawn

        def what() -> str:
            return f"POST {route} with bad text at {list(path)}: {redact(body.decode(errors='backslashreplace'))}"

        with launched_case(launched, what):
            answer = _post(launched, route, content=body, headers={"content-type": "application/json"})
            assert_http_answer(answer.status_code, answer.text, what)
            assert 400 <= answer.status_code < 500, f"HTTP {answer.status_code} for {what()}"

    case()


@pytest.mark.parametrize("route", sorted(ROUTE_BODIES))
def test_unknown_keys_are_bounded_work(launched, route):
    @PER_TARGET_SETTINGS
    @given(drawn=unknown_keys_bodies(ROUTE_BODIES[route]))
    def case(drawn: tuple[int, bytes]) -> None:
        count, body = drawn

        def what() -> str:
            return f"POST {route} with {count} unknown keys ({len(body)} bytes)"

        with launched_case(launched, what):
            log_before = launched.log.stat().st_size
            answer = _post(launched, route, content=body, headers={"content-type": "application/json"})
            assert_http_answer(answer.status_code, answer.text, what)
            logged = launched.log.stat().st_size - log_before
            assert logged <= MAX_LOG_BYTES_PER_CASE, f"{logged} bytes logged for {what()}"

    case()


#: Log bytes one request may add (the unknown-keys warning names a few keys, not all of them).
MAX_LOG_BYTES_PER_CASE = 16 * 1024


_SCHEMA_SIZES = st.one_of(st.sampled_from([1, 1024, 1025, 16_385, 100_000, 330_000]), st.integers(1, 100_000))


@given(count=_SCHEMA_SIZES, over_grpc=st.booleans(), detect=st.booleans())
@example(count=330_000, over_grpc=False, detect=True)  # 13 MB over HTTP: once held the loop
@EDGE_SETTINGS
def test_a_long_anomaly_schema_is_bounded_work(launched, count: int, over_grpc: bool, detect: bool):
    """The anomaly ``schema`` list (one entry per feature) sized far past the feature limit, to fit
    or one-shot detect: its validation and conversion must not hold the event loop (a 2 MB one to
    fit, or 13 MB to detect over HTTP, held every RPC for seconds when converted on it)."""
    fields = [{"name": f"feature_{i}", "type": "categorical" if i % 2 else "numeric"} for i in range(count)]
    rows = [[i % 7, "a"] for i in range(16)]
    method, route = (
        ("DetectAnomaly", "/v1/anomaly/detect") if detect else ("FitAnomalyDetector", "/v1/anomaly/fit")
    )
    named = {} if detect else {"detector": "fuzz-edge-schema"}

    def what() -> str:
        return f"{method} ({'gRPC' if over_grpc else 'HTTP'}) with a schema of {count} fields"

    if over_grpc:
        kinds = {"numeric": a.FEATURE_TYPE_NUMERIC, "categorical": a.FEATURE_TYPE_CATEGORICAL}
        message = a.DetectAnomalyRequest if detect else a.FitAnomalyDetectorRequest
        request = message(
            **named,
            schema=[a.FeatureField(name=f["name"], type=kinds[f["type"]]) for f in fields],
            rows=[
                a.FeatureRow(values=[a.FeatureValue(number_value=r[0]), a.FeatureValue(string_value=r[1])])
                for r in rows
            ],
        ).SerializeToString()
    else:
        body = json.dumps({**named, "schema": fields, "rows": rows}).encode()
    with launched_case(launched, what):
        if over_grpc:
            code, details = _grpc_call(
                launched,
                f"/universal_runtime.v1.InferenceService/{method}",
                [request],
                client_streaming=False,
                server_streaming=False,
                serialize=None,
            )
            assert_grpc_answer(code, details, what)
        else:
            answer = _post(launched, route, content=body, headers={"content-type": "application/json"})
            assert_http_answer(answer.status_code, answer.text, what)


_ROW_COUNTS = st.one_of(
    st.sampled_from([1, 200_001, 1_000_000, 1_000_001, 4_000_000]), st.integers(1, 4_000_000)
)


@given(count=_ROW_COUNTS, width=st.sampled_from([0, 1, 2, 8]), detect=st.booleans())
@example(count=1_000_000, width=0, detect=True)  # a million empty rows: once held the loop
@EDGE_SETTINGS
def test_many_anomaly_rows_are_bounded_work(launched, count: int, width: int, detect: bool):
    """Rows of a few bytes each, up to the body limit, to fit or detect over HTTP: validated and
    translated in steps, never one call over all of them."""
    row = b"[" + b",".join([b"0"] * width) + b"]"
    named = b"" if detect else b'"detector": "fuzz-edge-rows", '
    body = b"{" + named + b'"rows": [' + b",".join([row] * count) + b"]}"
    route = "/v1/anomaly/detect" if detect else "/v1/anomaly/fit"

    def what() -> str:
        return f"POST {route} with {count} rows of {width} cells ({len(body)} bytes)"

    with launched_case(launched, what):
        answer = _post(launched, route, content=body, headers={"content-type": "application/json"})
        assert_http_answer(answer.status_code, answer.text, what)


# ---------------------------------------------------------------------------------------------
# Token counting and tokenizing: large bodies


def _anthropic_tools(count: int, size: int) -> list[dict]:
    """``count`` tools whose input schemas are about ``size`` bytes (property descriptions)."""
    properties = {
        f"p{i:03d}": {"type": "string", "description": "x" * 140} for i in range(max(1, size // 160))
    }
    schema = {"type": "object", "properties": properties}
    return [{"name": f"tool_{t}", "description": "A tool.", "input_schema": schema} for t in range(count)]


@given(
    tools=st.one_of(st.sampled_from([1, 128]), st.integers(1, 128)),
    size=st.one_of(st.sampled_from([100, 16_384]), st.integers(100, 16_384)),
    messages=st.one_of(st.sampled_from([1, 1000]), st.integers(1, 1000)),
)
@example(tools=128, size=16_384, messages=1)  # 2.2 MB: once held the loop
@EDGE_SETTINGS
def test_count_tokens_bodies_are_bounded_work(launched, tools: int, size: int, messages: int):
    body = {
        "model": CHAT_MODEL,
        "messages": [{"role": "user", "content": f"message {i}"} for i in range(messages)],
        "tools": _anthropic_tools(tools, size),
    }
    data = json.dumps(body).encode()

    def what() -> str:
        return f"POST /v1/messages/count_tokens with {tools} tools of {size} bytes, {messages} messages ({len(data)} bytes)"

    with launched_case(launched, what):
        answer = _post(
            launched, "/v1/messages/count_tokens", content=data, headers={"content-type": "application/json"}
        )
        assert_http_answer(answer.status_code, answer.text, what)


_TOKENIZE_SIZES = st.one_of(st.sampled_from([1, 1000, 100_000, 1_000_000]), st.integers(1, 1_000_000))


@given(kind=st.sampled_from(["messages", "prompt", "tokens"]), count=_TOKENIZE_SIZES)
@example(kind="messages", count=100_000)
@EDGE_SETTINGS
def test_tokenize_bodies_are_bounded_work(launched, kind: str, count: int):
    """``/tokenize`` with many messages or a long prompt, ``/detokenize`` with many ids."""
    if kind == "messages":
        route, body = "/tokenize", {"messages": [{"role": "user", "content": f"m {i}"} for i in range(count)]}
    elif kind == "prompt":
        route, body = (
            "/tokenize",
            {"prompt": "word " * count, "return_token_strs": True, "return_offsets": True},
        )
    else:
        route, body = "/detokenize", {"tokens": [i % 1000 for i in range(count)]}
    data = json.dumps({"model": CHAT_MODEL, **body}).encode()

    def what() -> str:
        return f"POST {route} with {count} {kind} ({len(data)} bytes)"

    with launched_case(launched, what):
        answer = _post(launched, route, content=data, headers={"content-type": "application/json"})
        assert_http_answer(answer.status_code, answer.text, what)


# ---------------------------------------------------------------------------------------------
# Undecodable protobuf bytes

SERVICES = [
    inference_service_pb2.DESCRIPTOR.services_by_name["InferenceService"],
    model_service_pb2.DESCRIPTOR.services_by_name["ModelService"],
    response_store_pb2.DESCRIPTOR.services_by_name["ResponseStoreService"],
]
METHODS = [method for service in SERVICES for method in service.methods]


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
def test_undecodable_bytes_get_a_clear_status(launched, method):
    path = f"/{method.containing_service.full_name}/{method.name}"

    @PER_TARGET_SETTINGS
    @given(data=undecodable(method.input_type))
    def case(data: bytes) -> None:
        def what() -> str:
            return f"{method.name} with {data!r}"

        with launched_case(launched, what):
            code, details = _grpc_call(
                launched,
                path,
                [data],
                client_streaming=method.client_streaming,
                server_streaming=method.server_streaming,
                serialize=None,
            )
            assert_grpc_answer(code, details, what)
            assert code is not grpc.StatusCode.OK, f"OK for {what()}"

    case()


# ---------------------------------------------------------------------------------------------
# Oversized headers and metadata

#: Header bytes every server takes (one header, all headers); past these the answer must be a refusal.
SMALL_HEADER_BYTES, MAX_HEADER_BYTES = 4 * 1024, 64 * 1024
#: Headers every server takes in one request (Envoy's default limit is 100).
SMALL_HEADER_COUNT = 32
_HEADER_SIZES = st.one_of(
    st.sampled_from([100, 4096, 9000, 70_000, 1_000_000, 10_000_000]), st.integers(1, 10_000_000)
)
_HEADER_COUNTS = st.one_of(st.sampled_from([1, 100, 1000, 10_000]), st.integers(1, 10_000))


@given(size=_HEADER_SIZES, count=_HEADER_COUNTS)
@EDGE_SETTINGS
def test_oversized_http_headers_are_refused(launched, size: int, count: int):
    each = max(1, size // count)
    headers = [(f"x-fuzz-{i}", "a" * each) for i in range(count)]
    total = sum(len(name) + len(value) + 4 for name, value in headers)

    def what() -> str:
        return f"GET /health with {count} headers of {each} bytes ({total} bytes)"

    with launched_case(launched, what):
        try:
            status = httpx.get(
                f"{launched.http_base}/health", headers=headers, timeout=DEADLINE_S
            ).status_code
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            status = None  # the server closed the connection: a refusal at the transport
        if total <= SMALL_HEADER_BYTES and count <= SMALL_HEADER_COUNT:
            assert status == 200, f"HTTP {status} for {what()}"
        elif total > MAX_HEADER_BYTES:
            assert status in (None, 400, 413, 431), f"HTTP {status} for {what()}"
        else:
            assert status in (None, 200, 400, 413, 431), f"HTTP {status} for {what()}"


@given(size=_HEADER_SIZES, count=_HEADER_COUNTS)
@EDGE_SETTINGS
def test_oversized_grpc_metadata_is_refused(launched, size: int, count: int):
    each = max(1, size // count)
    metadata = [(f"x-fuzz-{i}", "a" * each) for i in range(count)]
    total = sum(len(name) + len(value) + 32 for name, value in metadata)  # HPACK's 32 bytes per entry

    def what() -> str:
        return f"ListModels with {count} metadata entries of {each} bytes ({total} bytes)"

    with launched_case(launched, what):
        with grpc.insecure_channel(launched.grpc_target) as channel:
            call = channel.unary_unary("/universal_runtime.v1.ModelService/ListModels")
            try:
                call(b"", metadata=metadata, timeout=DEADLINE_S)
                code, details = grpc.StatusCode.OK, ""
            except grpc.RpcError as err:
                code, details = err.code(), err.details() or ""
        assert_grpc_answer(code, details, what)
        if total <= SMALL_HEADER_BYTES and count <= SMALL_HEADER_COUNT:
            assert code is grpc.StatusCode.OK, f"{code.name} ({details}) for {what()}"
        elif total > MAX_HEADER_BYTES:
            assert code is grpc.StatusCode.RESOURCE_EXHAUSTED, f"{code.name} ({details}) for {what()}"
