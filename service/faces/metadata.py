"""What every face does alike: a call's context from its metadata, and a request's bytes parsed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from engines.errors import InvalidArgumentError
from engines.reasons import Reason
from service.core.admission.priority import PRIORITY_METADATA_KEY
from service.core.context import CallContext, MethodInfo
from service.request_context import REQUEST_ID_METADATA_KEY, client_request_id
from service.shared.client_address import client_address

log = logging.getLogger("universal_runtime.rpc")


def call_context(info: MethodInfo, metadata: Iterable[tuple[str, Any]], **fields: Any) -> CallContext:
    """The :class:`CallContext` of a call to ``info`` with ``metadata`` (``(key, value)`` pairs).

    Reads ``x-request-id`` (a new id when absent), every ``authorization`` entry, ``x-ur-priority``
    and ``x-ur-client-address``; binary entries are ignored. ``fields`` sets the rest (peer,
    deadline, headers).
    """
    text = [(key, value) for key, value in metadata if isinstance(value, str)]
    first = dict(reversed(text))  # the first entry of each key
    return CallContext(
        method=info,
        request_id=client_request_id(first.get(REQUEST_ID_METADATA_KEY)),
        credentials=tuple(value for key, value in text if key == "authorization"),
        priority=first.get(PRIORITY_METADATA_KEY),
        client_address=client_address(text),
        **fields,
    )


def checked_parser(parse: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
    """``parse`` returning :class:`InvalidArgumentError` (MALFORMED_REQUEST) for bytes it cannot parse.

    The message type's full name comes from the generated class (``FromString``'s owner).
    """
    if parse is None:
        return lambda raw: raw
    descriptor = getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None)
    type_name = getattr(descriptor, "full_name", "") or "the method's request message"

    def parse_or_refuse(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception as exc:  # any parse failure is the client's bytes
            log.info(
                "malformed request",
                extra={"message_type": type_name, "bytes": len(raw), "error": type(exc).__name__},
            )
            return InvalidArgumentError(
                f"the request message could not be parsed as {type_name}",
                reason=Reason.MALFORMED_REQUEST,
                message_type=type_name,
            )

    return parse_or_refuse
