"""Domain errors raised by engines and the model manager.

Each error names a canonical gRPC status code (by its ``grpc.StatusCode`` name, so this
module needs no gRPC import) and an UPPER_SNAKE_CASE reason for ``google.rpc.ErrorInfo``.
The service layer turns them into statuses; the gateway turns those into HTTP statuses.
"""

from __future__ import annotations

import re
from typing import ClassVar

from engines.reasons import Reason

MAX_ECHO_CHARS = 256
"""Longest client-supplied value (a model or detector name, a field value) echoed into an error.

Error messages and ``ErrorInfo`` metadata travel in gRPC trailers, which clients cap (8 KiB by
default): a 10 KB name echoed whole makes the client fail the call with RESOURCE_EXHAUSTED
instead of showing the real error.
"""

_CLIPPED = re.compile(r"…\(\d+ chars\)\Z")


def clip_text(text: str, limit: int = MAX_ECHO_CHARS) -> str:
    """Return ``text``, or its first ``limit`` characters and ``…(N chars)`` when it is longer.

    Idempotent: a text it clipped comes back unchanged.

    Args:
        text: Any string; ``N`` in the marker is its full length in characters.
        limit: The most characters kept (the marker comes on top).

    """
    if len(text) <= limit or (len(text) <= limit + 32 and _CLIPPED.search(text)):
        return text  # short, or clipped already (the status layer clips again, to the same result)
    return f"{text[:limit]}…({len(text)} chars)"


def clip_utf8(text: str, max_bytes: int) -> str:
    """Return ``text`` if its UTF-8 form fits ``max_bytes``, else its head and tail around a marker.

    The middle goes, so that both the start of a message and its end (often the explanation
    after an echoed value) survive. The result is at most ``max_bytes`` UTF-8 bytes (for
    ``max_bytes`` of 64 or more); cut characters are dropped whole.
    """
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = f" …({len(text)} chars)… "
    room = max(0, max_bytes - len(marker.encode("utf-8")))
    head = data[: room * 3 // 4].decode("utf-8", "ignore")
    tail = data[len(data) - room // 4 :].decode("utf-8", "ignore") if room // 4 else ""
    return head + marker + tail


class RuntimeServiceError(Exception):
    """Base of all errors that reach a client with a specific status.

    A subclass names its status and default reason as class keywords,
    ``class NotFound(RuntimeServiceError, status="NOT_FOUND", reason=Reason.MODEL_NOT_FOUND)``;
    one that names neither inherits its parent's. A reason is a :class:`~engines.reasons.Reason`
    (a ``str``: its wire form), whose table entry names the status it travels with.

    Args:
        message: Human-readable text sent to the client; must not contain secrets or traces.
        reason: ``ErrorInfo.reason`` override (a :class:`~engines.reasons.Reason`); defaults to
            the class's reason.
        metadata: ``ErrorInfo.metadata``: the values mentioned in the message, as strings.
            Each is clipped to :data:`MAX_ECHO_CHARS` (see :func:`clip_text`), and so is every
            occurrence of a long one in ``message``: an error can always echo what the client sent.

    """

    status: ClassVar[str] = "INTERNAL"
    reason: str = Reason.INTERNAL

    def __init_subclass__(
        cls, *, status: str | None = None, reason: str | None = None, **kwargs: object
    ) -> None:
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if reason is not None:
            cls.reason = reason

    def __init__(self, message: str, *, reason: str | None = None, **metadata: object) -> None:
        values = {key: str(value) for key, value in metadata.items()}
        for value in values.values():
            if len(value) > MAX_ECHO_CHARS:
                message = message.replace(value, clip_text(value))
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        self.metadata = {key: clip_text(value) for key, value in values.items()}


class InvalidArgumentError(RuntimeServiceError, status="INVALID_ARGUMENT", reason=Reason.INVALID_ARGUMENT):
    """The request is malformed or a value is out of range."""


class InputTooLongError(InvalidArgumentError, reason=Reason.INPUT_TOO_LONG):
    """An input exceeds the model's context or sequence length (status INVALID_ARGUMENT)."""


class ModelNotFoundError(RuntimeServiceError, status="NOT_FOUND", reason=Reason.MODEL_NOT_FOUND):
    """The named model is not in the catalog."""


class TaskNotSupportedError(
    RuntimeServiceError, status="FAILED_PRECONDITION", reason=Reason.TASK_NOT_SUPPORTED
):
    """The model exists but cannot do the requested task."""


class FailedPreconditionError(
    RuntimeServiceError, status="FAILED_PRECONDITION", reason=Reason.FAILED_PRECONDITION
):
    """The system is not in a state that allows the operation."""


class ResourceExhaustedError(RuntimeServiceError, status="RESOURCE_EXHAUSTED", reason=Reason.OVERLOADED):
    """A queue is full or there is no memory to load a model."""


def queue_wait_exceeded(model: str, waited_s: float, limit_s: float) -> ResourceExhaustedError:
    """The error of a request that waited in a model's queue longer than ``limit_s``.

    RESOURCE_EXHAUSTED, reason QUEUE_WAIT_EXCEEDED: retry later, as for a full queue (HTTP 429
    with ``Retry-After`` at the gateway).
    """
    return ResourceExhaustedError(
        f"waited {waited_s:.1f} s in model {model!r}'s queue, longer than its limit of {limit_s:g} s "
        "(max_queue_wait_s); the server is overloaded, retry later",
        reason=Reason.QUEUE_WAIT_EXCEEDED,
        model=model,
        max_queue_wait_s=limit_s,
    )


def kv_pool_exhausted(
    model: str, pool_cells: int, prompt_tokens: int, max_tokens: int
) -> ResourceExhaustedError:
    """The error of a request that could never fit a model's shared KV pool (``kv_pool_tokens``).

    RESOURCE_EXHAUSTED, reason KV_POOL_EXHAUSTED: its prompt plus ``max_tokens`` need more KV
    cells than the whole pool holds, so waiting would not help (HTTP 429 without ``Retry-After``
    at the gateway); a smaller ``max_tokens`` or a shorter prompt can fit.
    """
    needed = prompt_tokens + max_tokens
    return ResourceExhaustedError(
        f"the request needs {needed} KV cells ({prompt_tokens} prompt tokens + max_tokens {max_tokens}) "
        f"but model {model!r}'s KV pool holds {pool_cells} cells (kv_pool_tokens); ask for at most "
        f"{max(0, pool_cells - prompt_tokens)} tokens",
        reason=Reason.KV_POOL_EXHAUSTED,
        model=model,
        kv_pool_tokens=pool_cells,
        needed_cells=needed,
    )


class PermissionDeniedError(
    RuntimeServiceError, status="PERMISSION_DENIED", reason=Reason.ADMIN_ROLE_REQUIRED
):
    """The caller's API key may not do this: it needs role ``admin`` (HTTP 403 at the gateway)."""


class UnavailableError(RuntimeServiceError, status="UNAVAILABLE", reason=Reason.UNAVAILABLE):
    """The server is shutting down or a model failed to become ready."""


class BackendExitedError(UnavailableError, reason=Reason.BACKEND_EXITED):
    """The model's backend process ended (a signal or an exit code) while the call needed it.

    Only that model's calls in flight get it; the model's next request starts a new backend.
    """


class ModelLoadError(RuntimeServiceError, reason=Reason.MODEL_LOAD_FAILED):
    """A model failed to load; the message is safe for clients, the cause goes to the log (INTERNAL)."""
