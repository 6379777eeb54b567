"""Domain errors raised by engines and the model manager.

Each error names a canonical gRPC status code (by its ``grpc.StatusCode`` name, so this
module needs no gRPC import) and an UPPER_SNAKE_CASE reason for ``google.rpc.ErrorInfo``.
The service layer turns them into statuses; the gateway turns those into HTTP statuses.
"""

from __future__ import annotations

from typing import ClassVar


class RuntimeServiceError(Exception):
    """Base of all errors that reach a client with a specific status.

    A subclass names its status and default reason as class keywords,
    ``class NotFound(RuntimeServiceError, status="NOT_FOUND", reason="MODEL_NOT_FOUND")``;
    one that names neither inherits its parent's.

    Args:
        message: Human-readable text sent to the client; must not contain secrets or traces.
        reason: ``ErrorInfo.reason`` override; defaults to the class's reason.
        metadata: ``ErrorInfo.metadata``: the values mentioned in the message, as strings.

    """

    status: ClassVar[str] = "INTERNAL"
    reason: str = "INTERNAL"

    def __init_subclass__(
        cls, *, status: str | None = None, reason: str | None = None, **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if reason is not None:
            cls.reason = reason

    def __init__(self, message: str, *, reason: str | None = None, **metadata: object) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = {key: str(value) for key, value in metadata.items()}


class InvalidArgumentError(RuntimeServiceError, status="INVALID_ARGUMENT", reason="INVALID_ARGUMENT"):
    """The request is malformed or a value is out of range."""


class InputTooLongError(InvalidArgumentError, reason="INPUT_TOO_LONG"):
    """An input exceeds the model's context or sequence length (status INVALID_ARGUMENT)."""


class ModelNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason="MODEL_NOT_FOUND"):
    """The named model is not in the catalog."""


class TaskNotSupportedError(RuntimeServiceError, status="FAILED_PRECONDITION", reason="TASK_NOT_SUPPORTED"):
    """The model exists but cannot do the requested task."""


class FailedPreconditionError(
    RuntimeServiceError, status="FAILED_PRECONDITION", reason="FAILED_PRECONDITION"
):
    """The system is not in a state that allows the operation."""


class ResourceExhaustedError(RuntimeServiceError, status="RESOURCE_EXHAUSTED", reason="OVERLOADED"):
    """A queue is full or there is no memory to load a model."""


class UnavailableError(RuntimeServiceError, status="UNAVAILABLE", reason="UNAVAILABLE"):
    """The server is shutting down or a model failed to become ready."""


class ModelLoadError(RuntimeServiceError, reason="MODEL_LOAD_FAILED"):
    """A model failed to load; the message is safe for clients, the cause goes to the log (INTERNAL)."""
