"""Huge client values echoed in errors are clipped, so the status reaches the client intact.

A 10 KB model or detector name echoed whole in the message and the ErrorInfo metadata would pass
the client's metadata limit (8 KiB by default) in the trailers, and the client would report
RESOURCE_EXHAUSTED instead of the real error.
"""

from __future__ import annotations

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from universal_runtime.v1 import anomaly_pb2 as a
from universal_runtime.v1 import encoders_pb2 as e
from universal_runtime.v1 import generation_pb2 as g
from universal_runtime.v1 import model_service_pb2 as m

from engines.errors import MAX_ECHO_CHARS, InvalidArgumentError, clip_text, clip_utf8
from service.request_context import MAX_REQUEST_ID_CHARS
from service.status import MAX_MESSAGE_BYTES, MAX_METADATA_BYTES, status_for_error
from tests.conftest import CHAT_MODEL, error_info
from tests.service.core.test_bad_input import assert_healthy

HUGE = "a" * 10_000
CLIPPED = clip_text(HUGE)
USER = [g.ChatMessage(role=g.CHAT_ROLE_USER, content="hi")]
ROWS = [a.FeatureRow(values=[a.FeatureValue(number_value=float(i))]) for i in range(20)]
# The metadata limit of a default client; a status must leave room for the other trailers.
CLIENT_METADATA_LIMIT = 8 * 1024


def trailer_bytes(error: grpc.aio.AioRpcError) -> int:
    """Bytes of the status trailers as received: message, ErrorInfo detail and the rest."""
    trailing = error.trailing_metadata() or ()
    return len((error.details() or "").encode()) + sum(len(k) + len(v) for k, v in trailing)


async def rpc_error(call) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


@pytest.mark.parametrize(
    ("rpc", "request_", "code", "reason", "key"),
    [
        (
            "Embed",
            e.EmbedRequest(model=HUGE, inputs=["x"]),
            "INVALID_ARGUMENT",
            "INVALID_MODEL_NAME",
            "model",
        ),
        (
            "Classify",
            e.ClassifyRequest(model=HUGE, inputs=["x"]),
            "INVALID_ARGUMENT",
            "INVALID_MODEL_NAME",
            "model",
        ),
        (
            "DetectAnomaly",
            a.DetectAnomalyRequest(detector=HUGE, rows=ROWS),
            "INVALID_ARGUMENT",
            "INVALID_DETECTOR_NAME",
            "detector",
        ),
        (
            "DeleteAnomalyDetector",
            a.DeleteAnomalyDetectorRequest(detector=HUGE),
            "INVALID_ARGUMENT",
            "INVALID_DETECTOR_NAME",
            "detector",
        ),
        (
            "Generate",
            g.GenerateRequest(model=HUGE, messages=USER),
            "INVALID_ARGUMENT",
            "INVALID_MODEL_NAME",
            "model",
        ),
    ],
)
async def test_a_10kb_name_gets_its_real_status_with_the_name_clipped(
    inference, rpc, request_, code, reason, key
):
    err = await rpc_error(getattr(inference, rpc)(request_))
    assert err.code() == grpc.StatusCode[code], err.details()
    info = error_info(err)
    assert info.reason == reason
    assert info.metadata[key] == CLIPPED
    assert CLIPPED.endswith("…(10000 chars)")
    assert CLIPPED in err.details() and HUGE not in err.details()
    assert trailer_bytes(err) < CLIENT_METADATA_LIMIT / 2
    await assert_healthy(inference)


async def test_a_long_unknown_hub_id_is_not_found_with_the_name_clipped(inference):
    name = "o" * 128 + "/" + "n" * 128  # a well-formed hub id, 257 characters
    err = await rpc_error(inference.Embed(e.EmbedRequest(model=name, inputs=["x"])))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err.details()
    info = error_info(err)
    assert info.reason == "MODEL_NOT_FOUND"
    assert info.metadata["model"] == name[:MAX_ECHO_CHARS] + "…(257 chars)"
    assert "not in the catalog" in err.details()


