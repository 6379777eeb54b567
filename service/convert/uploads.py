"""Client-streamed uploads (Ocr, the document RPCs, Transcribe): the options, then the file in chunks."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Protocol, TypeVar

from engines.errors import InvalidArgumentError, ResourceExhaustedError
from engines.reasons import Reason
from service.settings import Settings

Job = TypeVar("Job")


class UploadMessage(Protocol):
    """A request message of a chunked upload (OcrRequest, AnalyzeDocumentRequest, ...)."""

    chunk: bytes

    @property
    def options(self) -> object:
        """The call's options (honoured on the first message)."""
        ...


async def read_upload(
    messages: AsyncIterable[UploadMessage],
    settings: Settings,
    parse: Callable[[object, Settings], Job],
    max_bytes: int,
) -> tuple[Job, bytes]:
    """Read every message: options from the first (``parse`` validates them), then the file.

    The file is the chunks in order.

    Bounded by ``max_bytes`` (``ocr_max_bytes`` for pages, ``audio_max_bytes`` for audio): reading
    stops at the first chunk past it. Bad options are reported only once the upload has been read
    (still within that bound): refused while it is still writing, grpc-python's client sometimes
    reports its own INTERNAL "Internal error from Core" instead of the server's status (see
    docs/architecture/design-notes.md#refusing-a-stream-after-its-upload).

    Raises:
        InvalidArgumentError: no message at all; bad options (see ``parse``).
        ResourceExhaustedError: the chunks add up to more than ``max_bytes`` (FILE_TOO_LARGE).

    """
    job: Job | None = None
    refused: InvalidArgumentError | None = None
    data = bytearray()
    limit = max_bytes
    received = 0
    async for message in messages:
        if job is None and refused is None:
            try:
                job = parse(message.options, settings)
            except InvalidArgumentError as exc:
                refused = exc
        chunk = message.chunk  # read once: each read copies the bytes
        received += len(chunk)
        if received > limit:
            raise ResourceExhaustedError(
                f"the file is over the limit of {limit} bytes",
                reason=Reason.FILE_TOO_LARGE,
                max_bytes=limit,
            )
        if refused is None:
            data += chunk
    if refused is not None:
        raise refused
    if job is None:
        raise InvalidArgumentError(
            "no request message received: send options and the file's bytes",
            reason=Reason.EMPTY_FILE,
            field="chunk",
        )
    return job, bytes(data)
