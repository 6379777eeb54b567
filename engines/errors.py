"""Domain errors raised by engines and the model manager.

Each error names a canonical gRPC status code (by its ``grpc.StatusCode`` name, so this
module needs no gRPC import) and an UPPER_SNAKE_CASE reason for ``google.rpc.ErrorInfo``.
The service layer turns them into statuses; the gateway turns those into HTTP statuses.
"""

from __future__ import annotations

from typing import ClassVar


class RuntimeServiceError(Exception):
    """Base of all errors that reach a client with a specific status.

    Args:
        message: Human-readable text sent to the client; must not contain secrets or traces.
        reason: ``ErrorInfo.reason`` override; defaults to the class's reason.
        metadata: ``ErrorInfo.metadata``: the values mentioned in the message, as strings.

    """

    status: ClassVar[str] = "INTERNAL"
    reason: str = "INTERNAL"

    def __init__(self, message: str, *, reason: str | None = None, **metadata: object) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = {key: str(value) for key, value in metadata.items()}


class InvalidArgumentError(RuntimeServiceError):
    """The request is malformed or a value is out of range (INVALID_ARGUMENT)."""

    status = "INVALID_ARGUMENT"
    reason = "INVALID_ARGUMENT"


class InputTooLongError(InvalidArgumentError):
    """An input exceeds the model's context or sequence length (INVALID_ARGUMENT, INPUT_TOO_LONG)."""

    reason = "INPUT_TOO_LONG"


class ModelNotFoundError(RuntimeServiceError):
    """The named model is not in the catalog (NOT_FOUND, MODEL_NOT_FOUND)."""

    status = "NOT_FOUND"
    reason = "MODEL_NOT_FOUND"


class TaskNotSupportedError(RuntimeServiceError):
    """The model exists but cannot do the requested task (FAILED_PRECONDITION)."""

    status = "FAILED_PRECONDITION"
    reason = "TASK_NOT_SUPPORTED"


class FailedPreconditionError(RuntimeServiceError):
    """The system is not in a state that allows the operation (FAILED_PRECONDITION)."""

    status = "FAILED_PRECONDITION"
    reason = "FAILED_PRECONDITION"


class ResourceExhaustedError(RuntimeServiceError):
    """A queue is full or there is no memory to load a model (RESOURCE_EXHAUSTED)."""

    status = "RESOURCE_EXHAUSTED"
    reason = "OVERLOADED"


class UnavailableError(RuntimeServiceError):
    """The server is shutting down or a model failed to become ready (UNAVAILABLE)."""

    status = "UNAVAILABLE"
    reason = "UNAVAILABLE"


class ModelLoadError(RuntimeServiceError):
    """A model failed to load; the message is safe for clients, the cause goes to the log (INTERNAL)."""

    status = "INTERNAL"
    reason = "MODEL_LOAD_FAILED"
