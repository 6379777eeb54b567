"""The gateway's HTTP edges: bodies that are not UTF-8 or hold lone surrogates, objects
of a million keys, content parts it cannot serve, unknown fields on the runtime's own routes,
64-bit integers in answers, and the API docs behind the key. Each is a clear 400 (or 401) in
OpenAI's error shape, never a 500, and no message shows pydantic's internals.

What each test rules out: a lone surrogate answered 500 (protobuf cannot hold one); invalid UTF-8
answered "There was an error parsing the body"; a million unknown keys validated, served and logged
by name on one line; an ``image_url`` part answered with pydantic's union member names;
``"contamnation": 0.1`` on ``/v1/anomaly/fit`` answered 200; a detector's ``created_at_ms`` a string.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import logging
import threading
import time

import orjson
import pytest
from universal_runtime.v1 import anomaly_pb2, encoders_pb2

from gateway import cli, json_body
from gateway.app import create_app
from gateway.http_limits import HeaderLimits
from gateway.json_body import DEFAULT_MAX_OBJECT_KEYS, INLINE_BODY_BYTES
from gateway.routes import embeddings as embeddings_route
from gateway.schemas.base import LOGGED_UNKNOWN_FIELDS
from gateway.translate.anomaly import to_json
from tests.gateway.gateway_fakes import asgi_client

USER = [{"role": "user", "content": "hi"}]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()

# One body per JSON route; "X" marks the string the bad text goes into, and the path it has.
ROUTES = [
    ("/v1/chat/completions", '{"model":"m","messages":[{"role":"user","content":"X"}]}', "messages[0].content"),
    ("/v1/completions", '{"model":"m","prompt":"X"}', "prompt"),
    ("/v1/embeddings", '{"model":"m","input":["a","X"]}', "input[1]"),
    ("/tokenize", '{"model":"m","prompt":"X"}', "prompt"),
    ("/v1/rerank", '{"model":"m","query":"X","documents":["a"]}', "query"),
    ("/v1/ner", '{"model":"m","input":"X"}', "input"),
    ("/v1/classify", '{"model":"m","input":"X"}', "input"),
    ("/v1/anomaly/fit", '{"detector":"d","rows":[[1.0,"X"]]}', "rows[0][1]"),
    ("/v1/classifiers", '{"name":"n","embedding_model":"m","examples":[{"text":"X","label":"a"}]}',
     "examples[0].text"),
    ("/v1/ocr", '{"file":"' + PNG + '","languages":["X"]}', "languages[0]"),
    ("/v1/documents/ask", '{"file":"' + PNG + '","question":"X"}', "question"),
]  # fmt: skip

PYDANTIC_INTERNALS = ("input_value", "errors.pydantic.dev", "function-after", "list[", "Value error")


def post_raw(http, route: str, body: bytes):
    return http.post(route, content=body, headers={"content-type": "application/json"})


def assert_clean_400(response, code: str) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == code, error
    for internal in PYDANTIC_INTERNALS:
        assert internal not in error["message"], error["message"]
    return error


@pytest.mark.parametrize(("route", "body", "path"), ROUTES, ids=[r[0] for r in ROUTES])
async def test_a_lone_surrogate_is_400_naming_where(client, route, body, path):
    response = await post_raw(client, route, body.replace("X", "a\\ud800b").encode())
    error = assert_clean_400(response, "invalid_json")
    assert f"lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape) at {path}" in error["message"]
    assert error["param"] == path


@pytest.mark.parametrize(("route", "body", "path"), ROUTES, ids=[r[0] for r in ROUTES])
async def test_invalid_utf8_is_400_saying_so(client, route, body, path):
    raw = body.encode().replace(b"X", b"a\xff\xfeb")
    response = await post_raw(client, route, raw)
    error = assert_clean_400(response, "invalid_json")
    where = raw.index(b"\xff")
    assert f"Request body is not valid UTF-8: byte {where} (0xff)" in error["message"]


async def test_a_surrogate_in_a_key_and_a_paired_one_in_a_value(client, fake):
    response = await post_raw(client, "/v1/chat/completions", b'{"model":"m","\\udc00":1,"messages":[]}')
    assert "lone UTF-16 surrogate" in assert_clean_400(response, "invalid_json")["message"]
    # A pair is one character (U+1F600): served.
    body = '{"model":"m","messages":[{"role":"user","content":"\\ud83d\\ude00"}]}'
    response = await post_raw(client, "/v1/chat/completions", body.encode())
    assert response.status_code == 200, response.text
    assert fake.inference.received[-1].request.messages[0].content == "\N{GRINNING FACE}"


async def test_an_object_of_too_many_keys_is_400_before_validation(client, fake, caplog):
    keys = {f"k{i}": 1 for i in range(DEFAULT_MAX_OBJECT_KEYS + 1)}
    with caplog.at_level(logging.WARNING, logger="gateway.schemas"):
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER, **keys})
    error = assert_clean_400(response, "invalid_json")
    assert (
        f"an object of {DEFAULT_MAX_OBJECT_KEYS + 3} keys; at most {DEFAULT_MAX_OBJECT_KEYS}"
        in error["message"]
    )
    assert not caplog.records  # refused before validation: nothing logged per key
    assert not fake.inference.received
    nested = {"model": "m", "messages": [{"role": "user", "content": "hi", **keys}]}
    assert_clean_400(await client.post("/v1/chat/completions", json=nested), "invalid_json")


async def test_unknown_openai_fields_are_served_and_logged_in_one_short_line(client, caplog):
    keys = {f"unknown_{i:04d}_" + "x" * 200: 1 for i in range(500)}
    with caplog.at_level(logging.WARNING, logger="gateway.schemas"):
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": USER, **keys})
    assert response.status_code == 200, response.text
    [record] = [r for r in caplog.records if "ignoring unsupported fields" in r.getMessage()]
    line = record.getMessage()
    assert len(line) < 1200, len(line)
    assert line.endswith(f"and {500 - LOGGED_UNKNOWN_FIELDS} more")
    assert "unknown_0000_" in line and "unknown_0499_" not in line


@pytest.mark.parametrize(
    ("part", "kind"),
    [
        ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, "image_url"),
        ({"type": "file", "file": {"file_id": "file-abc"}}, "file"),
    ],
)
async def test_a_content_part_it_cannot_serve_is_400_naming_the_part(client, part, kind):
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}]
    response = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    error = assert_clean_400(response, "invalid_value")
    assert error["message"] == (
        f"messages[0].content[1]: content parts of type '{kind}' are not supported by this server: "
        "send text or input_audio parts"
    )
    assert error["param"] == "messages[0].content[1]"


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            {"model": "m", "messages": [{"role": "robot", "content": "hi"}]},
            "messages[0].role",
            "Input should be",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages[0].content", "valid string"),
        ({"model": "m", "messages": USER, "tool_choice": "sometimes"}, "tool_choice", "Input should be"),
        ({"model": "m", "messages": USER, "max_tokens": 10, "max_completion_tokens": 20}, None, "differ"),
    ],
)
async def test_validation_messages_name_fields_without_pydantic_internals(client, body, param, message):
    error = assert_clean_400(await client.post("/v1/chat/completions", json=body), "invalid_value")
    assert message in error["message"]
    assert error["param"] == param
    assert not error["message"].startswith(("str", "list"))


# The runtime's own routes refuse a field they do not know; the OpenAI ones serve it.
OWN_ROUTES = [
    ("/v1/anomaly/fit", {"detector": "d", "rows": [[1.0]], "contamnation": 0.1}, "contamnation"),
    ("/v1/anomaly/detect", {"rows": [[1.0]], "treshold": 0.5}, "treshold"),
    ("/v1/anomaly/fit", {"detector": "d", "rows": [[1.0]], "schema": [{"name": "a", "kind": "x"}]},
     "schema[0].kind"),
    ("/v1/classifiers", {"name": "n", "embedding_model": "m", "examples": [], "overwrite_": True}, "overwrite_"),
    ("/v1/classifiers", {"name": "n", "embedding_model": "m", "examples": [{"text": "a", "label": "b", "w": 1}]},
     "examples[0].w"),
    ("/v1/classify", {"model": "m", "input": "x", "multilabel": True}, "multilabel"),
    ("/v1/ner", {"model": "m", "input": "x", "min_scor": 0.5}, "min_scor"),
    ("/v1/ocr", {"file": PNG, "return_box": True}, "return_box"),
    ("/v1/documents/ask", {"file": PNG, "question": "q", "topk": 2}, "topk"),
]  # fmt: skip


@pytest.mark.parametrize(("route", "body", "param"), OWN_ROUTES, ids=[f"{r[0]}:{r[2]}" for r in OWN_ROUTES])
async def test_own_routes_refuse_unknown_fields_by_name(client, fake, route, body, param):
    error = assert_clean_400(await client.post(route, json=body), "unknown_parameter")
    assert error["param"] == param
    assert error["message"] == f"{param}: unknown field: this route does not accept it"
    assert not fake.inference.received


async def test_an_upload_form_refuses_unknown_fields_too(client, fake):
    response = await client.post(
        "/v1/documents/ask", data={"question": "q", "top_kk": "2"}, files={"file": ("a.png", b"\x89PNG")}
    )
    assert assert_clean_400(response, "unknown_parameter")["param"] == "top_kk"


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": USER, "user": "u1", "store": False}),
        ("/v1/embeddings", {"model": "m", "input": "x", "user": "u1"}),
    ],
)
async def test_openai_routes_keep_serving_unknown_fields(client, route, body):
    response = await client.post(route, json=body)
    assert response.status_code == 200, response.text


def test_detector_times_are_numbers_like_classifier_times():
    response = anomaly_pb2.ListAnomalyDetectorsResponse()
    response.detectors.add(detector="d", version=3, created_at_ms=1_764_000_000_123, row_count=7)
    [detector] = to_json(response)["detectors"]
    assert detector["created_at_ms"] == 1_764_000_000_123
    assert detector["row_count"] == 7
    assert detector["version"] == 3


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"])
async def test_api_docs_need_the_key_when_health_does(fake, path):
    guarded = create_app(fake.target, api_key="sekret", auth_public_health=False)
    async with asgi_client(guarded) as http:
        refused = await http.get(path)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_api_key"
        allowed = await http.get(path, headers={"Authorization": "Bearer sekret"})
        assert allowed.status_code == 200
    public = create_app(fake.target, api_key="sekret")  # public probes: the docs stay open too
    async with asgi_client(public) as http:
        assert (await http.get(path)).status_code == 200


async def test_the_key_limit_is_a_setting(fake, monkeypatch):
    served = {}
    monkeypatch.setattr(cli, "run_uvicorn", lambda app, https, **kwargs: served.update(app=app, **kwargs))
    monkeypatch.setenv("UR_GATEWAY_MAX_JSON_OBJECT_KEYS", "3")
    monkeypatch.setenv("UR_GATEWAY_MAX_HEADER_COUNT", "20")
    cli.main(["--grpc-target", fake.target, "--port", "0"])
    assert served["header_limits"] == HeaderLimits(max_count=20)
    async with asgi_client(served["app"]) as http:
        three = await http.post("/v1/chat/completions", json={"model": "m", "messages": USER, "n": 1})
        assert three.status_code == 200, three.text
        four = await http.post("/v1/chat/completions", json={"model": "m", "messages": USER, "n": 1, "x": 1})
        assert "an object of 4 keys; at most 3" in assert_clean_400(four, "invalid_json")["message"]


async def test_a_large_body_does_not_hold_the_event_loop(client):
    """Tiny calls go on while a large body is parsed, validated and translated.

    A chat body of 30,000 messages (3.5 MB) costs seconds of validation and translation; on the
    event loop the gRPC server shares every other caller would wait for all of it (see
    docs/architecture/design-notes.md#json-bodies-on-or-off-the-event-loop). Those steps run in a
    worker thread: the probes (an embedding each, back to back, on the same loop as the gateway and
    the fake server) keep being answered meanwhile, and the longest wait between two of them stays
    under half the big request's time (on the loop it would be the whole parse and translation: most
    of it).

    The objects alive before the measurement are frozen out of the garbage collector (``gc.freeze``,
    as a server may do once its models are loaded): in a full test run the big body's allocations
    otherwise set off a full collection over the session's heap, which stops every thread, the loop's
    too, whatever thread allocated.
    """
    messages = [{"role": "user", "content": f"message number {i} " * 4} for i in range(30_000)]
    # Encoded before the clock starts: the test's client runs on the app's event loop.
    content = orjson.dumps({"model": "m", "messages": messages})
    assert len(content) > 50 * INLINE_BODY_BYTES
    gaps: list[float] = []
    done = asyncio.Event()

    async def probe() -> None:
        last = time.perf_counter()
        while not done.is_set():
            answer = await client.post("/v1/embeddings", json={"model": "m", "input": "hi"})
            assert answer.status_code == 200, answer.text
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    gc.collect()
    gc.freeze()
    try:
        probing = asyncio.create_task(probe())
        await asyncio.sleep(0.1)
        started = time.perf_counter()
        big = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        took = time.perf_counter() - started
        done.set()
        await probing
    finally:
        gc.unfreeze()
    assert big.status_code == 200, big.text
    assert len(gaps) >= 5, gaps
    assert max(gaps) < took / 2, (max(gaps), took)


async def test_small_bodies_parse_on_the_loop_and_large_ones_in_a_thread(client, monkeypatch):
    threads = []
    parse = json_body.parse_body

    def recording_parse(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return parse(*args)

    monkeypatch.setattr(json_body, "parse_body", recording_parse)
    for size in (100, INLINE_BODY_BYTES + 1):
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        padding = size - len(orjson.dumps(body)) - len(',"user":""')
        content = orjson.dumps({**body, "user": "u" * max(padding, 0)})
        assert abs(len(content) - size) <= 1
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
        assert response.status_code == 200, response.text
    assert threads == [True, False]  # on the loop's thread, then a worker's


async def test_a_body_with_a_wrong_key_is_refused_before_it_is_parsed(fake, monkeypatch):
    parsed = []
    parse = json_body.parse_body
    monkeypatch.setattr(json_body, "parse_body", lambda *args: parsed.append(1) or parse(*args))
    messages = [{"role": "user", "content": "hi"}] * 50_000  # 1.7 MB: over the inline size
    async with asgi_client(create_app(fake.target, api_key="sekret")) as http:
        refused = await http.post("/v1/chat/completions", json={"model": "m", "messages": messages})
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_api_key"
        assert not parsed
        served = await http.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"Authorization": "Bearer sekret"},
        )
        assert served.status_code == 200, served.text
        assert parsed == [1]


async def test_a_large_answer_is_built_off_the_event_loop(client, fake, monkeypatch):
    threads = []
    build = embeddings_route.embeddings_from_proto

    def recording_build(*args, **kwargs):
        threads.append(threading.current_thread() is threading.main_thread())
        return build(*args, **kwargs)

    monkeypatch.setattr(embeddings_route, "embeddings_from_proto", recording_build)
    small = await client.post("/v1/embeddings", json={"model": "m", "input": "a"})
    assert small.status_code == 200, small.text
    fake.inference.embed_response = encoders_pb2.EmbedResponse(
        model="m", embeddings=[encoders_pb2.Embedding(index=i, values=[0.5] * 384) for i in range(256)]
    )
    large = await client.post("/v1/embeddings", json={"model": "m", "input": ["a"] * 256})
    assert large.status_code == 200, large.text
    assert len(large.json()["data"]) == 256
    assert threads == [True, False]  # 400 KB of floats: built in a worker thread
