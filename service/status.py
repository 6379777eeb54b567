"""Rich gRPC errors: a canonical status code plus a ``google.rpc.ErrorInfo`` detail.

Clients read the detail from the ``grpc-status-details-bin`` trailer (``google.rpc.Status``),
as described in https://google.aip.dev/193.

The message travels twice (percent-encoded in ``grpc-message``, and inside the base64 detail),
and a client refuses trailers over its metadata limit (8 KiB by default) with RESOURCE_EXHAUSTED,
hiding the real error. So every status built here is bounded: the message to
:data:`MAX_MESSAGE_BYTES`, each metadata value to ``MAX_ECHO_CHARS`` characters and all of them
together to :data:`MAX_METADATA_BYTES`, which keeps the trailers under about 6.5 KiB.
"""

from __future__ import annotations

import math

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engines.errors import RuntimeServiceError, clip_text, clip_utf8
from engines.reasons import Reason
from service.request_context import REQUEST_ID_METADATA_KEY, REQUEST_ID_UNSET, request_id_var

ERROR_DOMAIN = "universal-runtime"
GENERIC_INTERNAL_MESSAGE = "internal error; see the server log for request id {request_id}"

MAX_MESSAGE_BYTES = 1024
"""Longest status message, in UTF-8 bytes (up to 3 KiB once percent-encoded in ``grpc-message``)."""
MAX_METADATA_BYTES = 1024
"""Most UTF-8 bytes of ErrorInfo metadata keys and values together."""
MAX_NAME_CHARS = 64
"""Longest ErrorInfo reason or metadata key (both are set by the server, bounded all the same)."""


def bounded_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """Return ``metadata`` with each value clipped (``clip_text``) and at most :data:`MAX_METADATA_BYTES`.

    Entries are kept in order while they fit; one that does not is left out (the message still
    says what went wrong), and smaller ones after it may still fit.
    """
    out: dict[str, str] = {}
    left = MAX_METADATA_BYTES
    for key, value in metadata.items():
        key, value = clip_text(key, MAX_NAME_CHARS), clip_text(value)
        size = len(key.encode("utf-8")) + len(value.encode("utf-8"))
        if size <= left:
            out[key] = value
            left -= size
    return out


def rich_status(
    code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str] | None = None
) -> grpc.Status:
    """Build a ``grpc.Status`` whose trailers carry ``google.rpc.Status`` with one ErrorInfo.

    The message, reason and metadata are bounded (see the module docstring), so the trailers fit
    any client's default metadata limit whatever the error echoes.
    """
    message = clip_utf8(message, MAX_MESSAGE_BYTES)
    info = error_details_pb2.ErrorInfo(
        reason=clip_text(reason, MAX_NAME_CHARS),
        domain=ERROR_DOMAIN,
        metadata=bounded_metadata(metadata or {}),
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    proto = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=[detail])
    status = rpc_status.to_status(proto)
    request_id = request_id_var.get()
    if request_id != REQUEST_ID_UNSET:
        # Every answer carries the call's request id (service.core.admission.request_log).
        status = status._replace(
            trailing_metadata=(*status.trailing_metadata, (REQUEST_ID_METADATA_KEY, request_id))
        )
    return status


STATUS_DETAILS_KEY = "grpc-status-details-bin"
"""The trailer carrying the serialized ``google.rpc.Status`` (https://google.aip.dev/193)."""


def status_for_error(error: RuntimeServiceError) -> grpc.Status:
    """The rich status of a domain error (its class names the code, its reason the ErrorInfo).

    An error with a known ``retry_after_s`` (a quota's refusal) also carries a
    ``google.rpc.RetryInfo`` (:func:`with_retry_delay`).
    """
    status = rich_status(grpc.StatusCode[error.status], error.message, error.reason, error.metadata)
    retry_after_s = getattr(error, "retry_after_s", None)
    return status if retry_after_s is None else with_retry_delay(status, retry_after_s)


def with_retry_delay(status: grpc.Status, seconds: float) -> grpc.Status:
    """``status`` with a ``google.rpc.RetryInfo`` of ``seconds`` added to its ``google.rpc.Status`` details.

    Args:
        status: A status from :func:`rich_status` (its details in the ``grpc-status-details-bin``
            trailer).
        seconds: The retry delay (>= 0), rounded up to whole milliseconds so that a client that
            waits exactly that long finds the bucket ready.

    """
    millis = max(0, math.ceil(seconds * 1000))
    delay = duration_pb2.Duration(seconds=millis // 1000, nanos=(millis % 1000) * 1_000_000)
    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
    trailing = []
    for key, value in status.trailing_metadata:  # a handful of entries
        if key == STATUS_DETAILS_KEY:
            proto = status_pb2.Status.FromString(value)
            proto.details.append(detail)
            value = proto.SerializeToString()
        trailing.append((key, value))
    return status._replace(trailing_metadata=tuple(trailing))


def internal_status(request_id: str) -> grpc.Status:
    """INTERNAL with a generic message: the trace stays in the server log."""
    return rich_status(
        grpc.StatusCode.INTERNAL,
        GENERIC_INTERNAL_MESSAGE.format(request_id=request_id),
        Reason.INTERNAL,
        {"request_id": request_id},
    )


def set_status(context: grpc.aio.ServicerContext, status: grpc.Status) -> None:
    """Make ``status`` (code, details, trailers) the one the call ends with once its handler returns.

    Unlike ``context.abort``, which sends the status at once and raises, nothing goes out until
    the handler returns, after the admission chain: the call's log line and metrics exist before
    the client can see the outcome (a client that reads the log or ``/metrics`` right after an error finds it
    there). A unary handler then returns ``None`` (grpc.aio sends no message with a status that
    is not OK); a response stream ends.
    """
    context.set_code(status.code)
    context.set_details(status.details)
    context.set_trailing_metadata(status.trailing_metadata)


def is_error_set(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call's status was set to something other than OK (:func:`set_status`)."""
    return context.code() not in (None, grpc.StatusCode.OK)
