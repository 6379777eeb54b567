"""One line of a batch (``POST /v1/batches``), answered by its route's own code as calls of the server.

The server's batch runner knows a line's ``url``, its JSON ``body`` and the NAME of the key that
submitted the batch. :class:`BatchLineExecutor` answers the line as the live route answers the
same body: the route's schema parses it (:func:`gateway.json_body.parse_body`, or
:func:`gateway.uploads.parse_json_upload` for a file given in base64), the route's ``answer_*``
function (:data:`LINE_ROUTES`) translates it, calls the server and renders the answer, and the
app's error translations render a failure (:mod:`gateway.errors`). There is no HTTP in between:
the calls go through stubs on the channel ``wrap_channel(channel, key_name)`` gives, on which the
server runs them in this process as that key (its policy, its quotas, its name in the log)
without any credential (the composition root, ``service.cli.start_batch_lines``, makes it from
the server's in-process face with the key as trusted caller). Every call carries:

- ``x-ur-priority: batch`` (:data:`gateway.dependencies.PRIORITY_HEADER`), which lowers the call's
  class below interactive work in every queue;
- ``x-request-id``: the line's own id (a new one when the runner gives none).

Bounds: each line has ``timeout_s`` in all (a line past it answers 504, and its call is cancelled
with it); a line refused as over the key's quota or a full queue (429 with ``Retry-After``) waits
that long and runs again, at most :data:`MAX_ATTEMPTS` times, all within the same ``timeout_s``.
A line that asks to stream (``"stream": true``) is refused (400), as OpenAI's Batch API refuses
it: a batch's output is one JSON body per line.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import orjson
from fastapi.exceptions import RequestValidationError
from starlette.responses import Response

from gateway.calls import CallSite, answer_generation
from gateway.dependencies import PRIORITY_HEADER, CallMetadata
from gateway.errors import (
    GatewayError,
    error_body,
    error_type_for_status,
    retry_after_headers,
    rpc_error_to_http,
    validation_error_to_http,
)
from gateway.grpc_clients import GrpcClients, open_channel
from gateway.json_body import off_loop_if_large, parse_body
from gateway.middleware import REQUEST_ID_HEADER, new_request_id
from gateway.routes import documents
from gateway.routes.classify import answer_classify
from gateway.routes.embeddings import answer_embeddings
from gateway.routes.ocr import answer_ocr
from gateway.routes.rerank import answer_rerank
from gateway.schemas.chat import ChatCompletionRequest
from gateway.schemas.classify import ClassifyRequest
from gateway.schemas.completions import CompletionRequest
from gateway.schemas.documents import (
    DocumentAnalyzeRequest,
    DocumentAskRequest,
    DocumentClassifyRequest,
    DocumentExtractRequest,
)
from gateway.schemas.embeddings import EmbeddingRequest
from gateway.schemas.ocr import OcrJsonRequest
from gateway.schemas.rerank import RerankRequest
from gateway.settings import GatewayConfig
from gateway.translate import chat, completions
from gateway.uploads import parse_json_upload

logger = logging.getLogger(__name__)

BATCH_PRIORITY = "batch"

DEFAULT_LINE_TIMEOUT_S = 600.0
"""Seconds one line may take in all, retries included: far above one chat answer of a few thousand
tokens on CPU or a many-page OCR, so only a stuck line reaches it."""

MAX_ATTEMPTS = 20
"""Most times one line runs (the first and its retries after 429 with ``Retry-After``)."""

MAX_RETRY_WAIT_S = 60.0
"""Longest single wait before a retry, whatever ``Retry-After`` says (a quota's reset may be a
minute away)."""

KeyChannel = Callable[[grpc.aio.Channel, str], grpc.aio.Channel]
"""Takes the executor's channel to the server and a key's name (``""`` on a server without keys),
returns the channel whose calls run as that key (built on the first, which serves what the
second does not)."""

Answer = dict[str, Any] | Response
"""What a route's ``answer_*`` function returns: the JSON object, or the response it encoded."""

