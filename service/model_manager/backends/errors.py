"""A backend's error status back into the domain error it was raised as.

The backend answers a failed call with the rich status the server would send (code, message,
``google.rpc.ErrorInfo`` with reason and metadata, ``google.rpc.RetryInfo``; AIP-193); the proxy
raises it again as a :class:`~engines.errors.RuntimeServiceError`, so the server's own faces
answer exactly what an in-process engine's error would have made them answer.
"""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2

from engines.errors import RuntimeServiceError
from engines.reasons import Reason

#: The trailer carrying the serialized ``google.rpc.Status`` (AIP-193): service.status's constant,
#: not imported from there: the import rules let the model manager reach gRPC only in this package.
STATUS_DETAILS_KEY = "grpc-status-details-bin"


class BackendAnswerError(RuntimeServiceError):
    """A domain error as the backend answered it: its status code is the instance's, not the class's.

    Attributes:
        status: the gRPC status code name the backend sent (``"INVALID_ARGUMENT"``).
        retry_after_s: the backend's ``RetryInfo`` delay, seconds, when it sent one.

    """

    def __init__(self, status: str, message: str, reason: str, metadata: dict[str, str]) -> None:
        super().__init__(message, reason=reason, **metadata)
        self.status = status  # type: ignore[misc]  # per instance: the backend's code
        self.retry_after_s: float | None = None


def error_from_status(error: grpc.aio.AioRpcError) -> RuntimeServiceError:
    """The domain error of a backend call's failed status.

    ``error`` is a failed call of grpc.aio, or of the synchronous API (a ``grpc.RpcError`` that
    is also a ``grpc.Call``): both have ``code()``, ``details()`` and ``trailing_metadata()``.

    A status without an ``ErrorInfo`` keeps its code, with reason ``UNAVAILABLE`` for
    ``UNAVAILABLE`` and ``INTERNAL`` otherwise.
    """
    code = error.code().name
    message = error.details() or code
    reason = str(Reason.UNAVAILABLE if error.code() is grpc.StatusCode.UNAVAILABLE else Reason.INTERNAL)
    metadata: dict[str, str] = {}
    retry_after_s = None
    for key, value in error.trailing_metadata() or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                reason, metadata = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_after_s = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    answer = BackendAnswerError(code, message, reason, metadata)
    answer.retry_after_s = retry_after_s
    return answer
