"""Rich gRPC errors: a canonical status code plus a ``google.rpc.ErrorInfo`` detail.

Clients read the detail from the ``grpc-status-details-bin`` trailer (``google.rpc.Status``),
as described in https://google.aip.dev/193.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from engines.errors import RuntimeServiceError

ERROR_DOMAIN = "universal-runtime"
GENERIC_INTERNAL_MESSAGE = "internal error; see the server log for request id {request_id}"


def rich_status(
    code: grpc.StatusCode, message: str, reason: str, metadata: dict[str, str] | None = None
) -> grpc.Status:
    """Build a ``grpc.Status`` whose trailers carry ``google.rpc.Status`` with one ErrorInfo."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN, metadata=metadata or {})
    detail = any_pb2.Any()
    detail.Pack(info)
    proto = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=[detail])
    return rpc_status.to_status(proto)


def status_for_error(error: RuntimeServiceError) -> grpc.Status:
    """The rich status of a domain error (its class names the code, its reason the ErrorInfo)."""
    return rich_status(grpc.StatusCode[error.status], error.message, error.reason, error.metadata)


def internal_status(request_id: str) -> grpc.Status:
    """INTERNAL with a generic message: the trace stays in the server log."""
    return rich_status(
        grpc.StatusCode.INTERNAL,
        GENERIC_INTERNAL_MESSAGE.format(request_id=request_id),
        "INTERNAL",
        {"request_id": request_id},
    )