Result = TypeVar("Result")


@dataclass(frozen=True, slots=True)
class LineRoute:
    """How a line of one url runs: its body parsed as the route parses it, then the route's answer.

    Attributes:
        parse: ``(body bytes, max_object_keys) -> parsed``; raises ``GatewayError`` (400
            ``invalid_json``, ``invalid_file``) or ``RequestValidationError``.
        answer: ``(site, parsed) -> answer``; raises ``GatewayError`` or ``grpc.aio.AioRpcError``.

    """

    parse: Callable[[bytes, int], Any]
    answer: Callable[[CallSite, Any], Awaitable[Answer]]


def _json_route(schema: type[Any], answer: Callable[[CallSite, Any], Awaitable[Answer]]) -> LineRoute:
    return LineRoute(functools.partial(parse_body, schema), answer)


def _upload_route(
    schema: type[Any], answer: Callable[[CallSite, bytes, Any], Awaitable[Answer]]
) -> LineRoute:
    async def answer_upload(site: CallSite, upload: tuple[bytes, Any]) -> Answer:
        data, body = upload
        return await answer(site, data, body)

    return LineRoute(functools.partial(parse_json_upload, schema), answer_upload)


LINE_ROUTES: Mapping[str, LineRoute] = {
    "/v1/chat/completions": _json_route(
        ChatCompletionRequest, lambda site, body: answer_generation(site, body, chat.API)
    ),
    "/v1/completions": _json_route(
        CompletionRequest, lambda site, body: answer_generation(site, body, completions.API)
    ),
    "/v1/embeddings": _json_route(EmbeddingRequest, answer_embeddings),
    "/v1/rerank": _json_route(RerankRequest, answer_rerank),
    "/v1/classify": _json_route(ClassifyRequest, answer_classify),
    "/v1/ocr": _upload_route(OcrJsonRequest, answer_ocr),
    "/v1/documents/analyze": _upload_route(DocumentAnalyzeRequest, documents.answer_analyze),
    "/v1/documents/ask": _upload_route(DocumentAskRequest, documents.answer_ask),
    "/v1/documents/extract": _upload_route(DocumentExtractRequest, documents.answer_extract),
    "/v1/documents/classify": _upload_route(DocumentClassifyRequest, documents.answer_classify),
}
"""Every route a line can run, by its url: the POST routes that answer one JSON object."""


@dataclass(frozen=True, slots=True)
class LineSite:
    """A batch line's :class:`~gateway.calls.CallSite`.

    No HTTP client: no disconnect to watch and no ``x-ratelimit-*`` headers to hand on; the line's
    timeout bounds its calls (a call cancelled with it is cancelled at the server).

    Attributes:
        clients: The stubs, on the channel of the line's key.
        metadata: Sent with every call (``x-request-id``, ``x-ur-priority``).
        config: The gateway's settings (``embeddings_truncate``).
        request_id: The line's id.
        body_bytes: Size of the line's body as JSON, bytes: above
            :data:`gateway.json_body.INLINE_BODY_BYTES` its translation runs in a worker thread.

    """

    clients: GrpcClients
    metadata: CallMetadata
    config: GatewayConfig
    request_id: str
    body_bytes: int

    def for_model(self, model: str) -> LineSite:
        """Itself: the lines run on the server in this process (no replica to pick)."""
        return self

    async def off_loop(self, fn: Callable[..., Result], *args: Any) -> Result:
        """``fn(*args)``, in a worker thread when the line's body is large."""
        return await off_loop_if_large(self.body_bytes, fn, *args)

    async def unary(
        self, method: Callable[..., Any], message: Any, *, deadline_s: float | None = None
    ) -> Any:
        """A unary (or stream-unary) call's response message.

        Raises:
            grpc.aio.AioRpcError: The call failed.

        """
        call = method(message, metadata=self.metadata, timeout=deadline_s)
        try:
            return await call
        finally:
            call.cancel()  # no-op once answered; stops the server's work when the line is cancelled

    async def collect(self, method: Callable[..., Any], messages: Iterable[Any]) -> list[Any]:
        """A stream-stream call's response messages, in order.

        Raises:
            grpc.aio.AioRpcError: The call failed.

        """
        call = method(messages, metadata=self.metadata)
        try:
            return [message async for message in call]
        finally:
            call.cancel()


