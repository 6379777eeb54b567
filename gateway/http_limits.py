"""Bounds on the head of an HTTP request (request line and headers), enforced where it is read.

uvicorn's httptools protocol buffers a header of any size before the app sees it, and the process
grows by many times what was sent (see docs/architecture/design-notes.md#http-request-heads).
:class:`BoundedHeadersProtocol` counts the head's bytes as they arrive and refuses it before the
parser holds more than the limit (plus a socket read or two, at most 256 KiB each): ``431 Request
Header Fields Too Large`` (RFC 6585) for a header line, the header count or the whole head over its
limit, ``414 URI Too Long`` (RFC 9110) for a request target over the line limit. Then the connection
is closed; what the client still sends meanwhile is read and dropped, never kept. The body is
OpenAI's error shape, as every other error of the gateway.

The defaults follow the common proxies: nginx reads a request line or header line into buffers of
8 KiB (``large_client_header_buffers 4 8k``), Envoy allows 60 KiB of headers
(``max_request_headers_kb``) and 100 of them (``max_headers_count``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import error_body

logger = logging.getLogger(__name__)

DEFAULT_MAX_HEADER_LINE_BYTES = 8 * 1024
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_HEADER_COUNT = 100

#: Seconds a refused connection is still read (and what arrives dropped) before it is closed.
LINGER_S = 1.0


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head over its limits."""


@dataclass(frozen=True, slots=True)
class HeaderLimits:
    """Limits of one request's head.

    Attributes:
        max_line_bytes: Largest header line (name and value) and request target, in bytes.
        max_total_bytes: Largest head in all (request line and every header), in bytes.
        max_count: Most header lines.

    """

    max_line_bytes: int = DEFAULT_MAX_HEADER_LINE_BYTES
    max_total_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_count: int = DEFAULT_MAX_HEADER_COUNT

    def protocol(self) -> Any:
        """The protocol factory to pass as ``uvicorn.Config(http=...)``."""
        return functools.partial(BoundedHeadersProtocol, limits=self)


class BoundedHeadersProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with :class:`HeaderLimits` on every request's head.

    Args:
        config, server_state, app_state, _loop: As for uvicorn's ``HttpToolsProtocol``.
        limits: The bounds of a request's head.

    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: HeaderLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self._in_message = False  # a request is being read (its head or its body)
        self._in_head = False  # a request's head is being read
        self._completed = 0  # requests read whole on this connection
        self._head_bytes = 0  # bytes of reads that were all head
        self._header_bytes = 0  # bytes of the headers taken so far
        self._header_count = 0
        self._refusal: tuple[HTTPStatus, str] | None = None

    def data_received(self, data: bytes) -> None:
        """Feed the parser; refuse the head once the bytes read while it is open pass the limit."""
        if self._refusal is not None:
            return
        # A read is all head when a head was open (or the connection idle) before it, no request
        # ended in it and a head is still open after it; a read that ends a head, or carries the
        # end of one request and the start of the next (pipelining), is not counted.
        head_or_idle = self._in_head or not self._in_message
        completed = self._completed
        super().data_received(data)
        counts = head_or_idle and self._in_head and completed == self._completed
        if counts and self._refusal is None and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_total_bytes:
                message = f"Request headers exceed {self.limits.max_total_bytes} bytes in all"
                self._refusal = (HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, message)
                self._send_refusal()

    def on_message_begin(self) -> None:
        """Start counting a new request's head."""
        super().on_message_begin()
        self._in_message = self._in_head = True
        self._head_bytes = self._header_bytes = self._header_count = 0

    def on_url(self, url: bytes) -> None:
        """Take a piece of the request target, refusing one over ``max_line_bytes``."""
        if len(self.url) + len(url) > self.limits.max_line_bytes:
            message = f"Request target exceeds {self.limits.max_line_bytes} bytes"
            self._refuse(HTTPStatus.REQUEST_URI_TOO_LONG, message)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Take one header, refusing one over ``max_line_bytes`` or past ``max_count``."""
        self._header_count += 1
        if len(name) + len(value) > self.limits.max_line_bytes:
            self._refuse(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"A request header exceeds {self.limits.max_line_bytes} bytes",
            )
        # The head so far as sent: the request target and each "name: value\r\n" (the method and
        # version are a few bytes more). Reads still open count in data_received.
        self._header_bytes += len(name) + len(value) + 4
        if len(self.url) + self._header_bytes > self.limits.max_total_bytes:
            self._refuse(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"Request headers exceed {self.limits.max_total_bytes} bytes in all",
            )
        if self._header_count > self.limits.max_count:
            self._refuse(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"Request has more than {self.limits.max_count} headers",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is whole: the body that follows is the body limit's business."""
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The request is whole: the connection is idle until the next one begins."""
        super().on_message_complete()
        self._in_message = False
        self._completed += 1

    def send_400_response(self, msg: str) -> None:
        """Answer a parse error as uvicorn does, unless the error was our refusal (then that answer)."""
        if self._refusal is None:
            super().send_400_response(msg)
        else:
            self._send_refusal()

    def _refuse(self, status: HTTPStatus, message: str) -> None:
        """Note the refusal and stop the parser (called from its callbacks only)."""
        self._refusal = (status, message)
        raise _HeadRefused(message)  # httptools stops and raises HttpParserCallbackError

    def _send_refusal(self) -> None:
        assert self._refusal is not None
        status, message = self._refusal
        logger.info("refused a request head from %s: %s", self.client, message)
        code = status.phrase.lower().replace(" ", "_").replace("-", "_")  # as gateway.errors names them
        content = json.dumps(error_body(message, error_type="invalid_request_error", code=code)).encode()
        head = [f"HTTP/1.1 {status.value} {status.phrase}".encode()]
        head += [name + b": " + value for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json",
            b"content-length: " + str(len(content)).encode(),
            b"connection: close",
        ]
        self.transport.write(b"\r\n".join(head) + b"\r\n\r\n" + content)
        # Close as nginx's lingering close does: a socket closed with unread bytes sends a reset,
        # which can discard the answer before the client reads it. So stop writing, read and drop
        # what the client still sends (data_received ignores it), and close a moment later.
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