async def test_model_service_clips_a_10kb_name(models):
    err = await rpc_error(models.GetModel(m.GetModelRequest(name=HUGE)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert error_info(err).metadata["model"] == CLIPPED


async def test_a_long_value_echoed_only_in_the_message_is_bounded_too(inference):
    # The function name is not in the metadata: the status's own message bound must catch it.
    params = g.GenerationParameters(
        tools=[g.ToolDefinition(name="lookup")],
        tool_choice=g.ToolChoice(mode=g.TOOL_CHOICE_MODE_FUNCTION, function_name="f" * 20_000),
    )
    err = await rpc_error(
        inference.Generate(g.GenerateRequest(model=CHAT_MODEL, messages=USER, parameters=params))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert error_info(err).metadata["field"] == "parameters.tool_choice.function_name"
    assert len(err.details().encode()) <= MAX_MESSAGE_BYTES
    assert err.details().startswith("parameters.tool_choice.function_name: 'fff")
    assert err.details().endswith("is not one of the tools")
    await assert_healthy(inference)


def test_clip_text_keeps_short_values_and_marks_long_ones():
    assert clip_text("x" * MAX_ECHO_CHARS) == "x" * MAX_ECHO_CHARS
    assert clip_text("x" * 300) == "x" * MAX_ECHO_CHARS + "…(300 chars)"
    assert clip_text(clip_text("x" * 300)) == clip_text("x" * 300)


def test_clip_utf8_cuts_the_middle_on_character_boundaries():
    text = "head " + "é🚀" * 3000 + " tail"
    clipped = clip_utf8(text, 500)
    assert len(clipped.encode()) <= 500
    assert clipped.startswith("head ") and clipped.endswith(" tail")
    assert f"…({len(text)} chars)…" in clipped
    assert clip_utf8("short", 500) == "short"


def test_every_status_fits_the_trailer_budget_whatever_the_error_holds():
    # Multi-byte text everywhere: 256 characters of it are 1 KiB, so the total bound matters.
    wide = "🚀" * 5000
    error = InvalidArgumentError(f"bad {wide} and {wide!r}", field="model", name=wide, other=wide, third=wide)
    status = status_for_error(error)
    assert len(status.details.encode()) <= MAX_MESSAGE_BYTES
    details = dict(status.trailing_metadata)["grpc-status-details-bin"]
    assert len(details) < MAX_MESSAGE_BYTES + MAX_METADATA_BYTES + 256
    info = error_details_pb2.ErrorInfo()
    assert status_pb2.Status.FromString(details).details[0].Unpack(info)
    assert dict(info.metadata) == {"field": "model"}  # the 1 KiB values do not fit the budget
    assert error.metadata["field"] == "model"
    assert error.metadata["name"] == clip_text(wide)
    assert wide not in error.message


async def test_ordinary_errors_are_unchanged(inference):
    err = await rpc_error(inference.Embed(e.EmbedRequest(model="no-such-model", inputs=["x"])))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(err).metadata["model"] == "no-such-model"
    assert err.details() == "model 'no-such-model' is not in the catalog"
    await assert_healthy(inference)


async def test_the_rpc_log_line_clips_the_model_name_and_the_request_id(inference, caplog):
    """The per-RPC log line (and the echoed id) hold at most a few hundred characters of client text."""
    long_id = "r" * 5_000
    with caplog.at_level("INFO", logger="universal_runtime.rpc"):
        call = inference.Embed(e.EmbedRequest(model=HUGE, inputs=["x"]), metadata=[("x-request-id", long_id)])
        error = await rpc_error(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    echoed = dict(await call.trailing_metadata())["x-request-id"]
    assert echoed == long_id[:MAX_REQUEST_ID_CHARS]
    lines = [
        r for r in caplog.records if r.getMessage() == "rpc" and getattr(r, "method", "").endswith("/Embed")
    ]
    assert lines, "no rpc log line"
    assert lines[-1].model == CLIPPED
    assert lines[-1].request_id == echoed
