"""The byte limits on one request message, the same from every face.

gRPC's own limit (``max_receive_message_bytes``) is one number for every method, sized for the
largest anomaly batch; the text RPCs get a smaller one (``max_text_request_bytes``), because a
request is parsed (and, for text, converted) on the event loop every call shares (see
docs/architecture/design-notes.md#protobuf-on-the-event-loop). A face checks a request's size
before any work: the gRPC face on the received bytes, before parsing them; the in-process face on
the message's serialized size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engines.errors import ResourceExhaustedError
from engines.reasons import Reason


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """The most bytes of one request message.

    Attributes:
        max_receive_bytes: Any method's (the server's ``grpc.max_receive_message_length``).
        max_send_bytes: Any answer message's (``grpc.max_send_message_length``).
        by_method: Smaller limits by full method name (the text RPCs').

    """

    max_receive_bytes: int
    max_send_bytes: int
    by_method: Mapping[str, int] = field(default_factory=dict)

    def error(self, path: str, size: int) -> ResourceExhaustedError | None:
        """The refusal of a ``size``-byte request to ``path`` over its method's own limit, else ``None``.

        RESOURCE_EXHAUSTED, reason MESSAGE_TOO_LARGE (HTTP 413 at the gateway), metadata
        ``bytes`` and ``max_bytes``; the receive limit itself is the transport's to answer.
        """
        limit = self.by_method.get(path)
        if limit is None or size <= limit:
            return None
        method = path.rpartition("/")[2]
        return ResourceExhaustedError(
            f"the request is {size} bytes; {method} accepts at most {limit} bytes "
            "(setting max_text_request_bytes)",
            reason=Reason.MESSAGE_TOO_LARGE,
            bytes=size,
            max_bytes=limit,
        )