class BatchLineExecutor:
    """Runs batch lines with the routes' own code, as calls of the submitting key (see the module).

    Use as an async context manager, or call :meth:`start` (it opens the channel to
    ``config.grpc_target``) and :meth:`close`; :meth:`execute` is the runner's executor.

    Args:
        config: The gateway's settings: the server's address and message limit (the channel's),
            and what the routes read (``embeddings_truncate``, ``max_json_object_keys``).
        wrap_channel: The channel of a key's calls (:data:`KeyChannel`).
        urls: The routes a line may name (the server's list of batch endpoints), each one of
            :data:`LINE_ROUTES`: every other url is refused, so that a line cannot reach the
            routes that manage state (classifiers, files, batches themselves: a batch must not
            create batches).
        timeout_s: Seconds one line may take in all, retries included; must be positive.

    Raises:
        ValueError: ``timeout_s`` is not positive, or a url of ``urls`` is not in :data:`LINE_ROUTES`.

    """

    def __init__(
        self,
        config: GatewayConfig,
        *,
        wrap_channel: KeyChannel,
        urls: Collection[str],
        timeout_s: float = DEFAULT_LINE_TIMEOUT_S,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        unknown = sorted(set(urls) - set(LINE_ROUTES))
        if unknown:
            raise ValueError(f"no batch line route for {', '.join(unknown)}")
        self._wrap_channel = wrap_channel
        self._config = config
        self._urls = frozenset(urls)
        self._timeout_s = timeout_s
        self._channel: grpc.aio.Channel | None = None

    async def start(self) -> None:
        """Open the channel to the server (it connects lazily)."""
        if self._channel is None:
            self._channel = open_channel(
                self._config.grpc_target, max_message_bytes=self._config.max_message_bytes
            )

    async def close(self) -> None:
        """Close the channel to the server; lines that come after are refused (503 ``unavailable``)."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close(grace=None)

    async def __aenter__(self) -> BatchLineExecutor:
        """Start (see :meth:`start`)."""
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Close (see :meth:`close`)."""
        await self.close()

    async def execute(
        self, url: str, body: dict[str, Any], key_name: str, *, request_id: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """Run one batch line: ``body`` through the route ``url``, as the key named ``key_name``.

        Args:
            url: The line's route, one of ``urls`` (e.g. ``/v1/embeddings``).
            body: The line's JSON body, as the route takes it.
            key_name: The name of the key that submitted the batch; ``""`` when the server has no
                keys (authentication off).
            request_id: Sent as ``x-request-id`` (the server's log names the line by it); a new
                one when ``None``.

        Returns:
            ``(http_status, json_body)``: the route's answer as a client would have read it (an
            OpenAI error body for any failure), which OpenAI's batch output records as the line's
            ``response.status_code`` and ``response.body``. Refusals of the executor itself: 400
            ``invalid_url`` (a route not in ``urls``), 400 ``streaming_unsupported``, 504
            ``timeout`` (past ``timeout_s``), 503 ``unavailable`` (the executor is not started).
            A key no longer configured is the server's 401 ``unauthenticated``.

        """
        if url not in self._urls:
            return _refusal(400, f"url {url!r} cannot run in a batch", "invalid_url", param="url")
        if body.get("stream") is True:
            return _refusal(400, "stream: a batch line cannot stream", "streaming_unsupported", "body.stream")
        channel = self._channel
        if channel is None:
            return _refusal(503, "the batch line executor is not running", "unavailable")
        scope = asyncio.timeout(self._timeout_s)
        try:
            async with scope:
                channel = self._wrap_channel(channel, key_name)
                answer = await self._run(url, body, channel, request_id or new_request_id(), scope)
        except TimeoutError:
            if not scope.expired():
                raise
        # Past the timeout, whatever the cancelled call answered (a call may end in a status, not
        # in the cancellation, when its work is cancelled under it).
        if scope.expired():
            return _refusal(504, f"the line did not finish within {self._timeout_s:g} s", "timeout")
        return answer

    async def _run(
        self,
        url: str,
        body: dict[str, Any],
        channel: grpc.aio.Channel,
        request_id: str,
        scope: asyncio.Timeout,
    ) -> tuple[int, dict[str, Any]]:
        """Parse the line, then answer it until an answer other than a retryable 429."""
        route = LINE_ROUTES[url]
        raw = _encoded(body)
        try:
            parsed = await off_loop_if_large(len(raw), route.parse, raw, self._config.max_json_object_keys)
        except RequestValidationError as exc:
            return validation_error_to_http(exc)
        except GatewayError as exc:
            return _gateway_error(exc)
        metadata = ((REQUEST_ID_HEADER, request_id), (PRIORITY_HEADER, BATCH_PRIORITY))
        # Stubs per line: tens of microseconds, against a line's milliseconds to seconds of model work.
        site: CallSite = LineSite(GrpcClients.on(channel), metadata, self._config, request_id, len(raw))
        loop = asyncio.get_running_loop()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                return await _json_of(await route.answer(site, parsed))
            except GatewayError as exc:
                return _gateway_error(exc)
            except grpc.aio.AioRpcError as err:
                wait = _retry_wait(err)
                deadline = scope.when()
                if (
                    wait is None
                    or attempt == MAX_ATTEMPTS
                    or (deadline is not None and loop.time() + wait > deadline)
                ):
                    return rpc_error_to_http(err, route=url)
                logger.debug("batch line %s: 429, retrying in %.2f s (attempt %d)", url, wait, attempt)
                await asyncio.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns")


def _encoded(body: dict[str, Any]) -> bytes:
    """``body`` as the JSON bytes a client would send.

    orjson refuses a string with a lone surrogate, which ``json`` escapes: the route's parse
    then refuses it naming its place, as it would refuse the client's bytes.
    """
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:
        return json.dumps(body).encode()


async def _json_of(answer: Answer) -> tuple[int, dict[str, Any]]:
    """``(status, JSON object)`` of a route's answer (an encoded one decoded, off the loop when large)."""
    if isinstance(answer, dict):
        return 200, answer
    content = bytes(answer.body)
    parsed = await off_loop_if_large(len(content), orjson.loads, content)
    if isinstance(parsed, dict):
        return answer.status_code, parsed
    message = f"the route answered {answer.status_code} without a JSON object"
    return 500, error_body(message, error_type="server_error", code="bad_answer")


def _retry_wait(err: grpc.aio.AioRpcError) -> float | None:
    """Seconds to wait before running again: a 429 with ``Retry-After`` (capped), else ``None``.

    The delay is the one the HTTP answer would carry (:func:`gateway.errors.retry_after_headers`):
    ``retry-after-ms`` when the server gave a quota's RetryInfo, else ``Retry-After``.
    """
    headers = retry_after_headers(err)
    if "retry-after-ms" in headers:
        seconds = float(headers["retry-after-ms"]) / 1000
    elif "Retry-After" in headers:
        seconds = float(headers["Retry-After"])
    else:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, MAX_RETRY_WAIT_S)


def _gateway_error(exc: GatewayError) -> tuple[int, dict[str, Any]]:
    """The status and body the app's handler answers a :class:`GatewayError` with."""
    return exc.status_code, error_body(exc.message, error_type=exc.error_type, code=exc.code, param=exc.param)


def _refusal(status: int, message: str, code: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    return status, error_body(message, error_type=error_type_for_status(status), code=code, param=param)
